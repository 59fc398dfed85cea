package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/tests/cluster"
)

// Local replicas of fastover-example publish addresses from TEST-NET-1
// (192.0.2.0/24: the API server accepts them, nothing routes them) and
// listen on 127.0.0.N; the tests map one to the other.
const publishedNet = "192.0.2."

// replica is one fastover-example process.
type replica struct {
	id   string
	n    int // 192.0.2.n, 127.0.0.n
	proc *cluster.Process
}

// fleet is a set of replicas of fastover-example behind one Service.
type fleet struct {
	env      *cluster.Env
	ns, svc  string
	lease    string
	port     int
	args     []string
	replicas []*replica
	http     *http.Client
}

// durations are lease duration / renew deadline / retry period.
type durations struct{ lease, renew, retry time.Duration }

var shortDurations = durations{4 * time.Second, 3 * time.Second, time.Second}

func newFleet(t *testing.T, env *cluster.Env, ns, svc string, d durations, extra ...string) *fleet {
	t.Helper()
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{
		env: env, ns: ns, svc: svc, lease: svc, port: ports[0],
		args: append([]string{
			"--lease-duration=" + d.lease.String(),
			"--renew-deadline=" + d.renew.String(),
			"--retry-period=" + d.retry.String(),
		}, extra...),
		http: &http.Client{
			Timeout:   300 * time.Millisecond,
			Transport: &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext},
		},
	}
}

// createService creates the Service: selector-less unless selector is
// given; port 80 to the replicas' port.
func (f *fleet) createService(ctx context.Context, t *testing.T, selector map[string]string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: f.svc},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(f.port))}},
		},
	}
	if _, err := f.env.Client.CoreV1().Services(f.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// add starts n more replicas.
func (f *fleet) add(t *testing.T, n int) {
	t.Helper()
	for range n {
		r := &replica{n: len(f.replicas) + 1}
		r.id = "replica-" + strconv.Itoa(r.n)
		f.replicas = append(f.replicas, r)
		f.start(t, r)
	}
}

func (f *fleet) start(t *testing.T, r *replica) {
	t.Helper()
	args := append([]string{
		"--kubeconfig=" + f.env.Kubeconfig,
		"--namespace=" + f.ns,
		"--service=" + f.svc,
		"--lease=" + f.lease,
		"--id=" + r.id,
		"--address=" + publishedNet + strconv.Itoa(r.n),
		"--listen=127.0.0." + strconv.Itoa(r.n) + ":" + strconv.Itoa(f.port),
		"--port=" + strconv.Itoa(f.port),
	}, f.args...)
	if r.proc == nil {
		p, err := f.env.StartProcess(r.id, binary(t, "fastover-example"), args...)
		if err != nil {
			t.Fatal(err)
		}
		r.proc = p
		return
	}
	if err := r.proc.Start(); err != nil {
		t.Fatal(err)
	}
}

func (f *fleet) byID(id string) *replica {
	for _, r := range f.replicas {
		if r.id == id {
			return r
		}
	}
	return nil
}

// holder returns the Lease's holder, "" if none.
func (f *fleet) holder(ctx context.Context) (string, int32, error) {
	l, err := f.env.Client.CoordinationV1().Leases(f.ns).Get(ctx, f.lease, metav1.GetOptions{})
	if err != nil {
		return "", 0, err
	}
	var h string
	var tr int32
	if l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		tr = *l.Spec.LeaseTransitions
	}
	return h, tr, nil
}

// slices returns the Service's EndpointSlices.
func (f *fleet) slices(ctx context.Context) ([]discoveryv1.EndpointSlice, error) {
	list, err := f.env.Client.DiscoveryV1().EndpointSlices(f.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + f.svc,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// publishedAddresses returns the ready addresses of all the Service's
// slices, sorted, duplicates kept.
func publishedAddresses(slices []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			out = append(out, ep.Addresses...)
		}
	}
	sort.Strings(out)
	return out
}

// call resolves the Service as a client would, through its EndpointSlices,
// and calls GET / on the one published address; it returns the identity
// that answered.
func (f *fleet) call(ctx context.Context) (string, error) {
	sl, err := f.slices(ctx)
	if err != nil {
		return "", err
	}
	addrs := publishedAddresses(sl)
	if len(addrs) != 1 {
		return "", fmt.Errorf("%d published addresses: %v", len(addrs), addrs)
	}
	n, ok := strings.CutPrefix(addrs[0], publishedNet)
	if !ok {
		return "", fmt.Errorf("address %s is not a replica's", addrs[0])
	}
	resp, err := f.http.Get("http://127.0.0." + n + ":" + strconv.Itoa(f.port) + "/")
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(body)), nil
}

// waitServing waits until the Service answers from a leader other than
// not, and returns it.
func (f *fleet) waitServing(ctx context.Context, t *testing.T, not string, timeout time.Duration) string {
	t.Helper()
	var got string
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		id, err := f.call(ctx)
		last = err
		if err == nil && id != not {
			got = id
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the Service does not answer from a leader other than %q after %v: %v", not, timeout, last)
	}
	return got
}

// sliceLog records every change of the Service's published addresses, from
// a watch, with when it was seen.
type sliceLog struct {
	mu      sync.Mutex
	byName  map[string][]string // slice name → its ready addresses
	changes []publication
}

type publication struct {
	at    time.Time
	addrs []string // all published addresses then
}

func watchPublications(ctx context.Context, t *testing.T, f *fleet) *sliceLog {
	t.Helper()
	w, err := f.env.Client.DiscoveryV1().EndpointSlices(f.ns).Watch(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + f.svc,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := &sliceLog{byName: map[string][]string{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			l.mu.Lock()
			if ev.Type == "DELETED" {
				delete(l.byName, s.Name)
			} else {
				l.byName[s.Name] = publishedAddresses([]discoveryv1.EndpointSlice{*s})
			}
			var all []string
			for _, a := range l.byName {
				all = append(all, a...)
			}
			sort.Strings(all)
			l.changes = append(l.changes, publication{at: time.Now(), addrs: all})
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *sliceLog) snapshot() []publication {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]publication(nil), l.changes...)
}

func itoa(n int) string { return strconv.Itoa(n) }

// Package fleet runs replicas of a leader-elected controller binary
// (fastover-example, or the client-go baseline of the benchmarks) as local
// processes beside an internal/cluster control plane, and plays their client:
// it resolves the Service through its EndpointSlices and calls GET /.
//
// Local replicas publish addresses from TEST-NET-1 (192.0.2.N: the API
// server accepts them, nothing routes them) and listen on 127.0.0.N; the
// client maps one to the other. With BindPublished, on a control plane in a
// network namespace of the test's own (cluster.Options.Netns), the address
// is real: replica N binds 192.0.2.N there and the client calls it.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
)

// PublishedNet is the prefix of the addresses replicas publish.
const PublishedNet = "192.0.2."

// Durations are the lease duration, renew deadline and retry period.
type Durations struct{ Lease, Renew, Retry time.Duration }

func (d Durations) String() string {
	return fmt.Sprintf("%v/%v/%v", d.Lease, d.Renew, d.Retry)
}

// Fleet is a set of replicas behind one Service and one Lease.
type Fleet struct {
	Env       *cluster.Env
	Binary    string
	Namespace string
	Service   string
	Lease     string
	Port      int
	// Args are added to every replica's command line.
	Args     []string
	Replicas []*Replica
	// Name prefixes the replicas' identities and logs.
	Name string
	// Kubeconfig the replicas use; default the control plane's admin one.
	Kubeconfig string
	// KubeconfigOf, if set, gives each replica a kubeconfig of its own
	// (through a fault-injecting proxy, for one), instead of Kubeconfig.
	KubeconfigOf func(*Replica) (string, error)
	// BindPublished makes each replica listen on the address it publishes
	// (192.0.2.N), added to the control plane's network namespace, and
	// the client call it there; it needs a control plane in a namespace
	// (cluster.Options.Netns). Off, the default, replicas listen on
	// 127.0.0.N.
	BindPublished bool
	http          *http.Client
	api           *apiTLS // set by EnableAPI
}

// New prepares a fleet; Add starts replicas. The binary takes the flags of
// fastover-example.
func New(env *cluster.Env, binary, namespace, service string, d Durations, extra ...string) (*Fleet, error) {
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	return &Fleet{
		Env: env, Binary: binary, Namespace: namespace, Service: service, Lease: service, Port: ports[0],
		Name: "replica",
		Args: append([]string{
			"--lease-duration=" + d.Lease.String(),
			"--renew-deadline=" + d.Renew.String(),
			"--retry-period=" + d.Retry.String(),
		}, extra...),
		http: &http.Client{
			Timeout: 300 * time.Millisecond,
			Transport: &http.Transport{
				DisableKeepAlives: true,
				DialContext:       dialer(env, 200*time.Millisecond),
			},
		},
	}, nil
}

// CreateService creates the Service, without selector unless one is
// given, port 80 to the replicas' port.
func (f *Fleet) CreateService(ctx context.Context, selector map[string]string) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: f.Service},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(f.Port))}},
		},
	}
	_, err := f.Env.Client.CoreV1().Services(f.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	return err
}

// Add starts n more replicas.
func (f *Fleet) Add(n int) error {
	for range n {
		r := NewReplica(f.Name, len(f.Replicas)+1)
		f.Replicas = append(f.Replicas, r)
		if err := f.Start(r); err != nil {
			return err
		}
	}
	return nil
}

// Start starts a replica, or starts it again after it exited or was
// stopped.
func (f *Fleet) Start(r *Replica) error {
	return r.Launch(f.Env, r.ID, f.Binary, func() ([]string, error) { return f.args(r) })
}

// args are the replica's flags: fastover-example's.
func (f *Fleet) args(r *Replica) ([]string, error) {
	kubeconfig := f.Kubeconfig
	if kubeconfig == "" {
		kubeconfig = f.Env.Kubeconfig
	}
	if f.KubeconfigOf != nil {
		var err error
		if kubeconfig, err = f.KubeconfigOf(r); err != nil {
			return nil, err
		}
	}
	listen, err := f.listenAddress(r)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + f.Namespace,
		"--service=" + f.Service,
		"--lease=" + f.Lease,
		"--id=" + r.ID,
		"--address=" + r.Address(),
		"--listen=" + listen + ":" + strconv.Itoa(f.Port),
		"--port=" + strconv.Itoa(f.Port),
	}, f.apiArgs()...)
	return append(args, f.Args...), nil
}

// ByID returns the replica with the identity, or nil.
func (f *Fleet) ByID(id string) *Replica { return ByID(f.Replicas, id) }

// Holder returns the Lease's holder ("" if none) and its transitions.
func (f *Fleet) Holder(ctx context.Context) (string, int32, error) {
	l, err := f.Env.Client.CoordinationV1().Leases(f.Namespace).Get(ctx, f.Lease, metav1.GetOptions{})
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

// Slices returns the Service's EndpointSlices.
func (f *Fleet) Slices(ctx context.Context) ([]discoveryv1.EndpointSlice, error) {
	list, err := f.Env.Client.DiscoveryV1().EndpointSlices(f.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + f.Service,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// PublishedAddresses returns the ready addresses of the slices, sorted,
// duplicates kept.
func PublishedAddresses(slices []discoveryv1.EndpointSlice) []string {
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

// Get calls path on the replica that publishes addr, over HTTPS after
// EnableAPI.
func (f *Fleet) Get(addr, path string) (int, string, error) {
	url, err := f.urlAt(addr, path)
	if err != nil {
		return 0, "", err
	}
	resp, err := f.http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

// URL is where the fleet calls path on replica r.
func (f *Fleet) URL(r *Replica, path string) (string, error) { return f.urlAt(r.Address(), path) }

// urlAt is where the fleet calls path on the replica that publishes addr.
func (f *Fleet) urlAt(addr, path string) (string, error) {
	host, err := f.callAddress(addr)
	if err != nil {
		return "", err
	}
	return f.scheme() + "://" + net.JoinHostPort(host, strconv.Itoa(f.Port)) + path, nil
}

// Call resolves the Service as a client would, through its EndpointSlices,
// and calls GET / on its one published address; it returns the identity
// that answered.
func (f *Fleet) Call(ctx context.Context) (string, error) {
	sl, err := f.Slices(ctx)
	if err != nil {
		return "", err
	}
	addrs := PublishedAddresses(sl)
	if len(addrs) != 1 {
		return "", fmt.Errorf("%d published addresses: %v", len(addrs), addrs)
	}
	code, body, err := f.Get(addrs[0], "/")
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("GET / answered %d", code)
	}
	return body, nil
}

// WaitServing calls the Service every 10ms until it answers from a leader
// other than not, and returns that leader's identity.
func (f *Fleet) WaitServing(ctx context.Context, not string, timeout time.Duration) (string, error) {
	var got string
	var last error
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		id, err := f.Call(ctx)
		last = err
		if err == nil && id != not {
			got = id
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("the Service does not answer from a leader other than %q after %v: %w", not, timeout, errors.Join(err, last))
	}
	return got, nil
}

// Log records every change of the Service's published addresses, from a
// watch, with when it was seen.
type Log struct {
	mu      sync.Mutex
	byName  map[string][]string // slice name → its ready addresses
	changes []Publication
}

// Publication is the set of published addresses after one change.
type Publication struct {
	At    time.Time
	Addrs []string
}

// Watch starts recording; the log stops when ctx ends.
func (f *Fleet) Watch(ctx context.Context) (*Log, error) {
	w, err := f.Env.Client.DiscoveryV1().EndpointSlices(f.Namespace).Watch(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + f.Service,
	})
	if err != nil {
		return nil, err
	}
	l := &Log{byName: map[string][]string{}}
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
				l.byName[s.Name] = PublishedAddresses([]discoveryv1.EndpointSlice{*s})
			}
			var all []string
			for _, a := range l.byName {
				all = append(all, a...)
			}
			sort.Strings(all)
			l.changes = append(l.changes, Publication{At: time.Now(), Addrs: all})
			l.mu.Unlock()
		}
	}()
	return l, nil
}

// Snapshot returns the changes recorded so far.
func (l *Log) Snapshot() []Publication {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Publication(nil), l.changes...)
}

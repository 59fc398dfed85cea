// Package opfleet runs replicas of the example operator
// (examples/configmap-operator) as local processes beside an
// internal/cluster control plane, and watches what they do: who stamps
// the ConfigMap (who reconciles) and whom the Service's EndpointSlices
// name. The end-to-end tests and the benchmark of the controller-runtime
// adapter (leader/ctrlmanager) use it.
//
// Replicas publish addresses from TEST-NET-1 (192.0.2.N), as those of
// internal/fleet, and serve metrics on 127.0.0.1:<port of their own>.
package opfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
)

// The example's label and annotations (its internal/controller, which
// this package cannot import).
const (
	labelStamp          = "example.fastover.io/stamp"
	annotationStampedBy = "example.fastover.io/stamped-by"
	annotationStampedAt = "example.fastover.io/stamped-at"
	// annotationCached is the informer-controller's: how many objects its
	// cache held when it stamped.
	annotationCached = "example.fastover.io/cached"
)

// Election is the operator's --leader-election.
type Election string

// The elections the operator offers.
const (
	Fastover          Election = "fastover"
	ControllerRuntime Election = "controller-runtime"
)

// Replica is one operator process.
type Replica struct {
	*fleet.Replica
	MetricsPort int
}

// Fleet is a set of operator replicas: one Lease, one Service (with
// fastover) and one labelled ConfigMap to reconcile, all named Name.
type Fleet struct {
	Env       *cluster.Env
	Binary    string
	Namespace string
	Name      string
	Election  Election
	Durations fleet.Durations
	Replicas  []*Replica
	// Args, if set, gives a replica's flags in place of the example
	// operator's, for another program that stamps the same way
	// (examples/informer-controller).
	Args func(r *Replica) []string
	http *http.Client
}

// New prepares a fleet; Setup creates its objects, Add starts replicas.
func New(env *cluster.Env, binary, namespace, name string, election Election, d fleet.Durations) *Fleet {
	return &Fleet{
		Env: env, Binary: binary, Namespace: namespace, Name: name, Election: election, Durations: d,
		http: &http.Client{Timeout: 2 * time.Second},
	}
}

// Setup creates the namespace (unless it exists: fleets may share one),
// the ConfigMap to reconcile and, with fastover, the selector-less
// Service.
func (f *Fleet) Setup(ctx context.Context) error {
	if err := f.Env.CreateNamespace(ctx, f.Namespace, nil); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: f.Name, Labels: map[string]string{labelStamp: "true"}},
		Data:       map[string]string{"hello": "world"},
	}
	if _, err := f.Env.Client.CoreV1().ConfigMaps(f.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	if f.Election != Fastover {
		return nil
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: f.Name},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(9443)}},
		},
	}
	_, err := f.Env.Client.CoreV1().Services(f.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	return err
}

// Add starts n more replicas.
func (f *Fleet) Add(n int) error {
	ports, err := cluster.FreePorts(n)
	if err != nil {
		return err
	}
	for i := range n {
		r := &Replica{Replica: fleet.NewReplica(f.Name, len(f.Replicas)+1), MetricsPort: ports[i]}
		f.Replicas = append(f.Replicas, r)
		if err := f.Start(r); err != nil {
			return err
		}
	}
	return nil
}

// Start starts a replica, or starts it again after it exited.
func (f *Fleet) Start(r *Replica) error {
	return r.Launch(f.Env, string(f.Election)+"-"+r.ID, f.Binary, func() ([]string, error) {
		if f.Args != nil {
			return f.Args(r), nil
		}
		return f.operatorArgs(r), nil
	})
}

// operatorArgs are the example operator's flags for the replica.
func (f *Fleet) operatorArgs(r *Replica) []string {
	args := []string{
		"--kubeconfig=" + f.Env.Kubeconfig,
		"--namespace=" + f.Namespace,
		"--lease=" + f.Name,
		"--id=" + r.ID,
		"--leader-election=" + string(f.Election),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(r.MetricsPort),
		"--health-probe-bind-address=0",
		"--lease-duration=" + f.Durations.Lease.String(),
		"--renew-deadline=" + f.Durations.Renew.String(),
		"--retry-period=" + f.Durations.Retry.String(),
	}
	if f.Election == Fastover {
		args = append(args, "--service="+f.Name, "--address="+r.Address())
	}
	return args
}

// StopAll kills every replica.
func (f *Fleet) StopAll() { fleet.StopAll(f.Replicas) }

// ByID returns the replica with the identity, or nil.
func (f *Fleet) ByID(id string) *Replica { return fleet.ByID(f.Replicas, id) }

// ByAddress returns the replica that publishes addr, or nil.
func (f *Fleet) ByAddress(addr string) *Replica { return fleet.ByAddress(f.Replicas, addr) }

// Metrics returns the replica's /metrics.
func (f *Fleet) Metrics(r *Replica) (string, error) {
	resp, err := f.http.Get("http://127.0.0.1:" + strconv.Itoa(r.MetricsPort) + "/metrics")
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(body), err
}

// Service is the fleet's Service and Lease, as an internal/fleet Fleet
// without replicas, for its helpers
// (Holder, Slices, Watch).
func (f *Fleet) Service() *fleet.Fleet {
	return &fleet.Fleet{Env: f.Env, Namespace: f.Namespace, Service: f.Name, Lease: f.Name}
}

// Stamp is a stamp of the ConfigMap: who reconciled it, and when (the
// reconciler's clock, the same host's here).
type Stamp struct {
	By   string
	At   time.Time // when the reconcile ran
	Seen time.Time // when the watch delivered it
	// Cached is how many objects the stamping replica's cache held (the
	// informer-controller's), -1 if the stamp does not say.
	Cached int
}

// Stamps records every stamp of the ConfigMap, from a watch.
type Stamps struct {
	mu     sync.Mutex
	stamps []Stamp
	wake   chan struct{}
}

// WatchStamps starts recording; it stops when ctx ends.
func (f *Fleet) WatchStamps(ctx context.Context) (*Stamps, error) {
	w, err := f.Env.Client.CoreV1().ConfigMaps(f.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", f.Name).String(),
	})
	if err != nil {
		return nil, err
	}
	s := &Stamps{wake: make(chan struct{})}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			by := cm.Annotations[annotationStampedBy]
			if by == "" {
				continue
			}
			at, _ := time.Parse(time.RFC3339Nano, cm.Annotations[annotationStampedAt])
			cached, err := strconv.Atoi(cm.Annotations[annotationCached])
			if err != nil {
				cached = -1
			}
			s.mu.Lock()
			if n := len(s.stamps); n == 0 || s.stamps[n-1].By != by || !s.stamps[n-1].At.Equal(at) {
				s.stamps = append(s.stamps, Stamp{By: by, At: at, Seen: time.Now(), Cached: cached})
				close(s.wake)
				s.wake = make(chan struct{})
			}
			s.mu.Unlock()
		}
	}()
	return s, nil
}

// All returns the stamps recorded so far, oldest first.
func (s *Stamps) All() []Stamp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Stamp(nil), s.stamps...)
}

// Next waits up to timeout for a stamp after the first `after` ones by
// another replica than not, and returns it.
func (s *Stamps) Next(after int, not string, timeout time.Duration) (Stamp, error) {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		for _, st := range s.stamps[min(after, len(s.stamps)):] {
			if st.By != not {
				s.mu.Unlock()
				return st, nil
			}
		}
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-deadline:
			return Stamp{}, fmt.Errorf("no stamp by a replica other than %q within %v", not, timeout)
		}
	}
}

// Len is the number of stamps recorded.
func (s *Stamps) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stamps)
}

// WaitPublished waits up to timeout until the log's latest publication is
// exactly addr, and returns when the watch saw it.
func WaitPublished(ctx context.Context, l *fleet.Log, addr string, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		pubs := l.Snapshot()
		if n := len(pubs); n > 0 && len(pubs[n-1].Addrs) == 1 && pubs[n-1].Addrs[0] == addr {
			at = pubs[n-1].At
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return time.Time{}, errors.Join(fmt.Errorf("the Service's EndpointSlices do not name only %s after %v", addr, timeout), err)
	}
	return at, nil
}

// Handover is what one signalled leader's handover took, from the signal.
type Handover struct {
	// Old is the signalled replica; New the one that stamped next.
	Old, New *Replica
	// Stamp is New's first stamp.
	Stamp Stamp
	// Work is the time to New's first stamp (its clock, the same host's).
	Work time.Duration
	// Endpoint is the time until the Service's EndpointSlices named New
	// only; 0 if not watched.
	Endpoint time.Duration
}

// HandOver signals the replica that stamped last and times the handover:
// it waits up to timeout for a stamp by another replica and, if published
// is not nil, for the Service's EndpointSlices to name that replica only.
func (f *Fleet) HandOver(ctx context.Context, stamps *Stamps, published *fleet.Log, sig syscall.Signal, timeout time.Duration) (Handover, error) {
	all := stamps.All()
	if len(all) == 0 {
		return Handover{}, errors.New("no stamp yet")
	}
	var h Handover
	if h.Old = f.ByID(all[len(all)-1].By); h.Old == nil || h.Old.Proc == nil || !h.Old.Proc.Running() {
		return h, fmt.Errorf("the last stamp is by %q, not a running replica", all[len(all)-1].By)
	}
	if err := h.Old.Proc.Signal(sig); err != nil {
		return h, err
	}
	start := time.Now()
	var err error
	if h.Stamp, err = stamps.Next(len(all), h.Old.ID, timeout); err != nil {
		return h, err
	}
	at := h.Stamp.At
	if at.IsZero() {
		at = h.Stamp.Seen
	}
	h.Work = at.Sub(start)
	if h.New = f.ByID(h.Stamp.By); h.New == nil {
		return h, fmt.Errorf("stamped by %q, not a replica", h.Stamp.By)
	}
	if published != nil {
		seen, err := WaitPublished(ctx, published, h.New.Address(), 30*time.Second)
		if err != nil {
			return h, err
		}
		h.Endpoint = seen.Sub(start)
	}
	return h, nil
}

// Restart waits up to 30 s for the replica to exit and starts it again.
func (f *Fleet) Restart(r *Replica) error {
	if exited, _ := r.Proc.WaitExit(30 * time.Second); !exited {
		return fmt.Errorf("%s still runs 30s after its signal", r.ID)
	}
	return f.Start(r)
}

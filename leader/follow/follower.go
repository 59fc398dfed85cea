package follow

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/leader/internal/names"
)

// Config configures a Follower.
type Config struct {
	// Client reads the Service and its EndpointSlices. Required.
	Client kubernetes.Interface
	// Namespace and Service name the Service whose leader is followed.
	// Required.
	Namespace, Service string
	// ClusterDomain is the cluster's DNS domain, for the Service's fully
	// qualified name; default "cluster.local".
	ClusterDomain string
	// LeaderWait is how long a dial of the Service waits for a leader to
	// be published when there is none (the dial's context may end it
	// sooner); default 30 s, client-go's and Go's dial timeout.
	LeaderWait time.Duration
	// HandOverGrace is how long a connection to an older term's leader
	// stays open after a planned hand-over (the new leader's slice says
	// leader.fastover.io/hand-over: planned): that ex-leader ends its
	// streams and sends its clients a GOAWAY itself (leader.ServerStopper),
	// and a stream that ends cleanly is resumed at once, where a
	// connection closed under it costs a client-go reflector a back-off
	// (about a second). After a crash, a freeze or a cut the connections
	// are closed at once. Default 2 s.
	HandOverGrace time.Duration
	// Logger logs; the zero Logger means klog's. logr.Discard() is the
	// zero Logger too: to log nothing, give one whose sink drops
	// everything, such as funcr.New(func(string, string) {}, funcr.Options{}).
	Logger logr.Logger
	// Clock times LeaderWait and HandOverGrace; default the real clock.
	Clock clock.WithDelayedExecution
}

// ErrNoLeader is returned (wrapped) by a dial of the Service when no
// leader was published within Config.LeaderWait.
var ErrNoLeader = errors.New("no leader published")

// ErrForbidden is returned (wrapped) by Start when the Follower may not
// read the Service or its EndpointSlices (see PolicyRules).
var ErrForbidden = errors.New("not allowed to read the Service and its EndpointSlices")

// Leader is a published leader, as its EndpointSlices give it.
type Leader struct {
	// Identity is the leader's identity (fastover.io/leader-identity).
	Identity string
	// Term is the leader's term (leader.fastover.io/term).
	Term int32
	// HandedOver says its term began on a Lease the previous leader
	// released (leader.fastover.io/hand-over: planned).
	HandedOver bool
	// Endpoints are its addresses, one per family it publishes, with
	// their ports.
	Endpoints []Endpoint
}

// Endpoint is one address of the leader with its ports by name (the
// Service's port names; "" for a Service's single unnamed port).
type Endpoint struct {
	Address netip.Addr
	Ports   map[string]int32
}

// Follower follows the leader of one Service. Make one with New, start it
// with Start, then dial through it (DialFunc, RESTConfig). Its methods may
// be called from many goroutines.
type Follower struct {
	cfg Config

	services corelisters.ServiceNamespaceLister
	slices   discoverylisters.EndpointSliceNamespaceLister
	// updating serializes update: the two informers call it from their
	// own goroutines, and a read of the caches must not be applied after
	// a newer one.
	updating sync.Mutex

	mu      sync.Mutex
	started bool
	synced  chan struct{} // closed once the caches have synced
	svc     *corev1.Service
	leader  *Leader // nil: none published
	maxTerm int32   // the highest term seen; -1 before the first
	changed chan struct{}
	conns   map[*conn]struct{}
}

// New validates cfg and returns a Follower that is not started yet.
func New(cfg Config) (*Follower, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("follow: Config.Client is required")
	case cfg.Namespace == "" || cfg.Service == "":
		return nil, errors.New("follow: Config.Namespace and Config.Service are required")
	case cfg.LeaderWait < 0:
		return nil, fmt.Errorf("follow: Config.LeaderWait must not be negative, not %v", cfg.LeaderWait)
	case cfg.HandOverGrace < 0:
		return nil, fmt.Errorf("follow: Config.HandOverGrace must not be negative, not %v", cfg.HandOverGrace)
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.LeaderWait == 0 {
		cfg.LeaderWait = 30 * time.Second
	}
	if cfg.HandOverGrace == 0 {
		cfg.HandOverGrace = 2 * time.Second
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	cfg.Logger = cfg.Logger.WithValues("service", cfg.Namespace+"/"+cfg.Service)
	return &Follower{
		cfg:     cfg,
		synced:  make(chan struct{}),
		maxTerm: -1,
		changed: make(chan struct{}),
		conns:   map[*conn]struct{}{},
	}, nil
}

// Start checks that the Follower may read the Service and its
// EndpointSlices, starts watching them until ctx ends, and returns once it
// has read them (or ctx ends first). A missing permission is an error
// (ErrForbidden), and so is a Service that does not exist (Start may be
// called again after these); a Service without a leader yet is not: dials
// wait for one.
func (f *Follower) Start(ctx context.Context) error {
	f.mu.Lock()
	if f.started {
		f.mu.Unlock()
		return errors.New("follow: Start was called already")
	}
	f.started = true
	f.mu.Unlock()
	if err := f.checkAccess(ctx); err != nil {
		f.mu.Lock()
		f.started = false // Start may be called again, once the Role is there
		f.mu.Unlock()
		return err
	}

	byName := informers.NewSharedInformerFactoryWithOptions(f.cfg.Client, 0, informers.WithNamespace(f.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", f.cfg.Service).String()
		}))
	byService := informers.NewSharedInformerFactoryWithOptions(f.cfg.Client, 0, informers.WithNamespace(f.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = f.sliceSelector().String() }))
	svcInformer := byName.Core().V1().Services()
	sliceInformer := byService.Discovery().V1().EndpointSlices()
	f.services = svcInformer.Lister().Services(f.cfg.Namespace)
	f.slices = sliceInformer.Lister().EndpointSlices(f.cfg.Namespace)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f.update() },
		UpdateFunc: func(any, any) { f.update() },
		DeleteFunc: func(any) { f.update() },
	}
	for _, inf := range []cache.SharedIndexInformer{svcInformer.Informer(), sliceInformer.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("follow: %w", err)
		}
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) {
			f.cfg.Logger.Error(err, "watch failed; retrying", "reflector", r.TypeDescription())
		}); err != nil {
			return fmt.Errorf("follow: %w", err)
		}
	}
	byName.Start(ctx.Done())
	byService.Start(ctx.Done())
	for typ, ok := range byName.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("follow: %v of %s/%s not read: %w", typ, f.cfg.Namespace, f.cfg.Service, context.Cause(ctx))
		}
	}
	for typ, ok := range byService.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("follow: %v of %s/%s not read: %w", typ, f.cfg.Namespace, f.cfg.Service, context.Cause(ctx))
		}
	}
	f.update()
	close(f.synced)
	return nil
}

// checkAccess reads the Service and opens and closes the watches the
// informers will open, so that a missing permission is Start's error
// instead of a reflector retrying in the log.
func (f *Follower) checkAccess(ctx context.Context) error {
	ns, name := f.cfg.Namespace, f.cfg.Service
	services := f.cfg.Client.CoreV1().Services(ns)
	slicesAPI := f.cfg.Client.DiscoveryV1().EndpointSlices(ns)
	one := metav1.ListOptions{TimeoutSeconds: ptr.To[int64](1)}
	checks := []struct {
		what string
		do   func() error
	}{
		{"get the Service", func() error { _, err := services.Get(ctx, name, metav1.GetOptions{}); return err }},
		{"list EndpointSlices", func() error {
			_, err := slicesAPI.List(ctx, metav1.ListOptions{LabelSelector: f.sliceSelector().String(), Limit: 1})
			return err
		}},
		{"watch the Service", func() error {
			o := one
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			return stopWatch(services.Watch(ctx, o))
		}},
		{"watch EndpointSlices", func() error {
			o := one
			o.LabelSelector = f.sliceSelector().String()
			return stopWatch(slicesAPI.Watch(ctx, o))
		}},
	}
	for _, c := range checks {
		err := c.do()
		switch {
		case err == nil:
		case apierrors.IsForbidden(err):
			return fmt.Errorf("follow: %w: cannot %s in namespace %s (grant the Role of follow.PolicyRules: get, list and watch on services and discovery.k8s.io endpointslices): %w",
				ErrForbidden, c.what, ns, err)
		case apierrors.IsNotFound(err):
			return fmt.Errorf("follow: Service %s/%s not found: %w", ns, name, err)
		default:
			return fmt.Errorf("follow: cannot %s in namespace %s: %w", c.what, ns, err)
		}
	}
	return nil
}

func stopWatch(w interface{ Stop() }, err error) error {
	if err == nil {
		w.Stop()
	}
	return err
}

func (f *Follower) sliceSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: f.cfg.Service})
}

// Leader returns the leader followed now; false while none is published
// (or only a slice of a term lower than one seen before).
func (f *Follower) Leader() (Leader, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader == nil {
		return Leader{}, false
	}
	return *f.leader, true
}

// update reads the Service and the leader from the caches; when a newer
// term is published it closes the connections to older terms' leaders.
func (f *Follower) update() {
	f.updating.Lock()
	defer f.updating.Unlock()
	svc, err := f.services.Get(f.cfg.Service)
	if err != nil {
		svc = nil // deleted: dials of it fail until it is back
	}
	all, err := f.slices.List(f.sliceSelector())
	if err != nil {
		all = nil
	}
	published := leaderOf(all)

	f.mu.Lock()
	f.svc = svc
	prev := f.leader
	switch {
	case published == nil:
		f.leader = nil
	case published.Term < f.maxTerm:
		// A frozen ex-leader's slice, or a cache behind: never followed.
		f.leader = nil
		f.cfg.Logger.Info("ignored a leader of an older term", "identity", published.Identity, "term", published.Term, "seen", f.maxTerm)
	default:
		f.leader = published
		f.maxTerm = published.Term
	}
	var stale []*conn
	for c := range f.conns {
		if c.term < f.maxTerm {
			stale = append(stale, c)
			delete(f.conns, c)
		}
	}
	cur, newest := f.leader, f.maxTerm
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()

	if !sameLeader(prev, cur) {
		if cur != nil {
			f.cfg.Logger.Info("following the leader", "identity", cur.Identity, "term", cur.Term, "endpoints", addresses(cur.Endpoints))
		} else if prev != nil {
			f.cfg.Logger.Info("no leader published", "was", prev.Identity, "term", prev.Term)
		}
	}
	for _, c := range stale {
		if cur != nil && cur.HandedOver {
			f.cfg.Logger.V(1).Info("leaving a connection to the ex-leader to end itself", "address", c.RemoteAddr(), "term", c.term, "newer", newest, "grace", f.cfg.HandOverGrace)
			f.cfg.Clock.AfterFunc(f.cfg.HandOverGrace, func() { _ = c.Conn.Close() })
			continue
		}
		f.cfg.Logger.Info("closing a connection to an older term's leader", "address", c.RemoteAddr(), "term", c.term, "newer", newest)
		_ = c.Conn.Close()
	}
}

func sameLeader(a, b *Leader) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Identity == b.Identity && a.Term == b.Term && slices.EqualFunc(a.Endpoints, b.Endpoints, sameEndpoint)
}

func sameEndpoint(a, b Endpoint) bool {
	return a.Address == b.Address && maps.Equal(a.Ports, b.Ports)
}

func addresses(eps []Endpoint) []string {
	out := make([]string, 0, len(eps))
	for _, ep := range eps {
		out = append(out, ep.Address.String())
	}
	return out
}

// leaderOf is the leader the slices publish: the slices that carry the
// leader annotations, of the highest term among them, with a ready
// address; nil if there is none. Slices of one term name one identity
// (the Lease allows one leader a term); should two differ, the first
// slice by name wins.
func leaderOf(all []*discoveryv1.EndpointSlice) *Leader {
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	var best *Leader
	for _, s := range all {
		id, ok := s.Annotations[names.AnnotationIdentity]
		if !ok || id == "" {
			continue
		}
		term, err := strconv.ParseInt(s.Annotations[names.AnnotationTerm], 10, 32)
		if err != nil || term < 0 {
			continue
		}
		ep, ok := endpointOf(s)
		if !ok {
			continue
		}
		switch {
		case best == nil || int32(term) > best.Term:
			best = &Leader{Identity: id, Term: int32(term), Endpoints: []Endpoint{ep},
				HandedOver: s.Annotations[names.AnnotationHandOver] == names.HandOverPlanned}
		case int32(term) == best.Term && id == best.Identity && !slices.ContainsFunc(best.Endpoints, func(e Endpoint) bool { return e.Address.Is4() == ep.Address.Is4() }):
			best.Endpoints = append(best.Endpoints, ep)
		}
	}
	return best
}

// endpointOf is the slice's first ready address with the slice's TCP
// ports.
func endpointOf(s *discoveryv1.EndpointSlice) (Endpoint, bool) {
	if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
		return Endpoint{}, false
	}
	for _, e := range s.Endpoints {
		if !ptr.Deref(e.Conditions.Ready, true) || len(e.Addresses) == 0 {
			continue
		}
		addr, err := netip.ParseAddr(e.Addresses[0])
		if err != nil || addr.Unmap().Is4() != (s.AddressType == discoveryv1.AddressTypeIPv4) {
			continue
		}
		ports := map[string]int32{}
		for _, p := range s.Ports {
			if ptr.Deref(p.Protocol, corev1.ProtocolTCP) == corev1.ProtocolTCP && p.Port != nil {
				ports[ptr.Deref(p.Name, "")] = *p.Port
			}
		}
		return Endpoint{Address: addr.Unmap(), Ports: ports}, true
	}
	return Endpoint{}, false
}

// awaitSync returns when the caches have synced; an error when ctx ends,
// expired fires or Start was not called first.
func (f *Follower) awaitSync(ctx context.Context, expired <-chan time.Time) error {
	f.mu.Lock()
	started := f.started
	f.mu.Unlock()
	if !started {
		return errors.New("follow: dial before Start")
	}
	select {
	case <-f.synced: // first: a select picks at random among ready cases
		return nil
	default:
	}
	select {
	case <-f.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return fmt.Errorf("follow: %s/%s not read within %v", f.cfg.Namespace, f.cfg.Service, f.cfg.LeaderWait)
	}
}

// awaitLeader returns the Service, the leader and the highest term seen
// once the caches have synced and a leader is published; an error when
// ctx ends or expired fires first.
func (f *Follower) awaitLeader(ctx context.Context, expired <-chan time.Time) (*corev1.Service, *Leader, int32, error) {
	if err := f.awaitSync(ctx, expired); err != nil {
		return nil, nil, 0, err
	}
	for {
		f.mu.Lock()
		svc, l, term, changed := f.svc, f.leader, f.maxTerm, f.changed
		f.mu.Unlock()
		if l != nil && svc != nil {
			return svc, l, term, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, nil, 0, ctx.Err()
		case <-expired:
			if svc == nil {
				return nil, nil, 0, fmt.Errorf("follow: Service %s/%s not found", f.cfg.Namespace, f.cfg.Service)
			}
			return nil, nil, 0, fmt.Errorf("follow: %w for Service %s/%s within %v", ErrNoLeader, f.cfg.Namespace, f.cfg.Service, f.cfg.LeaderWait)
		}
	}
}

// track records a connection to the leader of term; false, and the
// connection closed, if a newer term was published while it was dialed.
func (f *Follower) track(c net.Conn, term int32) (net.Conn, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if term < f.maxTerm {
		_ = c.Close()
		return nil, false
	}
	tc := &conn{Conn: c, term: term, f: f}
	f.conns[tc] = struct{}{}
	return tc, true
}

// replaced reports whether a term newer than term is published, and the
// channel that is closed at the next change.
func (f *Follower) replaced(term int32) (bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxTerm > term, f.changed
}

func (f *Follower) untrack(c *conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

package leader

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// ErrLeadershipLost is returned by Run when this replica was the leader
// and could no longer renew the Lease (or saw another replica take it).
// The process should exit.
var ErrLeadershipLost = errors.New("leadership lost")

// leaseState is this replica's view of the Lease and the requests that
// change it: it observes the Lease (from the watch and from its own reads
// and writes), and acquires, renews and releases it. One goroutine drives it; the observation is shared with
// the watch's handler and the health check.
//
// Two rules keep a standby from acting early and a leader from stepping
// down on old news:
//
//   - A record is dated when this replica had it in hand: after the read
//     or the watch event that brought it, never before the request that
//     fetched it. Only the leader's own deadline counts from before its
//     request (the renewal's send time), which errs the other way.
//   - Observations are ordered by resourceVersion: a record older than the
//     one already observed (a watch that lags behind a read or a write) is
//     ignored. Where resourceVersions cannot be compared, the leader
//     confirms a foreign holder with a read before it steps down.
type leaseState struct {
	cfg    *Config
	log    logr.Logger
	clock  clock.Clock
	leases coordinationclient.LeaseInterface

	mu sync.Mutex
	// The newest Lease observed, and when it was first seen: a holder's
	// Lease is valid for its duration after that moment, on this
	// replica's monotonic clock, whatever the clocks of the others say.
	observed     *coordinationv1.Lease
	observedRec  resourcelock.LeaderElectionRecord
	observedTime time.Time
	// term is the Lease's transition count of this replica's term: the
	// record is this replica's only if it names its identity with that
	// count, so another process with the same identity is not "self".
	term int32
	// renewedAt is when the last successful acquire or renewal was sent;
	// zero while not the leader. The work must stop by renewedAt +
	// RenewDeadline.
	renewedAt time.Time
	// beginning is how this replica's term began: on a Lease that its
	// previous holder released (a planned stop), on the Lease of a
	// leader whose process had ended (crash.go), on an expired one, or a
	// first.
	beginning termBeginning
	// lastLeader is the last holder reported to OnNewLeader.
	lastLeader string
	// self is this process's Pod and container (resolveSelf), which its
	// terms record (nil: they record none).
	self *instance
	// pending is an acquisition that got no answer and may have been
	// applied (outcomeUnknown), until a read settles it (settleAcquire).
	pending *pendingAcquire

	changed chan struct{} // the Lease changed: re-evaluate now
}

func newLeaseState(cfg *Config) *leaseState {
	return &leaseState{
		cfg:     cfg,
		clock:   cfg.Clock,
		log:     cfg.Logger.WithValues("lease", cfg.Namespace+"/"+cfg.LeaseName, "identity", cfg.Identity),
		leases:  cfg.Client.CoordinationV1().Leases(cfg.Namespace),
		changed: make(chan struct{}, 1),
	}
}

// wake signals ch without blocking; ch has room for one pending signal.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// observeLease is the watch's handler for an added or updated Lease.
func (e *leaseState) observeLease(lease *coordinationv1.Lease) {
	if lease != nil && e.observe(lease, e.clock.Now()) {
		wake(e.changed)
	}
}

// forget is the watch's handler for a deleted Lease: it is free, unless
// something newer than the deleted object was observed already.
func (e *leaseState) forget(lease *coordinationv1.Lease) {
	gone := &coordinationv1.Lease{}
	if lease != nil {
		gone.ObjectMeta = *lease.ObjectMeta.DeepCopy()
	}
	if e.observe(gone, e.clock.Now()) {
		wake(e.changed)
	}
}

// newer reports whether lease is newer than the one observed (or as new,
// with orSame), by resourceVersion. Versions that cannot be compared count
// as newer (the leader then confirms with a read before it steps down).
func newer(lease, than *coordinationv1.Lease, orSame bool) bool {
	if than == nil {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(lease.ResourceVersion, than.ResourceVersion)
	return err != nil || c > 0 || orSame && c == 0
}

// observe records lease, seen at at, if it is newer than the last one; it
// reports whether it was.
func (e *leaseState) observe(lease *coordinationv1.Lease, at time.Time) bool {
	return e.record(lease, at, false)
}

// record records lease, seen at at, if it is newer than the last one (or
// as new, with orSame: this replica's own write, which the API answered
// with its version); it reports whether it did.
func (e *leaseState) record(lease *coordinationv1.Lease, at time.Time, orSame bool) bool {
	e.mu.Lock()
	if !newer(lease, e.observed, orSame) {
		e.mu.Unlock()
		return false
	}
	rec := *resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	e.observed, e.observedRec, e.observedTime = lease, rec, at
	notify := rec.HolderIdentity != "" && rec.HolderIdentity != e.lastLeader
	if notify {
		e.lastLeader = rec.HolderIdentity
	}
	e.mu.Unlock()
	if notify {
		e.log.V(1).Info("new leader observed", "leader", rec.HolderIdentity)
		if e.cfg.OnNewLeader != nil {
			e.cfg.OnNewLeader(rec.HolderIdentity)
		}
	}
	return true
}

// holder returns the holder last observed.
func (e *leaseState) holder() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.observedRec.HolderIdentity
}

// mine reports whether the last observed record is this replica's term.
func (e *leaseState) mine() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.isMine(e.observedRec)
}

func (e *leaseState) isMine(rec resourcelock.LeaderElectionRecord) bool {
	return rec.HolderIdentity == e.cfg.Identity && int32(rec.LeaderTransitions) == e.term && !e.renewedAt.IsZero()
}

// currentTerm returns the Lease's transition count of this replica's
// term.
func (e *leaseState) currentTerm() int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term
}

// expiry returns when the observed holder's Lease expires for this replica;
// zero when it is free (no holder, or released).
func (e *leaseState) expiry() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.observedRec.HolderIdentity == "" {
		return time.Time{}
	}
	return e.observedTime.Add(time.Duration(e.observedRec.LeaseDurationSeconds) * time.Second)
}

// deadline returns when the leader must have stopped acting, and whether
// this replica leads at all.
func (e *leaseState) deadline() (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.renewedAt.IsZero() {
		return time.Time{}, false
	}
	return e.renewedAt.Add(e.cfg.RenewDeadline), true
}

// leading reports whether this replica may act as the leader now: it holds
// the Lease and its renew deadline has not passed. Every write of the
// leader checks it first.
func (e *leaseState) leading() bool {
	d, ok := e.deadline()
	return ok && e.clock.Now().Before(d)
}

// lastRenewal returns when the last successful acquire or renewal was
// sent; zero while not the leader.
func (e *leaseState) lastRenewal() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.renewedAt
}

// wrote records a successful write of this replica: the Lease the API
// returned (had in hand at done) and when the request was sent.
func (e *leaseState) wrote(lease *coordinationv1.Lease, sent, done time.Time) {
	e.record(lease, done, true)
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	e.mu.Lock()
	if rec.HolderIdentity == e.cfg.Identity {
		e.term, e.renewedAt = int32(rec.LeaderTransitions), sent
	} else {
		e.renewedAt = time.Time{}
	}
	e.mu.Unlock()
}

// handedOverTerm reports whether this replica's term began on a Lease its
// previous holder released.
func (e *leaseState) handedOverTerm() bool { return e.termBegan().handedOver }

// latest returns the newest Lease object this replica knows, the base of
// its writes.
func (e *leaseState) latest() *coordinationv1.Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.observed
}

func (e *leaseState) isMineLease(lease *coordinationv1.Lease) bool {
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.isMine(*rec)
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease == nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// get reads the Lease from the API (a consistent read) and observes it,
// dated when it arrived.
func (e *leaseState) get(ctx context.Context) (*coordinationv1.Lease, error) {
	lease, err := e.leases.Get(ctx, e.cfg.LeaseName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	e.observe(lease, e.clock.Now())
	return lease, nil
}

// recordEvent records an Event on the Lease, as client-go's locks do.
func (e *leaseState) recordEvent(reason, msg string) {
	e.event(corev1.EventTypeNormal, reason, msg)
}

// recordWarning records a Warning Event on the Lease.
func (e *leaseState) recordWarning(reason, msg string) {
	e.event(corev1.EventTypeWarning, reason, msg)
}

func (e *leaseState) event(typ, reason, msg string) {
	if e.cfg.EventRecorder == nil {
		return
	}
	lease := e.latest()
	if lease == nil || lease.UID == "" {
		return
	}
	ref := lease.DeepCopy()
	ref.SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind("Lease"))
	e.cfg.EventRecorder.Event(ref, typ, reason, e.cfg.Identity+" "+msg)
}

package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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
	// handedOver says this replica's term began on a Lease that its
	// previous holder released (a planned stop), not on an expired one.
	handedOver bool
	// crashTakeover says this replica's term began on the Lease of a
	// leader whose process had ended (crash.go), before it expired.
	crashTakeover bool
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
func (e *leaseState) handedOverTerm() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.handedOver
}

// latest returns the newest Lease object this replica knows, the base of
// its writes.
func (e *leaseState) latest() *coordinationv1.Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.observed
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

// tryAcquire takes the Lease if it is free, released or expired, or if
// dead (non-nil) is the instance the live Lease records and its process
// has ended (crash.go). It reads the Lease first, so a stale observation
// cannot make it steal a live Lease. A record naming this replica's
// identity counts as another holder's (Run acquires once per process, so
// it is a previous process with the same identity, which may still act
// until its Lease expires), except the term of this process's own earlier
// attempt that got no answer: the read shows it applied, and this replica
// renews it and leads.
func (e *leaseState) tryAcquire(ctx context.Context, dead *instance) (bool, error) {
	lease, err := e.get(ctx)
	if apierrors.IsNotFound(err) {
		e.settleAcquire(nil)
		sent := e.clock.Now()
		spec := e.spec(resourcelock.LeaderElectionRecord{}, sent)
		created := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.LeaseName},
			Spec:       spec,
		}
		setInstance(created, instanceOf(e.self, e.cfg.Identity, *spec.LeaseTransitions, sent))
		got, err := e.leases.Create(ctx, created, metav1.CreateOptions{})
		if err != nil {
			e.unanswered(err, created, false, false)
			return false, fmt.Errorf("create lease: %w", err)
		}
		e.wrote(got, sent, e.clock.Now())
		e.began(false, false)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("get lease: %w", err)
	}
	if p := e.settleAcquire(lease); p != nil {
		return e.resume(ctx, p)
	}
	base := e.latest()
	if base == nil || base.UID == "" {
		base = lease
	}
	// The observation may be newer than the read (from the watch): judge
	// by the newest.
	live := e.holder() != "" && e.clock.Now().Before(e.expiry())
	early := live && dead != nil && recordsInstance(base, *dead)
	if live && !early {
		return false, nil
	}
	sent := e.clock.Now()
	next := base.DeepCopy()
	prev := resourcelock.LeaseSpecToLeaderElectionRecord(&base.Spec)
	next.Spec = e.spec(*prev, sent)
	setInstance(next, instanceOf(e.self, e.cfg.Identity, *next.Spec.LeaseTransitions, sent))
	handedOver := prev.HolderIdentity == "" && !prev.AcquireTime.IsZero()
	updated, err := e.leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		e.unanswered(err, next, handedOver, early)
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	e.wrote(updated, sent, e.clock.Now())
	e.began(handedOver, early)
	return true, nil
}

// began records how this replica's new term began.
func (e *leaseState) began(handedOver, crashTakeover bool) {
	e.mu.Lock()
	e.handedOver, e.crashTakeover = handedOver, crashTakeover
	e.mu.Unlock()
}

// pendingAcquire is an acquisition that got no answer: the term it
// wrote, and how that term began.
type pendingAcquire struct {
	sent          time.Time // when the write was sent
	term          int32     // the transition count it wrote
	handedOver    bool
	crashTakeover bool
}

// unanswered records the acquisition wrote, which failed with err, if
// the API may have applied it all the same.
func (e *leaseState) unanswered(err error, wrote *coordinationv1.Lease, handedOver, crashTakeover bool) {
	if !outcomeUnknown(err) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending = &pendingAcquire{
		sent: wrote.Spec.AcquireTime.Time, term: *wrote.Spec.LeaseTransitions,
		handedOver: handedOver, crashTakeover: crashTakeover,
	}
}

// settleAcquire settles an acquisition that got no answer by lease, a
// read that followed it (nil: the Lease does not exist): it returns the
// acquisition if lease records its term, and forgets it either way.
func (e *leaseState) settleAcquire(lease *coordinationv1.Lease) *pendingAcquire {
	e.mu.Lock()
	p := e.pending
	e.pending = nil
	e.mu.Unlock()
	if p == nil || lease == nil {
		return nil
	}
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	at := rec.AcquireTime.Sub(p.sent)
	if rec.HolderIdentity != e.cfg.Identity || int32(rec.LeaderTransitions) != p.term || at < -time.Microsecond || at > time.Microsecond {
		return nil
	}
	return p
}

// resume makes the term of an acquisition that got no answer, which lease
// (just read) shows applied, this replica's: its deadline counts from when
// the acquisition was sent, and a renewal at once starts a fresh one.
func (e *leaseState) resume(ctx context.Context, p *pendingAcquire) (bool, error) {
	e.claim(p)
	e.log.Info("an acquisition that got no answer was applied: resuming its term", "term", p.term)
	if err := e.renew(ctx); err != nil {
		e.mu.Lock()
		e.renewedAt = time.Time{}
		e.pending = p // the next read settles it again
		e.mu.Unlock()
		return false, fmt.Errorf("renew the Lease of an acquisition that got no answer: %w", err)
	}
	e.began(p.handedOver, p.crashTakeover)
	return true, nil
}

// claim makes the term of p, an applied acquisition, this replica's, its
// deadline counting from when p was sent.
func (e *leaseState) claim(p *pendingAcquire) {
	e.mu.Lock()
	e.term, e.renewedAt = p.term, p.sent
	e.mu.Unlock()
}

// abandon is called when this replica stops without leading: if an
// acquisition of its got no answer, it reads the Lease and, if that
// acquisition was applied, releases it, so that the others need not wait
// for it to expire.
func (e *leaseState) abandon(ctx context.Context) error {
	e.mu.Lock()
	pending := e.pending != nil
	e.mu.Unlock()
	if !pending {
		return nil
	}
	lease, err := e.get(ctx)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the Lease after an acquisition that got no answer: %w", err)
	}
	p := e.settleAcquire(lease)
	if p == nil {
		return nil
	}
	e.claim(p)
	e.log.Info("an acquisition that got no answer was applied: releasing it", "term", p.term)
	return e.release(ctx)
}

// recordsInstance reports whether lease records inst for its current
// holder and term.
func recordsInstance(lease *coordinationv1.Lease, inst instance) bool {
	rec, err := recordedInstance(lease)
	return err == nil && rec.Holder == inst.Holder && rec.Term == inst.Term &&
		rec.Namespace == inst.Namespace && rec.Pod == inst.Pod && rec.UID == inst.UID &&
		rec.Container == inst.Container && rec.Since.Equal(inst.Since)
}

// crashTakeoverTerm reports whether this replica's term began on the Lease
// of a leader whose process had ended.
func (e *leaseState) crashTakeoverTerm() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.crashTakeover
}

// spec is the Lease spec of a new term of this replica, after prev.
func (e *leaseState) spec(prev resourcelock.LeaderElectionRecord, now time.Time) coordinationv1.LeaseSpec {
	next := prev
	next.HolderIdentity = e.cfg.Identity
	next.LeaseDurationSeconds = int(e.cfg.LeaseDuration / time.Second)
	next.AcquireTime = metav1.NewTime(now)
	next.RenewTime = metav1.NewTime(now)
	next.LeaderTransitions = prev.LeaderTransitions + 1
	if prev.HolderIdentity == "" && prev.AcquireTime.IsZero() {
		next.LeaderTransitions = 0 // a new Lease
	}
	return resourcelock.LeaderElectionRecordToLeaseSpec(&next)
}

// renew renews the Lease this replica holds. A conflict means the Lease
// changed under it: it re-reads it and renews only if it is still this
// replica's term.
func (e *leaseState) renew(ctx context.Context) error {
	base := e.latest()
	if base == nil || !e.isMineLease(base) {
		// Maybe old news whose version could not be ordered: only a
		// read decides.
		var err error
		if base, err = e.get(ctx); err != nil {
			return fmt.Errorf("renew lease: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		if !e.isMineLease(base) {
			return fmt.Errorf("%w: the Lease is held by %q", ErrLeadershipLost, holderOf(base))
		}
		sent := e.clock.Now()
		next := base.DeepCopy()
		next.Spec.RenewTime = &metav1.MicroTime{Time: sent}
		updated, err := e.leases.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			e.wrote(updated, sent, e.clock.Now())
			return nil
		}
		if !apierrors.IsConflict(err) || attempt > 0 {
			return fmt.Errorf("renew lease: %w", err)
		}
		if base, err = e.get(ctx); err != nil {
			return fmt.Errorf("renew lease: %w", err)
		}
	}
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

// confirmLost is called when the observed record is not this replica's
// term: it reads the Lease and reports whether it is really another's (an
// error reading counts as lost only once the deadline passes, which the
// run loop watches anyway).
func (e *leaseState) confirmLost(ctx context.Context) (bool, string) {
	lease, err := e.get(ctx)
	if err != nil {
		e.log.Error(err, "could not confirm the Lease's holder")
		return false, ""
	}
	return !e.isMineLease(lease), holderOf(lease)
}

// release gives the Lease up, if it records this replica's term, so that
// a standby takes it at once instead of waiting for it to expire. The
// caller has stopped the work: a release after the renew deadline is as
// safe as one before it (the write is conditional on the version of this
// term), and spares the others the rest of the Lease.
//
// It does not trust its last observation: a renewal cancelled by the
// stop that led here (SIGTERM while it was on its way) is usually applied
// all the same, so the Lease is newer than the copy in hand. A conflict,
// or a write whose outcome is unknown, is settled by a read: while the
// Lease still records this replica's term, release writes again from the
// fresh copy; once it records anything else (released, or another's), it
// is done. It returns an error only while the Lease may still name this
// replica: ctx ended, or the API refused the write outright.
func (e *leaseState) release(ctx context.Context) error {
	base := e.latest()
	if base == nil || !e.isMineLease(base) {
		return fmt.Errorf("not releasing: the Lease is held by %q", holderOf(base))
	}
	for {
		now := e.clock.Now()
		next := base.DeepCopy()
		setInstance(next, nil)
		next.Spec.HolderIdentity = nil
		next.Spec.LeaseDurationSeconds = ptr.To[int32](1)
		next.Spec.RenewTime = &metav1.MicroTime{Time: now}
		next.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		updated, err := e.leases.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			e.wrote(updated, now, e.clock.Now())
			return nil
		}
		if apierrors.IsNotFound(err) {
			return nil // deleted: it names nobody
		}
		if !apierrors.IsConflict(err) && !outcomeUnknown(err) {
			return fmt.Errorf("release lease: %w", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("release lease: %w", err)
		}
		e.log.V(1).Info("the Lease may have changed under the release; reading it", "reason", err.Error())
		if base, err = e.reread(ctx, err); apierrors.IsNotFound(err) {
			return nil // deleted: it names nobody
		} else if err != nil {
			return fmt.Errorf("release lease: %w", err)
		}
		if !e.isMineLease(base) {
			e.log.V(1).Info("the Lease no longer records this term", "holder", holderOf(base))
			return nil
		}
	}
}

// reread reads the Lease after a write failed with cause: at once after a
// conflict (the API answered), after a short pause when the API did not
// answer, and again while reads get no answer either, until one succeeds,
// the API refuses it, or ctx ends.
func (e *leaseState) reread(ctx context.Context, cause error) (*coordinationv1.Lease, error) {
	pause := e.cfg.RetryPeriod / 4
	for {
		if !apierrors.IsConflict(cause) {
			t := e.clock.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("%w (last error: %w)", ctx.Err(), cause)
			case <-t.C():
			}
		}
		lease, err := e.get(ctx)
		if err == nil {
			return lease, nil
		}
		if !outcomeUnknown(err) || ctx.Err() != nil {
			return nil, err
		}
		cause = err
	}
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

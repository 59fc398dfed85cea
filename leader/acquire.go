// Acquiring the Lease: free, released, expired, or a crashed holder's
// (crash takeover), and a write of its own that got no answer.

package leader

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

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
			e.unanswered(err, created, termBeginning{first: true})
			return false, fmt.Errorf("create lease: %w", err)
		}
		e.wrote(got, sent, e.clock.Now())
		e.began(termBeginning{first: true})
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
	b := beginningAfter(*prev, early, sent)
	updated, err := e.leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		e.unanswered(err, next, b)
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	e.wrote(updated, sent, e.clock.Now())
	e.began(b)
	return true, nil
}

// termBeginning is how a term of this replica began, and how long the
// Lease had been without a working leader then.
type termBeginning struct {
	// handedOver: on a Lease its previous holder released (a planned
	// stop); crashTakeover: on the Lease of a leader whose process had
	// ended, before it expired; first: on a Lease nobody had held.
	// Otherwise, on an expired Lease.
	handedOver, crashTakeover, first bool
	// leaderless is the time from the previous holder's last renewal (or
	// its release) to the acquisition, by this replica's clock: zero for
	// a first term.
	leaderless time.Duration
}

// How a term began, the values of the metric label "began".
const (
	beganHandover      = "handover"
	beganCrashTakeover = "crash-takeover"
	beganExpiry        = "expiry"
	beganFirst         = "first"
)

func (b termBeginning) kind() string {
	switch {
	case b.crashTakeover:
		return beganCrashTakeover
	case b.handedOver:
		return beganHandover
	case b.first:
		return beganFirst
	}
	return beganExpiry
}

// beginningAfter is how a term acquired at sent on a Lease that recorded
// prev begins (early: before prev's expiry, its leader's process ended).
func beginningAfter(prev resourcelock.LeaderElectionRecord, early bool, sent time.Time) termBeginning {
	b := termBeginning{
		handedOver:    prev.HolderIdentity == "" && !prev.AcquireTime.IsZero(),
		crashTakeover: early,
		first:         prev.HolderIdentity == "" && prev.AcquireTime.IsZero(),
	}
	if !b.first && !prev.RenewTime.IsZero() {
		b.leaderless = max(sent.Sub(prev.RenewTime.Time), 0)
	}
	return b
}

// began records how this replica's new term began.
func (e *leaseState) began(b termBeginning) {
	e.mu.Lock()
	e.beginning = b
	e.mu.Unlock()
}

// termBegan reports how this replica's term began.
func (e *leaseState) termBegan() termBeginning {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.beginning
}

// pendingAcquire is an acquisition that got no answer: the term it
// wrote, and how that term began.
type pendingAcquire struct {
	sent      time.Time // when the write was sent
	term      int32     // the transition count it wrote
	beginning termBeginning
}

// unanswered records the acquisition wrote, which failed with err, if
// the API may have applied it all the same.
func (e *leaseState) unanswered(err error, wrote *coordinationv1.Lease, b termBeginning) {
	if !outcomeUnknown(err) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending = &pendingAcquire{
		sent: wrote.Spec.AcquireTime.Time, term: *wrote.Spec.LeaseTransitions,
		beginning: b,
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
	e.began(p.beginning)
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
func (e *leaseState) crashTakeoverTerm() bool { return e.termBegan().crashTakeover }

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

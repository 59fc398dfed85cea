package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrLeadershipLost is returned by Run when this replica was the leader
// and could no longer renew the Lease (or saw another replica take it).
// The process should exit.
var ErrLeadershipLost = errors.New("leadership lost")

// election is the Lease state machine: it observes the Lease (from the
// watch and from its own reads and writes), and acquires, renews and
// releases it through client-go's Lease lock. One goroutine drives it;
// the observation is shared with the watch's handler and the health check.
type election struct {
	cfg  *Config
	log  logr.Logger
	lock *resourcelock.LeaseLock

	mu sync.Mutex
	// The last record observed, and when it was first seen: a holder's
	// Lease is valid for its duration after that moment, on this replica's
	// monotonic clock, whatever the clocks of the others say. Records are
	// compared with microsecond times (the Lease's precision), so every
	// renewal is a change, even two in the same second.
	observedKey    string
	observedRecord resourcelock.LeaderElectionRecord
	observedTime   time.Time
	// renewedAt is when the last successful acquire or renewal was sent;
	// zero while not the leader. The work must stop by renewedAt +
	// RenewDeadline.
	renewedAt time.Time
	// lastLeader is the last holder reported to OnNewLeader.
	lastLeader string

	changed chan struct{} // the Lease changed: re-evaluate now
}

func newElection(cfg *Config) *election {
	return &election{
		cfg: cfg,
		log: cfg.Logger.WithValues("lease", cfg.Namespace+"/"+cfg.LeaseName, "identity", cfg.Identity),
		lock: &resourcelock.LeaseLock{
			LeaseMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.LeaseName},
			Client:    cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{
				Identity:      cfg.Identity,
				EventRecorder: cfg.EventRecorder,
			},
		},
		changed: make(chan struct{}, 1),
	}
}

// observeLease is the watch's handler.
func (e *election) observeLease(lease *coordinationv1.Lease) {
	if lease == nil {
		return
	}
	e.observe(*resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec), time.Now())
	wake(e.changed)
}

// wake signals ch without blocking; ch has room for one pending signal.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// recordKey identifies a record's content.
func recordKey(r resourcelock.LeaderElectionRecord) string {
	return fmt.Sprintf("%s|%d|%d|%d|%d|%s|%s", r.HolderIdentity, r.LeaseDurationSeconds, r.LeaderTransitions,
		r.AcquireTime.UnixMicro(), r.RenewTime.UnixMicro(), r.Strategy, r.PreferredHolder)
}

// forget is the watch's handler for a deleted Lease: it is free.
func (e *election) forget() {
	e.observe(resourcelock.LeaderElectionRecord{}, time.Now())
	wake(e.changed)
}

// observe records the record if it differs from the last one.
func (e *election) observe(rec resourcelock.LeaderElectionRecord, now time.Time) {
	key := recordKey(rec)
	e.mu.Lock()
	if key == e.observedKey {
		e.mu.Unlock()
		return
	}
	e.observedKey, e.observedRecord, e.observedTime = key, rec, now
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
}

// holder returns the holder last observed.
func (e *election) holder() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.observedRecord.HolderIdentity
}

// expiry returns when the observed holder's Lease expires for this replica;
// zero when it is free (no holder, or released).
func (e *election) expiry() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.observedRecord.HolderIdentity == "" {
		return time.Time{}
	}
	return e.observedTime.Add(time.Duration(e.observedRecord.LeaseDurationSeconds) * time.Second)
}

// deadline returns when the leader must have stopped acting, and whether
// this replica leads at all.
func (e *election) deadline() (time.Time, bool) {
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
func (e *election) leading() bool {
	d, ok := e.deadline()
	return ok && time.Now().Before(d)
}

// lastRenewal returns when the last successful acquire or renewal was
// sent; zero while not the leader.
func (e *election) lastRenewal() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.renewedAt
}

func (e *election) setRenewed(t time.Time) {
	e.mu.Lock()
	e.renewedAt = t
	e.mu.Unlock()
}

// tryAcquire takes the Lease if it is free, released or expired, or
// already ours. It reads the Lease first, so a stale observation cannot
// make it steal a live Lease: a record that changed since the last
// observation restarts the expiry clock.
func (e *election) tryAcquire(ctx context.Context) (bool, error) {
	now := time.Now()
	rec, _, err := e.lock.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		fresh := resourcelock.LeaderElectionRecord{
			HolderIdentity:       e.cfg.Identity,
			LeaseDurationSeconds: int(e.cfg.LeaseDuration / time.Second),
			AcquireTime:          metav1.NewTime(now),
			RenewTime:            metav1.NewTime(now),
		}
		if err := e.lock.Create(ctx, fresh); err != nil {
			return false, fmt.Errorf("create lease: %w", err)
		}
		e.observe(fresh, now)
		e.setRenewed(now)
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get lease: %w", err)
	}
	e.observe(*rec, now)
	if rec.HolderIdentity != "" && rec.HolderIdentity != e.cfg.Identity {
		if exp := e.expiry(); now.Before(exp) {
			return false, nil
		}
	}
	next := *rec
	next.HolderIdentity = e.cfg.Identity
	next.LeaseDurationSeconds = int(e.cfg.LeaseDuration / time.Second)
	next.RenewTime = metav1.NewTime(now)
	if rec.HolderIdentity != e.cfg.Identity {
		next.AcquireTime = metav1.NewTime(now)
		next.LeaderTransitions = rec.LeaderTransitions + 1
	}
	if err := e.lock.Update(ctx, next); err != nil {
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	e.observe(next, now)
	e.setRenewed(now)
	return true, nil
}

// renew renews the Lease this replica holds. A conflict means the Lease
// changed under it: it re-reads it and renews only if it still holds it.
func (e *election) renew(ctx context.Context) error {
	now := time.Now()
	e.mu.Lock()
	next := e.observedRecord
	e.mu.Unlock()
	if next.HolderIdentity != e.cfg.Identity {
		return fmt.Errorf("%w: the Lease is held by %q", ErrLeadershipLost, next.HolderIdentity)
	}
	next.RenewTime = metav1.NewTime(now)
	err := e.lock.Update(ctx, next)
	if apierrors.IsConflict(err) {
		rec, _, gerr := e.lock.Get(ctx)
		if gerr != nil {
			return fmt.Errorf("renew lease: %w", gerr)
		}
		e.observe(*rec, now)
		if rec.HolderIdentity != e.cfg.Identity {
			return fmt.Errorf("%w: the Lease was taken by %q", ErrLeadershipLost, rec.HolderIdentity)
		}
		next = *rec
		next.RenewTime = metav1.NewTime(now)
		err = e.lock.Update(ctx, next)
	}
	if err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	e.observe(next, now)
	e.setRenewed(now)
	return nil
}

// release gives the Lease up, if this replica still leads, so that a
// standby takes it at once instead of waiting for it to expire.
func (e *election) release(ctx context.Context) error {
	if !e.leading() {
		return errors.New("not releasing: the renew deadline has passed")
	}
	e.mu.Lock()
	next := e.observedRecord
	e.mu.Unlock()
	now := time.Now()
	next.HolderIdentity = ""
	next.LeaseDurationSeconds = 1
	next.RenewTime = metav1.NewTime(now)
	next.AcquireTime = metav1.NewTime(now)
	if err := e.lock.Update(ctx, next); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	e.observe(next, now)
	e.setRenewed(time.Time{})
	return nil
}

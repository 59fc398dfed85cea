// Keeping and giving up the Lease: renewal, the check of a foreign
// holder before stepping down, and the release of a planned stop.

package leader

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

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

// A standby replica: waiting for the Lease, and one attempt at it.

package leader

import (
	"context"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// standby waits for the Lease, reacting to each change the watch reports;
// it returns true once this replica holds it, false if ctx ended first.
//
// It tries to acquire when the Lease is free, released or expired, the
// moment it is, and in any case every standbyRecheck (or LeaseDuration if
// longer), in case the watch missed an event. That re-read is all a
// standby asks of the API server besides its watches: a watch that stalls
// without an error stops the renewals the standby sees, so it tries (and
// reads the Lease) when the last one it saw expires anyway.
// A record naming this replica's own identity is not
// this process's (Run acquires once): it waits for expiry like any. A
// standby whose Pod is leaving makes no attempt (leaving.go).
func (e *Elector) standby(ctx context.Context) bool {
	clk := e.cfg.Clock
	recheck := max(e.cfg.LeaseDuration, standbyRecheck)
	var lastAttempt, crashRetry time.Time
	if e.pods != nil {
		defer e.pods.stop()
	}
	var said aside
	for {
		// A select with the context's end and a change both ready picks
		// either: an ended context must not make one more attempt.
		if ctx.Err() != nil {
			return false
		}
		if why, out := e.leaving(); out {
			// Its Pod is leaving: no more attempts (leaving.go).
			e.pods.stop()
			e.stepAside(&said, why)
			e.awaitChange(ctx, recheck)
			continue
		}
		now := clk.Now()
		exp := e.lease.expiry()
		dead := e.crashed()
		early := dead != nil && !now.Before(crashRetry)
		if e.lease.holder() == "" || !now.Before(exp) || now.Sub(lastAttempt) >= recheck || early {
			lastAttempt = now
			var acquired bool
			var inst *instance
			if early {
				inst = &dead.inst
			}
			if acquired, exp = e.attempt(ctx, inst); acquired {
				if e.lease.crashTakeoverTerm() {
					e.tookOverFromACrash(*dead)
				}
				return true
			}
			if early {
				crashRetry = clk.Now().Add(jitter(e.cfg.RetryPeriod))
				exp = minTime(exp, crashRetry)
			} else if e.crashed() != nil {
				// The read brought a record whose Pod shows its end.
				continue
			}
		}
		wait := lastAttempt.Add(recheck).Sub(clk.Now())
		if !exp.IsZero() {
			wait = min(wait, exp.Sub(clk.Now()))
		}
		e.awaitChange(ctx, max(wait, time.Millisecond))
	}
}

// awaitChange waits until ctx ends, the Lease or a watched Pod changes, or
// d has passed on the clock.
func (e *Elector) awaitChange(ctx context.Context, d time.Duration) {
	timer := e.cfg.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-e.lease.changed:
	case <-timer.C():
	}
}

// attempt tries to acquire the Lease once. If it did not, it returns when
// to try next at the latest: when the holder's Lease expires, or, if the
// API failed, after a jittered retry period.
func (e *Elector) attempt(ctx context.Context, dead *instance) (acquired bool, next time.Time) {
	actx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	ok, err := e.lease.tryAcquire(actx, dead)
	cancel()
	switch {
	case ok:
		return true, time.Time{}
	case err == nil:
		return false, e.lease.expiry()
	case ctx.Err() != nil:
	case apierrors.IsConflict(err):
		// Another replica was faster.
		e.lease.log.V(1).Info("lost the race for the Lease", "reason", err.Error())
	default:
		e.lease.log.Error(err, "could not acquire the Lease; retrying")
	}
	// Not a live holder's Lease, but the API is unhappy.
	return false, e.cfg.Clock.Now().Add(jitter(e.cfg.RetryPeriod))
}

// minTime returns the earlier of two times, ignoring a zero one.
func minTime(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// jitter returns d plus up to 20%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

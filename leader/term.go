package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
)

// term is one term of this replica as the leader, from acquiring the Lease
// to stepping down: the work and the publisher run beside hold, which
// renews the Lease until the term ends; stepDown then stops them and, on a
// planned stop, hands the Lease over.
type term struct {
	e   *Elector
	log logr.Logger

	stopWork context.CancelFunc
	workDone chan error // work's result, once
	workErr  error      // work's result, once received
	returned bool       // the result was received

	stopPub context.CancelFunc
	pubDone chan struct{}
}

// lead is the leader's term: it starts the work and the publisher, holds
// the Lease until the term ends, and steps down.
func (e *Elector) lead(ctx context.Context, work func(ctx context.Context) error) error {
	t := e.startTerm(work)
	return t.stepDown(t.hold(ctx))
}

// startTerm marks this replica the leader and starts the work and the
// publisher.
func (e *Elector) startTerm(work func(ctx context.Context) error) *term {
	acquired := e.cfg.Clock.Now()
	t := &term{e: e, log: e.lease.log, workDone: make(chan error, 1), pubDone: make(chan struct{})}
	e.isLeader.Store(true)
	e.handingOver.Store(false)
	e.cfg.Metrics.setLeader(true)
	began := e.lease.termBegan()
	e.cfg.Metrics.termBegan(began)
	t.log.Info("became the leader", "began", began.kind(), "leaderless", began.leaderless.Round(time.Millisecond))
	e.lease.recordEvent("LeaderElection", "became leader")
	e.unnamedTerm()

	workCtx, stopWork := context.WithCancel(context.Background())
	t.stopWork = stopWork
	go func() { t.workDone <- work(workCtx) }()

	// A change seen while standing by is old news: the first reconcile
	// reads the caches as they are now.
	select {
	case <-e.trigger:
	default:
	}
	pubCtx, stopPub := context.WithCancel(context.Background())
	t.stopPub = stopPub
	go func() {
		defer close(t.pubDone)
		if e.pub != nil {
			e.pub.run(pubCtx, acquired)
		}
	}()
	return t
}

// hold renews the Lease every RetryPeriod until the term ends. It returns
// nil when the term ends as planned (ctx cancelled, or the work
// returned), and an error wrapping ErrLeadershipLost when the Lease is
// lost: no successful renewal within RenewDeadline, or a confirmed other
// holder.
func (t *term) hold(ctx context.Context) error {
	cfg, clk := &t.e.cfg, t.e.cfg.Clock
	renewIn := cfg.RetryPeriod
	for {
		deadline, _ := t.e.lease.deadline()
		deadlineTimer := clk.NewTimer(deadline.Sub(clk.Now()))
		renewTimer := clk.NewTimer(renewIn)
		var lost error
		renew := false
		select {
		case <-ctx.Done():
			t.log.Info("stepping down: stopping")
			return nil
		case err := <-t.workDone:
			t.workErr, t.returned = err, true
			if err != nil {
				t.log.Error(err, "stepping down: the work returned an error")
			} else {
				t.log.Info("stepping down: the work returned")
			}
			return nil
		case <-deadlineTimer.C():
			lost = fmt.Errorf("%w: no successful renewal within %v", ErrLeadershipLost, cfg.RenewDeadline)
		case <-t.e.lease.changed:
			lost = t.checkHolder(ctx, deadline)
			renewIn = t.e.lease.lastRenewal().Add(cfg.RetryPeriod).Sub(clk.Now())
		case <-renewTimer.C():
			renew = true
		}
		deadlineTimer.Stop()
		renewTimer.Stop()
		if renew {
			renewIn, lost = t.renew(ctx, deadline)
		}
		if lost != nil {
			t.log.Error(lost, "stepping down: work stopped")
			return lost
		}
	}
}

// checkHolder is called when the Lease changed: if the newest record is
// not this replica's term, a read confirms it before the leader steps
// down, since a watch whose versions cannot be ordered must not depose a
// healthy leader.
func (t *term) checkHolder(ctx context.Context, deadline time.Time) error {
	if t.e.lease.mine() {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, deadline.Sub(t.e.cfg.Clock.Now()))
	defer cancel()
	if lost, holder := t.e.lease.confirmLost(cctx); lost {
		return fmt.Errorf("%w: the Lease is held by %q", ErrLeadershipLost, holder)
	}
	return nil
}

// renew renews the Lease once, before deadline, and says when to renew
// next: after RetryPeriod, or sooner after a failure (the API server may
// be restarting), until the deadline.
func (t *term) renew(ctx context.Context, deadline time.Time) (next time.Duration, lost error) {
	cfg := &t.e.cfg
	rctx, cancel := context.WithTimeout(ctx, deadline.Sub(cfg.Clock.Now()))
	err := t.e.lease.renew(rctx)
	cancel()
	switch {
	case err == nil:
		return cfg.RetryPeriod, nil
	case errors.Is(err, ErrLeadershipLost):
		return 0, err
	}
	cfg.Metrics.renewError()
	t.log.Error(err, "could not renew the Lease; retrying", "deadline", deadline.Sub(cfg.Clock.Now()).Round(time.Millisecond))
	return max(cfg.RetryPeriod/4, 50*time.Millisecond), nil
}

// stepDown ends the term: the work and the publisher stop; if the term
// ended as planned (lost == nil), the leader then withdraws its endpoint
// and releases the Lease, if it still leads once the work has returned.
// It returns lost, else the work's error.
func (t *term) stepDown(lost error) error {
	e := t.e
	e.handingOver.Store(lost == nil)
	e.isLeader.Store(false)
	e.cfg.Metrics.setLeader(false)
	t.stopWork()
	t.stopPub()
	<-t.pubDone
	if !t.waitWork(lost == nil) {
		return fmt.Errorf("leader: the work did not return within %v of its context's cancellation; the Lease is left to expire", e.cfg.WorkStopTimeout)
	}
	if lost != nil {
		return lost
	}
	t.handOver()
	return t.workErr
}

// waitWork waits up to WorkStopTimeout for the work to return, and
// reports whether it did. With renewing (a planned stop) it keeps
// renewing the Lease meanwhile, so no other replica starts while this
// one's work is still finishing.
func (t *term) waitWork(renewing bool) bool {
	if t.returned {
		return true
	}
	cfg, clk := &t.e.cfg, t.e.cfg.Clock
	timeout := clk.NewTimer(cfg.WorkStopTimeout)
	defer timeout.Stop()
	for {
		tick := clk.NewTimer(cfg.RetryPeriod)
		select {
		case err := <-t.workDone:
			tick.Stop()
			t.workErr, t.returned = err, true
			return true
		case <-timeout.C():
			tick.Stop()
			return false
		case <-tick.C():
		}
		if deadline, ok := t.e.lease.deadline(); renewing && ok && clk.Now().Before(deadline) {
			rctx, cancel := context.WithTimeout(context.Background(), deadline.Sub(clk.Now()))
			if err := t.e.lease.renew(rctx); err != nil {
				t.log.Error(err, "could not renew the Lease while the work stops")
			}
			cancel()
		}
	}
}

// handOver releases the Lease, so that a standby takes over at once
// instead of after the Lease expires, and leaves the endpoint to it
// (publisher.handOff): withdrawn only if no successor replaced it within a
// retry period. If the Lease cannot be released, the endpoint is withdrawn
// at once, while this replica still holds the Lease.
func (t *term) handOver() {
	e := t.e
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	if err := e.lease.release(ctx); err != nil {
		t.log.Error(err, "could not release the Lease; it will expire")
		if e.pub != nil {
			if err := e.pub.withdraw(ctx); err != nil {
				t.log.Error(err, "could not withdraw the endpoint")
			}
		}
		return
	}
	t.log.Info("released the Lease")
	if e.pub != nil {
		if err := e.pub.handOff(ctx, e.cfg.RetryPeriod); err != nil {
			t.log.Error(err, "could not withdraw the endpoint")
		}
	}
}

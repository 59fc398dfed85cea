package leader

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Name is the name of the health check, for healthz registries.
func (e *Elector) Name() string { return "leader-election" }

// Check is a /healthz check in the manner of client-go's HealthzAdaptor:
// it fails when this replica still believes it leads but has not renewed
// the Lease for its renew deadline plus a lease duration, a stuck leader
// that a liveness probe should restart. Standbys are healthy.
func (e *Elector) Check(_ *http.Request) error {
	if !e.isLeader.Load() {
		return nil
	}
	last := e.lease.lastRenewal()
	if over := e.cfg.Clock.Since(last); over > e.cfg.RenewDeadline+e.cfg.LeaseDuration {
		return fmt.Errorf("leader has not renewed the Lease for %v", over.Round(time.Second))
	}
	return nil
}

// Ready is a /readyz check: ready once the elector runs, its caches are
// synced and Config.Prepare has returned, for standbys as for the leader, so a Deployment of several
// replicas is Available and `kubectl rollout status` completes. Which
// replica receives traffic is the Service's endpoint's business, not
// readiness's.
func (e *Elector) Ready(_ *http.Request) error {
	if !e.ready.Load() {
		return errors.New("leader election not started")
	}
	return nil
}

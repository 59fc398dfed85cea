package main

import (
	"context"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastover/fastover/webhook"
)

// newRuleSource reads the rule of opts (--rule-file, with the rule flags
// given on top) for the reconciler running alone, with the webhook's rule
// metrics in reg.
func newRuleSource(opts webhook.Options, reg prometheus.Registerer, log logr.Logger) (*webhook.RuleSource, error) {
	m, err := webhook.NewRuleMetrics(reg)
	if err != nil {
		return nil, err
	}
	ro := opts.RuleSourceOptions()
	ro.Metrics, ro.Logger = m, log
	return webhook.NewRuleSource(ro)
}

// reconcile runs the reconciler with the rule in force for as long as this
// replica leads, and again with the new rule whenever the rule changes:
// the run in progress is stopped (its caches are filled anew by the next;
// a rule change is rare) and no pod is fixed under the old rule after the
// change is seen.
func (r *reconcileRunner) reconcile(ctx context.Context) error {
	if r.rules == nil {
		return r.rec.Run(ctx)
	}
	for {
		// A change seen before this run is in force already.
		select {
		case <-r.rules.Changed():
		default:
		}
		r.rec.Auditor.Rule = r.rules.Rule()
		runCtx, stop := context.WithCancel(ctx)
		changed := make(chan bool, 1)
		go func() {
			select {
			case <-r.rules.Changed():
				changed <- true
				stop()
			case <-runCtx.Done():
				changed <- false
			}
		}()
		err := r.rec.Run(runCtx)
		stop()
		if !<-changed || ctx.Err() != nil {
			return err
		}
		r.log.Info("the rule changed: the reconciler starts again with it")
	}
}

package ctrlmanager

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fastover/fastover/leader"
)

// HealthCheckName is the name under which New registers the Elector's
// /healthz and /readyz checks with the manager.
const HealthCheckName = "leader-election"

// Manager is a controller-runtime manager.Manager whose leader-election
// runnables run only while fastover's Elector leads. Its methods are the
// wrapped manager's, except Add, Elected and Start.
type Manager struct {
	manager.Manager
	elector *leader.Elector
	gate    *gate
}

var _ manager.Manager = (*Manager)(nil)

// New builds a controller-runtime manager from config and opts, as
// manager.New does, under a leader.Elector configured by lcfg.
//
// opts.LeaderElection must be false: the Elector replaces
// controller-runtime's election (its LeaderElection* options and
// durations are not used; lcfg's are). Defaults New fills in: lcfg.Client
// from config, lcfg.Logger from opts.Logger (else controller-runtime's
// logger), and opts.Controller.EnableWarmup true, so that a standby's
// controllers start their sources, and sync them, before it may lead. New
// registers the Elector's health checks (HealthCheckName) with the
// manager's /healthz and /readyz.
func New(config *rest.Config, opts manager.Options, lcfg leader.Config) (*Manager, error) {
	if config == nil {
		return nil, errors.New("ctrlmanager: nil rest config")
	}
	if opts.LeaderElection {
		return nil, errors.New("ctrlmanager: manager.Options.LeaderElection must be false: fastover's elector replaces controller-runtime's leader election")
	}
	if opts.Controller.EnableWarmup == nil {
		opts.Controller.EnableWarmup = ptr.To(true)
	}
	if lcfg.Client == nil {
		client, err := kubernetes.NewForConfig(config)
		if err != nil {
			return nil, fmt.Errorf("ctrlmanager: %w", err)
		}
		lcfg.Client = client
	}
	if lcfg.Logger.GetSink() == nil {
		if opts.Logger.GetSink() != nil {
			lcfg.Logger = opts.Logger.WithName("leader")
		} else {
			lcfg.Logger = ctrllog.Log.WithName("leader")
		}
	}
	elector, err := leader.New(lcfg)
	if err != nil {
		return nil, fmt.Errorf("ctrlmanager: %w", err)
	}
	mgr, err := manager.New(config, opts)
	if err != nil {
		return nil, err
	}
	return wrap(mgr, elector)
}

// wrap puts elector in charge of mgr's leader-election runnables. mgr
// must not run its own leader election.
func wrap(mgr manager.Manager, elector *leader.Elector) (*Manager, error) {
	g := &gate{elector: elector, elected: make(chan struct{}), log: mgr.GetLogger().WithName("ctrlmanager")}
	m := &Manager{Manager: mgr, elector: elector, gate: g}
	if err := mgr.Add(g); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck(HealthCheckName, elector.Check); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck(HealthCheckName, elector.Ready); err != nil {
		return nil, err
	}
	return m, nil
}

// Elector returns the elector, for its state: IsLeader, Leader, Term,
// Identity.
func (m *Manager) Elector() *leader.Elector { return m.elector }

// Add adds r to the manager. A runnable that controller-runtime runs
// only on its elected leader (a controller; a Runnable whose
// NeedLeaderElection is true, or that does not say and is neither a cache
// nor a webhook server) is held until the Elector elects this replica, and
// warmed up before if it can be (a controller with warmup on); any other
// goes to the wrapped manager.
func (m *Manager) Add(r manager.Runnable) error {
	if r == nil {
		return errors.New("ctrlmanager: nil runnable")
	}
	if !NeedsLeader(r) {
		return m.Manager.Add(r)
	}
	return m.gate.add(r)
}

// Elected is closed when the Elector elects this replica and its
// leader-election runnables have been started.
func (m *Manager) Elected() <-chan struct{} { return m.gate.elected }

// Start starts the manager and blocks until ctx is cancelled, or a
// runnable fails, as manager.Manager's Start. When the Lease is lost the
// error wraps leader.ErrLeadershipLost (errors.Is), and the program must
// exit; after a planned stop (ctx cancelled) the Lease has been released.
func (m *Manager) Start(ctx context.Context) error { return m.Manager.Start(ctx) }

// NeedsLeader reports whether controller-runtime's manager would run r in
// its leader-election group, that is only on its elected leader.
func NeedsLeader(r manager.Runnable) bool {
	switch v := r.(type) {
	case *manager.Server:
		return v.NeedLeaderElection()
	case interface{ GetCache() cache.Cache }:
		return false
	case webhook.Server:
		return false
	case manager.LeaderElectionRunnable:
		return v.NeedLeaderElection()
	default:
		return true
	}
}

// warmer is controller-runtime's warmup runnable: Warmup runs before the
// replica may lead (a controller starts and syncs its sources).
type warmer interface {
	Warmup(ctx context.Context) error
}

// gate is the one runnable of the wrapped manager's leader-election
// group: it warms up the held runnables and runs the Elector, whose work
// runs them.
type gate struct {
	elector *leader.Elector
	elected chan struct{}
	log     logr.Logger

	mu      sync.Mutex
	held    []manager.Runnable
	started bool                    // Start was called: warm up what is added
	warmCtx context.Context         // the gate's context, for late warmups
	fail    context.CancelCauseFunc // ends the campaign with an error
	term    context.Context         // while leading: the term's context
	endTerm context.CancelCauseFunc // ends the term with an error
	ended   bool                    // the term ended: refuse more
	wg      sync.WaitGroup          // the held runnables while leading
	warmups sync.WaitGroup          // warmups before the campaign
}

// NeedLeaderElection puts the gate in the wrapped manager's
// leader-election group, which the manager starts once everything else
// has: that is when the campaign may begin.
func (g *gate) NeedLeaderElection() bool { return true }

func (g *gate) add(r manager.Runnable) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.ended:
		return errors.New("ctrlmanager: cannot add a runnable: this replica's term as the leader has ended")
	case g.term != nil:
		g.runLocked(r)
		return nil
	}
	g.held = append(g.held, r)
	if g.started {
		g.warmLocked(r)
	}
	return nil
}

// warmLocked warms r up, if it can be, in the background; a failure ends
// the campaign, as a failed warmup ends controller-runtime's manager.
func (g *gate) warmLocked(r manager.Runnable) {
	w, ok := r.(warmer)
	if !ok {
		return
	}
	ctx, fail := g.warmCtx, g.fail
	g.warmups.Add(1)
	go func() {
		defer g.warmups.Done()
		if err := w.Warmup(ctx); err != nil {
			fail(fmt.Errorf("ctrlmanager: warmup of %T: %w", r, err))
		}
	}()
}

// runLocked starts r in the term; its failure ends the term, as a
// failed runnable ends controller-runtime's manager.
func (g *gate) runLocked(r manager.Runnable) {
	ctx, end := g.term, g.endTerm
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := r.Start(ctx); err != nil {
			end(fmt.Errorf("ctrlmanager: %T: %w", r, err))
		}
	}()
}

// Start warms the held runnables up, waits for their warmups, and runs the
// election until ctx ends (a planned stop: Start returns nil), the Lease
// is lost (leader.ErrLeadershipLost), or a runnable fails (its error).
func (g *gate) Start(ctx context.Context) error {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	g.mu.Lock()
	g.started, g.warmCtx, g.fail = true, ctx, fail
	for _, r := range g.held {
		g.warmLocked(r)
	}
	g.mu.Unlock()

	warm := make(chan struct{})
	go func() {
		g.warmups.Wait()
		close(warm)
	}()
	select {
	case <-warm:
	case <-ctx.Done():
		return failure(ctx)
	}
	g.log.Info("standing by, warm", "identity", g.elector.Identity())
	err := g.elector.Run(ctx, g.lead)
	if err == nil {
		return failure(ctx)
	}
	return err
}

// failure is why ctx ended, if not the parent's cancellation: nil for a
// planned stop.
func failure(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// lead is the Elector's work: the term. It starts the held runnables,
// closes elected, and when the term ends (ctx cancelled) waits for them to
// return; a runnable's failure ends the term with its error.
func (g *gate) lead(ctx context.Context) error {
	ctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	g.mu.Lock()
	g.term, g.endTerm = ctx, end
	for _, r := range g.held {
		g.runLocked(r)
	}
	g.held = nil
	g.mu.Unlock()
	close(g.elected)
	g.log.Info("leading: leader-election runnables started", "identity", g.elector.Identity(), "term", g.elector.Term())

	<-ctx.Done()
	g.mu.Lock()
	g.ended = true
	g.mu.Unlock()
	g.wg.Wait()
	return failure(ctx)
}

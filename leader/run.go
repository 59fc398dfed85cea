package leader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Elector runs one replica: standby until it acquires the Lease, then
// leader until the Lease is lost or Run's context ends.
type Elector struct {
	cfg         Config
	el          *election
	pub         *publisher
	broadcaster record.EventBroadcaster
	factories   []informers.SharedInformerFactory

	started  atomic.Bool
	ready    atomic.Bool
	isLeader atomic.Bool
	trigger  chan struct{} // the Service or its slices changed
}

// New validates the config and builds an Elector.
func New(cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("leader: invalid config: %w", err)
	}
	cfg = cfg.withDefaults()
	e := &Elector{cfg: cfg, trigger: make(chan struct{}, 1)}
	if e.cfg.EventRecorder == nil {
		e.broadcaster = record.NewBroadcaster()
		e.cfg.EventRecorder = e.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "fastover-leader", Host: cfg.Identity})
	}
	e.el = newElection(&e.cfg)

	leases := e.factory(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.LeaseName).String()
	})
	onLease := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			e.el.observeLease(l)
		}
	}
	if _, err := leases.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onLease,
		UpdateFunc: func(_, obj any) { onLease(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			l, _ := obj.(*coordinationv1.Lease)
			e.el.forget(l)
		},
	}); err != nil {
		return nil, err
	}

	if cfg.Service != "" {
		services := e.factory(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.Service).String()
		})
		slices := e.factory(func(o *metav1.ListOptions) {
			o.LabelSelector = labelsForService(cfg.Service).String()
		})
		kick := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { wake(e.trigger) },
			UpdateFunc: func(any, any) { wake(e.trigger) },
			DeleteFunc: func(any) { wake(e.trigger) },
		}
		svcInformer := services.Core().V1().Services()
		sliceInformer := slices.Discovery().V1().EndpointSlices()
		for _, inf := range []cache.SharedIndexInformer{svcInformer.Informer(), sliceInformer.Informer()} {
			if _, err := inf.AddEventHandler(kick); err != nil {
				return nil, err
			}
		}
		e.pub = &publisher{
			cfg:      &e.cfg,
			log:      e.el.log.WithValues("service", cfg.Service),
			leading:  e.el.leading,
			services: svcInformer.Lister().Services(cfg.Namespace),
			slices:   sliceInformer.Lister().EndpointSlices(cfg.Namespace),
		}
	}
	return e, nil
}

func (e *Elector) factory(tweak func(*metav1.ListOptions)) informers.SharedInformerFactory {
	f := informers.NewSharedInformerFactoryWithOptions(e.cfg.Client, 0,
		informers.WithNamespace(e.cfg.Namespace), informers.WithTweakListOptions(tweak))
	e.factories = append(e.factories, f)
	return f
}

func labelsForService(service string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service})
}

// IsLeader reports whether this replica leads now.
func (e *Elector) IsLeader() bool { return e.isLeader.Load() && e.el.leading() }

// Leader returns the identity of the leader last observed, "" if none.
func (e *Elector) Leader() string { return e.el.holder() }

// Identity returns this replica's identity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Term returns the Lease's transition count (spec.leaseTransitions) of
// this replica's current or last term as the leader: it grows with every
// new term, so a downstream system can refuse a leader whose term is older
// than one it has seen. 0 before the first term.
func (e *Elector) Term() int32 { return e.el.currentTerm() }

// Run campaigns for the Lease and, while it holds it, runs work with a
// context that is cancelled when leadership ends, and publishes this
// replica as the Service's only endpoint. It blocks until:
//
//   - ctx is cancelled: a leader stops its work (waiting up to
//     WorkStopTimeout for work to return, renewing the Lease meanwhile),
//     withdraws its endpoint and releases the Lease; Run returns nil;
//   - work returns: the same steps; Run returns work's error;
//   - the Lease is lost (no successful renewal within RenewDeadline, or
//     taken): work's context is cancelled at once; Run returns
//     ErrLeadershipLost, and the process should exit.
//
// Run may be called once.
func (e *Elector) Run(ctx context.Context, work func(ctx context.Context) error) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("leader: Run called twice")
	}
	if e.broadcaster != nil {
		e.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.cfg.Client.CoreV1().Events(e.cfg.Namespace)})
		defer e.broadcaster.Shutdown()
	}
	infCtx, stopInformers := context.WithCancel(context.Background())
	defer func() {
		stopInformers()
		for _, f := range e.factories {
			f.Shutdown()
		}
	}()
	for _, f := range e.factories {
		f.Start(infCtx.Done())
	}
	for _, f := range e.factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("leader: cache of %v did not sync", typ)
			}
		}
	}
	e.ready.Store(true)
	log := e.el.log
	log.Info("standing by", "leaseDuration", e.cfg.LeaseDuration, "renewDeadline", e.cfg.RenewDeadline, "retryPeriod", e.cfg.RetryPeriod)

	if !e.standby(ctx) {
		return nil
	}
	return e.lead(ctx, work)
}

// standby waits for the Lease, reacting to each change the watch reports;
// it returns false if ctx ended first.
func (e *Elector) standby(ctx context.Context) bool {
	log := e.el.log
	// A full attempt at least every LeaseDuration, in case the watch
	// missed something; otherwise attempts happen when the Lease is free,
	// released or expired, the moment it is.
	lastAttempt := time.Time{}
	for {
		now := time.Now()
		holder := e.el.holder()
		exp := e.el.expiry()
		// A record naming this replica's own identity is not this
		// process's (Run acquires once): it waits for expiry like any.
		if holder == "" || !now.Before(exp) || now.Sub(lastAttempt) >= e.cfg.LeaseDuration {
			lastAttempt = now
			actx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
			ok, err := e.el.tryAcquire(actx)
			cancel()
			if ok {
				return true
			}
			if err != nil && ctx.Err() == nil {
				log.V(1).Info("could not acquire the Lease", "error", err.Error())
			}
			if err != nil {
				// Not a live holder's Lease, but the API is unhappy:
				// retry after a jittered retry period.
				exp = time.Now().Add(jitter(e.cfg.RetryPeriod))
			} else {
				exp = e.el.expiry()
			}
		}
		wait := time.Until(lastAttempt.Add(e.cfg.LeaseDuration))
		if !exp.IsZero() {
			wait = min(wait, time.Until(exp))
		}
		timer := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-e.el.changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// jitter returns d plus up to 20%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// lead is the leader's term.
func (e *Elector) lead(ctx context.Context, work func(ctx context.Context) error) error {
	log := e.el.log
	acquired := time.Now()
	e.isLeader.Store(true)
	e.cfg.Metrics.setLeader(true)
	log.Info("became the leader")
	e.el.recordEvent("LeaderElection", "became leader")

	workCtx, stopWork := context.WithCancel(context.Background())
	workDone := make(chan error, 1)
	go func() { workDone <- work(workCtx) }()

	// A change seen while standing by is old news: the first reconcile
	// reads the caches as they are now.
	select {
	case <-e.trigger:
	default:
	}
	pubCtx, stopPub := context.WithCancel(context.Background())
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		if e.pub != nil {
			e.publishLoop(pubCtx, acquired)
		}
	}()

	// waitWork waits up to WorkStopTimeout for the work to return. On a
	// planned stop it keeps renewing the Lease meanwhile, so no other
	// replica starts while this one's work is still finishing.
	waitWork := func(renewing bool) (stopped bool, workErr error) {
		timeout := time.NewTimer(e.cfg.WorkStopTimeout)
		defer timeout.Stop()
		tick := time.NewTicker(e.cfg.RetryPeriod)
		defer tick.Stop()
		for {
			select {
			case err := <-workDone:
				return true, err
			case <-timeout.C:
				return false, nil
			case <-tick.C:
				if deadline, ok := e.el.deadline(); renewing && ok && time.Now().Before(deadline) {
					rctx, cancel := context.WithDeadline(context.Background(), deadline)
					if err := e.el.renew(rctx); err != nil {
						log.Info("could not renew the Lease while the work stops", "error", err.Error())
					}
					cancel()
				}
			}
		}
	}

	// stepDown ends the term. planned: withdraw the endpoint and release
	// the Lease, if this replica still leads once the work has stopped.
	stepDown := func(planned bool, reason error) error {
		e.isLeader.Store(false)
		e.cfg.Metrics.setLeader(false)
		stopWork()
		stopPub()
		<-pubDone
		stopped, workErr := waitWork(planned)
		if !stopped {
			return fmt.Errorf("leader: the work did not return within %v of its context's cancellation; the Lease is left to expire", e.cfg.WorkStopTimeout)
		}
		if planned {
			sctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
			if e.pub != nil {
				if err := e.pub.withdraw(sctx); err != nil {
					log.Info("could not withdraw the endpoint", "error", err.Error())
				}
			}
			if err := e.el.release(sctx); err != nil {
				log.Info("could not release the Lease; it will expire", "error", err.Error())
			} else {
				log.Info("released the Lease")
			}
			cancel()
		}
		if reason != nil {
			return reason
		}
		return workErr
	}

	renewIn := e.cfg.RetryPeriod
	for {
		deadline, _ := e.el.deadline()
		deadlineTimer := time.NewTimer(time.Until(deadline))
		renewTimer := time.NewTimer(renewIn)
		select {
		case <-ctx.Done():
			deadlineTimer.Stop()
			renewTimer.Stop()
			log.Info("stepping down: stopping")
			return stepDown(true, nil)
		case err := <-workDone:
			deadlineTimer.Stop()
			renewTimer.Stop()
			workDone <- err // for stepDown
			log.Info("stepping down: the work returned", "error", fmt.Sprint(err))
			return stepDown(true, nil)
		case <-deadlineTimer.C:
			renewTimer.Stop()
			log.Error(ErrLeadershipLost, "no successful renewal within the renew deadline; work stopped", "renewDeadline", e.cfg.RenewDeadline)
			return stepDown(false, fmt.Errorf("%w: no successful renewal within %v", ErrLeadershipLost, e.cfg.RenewDeadline))
		case <-e.el.changed:
			deadlineTimer.Stop()
			renewTimer.Stop()
			if !e.el.mine() {
				// Newer than this replica's last write, but confirm
				// with a read: a watch whose versions cannot be ordered
				// must not depose a healthy leader.
				cctx, cancel := context.WithDeadline(ctx, deadline)
				lost, h := e.el.confirmLost(cctx)
				cancel()
				if lost {
					log.Error(ErrLeadershipLost, "the Lease was taken", "holder", h)
					return stepDown(false, fmt.Errorf("%w: the Lease is held by %q", ErrLeadershipLost, h))
				}
			}
			renewIn = time.Until(e.el.lastRenewal().Add(e.cfg.RetryPeriod))
			continue
		case <-renewTimer.C:
			deadlineTimer.Stop()
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := e.el.renew(rctx)
		cancel()
		switch {
		case err == nil:
			renewIn = e.cfg.RetryPeriod
		case errors.Is(err, ErrLeadershipLost):
			log.Error(err, "stepping down")
			return stepDown(false, err)
		default:
			// The API server may be restarting: retry soon, until the
			// deadline.
			log.Info("could not renew the Lease; retrying", "error", err.Error(), "deadline", time.Until(deadline).Round(time.Millisecond))
			renewIn = max(e.cfg.RetryPeriod/4, 50*time.Millisecond)
		}
	}
}

// publishLoop keeps the leader the Service's only endpoint for the term:
// at once, then whenever the Service or its slices change, and at least
// every LeaseDuration.
func (e *Elector) publishLoop(ctx context.Context, acquired time.Time) {
	log := e.pub.log
	first := true
	backoff := 50 * time.Millisecond
	for {
		err := e.pub.reconcile(ctx, first)
		wait := e.cfg.LeaseDuration
		switch {
		case err == nil:
			if first {
				took := time.Since(acquired)
				e.cfg.Metrics.observePublish(took)
				log.Info("published the leader as the Service's only endpoint", "address", e.cfg.Address, "sinceAcquired", took.Round(time.Microsecond))
				first = false
			}
			backoff = 50 * time.Millisecond
		case errors.Is(err, errNotLeading) || ctx.Err() != nil:
			return
		default:
			e.cfg.Metrics.publishError()
			log.Error(err, "could not publish the endpoint; retrying", "in", backoff)
			wait = backoff
			backoff = min(2*backoff, 30*time.Second)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-e.trigger:
		case <-timer.C:
		}
		timer.Stop()
	}
}

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Elector runs one replica: standby until it acquires the Lease, then
// leader until the Lease is lost or Run's context ends.
type Elector struct {
	cfg         Config
	lease       *leaseState
	pub         *publisher
	broadcaster record.EventBroadcaster
	factories   []informers.SharedInformerFactory
	// pods watches the leader's Pod for crash takeover (nil: off).
	pods *podWatch
	// selfErr says why this replica could not name its Pod (nameSelf).
	selfErr error

	started  atomic.Bool
	ready    atomic.Bool
	isLeader atomic.Bool
	// handingOver: this replica's term ended as planned (its Run's
	// context ended), and it hands the Service over to its successor:
	// it may answer until the process ends (Only).
	handingOver atomic.Bool
	trigger     chan struct{} // the Service or its slices changed
}

// New validates the config and builds an Elector. An empty Identity
// becomes DefaultIdentity().
func New(cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("leader: invalid config: %w", err)
	}
	cfg = cfg.withDefaults()
	if cfg.Identity == "" {
		if cfg.Identity = DefaultIdentity(); cfg.Identity == "" {
			return nil, errors.New("leader: invalid config: Config.Identity: empty, and neither $POD_NAME nor the host name gives one")
		}
	}
	e := &Elector{cfg: cfg, trigger: make(chan struct{}, 1)}
	if e.cfg.EventRecorder == nil {
		e.broadcaster = record.NewBroadcaster()
		e.cfg.EventRecorder = e.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "fastover-leader", Host: cfg.Identity})
	}
	e.lease = newLeaseState(&e.cfg)
	if !e.cfg.DisableCrashTakeover {
		if e.cfg.Pod == nil {
			e.cfg.Pod = PodFromEnv()
		}
		e.pods = &podWatch{
			client:    e.cfg.Client,
			log:       e.lease.log,
			wake:      func() { wake(e.lease.changed) },
			forbidden: e.crashTakeoverOff,
		}
	}
	if err := e.watchLease(); err != nil {
		return nil, err
	}
	if cfg.Endpoint != nil {
		if err := e.watchService(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// watchLease feeds the Lease's changes to the Lease state.
func (e *Elector) watchLease() error {
	leases := e.factory(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", e.cfg.LeaseName).String()
	})
	onLease := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			e.lease.observeLease(l)
		}
	}
	_, err := leases.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onLease,
		UpdateFunc: func(_, obj any) { onLease(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			l, _ := obj.(*coordinationv1.Lease)
			e.lease.forget(l)
		},
	})
	return err
}

// watchService builds the publisher, over caches of the Service and its
// slices whose changes wake it.
func (e *Elector) watchService() error {
	service := e.cfg.Endpoint.Service
	services := e.factory(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", service).String()
	})
	slices := e.factory(func(o *metav1.ListOptions) {
		o.LabelSelector = labelsForService(service).String()
	})
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { wake(e.trigger) },
		UpdateFunc: func(any, any) { wake(e.trigger) },
		DeleteFunc: func(any) { wake(e.trigger) },
	}
	svcInformer := services.Core().V1().Services()
	sliceInformer := slices.Discovery().V1().EndpointSlices()
	watched := []cache.SharedIndexInformer{svcInformer.Informer(), sliceInformer.Informer()}
	var endpoints corelisters.EndpointsNamespaceLister
	if !e.cfg.Endpoint.SkipEndpoints {
		// The same name as the Service's: the same field selector.
		epInformer := services.Core().V1().Endpoints()
		endpoints = epInformer.Lister().Endpoints(e.cfg.Namespace)
		watched = append(watched, epInformer.Informer())
	}
	for _, inf := range watched {
		if _, err := inf.AddEventHandler(kick); err != nil {
			return err
		}
	}
	e.pub = &publisher{
		endpoints:  endpoints,
		cfg:        &e.cfg,
		ep:         e.cfg.Endpoint,
		log:        e.lease.log.WithValues("service", service),
		leading:    e.lease.leading,
		term:       e.lease.currentTerm,
		handedOver: e.lease.handedOverTerm,
		services:   svcInformer.Lister().Services(e.cfg.Namespace),
		slices:     sliceInformer.Lister().EndpointSlices(e.cfg.Namespace),
		trigger:    e.trigger,
	}
	return nil
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
func (e *Elector) IsLeader() bool { return e.isLeader.Load() && e.lease.leading() }

// Leader returns the identity of the leader last observed, "" if none.
func (e *Elector) Leader() string { return e.lease.holder() }

// Identity returns this replica's identity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Term returns the Lease's transition count (spec.leaseTransitions) of
// this replica's current or last term as the leader: it grows with every
// new term, so a downstream system can refuse a leader whose term is older
// than one it has seen. 0 before the first term.
func (e *Elector) Term() int32 { return e.lease.currentTerm() }

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
//     ErrLeadershipLost once work has returned, and the process should
//     exit;
//   - work does not return within WorkStopTimeout of its context's
//     cancellation: Run returns an error; the process must exit.
//
// Run may be called once: an Elector is one campaign of one process. A
// process whose Run returned an error exits, and its restart policy brings
// it back as a fresh standby.
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
	// The caller's standby-time work runs beside the sync of our own
	// caches; its context outlives ctx, until Run returns.
	prepCtx, endPrepare := context.WithCancel(context.WithoutCancel(ctx))
	defer endPrepare()
	prepared := e.prepare(ctx, prepCtx, endPrepare)
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
	select {
	case err := <-prepared:
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("leader: Prepare: %w", err)
		}
	case <-ctx.Done():
		return nil
	}
	e.nameSelf(ctx)
	e.ready.Store(true)
	e.lease.log.Info("standing by", "leaseDuration", e.cfg.LeaseDuration, "renewDeadline", e.cfg.RenewDeadline, "retryPeriod", e.cfg.RetryPeriod)

	if !e.standby(ctx) {
		e.abandon()
		return nil
	}
	return e.lead(ctx, work)
}

// abandon is the end of a Run that never led: an acquisition that got no
// answer (cancelled with ctx) may have been applied, and is released if
// so, within RenewDeadline.
func (e *Elector) abandon() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	if err := e.lease.abandon(ctx); err != nil {
		e.lease.log.Error(err, "could not release the Lease an unanswered acquisition may hold; it will expire")
	}
}

// prepare runs Config.Prepare, if any, with prepCtx, which end cancels
// if ctx ends while Prepare runs (and only then: afterwards prepCtx lives
// until Run returns). The channel delivers its result.
func (e *Elector) prepare(ctx, prepCtx context.Context, end context.CancelFunc) <-chan error {
	done := make(chan error, 1)
	if e.cfg.Prepare == nil {
		done <- nil
		return done
	}
	stopEarly := context.AfterFunc(ctx, end)
	go func() {
		start := e.cfg.Clock.Now()
		err := e.cfg.Prepare(prepCtx)
		stopEarly()
		if err == nil {
			e.lease.log.Info("prepared to lead", "took", e.cfg.Clock.Since(start))
		}
		done <- err
	}()
	return done
}

// standbyRecheck is how often a standby whose watch reports a live holder
// re-reads the Lease all the same: once a minute, the cost of a standby
// to the API server besides its watches.
const standbyRecheck = time.Minute

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
// this process's (Run acquires once): it waits for expiry like any.
func (e *Elector) standby(ctx context.Context) bool {
	clk := e.cfg.Clock
	recheck := max(e.cfg.LeaseDuration, standbyRecheck)
	var lastAttempt, crashRetry time.Time
	if e.pods != nil {
		defer e.pods.stop()
	}
	for {
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
		timer := clk.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-e.lease.changed:
		case <-timer.C():
		}
		timer.Stop()
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

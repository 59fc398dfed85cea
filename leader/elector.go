package leader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
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
	// pods watches the leader's Pod for crash takeover (nil: off); own,
	// this replica's Pod (leaving.go).
	pods, own *podWatch
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
		e.pods = e.newPodWatch(e.crashTakeoverOff)
		e.own = e.newPodWatch(e.ownPodUnwatched)
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

// newPodWatch is a watch of one Pod at a time whose changes wake the
// standby; forbidden is told once if the Role refuses it.
func (e *Elector) newPodWatch(forbidden func(error)) *podWatch {
	return &podWatch{
		client:    e.cfg.Client,
		log:       e.lease.log,
		wake:      func() { wake(e.lease.changed) },
		forbidden: forbidden,
	}
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
	if stop := e.watchOwnPod(e.nameSelf(ctx)); stop != nil {
		defer stop()
	}
	e.ready.Store(true)
	e.cfg.Metrics.setReady(true)
	defer e.cfg.Metrics.setReady(false)
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

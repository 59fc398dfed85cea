package retrofit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// Reconciler defaults.
const (
	DefaultQPS     = 20
	DefaultWorkers = 2
	// EventReason is the reason of the Event on each pod fixed.
	EventReason = "FastoverRetrofitted"
	// FieldManager is the reconciler's field manager.
	FieldManager = "fastover-reconciler"
)

// Reconciler watches the pods of enabled namespaces and fixes, in place,
// those the webhook missed (Fixer.Fix), including every pod of a namespace
// when it gets enabled. Run it on one replica only (fastover-webhook
// --reconcile elects one with the leader package).
type Reconciler struct {
	Client kubernetes.Interface
	// Auditor holds the rule, which must be the webhook's.
	Auditor Auditor
	// QPS bounds the patches per second (DefaultQPS if zero; it must
	// not be negative); bursts of up to QPS are allowed.
	QPS float64
	// Workers is how many pods are patched at once (DefaultWorkers if 0;
	// it must not be negative).
	Workers int
	// EventRecorder, if nil, is made by Run.
	EventRecorder record.EventRecorder
	// Metrics, if not nil, counts what the reconciler does.
	Metrics *Metrics
	// Logger (logr.Discard() if zero).
	Logger logr.Logger

	synced atomic.Bool
}

// Validate reports every problem of the reconciler's configuration at
// once (errors.Join), each naming its field: no Client, a QPS that is
// negative or not a finite number, negative Workers, or an invalid rule.
// Zero QPS and Workers are valid: they mean the defaults. It reads nothing
// but r.
func (r *Reconciler) Validate() error {
	var errs []error
	if r.Client == nil {
		errs = append(errs, errors.New("Reconciler.Client: must be set"))
	}
	if r.QPS < 0 || math.IsNaN(r.QPS) || math.IsInf(r.QPS, 0) {
		errs = append(errs, fmt.Errorf("Reconciler.QPS: must be a finite number, 0 or more (0: DefaultQPS), got %v", r.QPS))
	}
	if r.Workers < 0 {
		errs = append(errs, fmt.Errorf("Reconciler.Workers: must not be negative (0: DefaultWorkers), got %d", r.Workers))
	}
	if err := r.Auditor.Rule.Validate(); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("Reconciler.Auditor.Rule.%w", e))
		}
	}
	return errors.Join(errs...)
}

// unjoin returns the errors that err joins, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// settings are the reconciler's pace, workers and logger, defaults in
// place of zero values.
func (r *Reconciler) settings() (qps float64, workers int, log logr.Logger) {
	qps, workers, log = r.QPS, r.Workers, r.Logger
	if qps == 0 {
		qps = DefaultQPS
	}
	if workers == 0 {
		workers = DefaultWorkers
	}
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return qps, workers, log
}

// HasSynced reports whether Run has filled its caches and gone over every
// pod once, until it returns.
func (r *Reconciler) HasSynced() bool { return r.synced.Load() }

// Run reconciles until ctx ends. It returns nil then, or an error if the
// configuration does not validate (see Validate) or its caches never
// synced. It may be run again once it has returned.
func (r *Reconciler) Run(ctx context.Context) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("retrofit: %w", err)
	}
	qps, workers, log := r.settings()
	recorder := r.EventRecorder
	if recorder == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.Client.CoreV1().Events("")})
		defer b.Shutdown()
		recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: FieldManager})
	}

	// The pods' cache holds every pod of the cluster: only what the rule
	// and the audit read of each (SlimPod).
	factory := informers.NewSharedInformerFactoryWithOptions(r.Client, 0, informers.WithTransform(slimObjects))
	podInformer := factory.Core().V1().Pods()
	nsInformer := factory.Core().V1().Namespaces()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "fastover-retrofit"})
	defer queue.ShutDown()

	w := &worker{
		r:        r,
		log:      log,
		pods:     podInformer.Lister(),
		nss:      nsInformer.Lister(),
		queue:    queue,
		limiter:  rate.NewLimiter(rate.Limit(qps), int(math.Max(1, math.Ceil(qps)))),
		recorder: recorder,
		fixer:    Fixer{Client: r.Client, Rule: r.Auditor.Rule, FieldManager: FieldManager},
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.podChanged,
		UpdateFunc: func(_, obj any) { w.podChanged(obj) },
	}); err != nil {
		return err
	}
	if _, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.namespaceChanged,
		UpdateFunc: func(_, obj any) { w.namespaceChanged(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("retrofit: cache of %v never synced", typ)
		}
	}
	// Pods seen before the namespaces' cache synced were dropped: go over
	// them all once.
	w.enqueueAll()
	r.synced.Store(true)
	defer r.synced.Store(false)
	log.Info("reconciler running", "qps", qps, "workers", workers)

	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for w.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	for range workers {
		<-done
	}
	return nil
}

type worker struct {
	r        *Reconciler
	log      logr.Logger
	pods     listerscorev1.PodLister
	nss      listerscorev1.NamespaceLister
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	limiter  *rate.Limiter
	recorder record.EventRecorder
	fixer    Fixer
}

func (w *worker) enabled(namespace string) bool {
	ns, err := w.nss.Get(namespace)
	return err == nil && Enabled(ns)
}

// podChanged queues a pod that needs fixing.
func (w *worker) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !w.enabled(pod.Namespace) {
		return
	}
	if w.r.Auditor.Classify(pod, true).Status == StatusNeedsFix {
		w.queue.Add(cache.MetaObjectToName(pod))
	}
}

// namespaceChanged goes over a namespace's pods, for one just enabled.
func (w *worker) namespaceChanged(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok || !Enabled(ns) {
		return
	}
	pods, err := w.pods.Pods(ns.Name).List(everything)
	if err != nil {
		return
	}
	for _, p := range pods {
		w.podChanged(p)
	}
}

func (w *worker) enqueueAll() {
	pods, err := w.pods.List(everything)
	if err != nil {
		return
	}
	for _, p := range pods {
		w.podChanged(p)
	}
}

// next fixes one queued pod; false once the queue is shut down.
func (w *worker) next(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	w.r.Metrics.setQueued(w.queue.Len())
	if err := w.fix(ctx, key); err != nil {
		if ctx.Err() != nil {
			return true
		}
		w.r.Metrics.countError()
		w.log.Error(err, "retrofit failed; will retry", "pod", key.String())
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

func (w *worker) fix(ctx context.Context, key cache.ObjectName) error {
	pod, err := w.pods.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !w.enabled(pod.Namespace) {
		return nil
	}
	f := w.r.Auditor.Classify(pod, true)
	if f.Status != StatusNeedsFix {
		return nil
	}
	if err := w.limiter.Wait(ctx); err != nil {
		return err
	}
	start := time.Now()
	res, err := w.fixer.Fix(ctx, pod.DeepCopy())
	if err != nil {
		return err
	}
	if !res.Patched {
		return nil
	}
	w.r.Metrics.countFixed(time.Since(pod.CreationTimestamp.Time))
	w.recorder.Eventf(res.Pod, corev1.EventTypeNormal, EventReason,
		"fastover set the pod's effective tolerations in place (%s): %s; it was %s", res.Mark, f.Reason, f.Unreachable)
	w.log.Info("retrofitted a pod", "pod", key.String(), "mark", res.Mark, "reason", f.Reason, "took", time.Since(start))
	return nil
}

var everything = labels.Everything()

// slimObjects is the informers' transform: pods are cut to what the
// reconciler reads (SlimPod); other objects (namespaces) lose their
// managed fields, which the reconciler never reads either.
func slimObjects(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return SlimPod(pod), nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

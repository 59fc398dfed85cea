package retrofit

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

// Generous bounds: the fake client's informers are quick, the machine may
// not be.
const (
	eventually = 20 * time.Second
	tick       = 10 * time.Millisecond
)

func TestReconcilerValidate(t *testing.T) {
	client := fake.NewClientset()
	assert.NoError(t, (&Reconciler{Client: client}).Validate(), "zero QPS and Workers mean the defaults")
	assert.NoError(t, (&Reconciler{Client: client, QPS: 0.5, Workers: 8, Auditor: Auditor{Rule: toleration.DefaultRule()}}).Validate())

	err := (&Reconciler{
		QPS:     -1,
		Workers: -2,
		Auditor: Auditor{Rule: toleration.Rule{TolerationSeconds: -3, DefaultTolerationSeconds: -4}},
	}).Validate()
	require.Error(t, err)
	assert.Equal(t, []string{
		"Reconciler.Client: must be set",
		"Reconciler.QPS: must be a finite number, 0 or more (0: DefaultQPS), got -1",
		"Reconciler.Workers: must not be negative (0: DefaultWorkers), got -2",
		"Reconciler.Auditor.Rule.tolerationSeconds: must not be negative, got -3",
		"Reconciler.Auditor.Rule.defaultTolerationSeconds: must not be negative, got -4",
	}, strings.Split(err.Error(), "\n"), "every problem at once, each naming its field")

	for _, qps := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		assert.ErrorContains(t, (&Reconciler{Client: client, QPS: qps}).Validate(), "Reconciler.QPS", "%v", qps)
	}

	// Run refuses a configuration that does not validate, before any I/O.
	err = (&Reconciler{}).Run(context.Background())
	assert.EqualError(t, err, "retrofit: Reconciler.Client: must be set")
	err = (&Reconciler{Client: client, Workers: -1}).Run(context.Background())
	assert.ErrorContains(t, err, "Reconciler.Workers")
	assert.Empty(t, client.Actions(), "nothing read")
}

func TestReconcilerSettings(t *testing.T) {
	qps, workers, log := (&Reconciler{}).settings()
	assert.InDelta(t, DefaultQPS, qps, 0)
	assert.Equal(t, DefaultWorkers, workers)
	assert.NotPanics(t, func() { log.Info("discarded"); log.V(1).Info("discarded") })
	qps, workers, _ = (&Reconciler{QPS: 3, Workers: 4}).settings()
	assert.InDelta(t, 3, qps, 0)
	assert.Equal(t, 4, workers)
}

// running is a Reconciler run in the background.
type running struct {
	t      *testing.T
	rec    *Reconciler
	events *record.FakeRecorder
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func startReconciler(t *testing.T, client *fake.Clientset, rule toleration.Rule) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	r := &running{
		t:      t,
		events: record.NewFakeRecorder(100),
		reg:    reg,
		done:   make(chan error, 1),
	}
	r.rec = &Reconciler{Client: client, Auditor: Auditor{Rule: rule}, QPS: 1000, EventRecorder: r.events, Metrics: m}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.rec.Run(ctx) }()
	t.Cleanup(r.stop)
	require.Eventually(t, r.rec.HasSynced, eventually, tick, "caches synced")
	return r
}

func (r *running) stop() {
	r.cancel()
	err := <-r.done
	assert.NoError(r.t, err, "Run returns nil when its context ends")
	r.done <- nil // stop may be called again
}

// newFakeClient is a fake clientset holding objs whose pod patches behave
// as the API server's (see patchLikeAPIServer).
func newFakeClient(objs ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objs...)
	patchLikeAPIServer(client)
	return client
}

func mark(t *testing.T, client *fake.Clientset, ns, name string) string {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "error: " + err.Error()
	}
	return p.Annotations[toleration.AnnotationInjected]
}

func unreachableSeconds(t *testing.T, client *fake.Clientset, ns, name string) string {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return toleration.DefaultRule().Effective(p.Spec.Tolerations, corev1.TaintNodeUnreachable).String()
}

func TestReconcilerFixes(t *testing.T) {
	client := newFakeClient(
		namespace("shop", true), namespace("other", false), namespace("kube-system", true),
		podIn("shop", "old"), podIn("other", "o"), podIn("kube-system", "dns"),
	)
	r := startReconciler(t, client, toleration.DefaultRule())

	// A pod there before the start.
	require.Eventually(t, func() bool { return mark(t, client, "shop", "old") == "unreachable=0s" }, eventually, tick)
	assert.Equal(t, "0s", unreachableSeconds(t, client, "shop", "old"))
	select {
	case e := <-r.events.Events:
		assert.Equal(t, "Normal FastoverRetrofitted fastover set the pod's effective tolerations in place (unreachable=0s): "+
			"not injected; it was 300s (default)", e)
	case <-time.After(eventually):
		t.Fatal("no Event on the pod fixed")
	}

	// A pod created later (the webhook missed it).
	_, err := client.CoreV1().Pods("shop").Create(context.Background(), podIn("shop", "new"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return mark(t, client, "shop", "new") == "unreachable=0s" }, eventually, tick)

	// A namespace enabled later: its pods are gone over.
	ns, err := client.CoreV1().Namespaces().Get(context.Background(), "other", metav1.GetOptions{})
	require.NoError(t, err)
	ns.Labels = map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}
	_, err = client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return mark(t, client, "other", "o") == "unreachable=0s" }, eventually, tick)

	m := gathered(t, r.reg)
	assert.InDelta(t, 3, m["fastover_retrofit_pods_fixed_total"], 0)
	assert.InDelta(t, 3, m["fastover_retrofit_pod_age_seconds_count"], 0, "each fixed pod's age is observed")
	assert.InDelta(t, 0, m["fastover_retrofit_errors_total"], 0)

	r.stop()
	assert.False(t, r.rec.HasSynced(), "not synced once it returned")
	// An excluded namespace is never touched, labelled or not.
	assert.Empty(t, mark(t, client, "kube-system", "dns"))
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			assert.NotEqual(t, "kube-system", a.GetNamespace())
		}
	}
}

// TestReconcilerLeavesAlone: pods the rule leaves alone, or as wanted
// already, are not patched, and a pod of a namespace that is no longer
// enabled is not either.
func TestReconcilerLeavesAlone(t *testing.T) {
	optOut := podIn("shop", "opt-out")
	optOut.Annotations = map[string]string{toleration.AnnotationInject: "false"}
	user := podIn("shop", "user")
	user.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](600)
	fast := podIn("shop", "fast")
	fast.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](0)
	fast.Annotations = map[string]string{toleration.AnnotationInjected: "unreachable=0s"}
	client := newFakeClient(namespace("shop", true), namespace("off", false), optOut, user, fast, podIn("shop", "slow"))
	startReconciler(t, client, toleration.DefaultRule())
	require.Eventually(t, func() bool { return mark(t, client, "shop", "slow") == "unreachable=0s" }, eventually, tick)

	// A pod created later in a namespace that is not enabled: left as it
	// is. A pod of an enabled namespace created after it is a sync point:
	// the informer hands the reconciler pods in order.
	_, err := client.CoreV1().Pods("off").Create(context.Background(), podIn("off", "late"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.CoreV1().Pods("shop").Create(context.Background(), podIn("shop", "sync"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return mark(t, client, "shop", "sync") == "unreachable=0s" }, eventually, tick)

	patched := map[string]bool{}
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			patched[a.GetNamespace()+"/"+a.(k8stesting.PatchActionImpl).Name] = true
		}
	}
	assert.Equal(t, map[string]bool{"shop/slow": true, "shop/sync": true}, patched)
	assert.Empty(t, mark(t, client, "off", "late"))
	assert.Empty(t, mark(t, client, "shop", "opt-out"))
	assert.Equal(t, "unreachable=0s", mark(t, client, "shop", "fast"))
}

// TestReconcilerRetries: a failed patch is counted, logged and retried
// with backoff until it succeeds.
func TestReconcilerRetries(t *testing.T) {
	client := newFakeClient(namespace("shop", true), podIn("shop", "a"))
	var calls atomic.Int32
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) <= 2 {
			return true, nil, apierrors.NewServiceUnavailable("the API server is restarting")
		}
		return false, nil, nil
	})
	r := startReconciler(t, client, toleration.DefaultRule())
	require.Eventually(t, func() bool { return mark(t, client, "shop", "a") == "unreachable=0s" }, eventually, tick)
	m := gathered(t, r.reg)
	assert.InDelta(t, 2, m["fastover_retrofit_errors_total"], 0, "each failed attempt counted")
	assert.InDelta(t, 1, m["fastover_retrofit_pods_fixed_total"], 0)
	// Two failures and the patch that worked; a later pass over a stale
	// cached copy may try once more, and its guard makes it a no-op.
	assert.GreaterOrEqual(t, calls.Load(), int32(3))
}

// TestReconcilerRunsAgain: Run may be called again after it returned,
// with another rule (as fastover-webhook does when the rule changes).
func TestReconcilerRunsAgain(t *testing.T) {
	client := newFakeClient(namespace("shop", true), podIn("shop", "a"))
	r := startReconciler(t, client, toleration.DefaultRule())
	require.Eventually(t, func() bool { return mark(t, client, "shop", "a") == "unreachable=0s" }, eventually, tick)
	r.stop()

	r.rec.Auditor.Rule.TolerationSeconds = 5
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.rec.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool { return mark(t, client, "shop", "a") == "unreachable=5s" }, eventually, tick,
		"the toleration fastover set follows the new rule")
}

// TestReconcilerEvents: without an EventRecorder, Run records its Events
// through the API.
func TestReconcilerEvents(t *testing.T) {
	client := newFakeClient(namespace("shop", true), podIn("shop", "a"))
	rec := &Reconciler{Client: client, Auditor: Auditor{Rule: toleration.DefaultRule()}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool {
		events, err := client.CoreV1().Events("shop").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range events.Items {
			if e.Reason == EventReason && e.InvolvedObject.Name == "a" && e.Source.Component == FieldManager {
				return true
			}
		}
		return false
	}, eventually, tick)
}

func TestSlimObjects(t *testing.T) {
	pod := podIn("shop", "a")
	pod.Labels = map[string]string{"app": "a"}
	out, err := slimObjects(pod)
	require.NoError(t, err)
	assert.Equal(t, SlimPod(pod), out, "pods are cut to what the reconciler reads")

	ns := namespace("shop", true)
	ns.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	out, err = slimObjects(ns)
	require.NoError(t, err)
	assert.Same(t, ns, out)
	assert.Nil(t, ns.ManagedFields, "managed fields dropped")
	assert.Equal(t, "shop", ns.Name)

	// Something that is not an object passes through.
	out, err = slimObjects("not an object")
	require.NoError(t, err)
	assert.Equal(t, "not an object", out)
}

// gathered reads the registry's metrics by name: counters' and gauges'
// values, and a histogram's sample count and sum as name_count, name_sum.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				out[mf.GetName()] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[mf.GetName()] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[mf.GetName()+"_count"] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{
		"fastover_retrofit_pods_fixed_total":      0,
		"fastover_retrofit_errors_total":          0,
		"fastover_retrofit_queue_length":          0,
		"fastover_retrofit_pod_age_seconds_count": 0,
		"fastover_retrofit_pod_age_seconds_sum":   0,
	}, gathered(t, reg), "every metric registered, at zero")

	m.countFixed(90 * time.Second)
	m.countFixed(30 * time.Second)
	m.countError()
	m.setQueued(4)
	assert.Equal(t, map[string]float64{
		"fastover_retrofit_pods_fixed_total":      2,
		"fastover_retrofit_errors_total":          1,
		"fastover_retrofit_queue_length":          4,
		"fastover_retrofit_pod_age_seconds_count": 2,
		"fastover_retrofit_pod_age_seconds_sum":   120,
	}, gathered(t, reg))

	// Registered twice: an error, not a panic.
	_, err = NewMetrics(reg)
	var already prometheus.AlreadyRegisteredError
	assert.True(t, errors.As(err, &already), "%v", err)

	// A nil *Metrics counts nothing.
	var none *Metrics
	assert.NotPanics(t, func() { none.countFixed(time.Second); none.countError(); none.setQueued(1) })
}

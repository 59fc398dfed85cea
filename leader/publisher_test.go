package leader

import (
	"context"
	"errors"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// testPublisher is a publisher whose caches the test fills by hand, so
// that they can lag behind the API as informers do.
type testPublisher struct {
	*publisher
	client   *fake.Clientset
	services cache.Indexer
	slices   cache.Indexer
	eps      cache.Indexer // the Endpoints cache
	events   *record.FakeRecorder
}

func testService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", UID: "svc-uid"},
		Spec: corev1.ServiceSpec{
			// As the API server defaults them.
			Ports:      []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8443)}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		},
	}
}

func newTestPublisher(t *testing.T, address string, svc *corev1.Service) *testPublisher {
	t.Helper()
	client := fake.NewClientset(svc)
	events := record.NewFakeRecorder(10)
	cfg := Config{Client: client, Namespace: "ns", LeaseName: "l", Identity: "me",
		Endpoint:      &EndpointConfig{Service: "svc", Address: address},
		EventRecorder: events, Logger: logr.Discard()}
	require.NoError(t, cfg.Validate())
	cfg = cfg.withDefaults()
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	eps := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	require.NoError(t, svcs.Add(svc))
	return &testPublisher{
		publisher: &publisher{
			cfg: &cfg, ep: cfg.Endpoint, log: logr.Discard(), leading: func() bool { return true },
			term:      func() int32 { return 7 },
			services:  corelisters.NewServiceLister(svcs).Services("ns"),
			slices:    discoverylisters.NewEndpointSliceLister(slices).EndpointSlices("ns"),
			endpoints: corelisters.NewEndpointsLister(eps).Endpoints("ns"),
		},
		client: client, services: svcs, slices: slices, eps: eps, events: events,
	}
}

// apiSlice returns the leader's slice as the API has it.
func (tp *testPublisher) apiSlice(t *testing.T) *discoveryv1.EndpointSlice {
	t.Helper()
	s, err := tp.client.DiscoveryV1().EndpointSlices("ns").Get(context.Background(), "svc-fastover", metav1.GetOptions{})
	require.NoError(t, err)
	return s
}

// writes counts the slice writes the publisher sent.
func (tp *testPublisher) writes() int {
	n := 0
	for _, a := range tp.client.Actions() {
		if a.GetResource().Resource == "endpointslices" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

// A steady leader writes nothing, whatever others added to its slice
// (labels, annotations) and however often a change wakes it.
func TestSteadyLeaderWritesNothing(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	require.NoError(t, tp.reconcile(ctx, false))
	require.Equal(t, 1, tp.writes())
	// The cache catches up, with what a cluster adds to the slice.
	s := tp.apiSlice(t)
	s.Labels["team"] = "payments"
	s.Annotations["note"] = "added by a policy engine"
	s.ResourceVersion = "2"
	require.NoError(t, tp.slices.Add(s))
	for range 100 {
		require.NoError(t, tp.reconcile(ctx, false))
	}
	assert.Equal(t, 1, tp.writes(), "a steady leader rewrote its slice")
}

// A new term rewrites the slice with it, identity and term together.
func TestNewTermRewritesTheSlice(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	require.NoError(t, tp.reconcile(ctx, false))
	s := tp.apiSlice(t)
	assert.Equal(t, "7", s.Annotations[AnnotationTerm])
	require.NoError(t, tp.slices.Add(s))
	require.NoError(t, tp.reconcile(ctx, false))
	require.Equal(t, 1, tp.writes(), "the same term: no write")
	tp.term = func() int32 { return 8 }
	require.NoError(t, tp.reconcile(ctx, false))
	assert.Equal(t, 2, tp.writes())
	assert.Equal(t, "8", tp.apiSlice(t).Annotations[AnnotationTerm])
}

func ptrTo[T any](v T) *T { return &v }

// Right after its Create, the cache does not have the slice yet: the next
// pass gets AlreadyExists, reads the slice, finds it right and is done,
// without an error.
func TestCacheBehindTheLeadersOwnCreate(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	require.NoError(t, tp.reconcile(ctx, false))
	require.NoError(t, tp.reconcile(ctx, false), "a cache behind the API is not an error")
	for _, a := range tp.client.Actions() {
		assert.NotEqual(t, "update", a.GetVerb(), "the slice was right: nothing to update")
	}
}

// A user removes the service-name label from the leader's slice: it leaves
// the label-filtered cache. The leader reads it from the API and takes it
// back instead of failing on AlreadyExists for good.
func TestSliceThatLeftTheCacheIsTakenBack(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	require.NoError(t, tp.reconcile(ctx, false))
	s := tp.apiSlice(t)
	delete(s.Labels, discoveryv1.LabelServiceName)
	_, err := tp.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, s, metav1.UpdateOptions{})
	require.NoError(t, err)
	// Not in the cache (its label is gone).
	require.NoError(t, tp.reconcile(ctx, false))
	assert.Equal(t, "svc", tp.apiSlice(t).Labels[discoveryv1.LabelServiceName])
}

// An update that conflicts (the cache is behind) is retried from the
// API's version.
func TestConflictRetriesFromTheAPI(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	ctx := context.Background()
	stale := tp.desiredSlice(testService())
	stale.Endpoints[0].Addresses = []string{"10.9.9.9"}
	require.NoError(t, tp.client.Tracker().Add(stale))
	require.NoError(t, tp.slices.Add(stale))
	conflicted := false
	tp.client.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !conflicted {
			conflicted = true
			return true, nil, apierrors.NewConflict(discoveryv1.Resource("endpointslices"), "svc-fastover", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	require.NoError(t, tp.reconcile(ctx, false))
	assert.Equal(t, []string{"10.1.2.3"}, tp.apiSlice(t).Endpoints[0].Addresses)
}

// The owner reference does not block the owner's deletion: setting that
// needs update on services/finalizers where OwnerReferencesPermissionEnforcement
// is on, which the documented Role does not grant.
func TestOwnerReferenceDoesNotBlockDeletion(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	refs := tp.desiredSlice(testService()).OwnerReferences
	require.Len(t, refs, 1)
	assert.Nil(t, refs[0].BlockOwnerDeletion)
	assert.True(t, *refs[0].Controller)
}

// A replica past its renew deadline writes nothing.
func TestNotLeadingWritesNothing(t *testing.T) {
	svc := testService()
	svc.Spec.Selector = map[string]string{"app": "ctl"}
	tp := newTestPublisher(t, "10.1.2.3", svc)
	tp.leading = func() bool { return false }
	tp.ep.RemoveSelector = true
	assert.ErrorIs(t, tp.reconcile(context.Background(), true), errNotLeading)
	tp2 := newTestPublisher(t, "10.1.2.3", testService())
	tp2.leading = func() bool { return false }
	assert.ErrorIs(t, tp2.reconcile(context.Background(), true), errNotLeading)
	assert.ErrorIs(t, tp2.deleteStaleEndpoints(context.Background()), errNotLeading)
	assert.Empty(t, tp.client.Actions())
	assert.Empty(t, tp2.client.Actions())
}

// withdraw deletes this replica's slice, the version it saw, and nothing
// else: not another leader's slice, not after the renew deadline.
func TestWithdraw(t *testing.T) {
	ctx := context.Background()
	tp := newTestPublisher(t, "10.1.2.3", testService())
	require.NoError(t, tp.withdraw(ctx), "no slice: nothing to do")
	require.NoError(t, tp.reconcile(ctx, false))
	s := tp.apiSlice(t)
	s.UID, s.ResourceVersion = "slice-uid", "9"
	require.NoError(t, tp.slices.Add(s))

	tp.leading = func() bool { return false }
	assert.ErrorIs(t, tp.withdraw(ctx), errNotLeading)
	tp.leading = func() bool { return true }

	theirs := s.DeepCopy()
	theirs.Annotations[AnnotationIdentity] = "next-leader"
	require.NoError(t, tp.slices.Update(theirs))
	require.NoError(t, tp.withdraw(ctx))
	tp.apiSlice(t) // still there

	require.NoError(t, tp.slices.Update(s))
	require.NoError(t, tp.withdraw(ctx))
	_, err := tp.client.DiscoveryV1().EndpointSlices("ns").Get(ctx, "svc-fastover", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
	var last k8stesting.DeleteAction
	for _, a := range tp.client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			last = d
		}
	}
	require.NotNil(t, last)
	assert.Equal(t, types.UID("slice-uid"), *last.GetDeleteOptions().Preconditions.UID)
	assert.Equal(t, "9", *last.GetDeleteOptions().Preconditions.ResourceVersion)
}

// A missing Service is an error that names it; nothing is written.
func TestMissingService(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	require.NoError(t, tp.services.Delete(testService()))
	assert.ErrorContains(t, tp.reconcile(context.Background(), false), "service ns/svc")
	assert.Equal(t, 0, tp.writes())
}

// The publishing loop: at once (the publish time observed), again when
// woken, with a growing backoff after errors (counted), and until the
// replica no longer leads or the term ends.
func TestPublishLoop(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	clk := clocktesting.NewFakeClock(time.Now())
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	tp.cfg.Clock, tp.cfg.Metrics = clk, m
	tp.trigger = make(chan struct{}, 1)
	var failing atomic.Bool
	tp.client.PrependReactor("*", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			return true, nil, apierrors.NewServiceUnavailable("restarting")
		}
		return false, nil, nil
	})
	var leading atomic.Bool // the loop reads it while the test changes it
	leading.Store(true)
	tp.leading = leading.Load
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	acquired := clk.Now()
	clk.Step(3 * time.Millisecond)
	go func() { defer close(done); tp.run(ctx, acquired) }()

	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	tp.apiSlice(t) // published
	var h dto.Metric
	require.NoError(t, m.publish.Write(&h))
	assert.Equal(t, uint64(1), h.Histogram.GetSampleCount())
	assert.InDelta(t, 0.003, h.Histogram.GetSampleSum(), 1e-9, "from acquiring to published, on the clock")

	// Someone changes the slice: woken, the loop writes it back.
	s := tp.apiSlice(t)
	s.Endpoints[0].Addresses = []string{"10.9.9.9"}
	_, err = tp.client.DiscoveryV1().EndpointSlices("ns").Update(ctx, s, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, tp.slices.Add(s))
	wake(tp.trigger)
	require.Eventually(t, func() bool {
		return tp.apiSlice(t).Endpoints[0].Addresses[0] == "10.1.2.3"
	}, waitFor, time.Millisecond)

	// Errors: counted, retried after 50 ms, then 100 ms.
	failing.Store(true)
	s = tp.apiSlice(t)
	s.Endpoints[0].Addresses = []string{"10.9.9.9"}
	require.NoError(t, tp.client.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), s, "ns"))
	require.NoError(t, tp.slices.Update(s))
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	wake(tp.trigger)
	require.Eventually(t, func() bool { return value(t, m.publishErrors) == 1 }, waitFor, time.Millisecond)
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	clk.Step(50 * time.Millisecond)
	require.Eventually(t, func() bool { return value(t, m.publishErrors) == 2 }, waitFor, time.Millisecond)
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	clk.Step(99 * time.Millisecond)
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	assert.Equal(t, float64(2), value(t, m.publishErrors), "retried before the backoff")
	failing.Store(false)
	clk.Step(time.Millisecond)
	require.Eventually(t, func() bool {
		return tp.apiSlice(t).Endpoints[0].Addresses[0] == "10.1.2.3"
	}, waitFor, time.Millisecond)

	// No longer leading: the loop ends by itself.
	leading.Store(false)
	s = tp.apiSlice(t)
	s.Endpoints[0].Addresses = []string{"10.9.9.9"}
	require.NoError(t, tp.slices.Update(s))
	wake(tp.trigger)
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the loop went on after the replica stopped leading")
	}
	cancel()
}

// A pass at least every LeaseDuration; the term's end stops the loop.
func TestPublishLoopStopsWithTheTerm(t *testing.T) {
	tp := newTestPublisher(t, "10.1.2.3", testService())
	clk := clocktesting.NewFakeClock(time.Now())
	tp.cfg.Clock = clk
	tp.trigger = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tp.run(ctx, clk.Now()) }()
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	// Someone changes the slice and the watch misses it: the pass every
	// LeaseDuration puts it right, not sooner.
	s := tp.apiSlice(t)
	s.Endpoints[0].Addresses = []string{"10.9.9.9"}
	require.NoError(t, tp.client.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), s, "ns"))
	require.NoError(t, tp.slices.Add(s))
	clk.Step(DefaultLeaseDuration - time.Millisecond)
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	assert.Equal(t, "10.9.9.9", tp.apiSlice(t).Endpoints[0].Addresses[0])
	clk.Step(time.Millisecond)
	require.Eventually(t, func() bool {
		return tp.apiSlice(t).Endpoints[0].Addresses[0] == "10.1.2.3"
	}, waitFor, time.Millisecond, "no pass after a lease duration")
	require.Eventually(t, clk.HasWaiters, waitFor, time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("the loop did not stop with its context")
	}
}

// A write that the API refused has no unknown outcome: the hand-off reads
// nothing from the API. One whose answer was lost makes it read the
// leader's objects, and wait (bounded) for the caches to show them.
func TestSettle(t *testing.T) {
	ctx := context.Background()
	tp := newTestPublisher(t, "10.1.2.3", testService())
	tp.noteUnanswered(apierrors.NewConflict(discoveryv1.Resource("endpointslices"), "svc-fastover", errors.New("modified")))
	require.NoError(t, tp.settle(ctx))
	assert.Empty(t, tp.client.Actions())

	tp.noteUnanswered(&url.Error{Op: "Put", URL: "https://api/endpointslices", Err: context.DeadlineExceeded})
	require.NoError(t, tp.settle(ctx), "nothing in the API: nothing to wait for")
	assert.False(t, tp.unanswered.Load())

	s := tp.desiredSlice(testService())
	s.ResourceVersion = "8"
	_, err := tp.client.DiscoveryV1().EndpointSlices("ns").Create(ctx, s, metav1.CreateOptions{})
	require.NoError(t, err)
	old := s.DeepCopy()
	old.ResourceVersion = "7"
	require.NoError(t, tp.slices.Add(old))
	tp.noteUnanswered(context.Canceled)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	assert.ErrorContains(t, tp.settle(tctx), "the cache did not show EndpointSlice svc-fastover at version 8")
	assert.True(t, tp.unanswered.Load(), "still unsettled")
	require.NoError(t, tp.slices.Update(s))
	require.NoError(t, tp.settle(ctx))
}

// EndpointConfig.Ready: nothing is written until it returns nil; an error
// (the work never became ready) publishes nothing in the term, and a term
// that ends while it waits writes nothing either.
func TestPublishWaitsForTheWorkToBeReady(t *testing.T) {
	start := func(ready func(context.Context) error) (*testPublisher, context.CancelFunc, <-chan struct{}) {
		tp := newTestPublisher(t, "10.1.2.3", testService())
		tp.cfg.Clock = clocktesting.NewFakeClock(time.Now())
		tp.trigger = make(chan struct{}, 1)
		tp.ep.Ready = ready
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); tp.run(ctx, tp.cfg.Clock.Now()) }()
		return tp, cancel, done
	}
	ended := func(done <-chan struct{}) bool {
		select {
		case <-done:
			return true
		case <-time.After(waitFor):
			return false
		}
	}

	gate := make(chan struct{})
	asked := make(chan struct{})
	tp, cancel, done := start(func(ctx context.Context) error {
		close(asked)
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	<-asked
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, tp.writes(), "published before the work was ready")
	close(gate)
	require.Eventually(t, func() bool { return tp.writes() == 1 }, waitFor, time.Millisecond)
	assert.Equal(t, "10.1.2.3", tp.apiSlice(t).Endpoints[0].Addresses[0])
	cancel()
	require.True(t, ended(done))

	tp, cancel, done = start(func(context.Context) error { return errors.New("the command exited") })
	require.True(t, ended(done), "the loop ends when the work will not be ready")
	assert.Zero(t, tp.writes())
	cancel()

	tp, cancel, done = start(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	cancel()
	require.True(t, ended(done), "the term's end stops the wait")
	assert.Zero(t, tp.writes())
}

package leader

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// The elector's tests run Run against a fake clientset (its watches
// included) on a fake clock: time moves only when the test steps it, so
// the deadlines are exact and nothing waits in real time but for the
// goroutines to get there (bounded by waitFor).

const waitFor = 10 * time.Second

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

// testRun is one Run of an Elector on a fake clock.
type testRun struct {
	t       *testing.T
	el      *Elector
	client  *fake.Clientset
	clock   *clocktesting.FakeClock
	events  *record.FakeRecorder
	cancel  context.CancelFunc
	done    chan error
	leading chan struct{} // closed when the work starts
	// stoppedAt is the fake time at which the work's context ended.
	stoppedAt chan time.Time
	workErr   error // what the default work returns
}

// startRun starts Run of an Elector "me" with lease 15s, renew deadline
// 10s, retry period 2s (the defaults), on a fake clock; mutate may change
// the config and the work.
func startRun(t *testing.T, client *fake.Clientset, mutate func(*Config), work func(r *testRun) func(context.Context) error) *testRun {
	t.Helper()
	r := &testRun{
		t: t, client: client,
		clock:     clocktesting.NewFakeClock(time.Now()),
		events:    record.NewFakeRecorder(100),
		done:      make(chan error, 1),
		leading:   make(chan struct{}),
		stoppedAt: make(chan time.Time, 1),
	}
	cfg := Config{Client: client, Namespace: "ns", LeaseName: "l", Identity: "me",
		Clock: r.clock, EventRecorder: r.events, Logger: testr.New(t)}
	if mutate != nil {
		mutate(&cfg)
	}
	el, err := New(cfg)
	require.NoError(t, err)
	r.el = el
	w := r.defaultWork
	if work != nil {
		w = work(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			r.done <- err
		case <-time.After(waitFor):
		}
	})
	go func() { r.done <- el.Run(ctx, w) }()
	return r
}

func (r *testRun) defaultWork(ctx context.Context) error {
	close(r.leading)
	<-ctx.Done()
	r.stoppedAt <- r.clock.Now()
	return r.workErr
}

// awaitLeading waits for the work to start.
func (r *testRun) awaitLeading() {
	r.t.Helper()
	select {
	case <-r.leading:
	case err := <-r.done:
		r.t.Fatalf("Run returned before leading: %v", err)
	case <-time.After(waitFor):
		r.t.Fatal("not leading")
	}
}

// result waits for Run to return.
func (r *testRun) result() error {
	r.t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for Cleanup
		return err
	case <-time.After(waitFor):
		r.t.Fatal("Run did not return")
		return nil
	}
}

// stepUntil steps the fake clock by d, each time the elector waits on it,
// until cond holds; it fails after waitFor of real time.
func (r *testRun) stepUntil(d time.Duration, cond func() bool) {
	r.t.Helper()
	limit := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(limit) {
			r.t.Fatal("condition not reached")
		}
		if r.clock.HasWaiters() {
			r.clock.Step(d)
		}
		time.Sleep(time.Millisecond) // let the elector run
	}
}

// awaitWaiting waits until the elector waits on the clock.
func (r *testRun) awaitWaiting() {
	r.t.Helper()
	require.Eventually(r.t, r.clock.HasWaiters, waitFor, time.Millisecond)
}

func (r *testRun) lease() *coordinationv1.Lease {
	r.t.Helper()
	l, err := r.client.CoordinationV1().Leases("ns").Get(context.Background(), "l", metav1.GetOptions{})
	require.NoError(r.t, err)
	return l
}

func (r *testRun) returned() bool {
	select {
	case err := <-r.done:
		r.done <- err
		return true
	default:
		return false
	}
}

// awaitWatch waits until the Elector has opened a watch of resource.
func (r *testRun) awaitWatch(resource string) {
	r.t.Helper()
	require.Eventually(r.t, func() bool { return countActions(r.client, "watch", resource) > 0 }, waitFor, time.Millisecond, "no watch of %s", resource)
}

// countActions counts the client's requests of verb on resource.
func countActions(client *fake.Clientset, verb, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

var errUnavailable = apierrors.NewServiceUnavailable("the API server is restarting")

// The renew deadline: when no renewal succeeds, the work's context ends
// exactly once RenewDeadline has passed since the last successful renewal
// was sent (not before, and well before the Lease expires for the
// others), and Run returns ErrLeadershipLost without releasing the Lease.
func TestRenewDeadlineStopsTheWork(t *testing.T) {
	client := fake.NewClientset()
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	require.NoError(t, err)
	r := startRun(t, client, func(c *Config) { c.Metrics = metrics }, nil)
	r.awaitLeading()
	acquired := r.clock.Now() // the fake clock has not moved yet
	assert.True(t, r.el.IsLeader())
	assert.Equal(t, "me", r.el.Leader())
	assert.Equal(t, float64(1), value(t, metrics.isLeader))
	assert.Equal(t, float64(1), value(t, metrics.transitions))
	assert.Equal(t, float64(1), value(t, metrics.ready), "a leader is ready")
	assert.Equal(t, uint64(1), observations(t, metrics.leaderless, beganFirst), "a first term, on the Lease it created")
	assert.Equal(t, float64(0), value(t, metrics.renewErrors))

	var failing atomic.Bool
	failing.Store(true)
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errUnavailable
		}
		return false, nil, nil
	})
	r.stepUntil(250*time.Millisecond, r.returned)
	stopped := <-r.stoppedAt
	assert.False(t, stopped.Before(acquired.Add(DefaultRenewDeadline)), "the work stopped %v after the last renewal, before the renew deadline", stopped.Sub(acquired))
	assert.True(t, stopped.Before(acquired.Add(DefaultRenewDeadline+time.Second)), "the work stopped %v after the last renewal", stopped.Sub(acquired))
	err = r.result()
	assert.ErrorIs(t, err, ErrLeadershipLost)
	assert.ErrorContains(t, err, "no successful renewal within 10s")
	assert.Greater(t, countActions(client, "update", "leases"), 4, "renewals were retried until the deadline")
	assert.Greater(t, value(t, metrics.renewErrors), float64(4), "each failed renewal is counted")
	assert.False(t, r.el.IsLeader())
	assert.Equal(t, float64(0), value(t, metrics.isLeader))
	assert.Equal(t, float64(0), value(t, metrics.ready), "Run has returned")
	assert.Equal(t, "me", *r.lease().Spec.HolderIdentity, "a lost Lease is not released: it expires")
}

// A renewal that conflicts (the Lease changed since this replica wrote
// it, e.g. a label added) re-reads the Lease and renews again: still this
// replica's term, so it keeps leading.
func TestRenewalConflictRereadsAndRenews(t *testing.T) {
	client := fake.NewClientset()
	r := startRun(t, client, nil, nil)
	r.awaitLeading()
	var conflicts atomic.Int32
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts.Add(1) == 1 {
			return true, nil, errConflict
		}
		return false, nil, nil
	})
	gets := countActions(client, "get", "leases")
	// Both timers of the term (its deadline and its next renewal) set.
	require.Eventually(t, func() bool { return r.clock.Waiters() >= 2 }, waitFor, time.Millisecond)
	r.clock.Step(DefaultRetryPeriod)
	renewedAt := r.clock.Now()
	require.Eventually(t, func() bool {
		// A timer set for "now" by a loop that woke up meanwhile (the
		// watch reporting its own write) fires on the next step only.
		r.clock.Step(0)
		return r.lease().Spec.RenewTime.Time.Equal(renewedAt)
	}, waitFor, time.Millisecond, "the renewal was not retried after the conflict")
	// The API has the renewal a moment before the elector records it.
	require.Eventually(t, func() bool { return r.el.lease.lastRenewal().Equal(renewedAt) }, waitFor, time.Millisecond)
	assert.Equal(t, int32(2), conflicts.Load(), "one conflict, one renewal")
	assert.Greater(t, countActions(client, "get", "leases"), gets, "the conflict made it read the Lease")
	assert.True(t, r.el.IsLeader())
	assert.False(t, r.returned())
	// The deadline now counts from the second renewal: stepping to the
	// first one's deadline does not stop the work.
	r.clock.Step(DefaultRenewDeadline - time.Millisecond)
	assert.True(t, r.el.IsLeader())
	r.cancel()
	assert.NoError(t, r.result())
}

// Another replica takes the Lease (the watch reports it, a read confirms
// it): the work stops at once and Run returns ErrLeadershipLost, without
// writing the Lease again.
func TestLeaseTakenStopsTheWork(t *testing.T) {
	client := fake.NewClientset()
	r := startRun(t, client, nil, nil)
	r.awaitLeading()
	l := r.lease()
	l.Spec.HolderIdentity = ptr.To("other")
	l.Spec.LeaseTransitions = ptr.To(*l.Spec.LeaseTransitions + 1)
	_, err := client.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
	updates := countActions(client, "update", "leases")
	err = r.result()
	assert.ErrorIs(t, err, ErrLeadershipLost)
	assert.ErrorContains(t, err, `held by "other"`)
	assert.Equal(t, updates, countActions(client, "update", "leases"), "the lost leader wrote the Lease")
	assert.Equal(t, "other", r.el.Leader())
	assert.Equal(t, "other", *r.lease().Spec.HolderIdentity)
}

// A renewal that finds another term in the Lease (a conflict, then a read
// showing another holder) ends the term at once.
func TestRenewalFindsTheLeaseTaken(t *testing.T) {
	client := fake.NewClientset()
	// No watch: the leader learns of the new holder by renewing.
	client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	r := startRun(t, client, nil, nil)
	r.awaitLeading()
	l := r.lease()
	l.Spec.HolderIdentity = ptr.To("other")
	require.NoError(t, client.Tracker().Update(leasesGVR, l, "ns"))
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errConflict
	})
	r.stepUntil(DefaultRetryPeriod, r.returned)
	assert.ErrorIs(t, r.result(), ErrLeadershipLost)
	stopped := <-r.stoppedAt
	assert.True(t, stopped.Before(r.clock.Now().Add(time.Nanosecond)))
}

// TestPlannedStopLeavesTheEndpointToTheSuccessor: on a planned stop the
// leader releases the Lease and leaves its slice and Endpoints object to
// the standby that takes over, which replaces them in one write each: it
// deletes neither, and returns as soon as the successor's endpoint is
// there, not after a retry period. (Withdrawn first, the Service would
// change twice, through no endpoint at all: kube-proxy, which waits its
// min-sync period between two syncs, would leave the ClusterIP without an
// endpoint for about a second.)
func TestPlannedStopLeavesTheEndpointToTheSuccessor(t *testing.T) {
	client := fake.NewClientset(testService(), testLease("1", "", 1, 4, time.Now().Add(-time.Hour)))
	r := startRun(t, client, func(c *Config) {
		c.Endpoint = &EndpointConfig{Service: "svc", Address: "10.1.2.3", PodName: "ctl-0", NodeName: "node-a"}
	}, nil)
	r.awaitLeading()
	slices := client.DiscoveryV1().EndpointSlices("ns")
	endpoints := client.CoreV1().Endpoints("ns")
	require.Eventually(t, func() bool {
		_, err := r.el.pub.slices.Get("svc-fastover")
		_, err2 := r.el.pub.endpoints.Get("svc")
		return err == nil && err2 == nil
	}, waitFor, time.Millisecond, "the endpoint was not published")
	r.cancel()
	require.Eventually(t, func() bool { return r.lease().Spec.HolderIdentity == nil }, waitFor, time.Millisecond, "the Lease was not released")
	released := r.clock.Now()

	// The successor takes the endpoint over, as its publisher does.
	ctx := context.Background()
	slice, err := slices.Get(ctx, "svc-fastover", metav1.GetOptions{})
	require.NoError(t, err)
	slice.Annotations[AnnotationIdentity] = "next"
	slice.Endpoints[0].Addresses = []string{"10.1.2.4"}
	_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	require.NoError(t, err)
	ep, err := endpoints.Get(ctx, "svc", metav1.GetOptions{})
	require.NoError(t, err)
	ep.Annotations[AnnotationIdentity] = "next"
	ep.Subsets[0].Addresses[0].IP = "10.1.2.4"
	_, err = endpoints.Update(ctx, ep, metav1.UpdateOptions{})
	require.NoError(t, err)

	r.stepUntil(handOffPoll, r.returned)
	require.NoError(t, r.result())
	assert.Less(t, r.clock.Since(released), DefaultRetryPeriod/2, "Run waited for more than the successor's endpoint")
	slice, err = slices.Get(ctx, "svc-fastover", metav1.GetOptions{})
	require.NoError(t, err, "the successor's slice was deleted")
	assert.Equal(t, "next", slice.Annotations[AnnotationIdentity])
	ep, err = endpoints.Get(ctx, "svc", metav1.GetOptions{})
	require.NoError(t, err, "the successor's Endpoints object was deleted")
	assert.Equal(t, "next", ep.Annotations[AnnotationIdentity])
	assert.Zero(t, countActions(client, "delete", "endpointslices")+countActions(client, "delete", "endpoints"), "the ex-leader deleted something")
}

// A planned stop (Run's context cancelled): the work stops, the Lease is
// released (no holder, 1 s) for a standby to take at once, with an Event;
// no standby takes the endpoint over within a retry period, so it is
// withdrawn then; Run returns nil.
func TestPlannedStopReleasesTheLease(t *testing.T) {
	// A released Lease (with a UID, which the fake API would not give).
	client := fake.NewClientset(testService(), testLease("1", "", 1, 4, time.Now().Add(-time.Hour)))
	// The fake clock's time when the slice is withdrawn: Run returns a few
	// clock steps later on a loaded machine (other timers wait on the
	// clock while the withdrawal's writes run).
	var clock atomic.Pointer[clocktesting.FakeClock] // the run's, once it started
	withdrawn := make(chan time.Time, 1)
	client.PrependReactor("delete", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if c := clock.Load(); c != nil {
			select {
			case withdrawn <- c.Now():
			default:
			}
		}
		return false, nil, nil
	})
	r := startRun(t, client, func(c *Config) {
		c.Endpoint = &EndpointConfig{Service: "svc", Address: "10.1.2.3", PodName: "ctl-0", NodeName: "node-a"}
	}, nil)
	clock.Store(r.clock)
	r.awaitLeading()
	slices := client.DiscoveryV1().EndpointSlices("ns")
	require.Eventually(t, func() bool {
		_, err := slices.Get(context.Background(), "svc-fastover", metav1.GetOptions{})
		return err == nil
	}, waitFor, time.Millisecond, "the endpoint was not published")
	// The slice carries the term: the Lease's transition count, 4 before.
	published, err := slices.Get(context.Background(), "svc-fastover", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(5), r.el.Term())
	assert.Equal(t, int32(5), *r.lease().Spec.LeaseTransitions)
	assert.Equal(t, "5", published.Annotations[AnnotationTerm])
	assert.Equal(t, "me", published.Annotations[AnnotationIdentity])
	assert.Equal(t, "planned", published.Annotations[AnnotationHandOver], "the term began on a released Lease")
	// The withdrawal reads the slice and the Endpoints object from the
	// caches.
	require.Eventually(t, func() bool {
		_, err := r.el.pub.slices.Get("svc-fastover")
		_, err2 := r.el.pub.endpoints.Get("svc")
		return err == nil && err2 == nil
	}, waitFor, time.Millisecond)
	r.cancel()
	// Released first; the endpoint waits for a successor.
	require.Eventually(t, func() bool { return r.lease().Spec.HolderIdentity == nil }, waitFor, time.Millisecond, "the Lease was not released")
	_, err = slices.Get(context.Background(), "svc-fastover", metav1.GetOptions{})
	require.NoError(t, err, "the endpoint was withdrawn before a successor could take it over")
	released := r.clock.Now()
	r.stepUntil(handOffPoll, r.returned)
	require.NoError(t, r.result())
	select {
	case at := <-withdrawn:
		// handOff polls every handOffPoll until the retry period is up;
		// the test steps the fake clock whenever anything waits on it, so
		// the clock may pass the deadline by one poll before handOff looks.
		waited := at.Sub(released)
		assert.GreaterOrEqual(t, waited, DefaultRetryPeriod, "withdrawn after a retry period without a successor")
		assert.LessOrEqual(t, waited, DefaultRetryPeriod+handOffPoll, "withdrawn within a poll of the retry period")
	default:
		t.Error("the slice was not deleted")
	}
	_, err = slices.Get(context.Background(), "svc-fastover", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the endpoint was not withdrawn: %v", err)
	_, err = client.CoreV1().Endpoints("ns").Get(context.Background(), "svc", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the Endpoints object was not withdrawn: %v", err)
	l := r.lease()
	assert.Nil(t, l.Spec.HolderIdentity, "the Lease was not released")
	assert.Equal(t, int32(1), *l.Spec.LeaseDurationSeconds)
	select {
	case ev := <-r.events.Events:
		assert.Equal(t, "Normal LeaderElection me became leader", ev)
	default:
		t.Error("no Event on the Lease")
	}
}

// The work returns: the term ends as planned (released Lease), and Run
// returns the work's error.
func TestWorkReturningEndsTheTerm(t *testing.T) {
	client := fake.NewClientset()
	boom := errors.New("boom")
	r := startRun(t, client, nil, func(*testRun) func(context.Context) error {
		return func(context.Context) error { return boom }
	})
	assert.ErrorIs(t, r.result(), boom)
	assert.Nil(t, r.lease().Spec.HolderIdentity, "the Lease was not released")
	assert.False(t, r.el.IsLeader())
}

// Work that ignores its context's end: the leader renews the Lease while
// it waits (a planned stop), gives up after WorkStopTimeout, and leaves
// the Lease to expire instead of releasing it under running work.
func TestWorkThatDoesNotStop(t *testing.T) {
	client := fake.NewClientset()
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	r := startRun(t, client, func(c *Config) { c.WorkStopTimeout = 5 * time.Second }, func(*testRun) func(context.Context) error {
		return func(context.Context) error {
			close(started)
			<-release
			return nil
		}
	})
	<-started
	r.awaitWaiting()
	r.cancel()
	updates := countActions(client, "update", "leases")
	var renewedWhileStopping bool
	r.stepUntil(DefaultRetryPeriod, func() bool {
		renewedWhileStopping = renewedWhileStopping || countActions(client, "update", "leases") > updates
		return r.returned()
	})
	err := r.result()
	assert.ErrorContains(t, err, "did not return within 5s")
	assert.True(t, renewedWhileStopping, "the Lease was not renewed while the work stopped")
	assert.Equal(t, "me", *r.lease().Spec.HolderIdentity, "the Lease was released under running work")
}

// Run once; a cancelled context before the caches sync is a clean return.
func TestRunOnceAndCancelledEarly(t *testing.T) {
	el, err := New(Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "l", Identity: "me", Logger: logr.Discard()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.NoError(t, el.Run(ctx, func(context.Context) error { return nil }))
	assert.ErrorContains(t, el.Run(context.Background(), nil), "Run called twice")
}

// New reports an invalid config with every problem.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	_, err := New(Config{Namespace: "ns"})
	assert.ErrorContains(t, err, "leader: invalid config: Config.Client: required\nConfig.LeaseName: required")
}

// The health checks: Ready once Run's caches are synced; Check fails for a
// leader that has not renewed for RenewDeadline + LeaseDuration.
func TestHealthChecks(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	el, err := New(Config{Client: client, Namespace: "ns", LeaseName: "l", Identity: "me", Clock: clk, Logger: logr.Discard()})
	require.NoError(t, err)
	assert.Equal(t, "leader-election", el.Name())
	req, _ := http.NewRequest(http.MethodGet, "/healthz", nil)
	assert.ErrorContains(t, el.Ready(req), "not started")
	assert.NoError(t, el.Check(req), "a standby is healthy")

	el.isLeader.Store(true)
	el.lease.mu.Lock()
	el.lease.renewedAt = clk.Now()
	el.lease.mu.Unlock()
	clk.Step(DefaultRenewDeadline + DefaultLeaseDuration)
	assert.NoError(t, el.Check(req))
	clk.Step(time.Second)
	assert.ErrorContains(t, el.Check(req), "has not renewed the Lease for 26s")
}

// Ready turns true once Run has synced its caches, standby or not.
func TestReadyOnceRunning(t *testing.T) {
	client := fake.NewClientset(testLease("5", "other", 15, 2, time.Now()))
	r := startRun(t, client, nil, nil)
	r.awaitWaiting()
	req, _ := http.NewRequest(http.MethodGet, "/readyz", nil)
	assert.NoError(t, r.el.Ready(req))
	assert.False(t, r.el.IsLeader())
}

// OnNewLeader hears of each new holder once, this replica included.
func TestOnNewLeader(t *testing.T) {
	client := fake.NewClientset(testLease("5", "other", 15, 2, time.Now()))
	var mu sync.Mutex
	var seen []string
	r := startRun(t, client, func(c *Config) {
		c.OnNewLeader = func(id string) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, id)
		}
	}, nil)
	r.awaitWaiting()
	r.clock.Step(DefaultLeaseDuration)
	r.awaitLeading()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"other", "me"}, seen)
}

// value reads a gauge's or a counter's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// observations reads how many observations a histogram of vec with the
// label value has.
func observations(t *testing.T, vec *prometheus.HistogramVec, label string) uint64 {
	t.Helper()
	h, err := vec.GetMetricWithLabelValues(label)
	require.NoError(t, err)
	var m dto.Metric
	require.NoError(t, h.(prometheus.Metric).Write(&m))
	return m.GetHistogram().GetSampleCount()
}

// jitter adds up to 20%.
func TestJitter(t *testing.T) {
	for range 100 {
		j := jitter(time.Second)
		assert.GreaterOrEqual(t, j, time.Second)
		assert.LessOrEqual(t, j, 1200*time.Millisecond)
	}
}

// SIGTERM while a renewal is on its way: the API applies the renewal, the
// replica never hears of it, and its release then starts from the version
// before. The planned stop must still end with the Lease released, not
// left to expire (a whole LeaseDuration without a leader).
func TestStopDuringARenewalReleasesTheLease(t *testing.T) {
	client := fake.NewClientset(testLease("1", "", 1, 4, time.Now().Add(-time.Hour)))
	unanswered := strictLeases(t, client)
	var armed atomic.Bool
	var stop func()
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if armed.CompareAndSwap(true, false) {
			var cancelled error = &url.Error{Op: "Put", URL: "https://api/leases/l", Err: context.Canceled}
			unanswered.Store(&cancelled)
			stop()
		}
		return false, nil, nil // on to strictLeases, which applies it
	})
	r := startRun(t, client, nil, nil)
	stop = r.cancel
	r.awaitLeading()
	renewals := countActions(client, "update", "leases")
	armed.Store(true)
	require.Eventually(t, func() bool { return r.clock.Waiters() >= 2 }, waitFor, time.Millisecond)
	r.clock.Step(DefaultRetryPeriod)
	r.stepUntil(handOffPoll, r.returned)
	require.NoError(t, r.result())
	require.False(t, armed.Load(), "no renewal was sent")
	l := r.lease()
	assert.Nil(t, l.Spec.HolderIdentity, "the Lease was left to expire")
	assert.Equal(t, int32(1), *l.Spec.LeaseDurationSeconds)
	// The renewal, then one release, or two: the first conflicts with the
	// renewal unless the watch showed the renewal before it (the fake
	// watch is quick; TestReleaseAfterAnUnansweredRenewal takes the
	// conflict's path every time).
	assert.Contains(t, []int{renewals + 2, renewals + 3}, countActions(client, "update", "leases"))
}

// SIGTERM while a standby's acquisition is on its way: the API applies it,
// the standby never hears of it, and stops. It must release the Lease
// its acquisition took, not leave it to expire.
func TestStopDuringAnAcquisitionReleasesIt(t *testing.T) {
	client := fake.NewClientset(testLease("1", "", 1, 4, time.Now().Add(-time.Hour)))
	unanswered := strictLeases(t, client)
	stopped, cancelled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() {
			var canceled error = &url.Error{Op: "Put", URL: "https://api/leases/l", Err: context.Canceled}
			unanswered.Store(&canceled)
			close(stopped)
			// As a real client's: the answer is Canceled because Run's
			// context ended while the request was out.
			<-cancelled
		})
		return false, nil, nil
	})
	r := startRun(t, client, nil, func(r *testRun) func(context.Context) error {
		return func(context.Context) error {
			t.Error("the work started")
			return nil
		}
	})
	<-stopped
	r.cancel()
	close(cancelled)
	require.NoError(t, r.result())
	l := r.lease()
	assert.Nil(t, l.Spec.HolderIdentity, "the acquisition was left to expire")
	assert.Equal(t, int32(5), *l.Spec.LeaseTransitions, "the acquisition was applied")
}

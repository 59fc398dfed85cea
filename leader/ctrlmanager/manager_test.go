package ctrlmanager

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fastover/fastover/leader"
)

// unreachable is a rest config whose server nobody serves: a manager with
// no watched types never calls it, and the election goes to a fake
// clientset.
var unreachable = &rest.Config{Host: "http://127.0.0.1:1"}

func newManager(t *testing.T, client kubernetes.Interface, id string) *Manager {
	t.Helper()
	m, err := New(unreachable, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}}, leader.Config{
		Client:        client,
		Namespace:     "ns",
		LeaseName:     "op",
		Identity:      id,
		LeaseDuration: 4 * time.Second,
		RenewDeadline: 3 * time.Second,
		RetryPeriod:   time.Second,
	})
	require.NoError(t, err)
	return m
}

// recorder is a runnable that records when it runs.
type recorder struct {
	leaderOnly *bool // nil: says nothing, as a plain Runnable
	started    chan struct{}
	stopped    chan struct{}
	fail       error
	warmed     atomic.Bool
	warmup     chan struct{} // if set, Warmup waits for it
}

func newRecorder(leaderOnly *bool) *recorder {
	return &recorder{leaderOnly: leaderOnly, started: make(chan struct{}), stopped: make(chan struct{})}
}

func (r *recorder) Start(ctx context.Context) error {
	close(r.started)
	defer close(r.stopped)
	if r.fail != nil {
		return r.fail
	}
	<-ctx.Done()
	return nil
}

type leRecorder struct{ *recorder }

func (r leRecorder) NeedLeaderElection() bool { return *r.leaderOnly }

type warmRecorder struct{ leRecorder }

func (r warmRecorder) Warmup(ctx context.Context) error {
	if r.warmup != nil {
		select {
		case <-r.warmup:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.warmed.Store(true)
	return nil
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting: %s", what)
	}
}

type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(m *Manager) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Start(ctx) }()
	return r
}

func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return")
		return nil
	}
}

func TestNewRefusesControllerRuntimeLeaderElection(t *testing.T) {
	_, err := New(unreachable, manager.Options{LeaderElection: true, LeaderElectionID: "x"},
		leader.Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "op"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "LeaderElection must be false")
}

func TestNewReportsBadLeaderConfig(t *testing.T) {
	_, err := New(unreachable, manager.Options{}, leader.Config{Client: fake.NewClientset(), RenewDeadline: time.Minute})
	require.Error(t, err)
	for _, field := range []string{"Config.Namespace", "Config.LeaseName", "Config.RenewDeadline"} {
		assert.Contains(t, err.Error(), field)
	}
	_, err = New(nil, manager.Options{}, leader.Config{})
	assert.ErrorContains(t, err, "nil rest config")
}

func TestNewDefaults(t *testing.T) {
	m, err := New(unreachable, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}},
		leader.Config{Namespace: "ns", LeaseName: "op", Identity: "a"})
	require.NoError(t, err, "the Elector's client comes from the rest config")
	assert.Equal(t, ptr.To(true), m.GetControllerOptions().EnableWarmup, "standbys warm their controllers up")
	assert.Equal(t, "a", m.Elector().Identity())
	assert.ErrorContains(t, m.Add(nil), "nil runnable")
}

func TestNewKeepsWarmupOff(t *testing.T) {
	opts := manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}}
	opts.Controller.EnableWarmup = ptr.To(false)
	m, err := New(unreachable, opts, leader.Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "op", Identity: "a"})
	require.NoError(t, err)
	assert.Equal(t, ptr.To(false), m.GetControllerOptions().EnableWarmup)
}

type cacheRunnable struct{ manager.Runnable }

func (cacheRunnable) GetCache() cache.Cache { return &informertest.FakeInformers{} }

type cacheLE struct{ cacheRunnable }

func (cacheLE) NeedLeaderElection() bool { return true }

// NeedsLeader sorts as controller-runtime's manager does.
func TestNeedsLeader(t *testing.T) {
	plain := manager.RunnableFunc(func(context.Context) error { return nil })
	for name, tc := range map[string]struct {
		r    manager.Runnable
		want bool
	}{
		"a plain runnable":                      {plain, true},
		"NeedLeaderElection true":               {leRecorder{newRecorder(ptr.To(true))}, true},
		"NeedLeaderElection false":              {leRecorder{newRecorder(ptr.To(false))}, false},
		"a warmup runnable, leader only":        {warmRecorder{leRecorder{newRecorder(ptr.To(true))}}, true},
		"an HTTP server":                        {&manager.Server{Server: &http.Server{}}, false},
		"an HTTP server only for the leader":    {&manager.Server{Server: &http.Server{}, OnlyServeWhenLeader: true}, true},
		"a webhook server":                      {webhook.NewServer(webhook.Options{}), false},
		"a cache":                               {cacheRunnable{plain}, false},
		"a cache that asks for leader election": {cacheLE{cacheRunnable{plain}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, NeedsLeader(tc.r))
		})
	}
}

// Two replicas: runnables that need no leader start on both; leader
// runnables only on the Elector's leader; a planned stop of the leader
// stops its leader runnables, releases the Lease, and the other replica
// takes over.
func TestLeaderRunnablesRunOnlyOnTheLeader(t *testing.T) {
	client := fake.NewClientset()
	type replica struct {
		m              *Manager
		every, leading *recorder
		run            *running
	}
	var rs []*replica
	for _, id := range []string{"a", "b"} {
		r := &replica{m: newManager(t, client, id), every: newRecorder(ptr.To(false)), leading: newRecorder(nil)}
		require.NoError(t, r.m.Add(leRecorder{r.every}))
		require.NoError(t, r.m.Add(r.leading))
		rs = append(rs, r)
	}
	rs[0].run = start(rs[0].m)
	waitClosed(t, rs[0].m.Elected(), "a elected")
	waitClosed(t, rs[0].leading.started, "a's leader runnable started")
	waitClosed(t, rs[0].every.started, "a's other runnable started")
	assert.True(t, rs[0].m.Elector().IsLeader())

	rs[1].run = start(rs[1].m)
	defer rs[1].run.cancel()
	waitClosed(t, rs[1].every.started, "b's other runnable started")
	time.Sleep(500 * time.Millisecond)
	assert.False(t, closed(rs[1].leading.started), "a standby's leader runnable does not start")
	assert.False(t, closed(rs[1].m.Elected()))

	rs[0].run.cancel()
	require.NoError(t, rs[0].run.wait(t), "a planned stop")
	assert.True(t, closed(rs[0].leading.stopped), "the leader runnable returned before Start did")
	l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "op", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, ptr.To("a"), l.Spec.HolderIdentity, "a released the Lease")

	waitClosed(t, rs[1].m.Elected(), "b elected after a's release")
	waitClosed(t, rs[1].leading.started, "b's leader runnable started")
	assert.Equal(t, "b", rs[1].m.Elector().Leader())
	rs[1].run.cancel()
	require.NoError(t, rs[1].run.wait(t))
}

// A leader runnable that fails ends Start with its error, as in
// controller-runtime's manager; the Lease is released.
func TestLeaderRunnableFailureEndsStart(t *testing.T) {
	client := fake.NewClientset()
	m := newManager(t, client, "a")
	r := newRecorder(ptr.To(true))
	r.fail = errors.New("boom")
	require.NoError(t, m.Add(leRecorder{r}))
	run := start(m)
	defer run.cancel()
	err := run.wait(t)
	require.Error(t, err)
	assert.ErrorIs(t, err, r.fail)
	assert.NotErrorIs(t, err, leader.ErrLeadershipLost)
}

// Losing the Lease stops the leader runnables and ends Start with
// leader.ErrLeadershipLost.
func TestLostLeaseEndsStart(t *testing.T) {
	client := fake.NewClientset()
	m := newManager(t, client, "a")
	r := newRecorder(ptr.To(true))
	require.NoError(t, m.Add(leRecorder{r}))
	run := start(m)
	defer run.cancel()
	waitClosed(t, r.started, "leader runnable started")

	ctx := context.Background()
	var l *coordinationv1.Lease
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		l, err = client.CoordinationV1().Leases("ns").Get(ctx, "op", metav1.GetOptions{})
		return err == nil, nil
	}))
	l.Spec.HolderIdentity = ptr.To("usurper")
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	_, err := client.CoordinationV1().Leases("ns").Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)

	err = run.wait(t)
	assert.ErrorIs(t, err, leader.ErrLeadershipLost)
	assert.True(t, closed(r.stopped), "the leader runnable stopped")
}

// Held runnables are warmed up before the replica competes for the Lease.
func TestWarmupBeforeCampaign(t *testing.T) {
	client := fake.NewClientset()
	m := newManager(t, client, "a")
	r := warmRecorder{leRecorder{newRecorder(ptr.To(true))}}
	r.warmup = make(chan struct{})
	require.NoError(t, m.Add(r))
	run := start(m)
	defer run.cancel()

	time.Sleep(time.Second)
	_, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "op", metav1.GetOptions{})
	assert.Error(t, err, "no Lease before the warmup is done")
	assert.False(t, closed(r.started))

	close(r.warmup)
	waitClosed(t, r.started, "started once warm")
	assert.True(t, r.warmed.Load())
	run.cancel()
	require.NoError(t, run.wait(t))
}

// A failed warmup ends Start with its error.
func TestWarmupFailureEndsStart(t *testing.T) {
	m := newManager(t, fake.NewClientset(), "a")
	r := warmRecorder{leRecorder{newRecorder(ptr.To(true))}}
	r.warmup = make(chan struct{})
	require.NoError(t, m.Add(failingWarmup{r}))
	run := start(m)
	defer run.cancel()
	err := run.wait(t)
	assert.ErrorContains(t, err, "warmup")
	assert.ErrorContains(t, err, "cold")
}

type failingWarmup struct{ warmRecorder }

func (failingWarmup) Warmup(context.Context) error { return errors.New("cold") }

// A leader runnable added while leading starts at once; one added after
// the term is refused.
func TestAddWhileLeading(t *testing.T) {
	m := newManager(t, fake.NewClientset(), "a")
	run := start(m)
	waitClosed(t, m.Elected(), "elected")
	late := newRecorder(nil)
	require.NoError(t, m.Add(late))
	waitClosed(t, late.started, "a runnable added while leading")
	run.cancel()
	require.NoError(t, run.wait(t))
	assert.True(t, closed(late.stopped))
	assert.ErrorContains(t, m.gate.add(newRecorder(nil)), "term as the leader has ended")
}

package charts_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/charts"
)

// caller calls the Service every 10 ms, as fleet.Call resolves it, and
// records each failed call and the longest time without an answer.
type caller struct {
	mu       sync.Mutex
	calls    int
	failures []string
	lastOK   time.Time
	maxGap   time.Duration
	stop     chan struct{}
	done     chan struct{}
}

func startCaller(ctx context.Context, f *fleet.Fleet) *caller {
	c := &caller{lastOK: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, err := f.Call(ctx)
			now := time.Now()
			c.mu.Lock()
			c.calls++
			if err != nil {
				c.failures = append(c.failures, err.Error())
			} else {
				c.maxGap = max(c.maxGap, now.Sub(c.lastOK))
				c.lastOK = now
			}
			c.mu.Unlock()
		}
	}()
	return c
}

// phase returns the calls, failures and longest gap since the last phase
// and starts a new one.
func (c *caller) phase() (calls int, failures []string, gap time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls, failures, gap = c.calls, c.failures, c.maxGap
	c.calls, c.failures, c.maxGap = 0, nil, 0
	return calls, failures, gap
}

func (c *caller) finish() {
	close(c.stop)
	<-c.done
}

// TestExampleHASwitchLive switches `ha` on a running example, 1 → 3 → 1
// replicas, with the replicas as processes (internal/fleet) running as the
// chart's ServiceAccount, bound to the chart's Role: helm upgrade applies
// the new render and deletes what it no longer renders (the
// PodDisruptionBudget); the Deployment's scaling is played by starting and
// stopping replicas. The Service is never touched. A client calling the
// Service every 10 ms sees no failed call while the leader stays, and at
// most a planned handover's gap when the scale-down stops the leader.
func TestExampleHASwitchLive(t *testing.T) {
	env := cluster.Start(t, cluster.Options{Nodes: []string{"node-a"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	applier, err := install.NewApplier(env.Config)
	require.NoError(t, err)
	require.NoError(t, env.CreateNamespace(ctx, exampleNS, restricted(nil)))

	// helm upgrade --set ha=<on>: apply the render, delete what it dropped.
	var last []*unstructured.Unstructured
	upgrade := func(on bool) {
		t.Helper()
		objs := charts.Without(render(t, charts.Example, exampleNS, "ha="+map[bool]string{true: "true", false: "false"}[on]), "Deployment")
		res, err := applier.Apply(ctx, objs, install.ApplyOptions{})
		require.NoError(t, err)
		assert.Empty(t, res.Warnings)
		for _, o := range last {
			if charts.Find(objs, o.GetKind(), o.GetName()) == nil {
				require.Equal(t, "PodDisruptionBudget", o.GetKind(), "the switch drops a %s", o.GetKind())
				err := env.Client.PolicyV1().PodDisruptionBudgets(exampleNS).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
				require.True(t, err == nil || apierrors.IsNotFound(err), "%v", err)
			}
		}
		last = objs
	}
	upgrade(false)
	svc0, err := env.Client.CoreV1().Services(exampleNS).Get(ctx, "fastover-example", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, svc0.Spec.Selector)

	kubeconfig, err := env.KubeconfigAs(ctx, exampleNS, "fastover-example")
	require.NoError(t, err)
	f, err := fleet.New(env, binary(t, "fastover-example"), exampleNS, "fastover-example",
		fleet.Durations{Lease: 15 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second})
	require.NoError(t, err)
	f.Kubeconfig = kubeconfig
	require.NoError(t, f.Add(1))
	leader, err := f.WaitServing(ctx, "", time.Minute)
	require.NoError(t, err)
	require.Equal(t, f.Replicas[0].ID, leader, "one replica publishes itself")

	c := startCaller(ctx, f)
	defer c.finish()
	settle := func() { time.Sleep(3 * time.Second) }
	settle()
	calls, failures, gap := c.phase()
	t.Logf("ha=false, 1 replica: %d calls, %d failed, longest gap %v", calls, len(failures), gap.Round(time.Millisecond))
	assert.Empty(t, failures)

	// 1 → 3: the PodDisruptionBudget comes, two standbys join.
	upgrade(true)
	require.NoError(t, f.Add(2))
	_, err = env.Client.PolicyV1().PodDisruptionBudgets(exampleNS).Get(ctx, "fastover-example", metav1.GetOptions{})
	require.NoError(t, err)
	settle()
	calls, failures, gap = c.phase()
	t.Logf("ha=true, 1 → 3 replicas, leader stays: %d calls, %d failed, longest gap %v", calls, len(failures), gap.Round(time.Millisecond))
	assert.Empty(t, failures, "calls failed while standbys joined")
	holder, _, err := f.Holder(ctx)
	require.NoError(t, err)
	assert.Equal(t, leader, holder)

	// 3 → 1, the leader stays: the standbys stop.
	upgrade(false)
	for _, r := range f.Replicas[1:] {
		r.Proc.Stop(syscall.SIGTERM, 20*time.Second)
	}
	settle()
	calls, failures, gap = c.phase()
	t.Logf("ha=false, 3 → 1 replica, leader stays: %d calls, %d failed, longest gap %v", calls, len(failures), gap.Round(time.Millisecond))
	assert.Empty(t, failures, "calls failed while standbys left")

	// 1 → 3 → 1 again, and this time the scale-down stops the leader: one
	// planned handover (it releases the Lease on SIGTERM).
	upgrade(true)
	for _, r := range f.Replicas[1:] {
		require.NoError(t, f.Start(r))
	}
	settle()
	c.phase()
	upgrade(false)
	// The standby first, so that the leader's Lease goes to the survivor.
	f.Replicas[1].Proc.Stop(syscall.SIGTERM, 20*time.Second)
	stopped := time.Now()
	f.Replicas[0].Proc.Stop(syscall.SIGTERM, 20*time.Second)
	next, err := f.WaitServing(ctx, leader, 30*time.Second)
	require.NoError(t, err)
	handover := time.Since(stopped)
	settle()
	calls, failures, gap = c.phase()
	t.Logf("ha=false, 3 → 1 replica, the leader stopped: %s took over, serving %v after the stop; %d calls, %d failed, longest gap %v",
		next, handover.Round(time.Millisecond), calls, len(failures), gap.Round(time.Millisecond))
	assert.Equal(t, f.Replicas[2].ID, next)
	assert.Less(t, gap, 5*time.Second, "more than a planned handover's gap")

	svc1, err := env.Client.CoreV1().Services(exampleNS).Get(ctx, "fastover-example", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, svc0.ResourceVersion, svc1.ResourceVersion, "the switch touched the Service")
	assert.Equal(t, svc0.UID, svc1.UID)
}

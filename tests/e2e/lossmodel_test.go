package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/retrofit/nodeloss"
)

// lossGrace and lossRate are TestNodeLossModel's compressed
// kube-controller-manager flags (issue 44 §2): the defaults are 50 s and
// 0.1/s, whose figures take hours to measure. The rate is not 1/s, the
// issue's first choice: with 1/s, a zone whose taint queue once had rate 0
// (a small zone partly disrupted while its nodes register, which happens
// as a test brings 20 nodes up) never taints again (kubernetes#104639,
// modelled in retrofit/nodeloss).
const (
	lossGrace = 10 * time.Second
	lossRate  = 0.5
	// lossSecondaryRate is --secondary-node-eviction-rate.
	lossSecondaryRate = 0.1
)

// lossEnv starts a control plane whose kube-controller-manager runs at the
// compressed flags (lossGrace, lossRate, lossSecondaryRate; the
// harness's --node-monitor-period of 1 s). apiServerFlags and cmFlags are
// added to the API server's and kube-controller-manager's.
func lossEnv(t *testing.T, apiServerFlags, cmFlags []string) *cluster.Env {
	t.Helper()
	return cluster.Start(t, cluster.Options{
		NodeMonitorGracePeriod: lossGrace,
		APIServerFlags:         apiServerFlags,
		ControllerManagerFlags: append([]string{fmt.Sprintf("--node-eviction-rate=%v", lossRate), fmt.Sprintf("--secondary-node-eviction-rate=%v", lossSecondaryRate)}, cmFlags...),
	})
}

// lossFlags are lossEnv's flags, as the model takes them.
func lossFlags() nodeloss.Flags {
	flags := nodeloss.DefaultFlags()
	flags.NodeMonitorGracePeriod, flags.NodeMonitorPeriod = lossGrace, time.Second
	flags.NodeEvictionRate, flags.SecondaryNodeEvictionRate = lossRate, lossSecondaryRate
	return flags
}

// lossBound is how far a measured taint or eviction may be from the
// model's prediction: a second, plus one pass (the harness's
// --node-monitor-period), whose phase the model cannot know.
const lossBound = time.Second + time.Second

// TestNodeLossModel checks the node loss model (retrofit/nodeloss) against
// the real node lifecycle and taint-eviction controllers, at compressed
// rates (grace 10 s, --node-eviction-rate=1, --secondary-node-eviction-rate
// 0.1, the rest default): one zone of 20 kwok nodes with two pods each,
// whose 0 s unreachable toleration evicts them with the taint. One node is
// lost, then five at once. Each taint and each pod's deletion is timed by
// watches, against the model's prediction from each lost node's last Lease
// renewal: the i-th taint within lossBound of the model's i-th (which node
// the controller takes next follows its cache's order, which the model
// does not know), and each eviction within lossBound of its node's taint
// plus the model's delay.
func TestNodeLossModel(t *testing.T) {
	env := lossEnv(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := env.Client
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("m-%02d", i+1))
	}
	addZoneNodes(ctx, t, env, "m", names...)
	const ns = "loss"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	d := spreadDeployment("app", "m", 40)
	d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{
		Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](0),
	}}
	_, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
	waitRunningN(ctx, t, c, ns, "app", 40, 2*time.Minute)

	zoneOf := map[string]string{}
	for _, name := range names {
		zoneOf[name] = "local/m"
	}
	seen := watchLoss(ctx, t, env, ns)
	flags := lossFlags()

	var lost []string
	for _, round := range [][]string{names[:1], names[1:6]} {
		t0 := time.Now()
		for _, name := range round {
			require.NoError(t, env.StopNode(name))
		}
		lost = append(lost, round...)
		// The scenario as the cluster is now: the pods where they are,
		// the earlier round's node tainted when it was.
		r := lossPrediction(ctx, t, env, ns, flags, zoneOf, lost, seen, t0)

		// Wait for what the model predicts, and a little more.
		last, never := r.LastTaint()
		require.Zero(t, never, "the model taints every lost node")
		require.Eventually(t, func() bool {
			for _, name := range round {
				if _, ok := seen.taintedAt(name); !ok {
					return false
				}
			}
			return true
		}, last+30*time.Second, 100*time.Millisecond, "the lost nodes were not all tainted")
		time.Sleep(3 * time.Second) // the evictions

		var predicted, measured []time.Duration
		var table []string
		for _, n := range r.Nodes {
			if !slices.Contains(round, n.Name) {
				continue
			}
			at, _ := seen.taintedAt(n.Name)
			predicted = append(predicted, n.Tainted)
			measured = append(measured, at.Sub(t0))
			checkEvictions(t, "", n, at, seen)
			table = append(table, fmt.Sprintf("%s: lost %v, Unknown %v (model), tainted %v (model %v)",
				n.Name, n.LostAt.Round(time.Millisecond), n.Unknown, at.Sub(t0).Round(time.Millisecond), n.Tainted))
		}
		slices.Sort(predicted)
		slices.Sort(measured)
		checkTaints(t, "", predicted, measured)
		t.Logf("%d lost at once (from the loss; the model takes nodes by name, the controller by its cache):\n  %s\n  taints in order: measured %v, the model %v",
			len(round), strings.Join(table, "\n  "), roundAll(measured), predicted)
	}
}

// checkEvictions checks, against the model, when each pod of the lost node
// n, tainted at, was deleted: within lossBound of its delay after the
// taint. It returns how many were deleted and the largest gap. label
// starts each message (a shape's name, or "").
func checkEvictions(t *testing.T, label string, n nodeloss.NodeResult, at time.Time, seen *lossWatch) (deleted int, worst time.Duration) {
	t.Helper()
	for _, p := range n.Pods {
		when, ok := seen.deletedAt(p.Name)
		if !assert.True(t, ok, "%spod %s on %s was not deleted", label, p.Name, n.Name) {
			continue
		}
		deleted++
		got, delay := when.Sub(at), p.Evicted-n.Tainted
		worst = max(worst, (got - delay).Abs())
		assert.InDelta(t, delay.Seconds(), got.Seconds(), lossBound.Seconds(), "%spod %s: deleted %v after its node's taint, the model says %v", label, p.Name, got, delay)
	}
	return deleted, worst
}

// checkTaints checks the taints measured against the model's, both in
// time order, the i-th against the i-th, as far as both go: within
// lossBound. It returns the largest gap.
func checkTaints(t *testing.T, label string, predicted, measured []time.Duration) (worst time.Duration) {
	t.Helper()
	for i := range min(len(predicted), len(measured)) {
		worst = max(worst, (measured[i] - predicted[i]).Abs())
		assert.InDelta(t, predicted[i].Seconds(), measured[i].Seconds(), lossBound.Seconds(),
			"%staint %d of %d: measured %v, the model %v", label, i+1, len(predicted), measured[i], predicted[i])
	}
	return worst
}

// lossWatch records, from watches, when each node got the unreachable
// NoExecute taint and when each pod of the namespace got its deletion.
type lossWatch struct {
	mu      sync.Mutex
	tainted map[string]time.Time
	deleted map[string]time.Time
}

func (w *lossWatch) taintedAt(node string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.tainted[node]
	return at, ok
}

func (w *lossWatch) deletedAt(pod string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.deleted[pod]
	return at, ok
}

func watchLoss(ctx context.Context, t *testing.T, env *cluster.Env, ns string) *lossWatch {
	t.Helper()
	w := &lossWatch{tainted: map[string]time.Time{}, deleted: map[string]time.Time{}}
	nodes, err := env.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	pods, err := env.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(nodes.Stop)
	t.Cleanup(pods.Stop)
	record := func(events <-chan watch.Event) {
		for ev := range events {
			now := time.Now()
			w.mu.Lock()
			switch o := ev.Object.(type) {
			case *corev1.Node:
				if _, ok := w.tainted[o.Name]; !ok && cluster.HasTaint(o, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
					w.tainted[o.Name] = now
				}
			case *corev1.Pod:
				if _, ok := w.deleted[o.Name]; !ok && (o.DeletionTimestamp != nil || ev.Type == watch.Deleted) {
					w.deleted[o.Name] = now
				}
			}
			w.mu.Unlock()
		}
	}
	go record(nodes.ResultChan())
	go record(pods.ResultChan())
	return w
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

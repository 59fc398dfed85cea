package charts_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/tests/charts"
	"github.com/fastover/fastover/toleration"
)

// exampleSelector selects the example chart's pods.
const exampleSelector = "app.kubernetes.io/name=fastover-example"

// plannedGap is the most a client may wait for an answer across a planned
// handover (the leader stopped by SIGTERM releases its Lease; the next
// publishes itself and kube-proxy syncs), with room for a loaded machine.
const plannedGap = 5 * time.Second

// TestExampleChartOnRealNodes is `helm install` of charts/fastover-example
// (ha: true, its default) onto three real nodes, beside charts/fastover:
//   - the three replicas run one per node (the chart's spread), one leads,
//     and the Service's only endpoint is the leader's pod IP (POD_IP from
//     the downward API);
//   - a client in a pod of another node calls the ClusterIP through its
//     node's kube-proxy, on connections it keeps, and the leader answers;
//   - `kubectl rollout restart` completes (rollout status returns), the
//     client waiting at most a planned handover's gap;
//   - `ha: false` runs one replica that publishes itself, and switching
//     1 → 3 → 1 → 3 live touches nothing else (the Service is the same
//     object, at the same resourceVersion), each switch within a planned
//     gap;
//   - the leader's node is cut off (NodeMonitorGracePeriod 10 s): a
//     standby on another node answers the client (in a pod of a third
//     node) within the lease + 3 s; the old leader's pod is evicted (the
//     webhook gave it the 0 s toleration) and replaced, and its
//     replacement joins as a standby; when the node comes back, its
//     kubelet ends the old container and only the new leader answers
//     (the old pod's answers before that are counted).
func TestExampleChartOnRealNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const grace = 10 * time.Second
	nodes := []string{"real-1", "real-2", "real-3"}
	env, realNodes := realEnv(ctx, t, cluster.Options{NodeMonitorGracePeriod: grace}, nodes...)
	ch, err := charts.Load(charts.Example)
	require.NoError(t, err)
	_, err = env.PushImages(ctx, ch.Metadata.AppVersion)
	require.NoError(t, err)
	require.NoError(t, env.CreateNamespace(ctx, systemNS, restricted(nil)))
	newHelm(t, env, "fastover", systemNS).install(ctx, t, charts.Webhook, 3*time.Minute)

	require.NoError(t, env.CreateNamespace(ctx, exampleNS, restricted(map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue})))
	h := newHelm(t, env, "fastover-example", exampleNS)
	began := time.Now()
	h.install(ctx, t, charts.Example, 3*time.Minute)
	t.Logf("helm install fastover-example --wait returned after %v", time.Since(began).Round(100*time.Millisecond))
	svc0, err := env.Client.CoreV1().Services(exampleNS).Get(ctx, "fastover-example", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, svc0.Spec.Selector)

	pods := examplePods(ctx, t, env)
	require.Len(t, pods, 3)
	var on []string
	for _, p := range pods {
		on = append(on, p.Spec.NodeName)
		i := toleration.EffectiveToleration(p.Spec.Tolerations, corev1.TaintNodeUnreachable)
		require.GreaterOrEqual(t, i, 0, "pod %s injected", p.Name)
		assert.Equal(t, int64(0), *p.Spec.Tolerations[i].TolerationSeconds, "pod %s's unreachable toleration", p.Name)
	}
	slices.Sort(on)
	// The chart spreads them by preference (a small cluster still runs
	// all three): at least two nodes, and each on its own as a rule.
	assert.GreaterOrEqual(t, len(slices.Compact(slices.Clone(on))), 2, "the replicas on %v", on)
	if !slices.Equal(nodes, on) {
		t.Logf("the scheduler put the replicas on %v; its decisions:\n%s\nthe nodes now:\n%s", on,
			grepLog(filepath.Join(env.Dir, "logs", string(cluster.Scheduler)+".log"), "fastover-example"), describeNodes(ctx, env))
	}
	leader := waitPublished(ctx, t, env, "")

	const clientNS = "real-client"
	require.NoError(t, env.CreateNamespace(ctx, clientNS, nil))
	var clientNode string
	for _, n := range nodes {
		if n != leader.Spec.NodeName {
			clientNode = n
			break
		}
	}
	url := "http://" + net.JoinHostPort(svc0.Spec.ClusterIP, "8080") + "/"
	client := startPodClient(ctx, t, env, clientNS, "client", clientNode, url)
	began = time.Now()
	waitAnswer(ctx, t, client, leader.Identity, began)
	t.Logf("the client on %s, through the ClusterIP %s, reaches the leader %s on %s", clientNode, svc0.Spec.ClusterIP, leader.Name, leader.Spec.NodeName)

	phase := func(name string, since time.Time) {
		t.Helper()
		time.Sleep(2 * time.Second) // calls after the change
		s := statsOf(client.calls(ctx, t, since))
		t.Logf("%s: %d calls, %d failed, answered by %v, longest gap %v", name, s.calls, s.failed, s.answered, s.longestGap.Round(time.Millisecond))
		assert.Less(t, s.longestGap, plannedGap, "%s: longer than a planned handover", name)
	}

	began = time.Now()
	d := rolloutRestartStart(ctx, t, env, exampleNS, "fastover-example")
	require.NoError(t, waitRollout(ctx, env, exampleNS, "fastover-example", d, 4*time.Minute), "rollout status")
	t.Logf("rollout restart complete (rollout status returned) after %v", time.Since(began).Round(100*time.Millisecond))
	leader = waitPublished(ctx, t, env, "")
	waitAnswer(ctx, t, client, leader.Identity, time.Now())
	phase("rollout restart", began)

	for _, step := range []struct {
		ha       bool
		replicas int
	}{{false, 1}, {true, 3}, {false, 1}, {true, 3}} {
		name := fmt.Sprintf("helm upgrade --set ha=%t", step.ha)
		began := time.Now()
		h.upgrade(ctx, t, charts.Example, 3*time.Minute, fmt.Sprintf("ha=%t", step.ha))
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			return len(examplePods(ctx, t, env)) == step.replicas, nil
		}), "%s: %d replicas", name, step.replicas)
		leader = waitPublished(ctx, t, env, "")
		waitAnswer(ctx, t, client, leader.Identity, time.Now())
		_, err := env.Client.PolicyV1().PodDisruptionBudgets(exampleNS).Get(ctx, "fastover-example", metav1.GetOptions{})
		assert.Equal(t, step.ha, err == nil, "%s: a PodDisruptionBudget (%v)", name, err)
		phase(fmt.Sprintf("%s (%d replica(s), leader %s)", name, step.replicas, leader.Name), began)
	}
	svc1, err := env.Client.CoreV1().Services(exampleNS).Get(ctx, "fastover-example", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, svc0.UID, svc1.UID)
	assert.Equal(t, svc0.ResourceVersion, svc1.ResourceVersion, "the upgrades touched the Service")

	t.Run("LeaderNodeCut", func(t *testing.T) {
		old := waitPublished(ctx, t, env, "")
		lost := realNodes[old.Spec.NodeName]
		var clientAt string
		for _, n := range nodes {
			if n != lost.Name {
				clientAt = n
				break
			}
		}
		watcher := startPodClient(ctx, t, env, clientNS, "watcher", clientAt, url)
		waitAnswer(ctx, t, watcher, old.Identity, time.Now())
		lease := 15 * time.Second // the chart's election.leaseDuration

		cut := time.Now()
		require.NoError(t, lost.Partition(true))
		t.Logf("%s, the leader %s's node, cut off; the client on %s", lost.Name, old.Identity, clientAt)
		var first clientCall
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, c := range watcher.calls(ctx, t, cut) {
				if c.ok && c.answer != old.Identity {
					first = c
					return true, nil
				}
			}
			return false, nil
		}), "no standby answered after the cut")
		failover := first.at.Sub(cut)
		t.Logf("a standby (%s) answered through the ClusterIP %v after the cut (lease %v)", first.answer, failover.Round(time.Millisecond), lease)
		assert.Less(t, failover, lease+3*time.Second, "the failover took longer than the lease + 3 s")
		next := waitPublished(ctx, t, env, old.Name)
		assert.Equal(t, first.answer, next.Identity)

		// The old leader's pod is evicted at the taint (0 s toleration),
		// and a replacement joins as a standby.
		var evicted time.Duration
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(exampleNS).Get(ctx, old.Name, metav1.GetOptions{})
			if err == nil && p.DeletionTimestamp == nil {
				return false, nil
			}
			evicted = time.Since(cut)
			return true, nil
		}), "the old leader's pod was not evicted")
		var standby corev1.Pod
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, p := range examplePods(ctx, t, env) {
				if p.Spec.NodeName != lost.Name && p.Name != next.Name && p.CreationTimestamp.After(cut) && podReady(p) {
					standby = p
					return true, nil
				}
			}
			return false, nil
		}), "no replacement joined")
		t.Logf("the old leader's pod evicted %v after the cut (grace %v); its replacement %s Ready on %s %v after the cut",
			evicted.Round(100*time.Millisecond), grace, standby.Name, standby.Spec.NodeName, time.Since(cut).Round(100*time.Millisecond))
		holder := waitPublished(ctx, t, env, old.Name)
		assert.Equal(t, next.Identity, holder.Identity, "the replacement took the lead")

		// The node comes back: its kubelet ends the old container, and
		// nothing answers from it after that. Before that, the old pod
		// may answer: its container, restarted by its kubelet when the
		// leader lost its Lease, runs as a standby, and a connection the
		// client began during the cut (Go's transport dials on for 30 s
		// after the request gave up; the SYN's conntrack entry holds the
		// old endpoint) reaches it when the SYN gets through.
		require.NoError(t, lost.Partition(false))
		healed := time.Now()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().Pods(exampleNS).Get(ctx, old.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}), "the old leader's pod is still there after the node came back")
		gone := time.Now()
		var stale []string
		for _, c := range watcher.calls(ctx, t, healed) {
			if c.at.Before(gone) && c.ok && strings.HasPrefix(c.answer, old.Name+"_") {
				stale = append(stale, fmt.Sprintf("%s at +%v", c.answer, c.at.Sub(healed).Round(time.Millisecond)))
			}
		}
		t.Logf("the node back: the old leader's pod gone %v later (its kubelet ended it); before that the old pod answered %d call(s): %v",
			gone.Sub(healed).Round(100*time.Millisecond), len(stale), stale)
		time.Sleep(2 * time.Second)
		s := statsOf(watcher.calls(ctx, t, gone))
		assert.Equal(t, []string{next.Identity}, s.answered, "answers once the old pod is gone")
		assert.Zero(t, s.failed, "calls failed once the old pod is gone")
		dialCtx, cancelDial := context.WithTimeout(ctx, 3*time.Second)
		defer cancelDial()
		conn, err := env.DialContext(dialCtx, "tcp", net.JoinHostPort(old.Status.PodIP, "8080"))
		if err == nil {
			_ = conn.Close()
		}
		assert.Error(t, err, "the old leader's address %s still accepts connections", old.Status.PodIP)
	})
}

// describeNodes is each node's taints and Ready condition, for a log.
func describeNodes(ctx context.Context, env *cluster.Env) string {
	list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, n := range list.Items {
		fmt.Fprintf(&b, "%s: taints %v", n.Name, n.Spec.Taints)
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				fmt.Fprintf(&b, ", Ready=%s since %s (%s)", c.Status, c.LastTransitionTime.Format(time.RFC3339), c.Reason)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// grepLog is the lines of the log file that contain s.
func grepLog(path, s string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// podReady reports whether the pod's Ready condition is true.
func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// examplePods are the example's pods that are not terminating.
func examplePods(ctx context.Context, t *testing.T, env *cluster.Env) []corev1.Pod {
	t.Helper()
	return exampleApp.pods(ctx, t, env)
}

// app is a leader-elected program installed on the cluster: its
// namespace, Lease, Service (the leader its only endpoint) and pods.
type app struct {
	ns, lease, service, selector string
}

// exampleApp is charts/fastover-example as the tests install it.
var exampleApp = app{ns: exampleNS, lease: "fastover-example", service: "fastover-example", selector: exampleSelector}

// pods are the app's pods that are not terminating.
func (a app) pods(ctx context.Context, t *testing.T, env *cluster.Env) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(a.ns).List(ctx, metav1.ListOptions{LabelSelector: a.selector})
	require.NoError(t, err)
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// published is the example's leader as the cluster shows it.
type published = cluster.Published

// waitPublished waits until the example's Lease names a running pod
// (other than the pod named not, if given) whose pod IP is the only
// endpoint of the Service's EndpointSlices, and returns it.
func waitPublished(ctx context.Context, t *testing.T, env *cluster.Env, not string) published {
	t.Helper()
	return exampleApp.waitPublished(ctx, t, env, not)
}

// waitPublished is cluster.WaitPublished for the app, within two minutes.
func (a app) waitPublished(ctx context.Context, t *testing.T, env *cluster.Env, not string) published {
	t.Helper()
	leader, err := cluster.WaitPublished(ctx, env.Client, a.ns, a.lease, a.service, not, 2*time.Minute)
	require.NoError(t, err)
	return leader
}

// waitAnswer waits until the client, since then, got an answer from the
// replica named id.
func waitAnswer(ctx context.Context, t *testing.T, c *podClient, id string, since time.Time) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, call := range c.calls(ctx, t, since) {
			if call.ok && call.answer == id {
				return true, nil
			}
		}
		return false, nil
	}), "the client got no answer from %s", id)
}

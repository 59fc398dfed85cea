package e2e

import (
	"context"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/retrofit"
)

// hazardGrace is the node monitor grace period of TestHazards' control
// plane.
const hazardGrace = 10 * time.Second

// TestHazards measures, on one control plane with the webhook injecting,
// the two cases where a 0s unreachable toleration does not bring a pod
// back (docs/hazards.md), side by side since their zones are independent:
//
//   - zone "a" (two nodes): a StatefulSet pod on a vanished node is evicted
//     but stays Terminating, not replaced, until the node gets the
//     node.kubernetes.io/out-of-service taint;
//   - zone "b" (five nodes, three vanish at once): the zone is disrupted and
//     kube-controller-manager stops tainting its nodes, so most injected
//     pods stay bound to dead nodes, while a leader-library fleet that lost
//     its leader at the same moment fails over within its lease.
func TestHazards(t *testing.T) {
	t.Parallel()
	binary(t, "fastover-webhook") // built before the clock starts
	env := cluster.Start(t, cluster.Options{NodeMonitorGracePeriod: hazardGrace})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	wh := startWebhook(t, env)
	wh.register(ctx, t, env, admissionregistrationv1.Fail)
	c := env.Client
	const ns = "hazards"
	require.NoError(t, env.CreateNamespace(ctx, ns, injectLabel()))

	// The workloads land on the nodes they will lose: the StatefulSet's
	// pod on sts-1, the three spread pods one on each of zone-1..3.
	addZoneNodes(ctx, t, env, "a", "sts-1")
	addZoneNodes(ctx, t, env, "b", "zone-1", "zone-2", "zone-3")
	sts, err := c.AppsV1().StatefulSets(ns).Create(ctx, statefulSet("web", "a"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.AppsV1().Deployments(ns).Create(ctx, spreadDeployment("spread", "b", 3), metav1.CreateOptions{})
	require.NoError(t, err)
	stsPod := waitRunning(ctx, t, c, ns, "web", time.Minute)
	spread := waitRunningN(ctx, t, c, ns, "spread", 3, time.Minute)
	assertEffectiveSeconds(t, stsPod, corev1.TaintNodeUnreachable, ptr.To[int64](0))
	for i := range spread {
		assertEffectiveSeconds(t, &spread[i], corev1.TaintNodeUnreachable, ptr.To[int64](0))
	}

	t.Run("the webhook warns the client about a StatefulSet pod", func(t *testing.T) {
		// A client that creates a StatefulSet pod (here a dry run, as
		// `kubectl apply --dry-run=server` would) sees the warning, as
		// client-go surfaces it through its WarningHandler.
		rec := &warningRecorder{}
		cfg := rest.CopyConfig(env.Config)
		cfg.WarningHandler = rec
		client, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

		pod := bare("web-probe")
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}}
		_, err = client.CoreV1().Pods(ns).Create(ctx, pod, dry)
		require.NoError(t, err)
		warnings := rec.take()
		require.Len(t, warnings, 1, "%q", warnings)
		assert.Contains(t, warnings[0], "StatefulSet pod's unreachable toleration to 0s")
		assert.Contains(t, warnings[0], "node.kubernetes.io/out-of-service")
		t.Logf("warning the client saw: %q", warnings[0])

		_, err = client.CoreV1().Pods(ns).Create(ctx, bare("plain-probe"), dry)
		require.NoError(t, err)
		assert.Empty(t, rec.take(), "a pod of no StatefulSet gets no warning")

		// The pods a StatefulSet creates have kube-controller-manager for
		// client, which discards warnings (client-go's NoWarnings): the
		// audit is where those show.
		if lines := grepLines(controllerManagerLog(t, env), "fastover set this StatefulSet pod"); len(lines) > 0 {
			t.Logf("kube-controller-manager logged the warning: %s", strings.TrimSpace(lines[0]))
		} else {
			t.Log("kube-controller-manager, which created web-0, did not log the warning")
		}
	})

	t.Run("kubectl fastover audit warns about the StatefulSet pod", func(t *testing.T) {
		r, kinds := auditHazards(ctx, t, env, ns)
		assert.Equal(t, []string{stsPod.Name + ":statefulset"}, kinds)
		assert.Contains(t, r.Pods[0].Advice, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
		assert.Equal(t, retrofit.Zone{Name: "local/b", Nodes: 3, State: retrofit.ZoneNormal, Evictions: "normal rate"}, zoneNamed(t, r, "local/b"))
		table, _ := kubectlFastover(ctx, t, env, "audit", "-n", ns, "--rule-config=")
		assert.Contains(t, table, "Warning: the toleration does not bring these pods back from a lost node by itself")
		t.Logf("kubectl fastover audit -n %s:\n%s", ns, table)

		// A loss to come, predicted by the node loss model with this
		// control plane's grace period: all of zone b, fully disrupted
		// while zone a is not, so tainted at the normal rate.
		lose := []string{"audit", "-n", ns, "--rule-config=", "--lose=zone=local/b", "--node-monitor-grace-period=" + hazardGrace.String()}
		table, _ = kubectlFastover(ctx, t, env, lose...)
		assert.Contains(t, table, "Node loss predicted for a loss of zone=local/b now")
		assert.Contains(t, table, "3 nodes lost: the last taint +")
		assert.Contains(t, table, ", 0 never tainted.")
		assert.Contains(t, table, "zone local/b (3 nodes): +0s Normal (0.1/s), then +15s FullDisruption (0.1/s)")
		t.Logf("kubectl fastover %s:\n%s", strings.Join(lose, " "), table)
	})

	// Somewhere for replacements to go, in each zone.
	addZoneNodes(ctx, t, env, "a", "sts-2")
	addZoneNodes(ctx, t, env, "b", "zone-4", "zone-5")
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	f := newFleet(t, env, "ha", "ctl", shortDurations)
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(2))
	waitServing(ctx, t, f, "", 30*time.Second)

	// The two hazards run at once, each a subtest started from a goroutine
	// of its own rather than a parallel subtest: parallel subtests queue
	// for go test's -parallel slots behind every other parallel test of
	// the package, which kept the lost nodes waiting 2 minutes in make e2e.
	t.Run("hazards", func(t *testing.T) {
		var wg sync.WaitGroup
		wg.Go(func() {
			t.Run("StatefulSet pod on a lost node", func(t *testing.T) {
				statefulSetHazard(ctx, t, env, ns, stsPod)
			})
		})
		wg.Go(func() {
			t.Run("disrupted zone", func(t *testing.T) {
				disruptedZone(ctx, t, env, f, ns, spread)
			})
		})
		wg.Wait()
	})
}

// statefulSetHazard makes the StatefulSet pod's node vanish and measures:
// the pod is evicted (Terminating) but not replaced at grace + 30s; once
// the node is tainted out-of-service, the pod GC controller deletes it and
// the StatefulSet creates its replacement.
func statefulSetHazard(ctx context.Context, t *testing.T, env *cluster.Env, ns string, old *corev1.Pod) {
	c := env.Client
	node := old.Spec.NodeName
	require.NoError(t, env.StopNode(node))
	lost := time.Now()

	var evicted time.Time
	deadline := lost.Add(hazardGrace + 30*time.Second)
	for time.Now().Before(deadline) {
		pods, err := cluster.PodsOf(ctx, c, ns, "web")
		require.NoError(t, err)
		if len(pods) != 1 || pods[0].UID != old.UID {
			t.Fatalf("the StatefulSet pod was replaced %.1fs after its node vanished, before the out-of-service taint: %s",
				time.Since(lost).Seconds(), describePods(pods))
		}
		if evicted.IsZero() && pods[0].DeletionTimestamp != nil {
			evicted = time.Now()
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.False(t, evicted.IsZero(), "the 0s toleration should have evicted the pod (Terminating) within grace + 30s")
	t.Logf("%s/%s: evicted (Terminating) %.1fs after %s vanished; at grace + 30s (%.0fs) it is still Terminating on %s and not replaced",
		ns, old.Name, since(lost, evicted), node, since(lost, deadline), node)

	require.NoError(t, taintNode(ctx, c, node, outOfService))
	tainted := time.Now()
	var gone, running time.Time
	var replacement *corev1.Pod
	for running.IsZero() {
		if time.Since(tainted) > 60*time.Second {
			pods, _ := cluster.PodsOf(ctx, c, ns, "web")
			t.Fatalf("the StatefulSet pod not replaced 60s after the out-of-service taint: %s", describePods(pods))
		}
		pods, err := cluster.PodsOf(ctx, c, ns, "web")
		require.NoError(t, err)
		if gone.IsZero() && !containsUID(pods, old.UID) {
			gone = time.Now()
		}
		if p := cluster.RunningPod(pods, node); p != nil && p.UID != old.UID {
			running, replacement = time.Now(), p
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.Equal(t, old.Name, replacement.Name, "the StatefulSet keeps the pod's identity")
	t.Logf("%s/%s: with %s tainted %s=%s:%s, the old pod is gone after %.1fs and %s runs on %s after %.1fs (%.1fs after the node vanished)",
		ns, old.Name, node, outOfService.Key, outOfService.Value, outOfService.Effect,
		since(tainted, gone), replacement.Name, replacement.Spec.NodeName, since(tainted, running), since(lost, running))
}

// zoneNode is what happened to one vanished node of the disrupted zone.
type zoneNode struct {
	name                     string
	pod                      corev1.Pod // the injected pod that ran on it
	unknown, noSched, noExec time.Time  // Ready Unknown; tainted unreachable NoSchedule; NoExecute
	evicted, replaced        time.Time  // its pod Terminating or gone; a replacement running elsewhere
	returned                 bool       // started again
}

// disruptedZone makes three of the five nodes of zone "b" vanish at once,
// and with them the fleet's leader, and measures what the node lifecycle
// controller does to the injected pods on them, next to the fleet's
// failover. It pins what was measured: the zone enters PartialDisruption,
// at most one of the three nodes (the one noticed first, which takes the
// zone's eviction token) gets the NoExecute taint and only its pod is
// replaced; the others stay bound to dead nodes, not evicted, until the
// zone is healthy again (one node back), after which they are replaced at
// the zone's normal eviction rate.
func disruptedZone(ctx context.Context, t *testing.T, env *cluster.Env, f *fleet.Fleet, ns string, spread []corev1.Pod) {
	c := env.Client
	nodes := map[string]*zoneNode{}
	for _, p := range spread {
		nodes[p.Spec.NodeName] = &zoneNode{name: p.Spec.NodeName, pod: p}
	}
	require.Len(t, nodes, 3, "one spread pod on each of three nodes")
	leader, _, err := f.Holder(ctx)
	require.NoError(t, err)

	for name := range nodes {
		require.NoError(t, env.StopNode(name))
	}
	f.ByID(leader).Proc.Stop(syscall.SIGKILL, 0) // it ran on a vanished node too
	lost := time.Now()
	failover := make(chan error, 1)
	var newLeader string
	var failedOver time.Time
	go func() {
		id, err := f.WaitServing(ctx, leader, shortDurations.Lease+10*time.Second)
		newLeader, failedOver = id, time.Now()
		failover <- err
	}()

	deadline := lost.Add(hazardGrace + 30*time.Second)
	watch := func(until time.Time) {
		for time.Now().Before(until) {
			observeZone(ctx, t, c, ns, nodes)
			time.Sleep(200 * time.Millisecond)
		}
	}
	watch(deadline)
	require.NoError(t, <-failover, "the leader-library fleet")
	t.Logf("fleet: %s took over from %s %.1fs after its node vanished (lease %v)", newLeader, leader, since(lost, failedOver), shortDurations.Lease)

	var noExec, replaced []string
	for _, n := range nodes {
		assert.False(t, n.unknown.IsZero(), "%s not marked Unknown", n.name)
		assert.False(t, n.noSched.IsZero(), "%s not tainted unreachable:NoSchedule", n.name)
		if !n.noExec.IsZero() {
			noExec = append(noExec, n.name)
		}
		if !n.replaced.IsZero() {
			replaced = append(replaced, n.name)
		}
		t.Logf("%s: Unknown after %.1fs, unreachable:NoSchedule after %.1fs, unreachable:NoExecute after %.1fs; its pod %s evicted after %.1fs, replaced after %.1fs (-1: not by grace + 30s)",
			n.name, since(lost, n.unknown), since(lost, n.noSched), since(lost, n.noExec), n.pod.Name, since(lost, n.evicted), since(lost, n.replaced))
	}
	zoneLog := grepLines(controllerManagerLog(t, env), "Controller detected that zone is now in new state", "PartialDisruption")
	require.NotEmpty(t, zoneLog, "kube-controller-manager did not report zone b in PartialDisruption")
	t.Logf("kube-controller-manager: %s", strings.TrimSpace(zoneLog[0]))
	assert.LessOrEqual(t, len(noExec), 1, "in a disrupted zone of 5 nodes (<= --large-cluster-size-threshold), at most the first node noticed is tainted NoExecute: %v", noExec)
	assert.ElementsMatch(t, noExec, replaced, "a pod is replaced exactly when its node is tainted NoExecute")
	t.Logf("at grace + 30s: %d of 3 vanished nodes tainted NoExecute %v, %d of 3 injected pods replaced", len(noExec), noExec, len(replaced))

	// The audit sees the disrupted zone and warns about the pods in it.
	r, kinds := auditHazards(ctx, t, env, ns)
	assert.Equal(t, retrofit.Zone{Name: "local/b", Nodes: 5, NotReady: 3, State: retrofit.ZonePartialDisruption, Evictions: "stopped", StopsAt: 3},
		zoneNamed(t, r, "local/b"))
	for _, n := range nodes {
		if n.noExec.IsZero() {
			assert.Contains(t, kinds, n.pod.Name+":disrupted-zone", "the pod bound to the lost %s", n.name)
		}
	}
	table, _ := kubectlFastover(ctx, t, env, "audit", "-n", ns, "--rule-config=")
	t.Logf("kubectl fastover audit -n %s, zone b disrupted:\n%s", ns, table)

	// One node comes back: 2 of 5 not ready, the zone is Normal again and
	// the remaining nodes are tainted at --node-eviction-rate (0.1/s).
	back := ""
	for name, n := range nodes {
		if back == "" || !n.noExec.IsZero() {
			back = name
		}
	}
	require.NoError(t, env.StartNode(back))
	recovered := time.Now()
	nodes[back].returned = true
	watch(recovered.Add(45 * time.Second))
	for _, n := range nodes {
		if n.returned {
			continue
		}
		if n.replaced.IsZero() {
			pods, _ := cluster.PodsOf(ctx, c, ns, "spread")
			t.Fatalf("%s's pod not replaced 45s after %s came back and the zone recovered: %s", n.name, back, describePods(pods))
		}
		t.Logf("after %s came back (zone Normal): %s tainted NoExecute after %.1fs, its pod replaced after %.1fs",
			back, n.name, since(recovered, n.noExec), since(recovered, n.replaced))
	}
	changes := grepLines(controllerManagerLog(t, env), "Controller detected that zone is now in new state")
	i := slices.IndexFunc(changes, func(l string) bool { return strings.Contains(l, "PartialDisruption") })
	require.GreaterOrEqual(t, i, 0)
	assert.True(t, slices.ContainsFunc(changes[i+1:], func(l string) bool { return strings.Contains(l, "Normal") }),
		"kube-controller-manager did not report zone b Normal again: %q", changes)
}

// observeZone records, for each vanished node, the first time each state
// was seen.
func observeZone(ctx context.Context, t *testing.T, c kubernetes.Interface, ns string, nodes map[string]*zoneNode) {
	t.Helper()
	now := time.Now()
	pods, err := cluster.PodsOf(ctx, c, ns, "spread")
	require.NoError(t, err)
	original := map[types.UID]bool{}
	for _, n := range nodes {
		original[n.pod.UID] = true
	}
	// Running replacements, on a node that is not (still) vanished; each is
	// credited to an evicted pod that has none yet.
	replacements := 0
	for _, p := range pods {
		n, onVanished := nodes[p.Spec.NodeName]
		if (!onVanished || n.returned) && !original[p.UID] && cluster.RunningPod([]corev1.Pod{p}, "") != nil {
			replacements++
		}
	}
	for _, n := range nodes {
		if !n.replaced.IsZero() {
			replacements--
		}
	}
	for _, n := range nodes {
		node, err := c.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		require.NoError(t, err)
		if n.unknown.IsZero() && cluster.NodeReady(node) == corev1.ConditionUnknown {
			n.unknown = now
		}
		if n.noSched.IsZero() && cluster.HasTaint(node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule) {
			n.noSched = now
		}
		if n.noExec.IsZero() && cluster.HasTaint(node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
			n.noExec = now
		}
		for _, p := range pods {
			if p.UID == n.pod.UID && p.DeletionTimestamp != nil && n.evicted.IsZero() {
				n.evicted = now
			}
		}
		if n.evicted.IsZero() && !containsUID(pods, n.pod.UID) {
			n.evicted = now
		}
		if !n.evicted.IsZero() && n.replaced.IsZero() && replacements > 0 {
			n.replaced = now
			replacements--
		}
	}
}

func containsUID(pods []corev1.Pod, uid types.UID) bool {
	for _, p := range pods {
		if p.UID == uid {
			return true
		}
	}
	return false
}

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/tests/cluster"
)

// TestTolerationDecidesFailover reproduces, with real Kubernetes code, the
// effect fastover exists for: when a node vanishes, a pod that tolerates
// node.kubernetes.io/unreachable:NoExecute for 0s is replaced on another
// node right after the node is tainted, while a pod with the API server's
// default 300s toleration stays bound to the dead node.
func TestTolerationDecidesFailover(t *testing.T) {
	const grace = 10 * time.Second
	env := cluster.Start(t, cluster.Options{NodeMonitorGracePeriod: grace, Nodes: []string{"node-a"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.Client

	const ns = "proof"
	if err := env.CreateNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	fast := deployment("fast", []corev1.Toleration{{
		Key:               corev1.TaintNodeUnreachable,
		Operator:          corev1.TolerationOpExists,
		Effect:            corev1.TaintEffectNoExecute,
		TolerationSeconds: ptr.To[int64](0),
	}})
	slow := deployment("slow", nil)
	for _, d := range []string{"fast", "slow"} {
		obj := fast
		if d == "slow" {
			obj = slow
		}
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create deployment %s: %v", d, err)
		}
	}
	// node-a is the only node: both pods land on it.
	fastPod := waitRunning(ctx, t, c, ns, "fast", 60*time.Second)
	slowPod := waitRunning(ctx, t, c, ns, "slow", 60*time.Second)
	if fastPod.Spec.NodeName != "node-a" || slowPod.Spec.NodeName != "node-a" {
		t.Fatalf("pods not on node-a: fast on %q, slow on %q", fastPod.Spec.NodeName, slowPod.Spec.NodeName)
	}
	// The premise: the API server gave the slow pod its default 300s.
	if tol := effectiveToleration(slowPod.Spec.Tolerations, corev1.TaintNodeUnreachable); tol == nil ||
		tol.TolerationSeconds == nil || *tol.TolerationSeconds != 300 {
		t.Fatalf("slow pod: effective unreachable toleration %+v, want the default 300s", tol)
	}
	if tol := effectiveToleration(fastPod.Spec.Tolerations, corev1.TaintNodeUnreachable); tol == nil ||
		tol.TolerationSeconds == nil || *tol.TolerationSeconds != 0 {
		t.Fatalf("fast pod: effective unreachable toleration %+v, want 0s", tol)
	}
	// Somewhere for the replacement to go.
	env.AddNodes(t, "node-b")

	if err := env.StopNode("node-a"); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	t.Logf("node-a vanished (kwok killed); grace period %v", grace)

	deadline := lost.Add(grace + 10*time.Second)
	var replaced, unknown, tainted time.Duration
	for replaced == 0 {
		now := time.Now()
		if now.After(deadline) {
			pods, _ := podsOf(ctx, c, ns, "fast")
			t.Fatalf("fast pod not replaced within grace + 10s (%v): %s", deadline.Sub(lost), describePods(pods))
		}
		if unknown == 0 || tainted == 0 {
			node, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err == nil {
				if unknown == 0 && readyStatus(node) == corev1.ConditionUnknown {
					unknown = now.Sub(lost)
				}
				if tainted == 0 && hasTaint(node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
					tainted = now.Sub(lost)
				}
			}
		}
		pods, err := podsOf(ctx, c, ns, "fast")
		if err != nil {
			t.Fatal(err)
		}
		if p := runningPod(pods, "node-a"); p != nil {
			replaced = now.Sub(lost)
			t.Logf("fast pod (0s toleration) replaced: %s runs on %s, %.1fs after the node vanished (node Unknown after %.1fs, tainted unreachable:NoExecute after %.1fs)",
				p.Name, p.Spec.NodeName, replaced.Seconds(), unknown.Seconds(), tainted.Seconds())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The slow pod is checked at the deadline the fast one had to meet.
	time.Sleep(time.Until(deadline))
	pods, err := podsOf(ctx, c, ns, "slow")
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].UID != slowPod.UID || pods[0].Spec.NodeName != "node-a" || pods[0].DeletionTimestamp != nil {
		t.Fatalf("slow pod (300s toleration) should still be bound to node-a, not evicted, not replaced: %s", describePods(pods))
	}
	t.Logf("slow pod (default 300s toleration) still bound to node-a %.1fs after the node vanished; it would be evicted about %v after the taint",
		time.Since(lost).Seconds(), 300*time.Second)
}

func readyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func hasTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

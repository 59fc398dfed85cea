package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fastover/fastover/internal/cluster"
)

// app names a one-replica Deployment.
type app struct{ ns, name string }

// nodeLoss makes the kwok node vanish while fast's and slow's pods run on
// it, and checks the behaviour fastover exists for: fast's pod is replaced
// on another node within grace + 10s; at that deadline slow's pod is still
// bound to the dead node, not evicted, not replaced. It logs the measured
// times.
func nodeLoss(ctx context.Context, t *testing.T, env *cluster.Env, node string, grace time.Duration, fast, slow app) {
	t.Helper()
	lose := func() error {
		if err := env.StopNode(node); err != nil {
			return err
		}
		t.Logf("%s vanished (kwok killed); grace period %v", node, grace)
		return nil
	}
	nodeLossBy(ctx, t, env, node, lose, grace, 10*time.Second, 10*time.Second, fast, slow)
}

// nodeLossBy is nodeLoss with the loss lose does (a kwok process killed,
// a real node cut off or frozen): fast's pod replaced within grace +
// within, slow's still bound to the lost node at grace + hold.
func nodeLossBy(ctx context.Context, t *testing.T, env *cluster.Env, node string, lose func() error, grace, within, hold time.Duration, fast, slow app) {
	t.Helper()
	c := env.Client
	fastPod := waitRunning(ctx, t, c, fast.ns, fast.name, 60*time.Second)
	slowPod := waitRunning(ctx, t, c, slow.ns, slow.name, 60*time.Second)
	if fastPod.Spec.NodeName != node || slowPod.Spec.NodeName != node {
		t.Fatalf("pods not on %s: fast on %q, slow on %q", node, fastPod.Spec.NodeName, slowPod.Spec.NodeName)
	}

	lost := time.Now()
	if err := lose(); err != nil {
		t.Fatal(err)
	}

	deadline := lost.Add(grace + within)
	var replaced, unknown, tainted time.Duration
	for replaced == 0 {
		now := time.Now()
		if now.After(deadline) {
			pods, _ := cluster.PodsOf(ctx, c, fast.ns, fast.name)
			t.Fatalf("%s/%s not replaced within grace + %v (%v): %s", fast.ns, fast.name, within, deadline.Sub(lost), describePods(pods))
		}
		if unknown == 0 || tainted == 0 {
			if n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
				if unknown == 0 && cluster.NodeReady(n) == corev1.ConditionUnknown {
					unknown = now.Sub(lost)
				}
				if tainted == 0 && cluster.HasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
					tainted = now.Sub(lost)
				}
			}
		}
		pods, err := cluster.PodsOf(ctx, c, fast.ns, fast.name)
		if err != nil {
			t.Fatal(err)
		}
		if p := cluster.RunningPod(pods, node); p != nil {
			replaced = now.Sub(lost)
			t.Logf("%s/%s (0s toleration) replaced: %s runs on %s, %.1fs after the node vanished (node Unknown after %.1fs, tainted unreachable:NoExecute after %.1fs)",
				fast.ns, fast.name, p.Name, p.Spec.NodeName, replaced.Seconds(), unknown.Seconds(), tainted.Seconds())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The slow pod is checked at grace + hold.
	time.Sleep(time.Until(lost.Add(grace + hold)))
	pods, err := cluster.PodsOf(ctx, c, slow.ns, slow.name)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].UID != slowPod.UID || pods[0].Spec.NodeName != node || pods[0].DeletionTimestamp != nil {
		t.Fatalf("%s/%s (300s toleration) should still be bound to %s, not evicted, not replaced: %s", slow.ns, slow.name, node, describePods(pods))
	}
	t.Logf("%s/%s (default 300s toleration) still bound to %s %.1fs after the node vanished; it would be evicted about %v after the taint",
		slow.ns, slow.name, node, time.Since(lost).Seconds(), 300*time.Second)
}

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
)

// TestTolerationDecidesFailover reproduces, with real Kubernetes code and
// nothing of fastover's, the effect fastover exists for: when a node
// vanishes, a pod that tolerates node.kubernetes.io/unreachable:NoExecute
// for 0s is replaced on another node right after the node is tainted, while
// a pod with the API server's default 300s toleration stays bound to the
// dead node.
func TestTolerationDecidesFailover(t *testing.T) {
	t.Parallel()
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
	for _, d := range []*appsDeployment{fast, slow} {
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create deployment %s: %v", d.Name, err)
		}
	}
	// node-a is the only node: both pods land on it.
	fastPod := waitRunning(ctx, t, c, ns, "fast", 60*time.Second)
	slowPod := waitRunning(ctx, t, c, ns, "slow", 60*time.Second)
	// The premise: the API server gave the slow pod its default 300s.
	assertEffectiveSeconds(t, slowPod, corev1.TaintNodeUnreachable, ptr.To[int64](300))
	assertEffectiveSeconds(t, fastPod, corev1.TaintNodeUnreachable, ptr.To[int64](0))
	// Somewhere for the replacement to go.
	env.AddNodes(t, "node-b")

	nodeLoss(ctx, t, env, "node-a", grace, app{ns, "fast"}, app{ns, "slow"})
}

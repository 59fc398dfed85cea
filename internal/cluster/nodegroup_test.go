package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeGroups adds two groups of kwok nodes, 40 and 10, each played by
// one kwok process, and loses the small one at once: its nodes' Leases
// stop together and they go Unknown, while the other group's stay Ready;
// the group then comes back.
func TestNodeGroups(t *testing.T) {
	env := Start(t, Options{NodeMonitorGracePeriod: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	names := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%02d", prefix, i+1))
		}
		return out
	}
	zone := func(z string) map[string]string { return map[string]string{corev1.LabelTopologyZone: z} }
	a, b := names("a", 40), names("b", 10)
	began := time.Now()
	require.NoError(t, env.AddNodeGroup(ctx, "zone-a", zone("a"), a...))
	require.NoError(t, env.AddNodeGroup(ctx, "zone-b", zone("b"), b...))
	t.Logf("50 nodes in two groups Ready in %v", time.Since(began).Round(time.Millisecond))
	got, err := env.NodeGroup("zone-b")
	require.NoError(t, err)
	assert.Equal(t, b, got)
	n, err := env.Client.CoreV1().Nodes().Get(ctx, "a-07", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "zone-a", n.Labels[NodeGroupLabel])
	assert.Equal(t, "a", n.Labels[corev1.LabelTopologyZone])

	t.Run("bad input", func(t *testing.T) {
		assert.ErrorContains(t, env.AddNodeGroup(ctx, "zone-a", nil, "a-99"), "already added")
		assert.ErrorContains(t, env.AddNodeGroup(ctx, "empty", nil), "no nodes")
		assert.ErrorContains(t, env.AddNodeGroup(ctx, "a/b", nil, "x"), "not a label value")
		assert.ErrorContains(t, env.StopNodeGroup("nope"), `no node group "nope"`)
		_, err := env.NodeGroup("empty")
		assert.ErrorContains(t, err, `no node group "empty"`)
	})

	t.Run("a group lost at once", func(t *testing.T) {
		stopped := time.Now()
		require.NoError(t, env.StopNodeGroup("zone-b"))
		for _, name := range b {
			require.NoError(t, env.WaitNodeCondition(ctx, name, corev1.ConditionUnknown, 30*time.Second), name)
		}
		for _, name := range b {
			l, err := env.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			// kwok renews every 2 s: the last renewal of each came
			// within that before the stop, none after it.
			renewed := l.Spec.RenewTime.Time
			assert.WithinRange(t, renewed, stopped.Add(-3*time.Second), stopped.Add(time.Second), "%s: last renewed %v, stopped %v", name, renewed, stopped)
		}
		for _, name := range a {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, corev1.ConditionTrue, NodeReady(n), "%s of the other group", name)
		}
		require.NoError(t, env.StartNodeGroup(ctx, "zone-b"))
	})
}

package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
)

// addPodReplicas adds n replicas to f (not started), each "in" a Pod of
// its own (fleet.Fleet.AddPodReplicas); the Pods' finalizers are removed
// when the test ends.
func addPodReplicas(ctx context.Context, t *testing.T, f *fleet.Fleet, n int, labels map[string]string) {
	t.Helper()
	release, err := f.AddPodReplicas(ctx, n, labels)
	t.Cleanup(release)
	require.NoError(t, err)
}

// setPodStatus writes the status a kubelet would (fleet.SetPodStatus).
func setPodStatus(ctx context.Context, t *testing.T, env *cluster.Env, ns, name string, ready bool, ended *corev1.ContainerStateTerminated) {
	t.Helper()
	require.NoError(t, fleet.SetPodStatus(ctx, env.Client, ns, name, ready, ended))
}

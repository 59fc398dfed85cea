package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastover/fastover/internal/fleet"
)

// podFinalizer holds the Pods of addPodReplicas, and gates their
// scheduling.
const podFinalizer = "fastover.io/test-hold"

// addPodReplicas adds n replicas to f (not started), each "in" a Pod of
// its own in f's namespace: the Pod object on the real API server, with
// labels, held unscheduled (a scheduling gate) and by a finalizer (removed
// when the test ends), and the downward API's variables in the process's
// environment, so crash takeover names it. No kubelet acts on the Pods.
func addPodReplicas(ctx context.Context, t *testing.T, f *fleet.Fleet, n int, labels map[string]string) {
	t.Helper()
	pods := f.Env.Client.CoreV1().Pods(f.Namespace)
	for range n {
		r := fleet.NewReplica(f.Name, len(f.Replicas)+1)
		p, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: r.ID, Labels: labels, Finalizers: []string{podFinalizer}},
			Spec: corev1.PodSpec{
				SchedulingGates: []corev1.PodSchedulingGate{{Name: podFinalizer}},
				Containers:      []corev1.Container{{Name: "ctl", Image: "fastover.test/none"}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		r.Environ = []string{"POD_NAME=" + p.Name, "POD_NAMESPACE=" + f.Namespace, "POD_UID=" + string(p.UID), "CONTAINER_NAME=ctl"}
		f.Replicas = append(f.Replicas, r)
		t.Cleanup(func() {
			_, _ = pods.Patch(context.Background(), p.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		})
	}
}

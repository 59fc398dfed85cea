package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
)

// TestTerminatingStandbyStaysOut: a standby whose Pod is deleted while
// its process runs on does not take the Lease (leader/leaving.go). Each
// replica of fastover-example runs "in" a Pod of its own: the Pod object
// on the real API server, held unscheduled (a scheduling gate) and by a
// finalizer, and the downward API's variables in the process's
// environment, so crash takeover names it. No kubelet acts on the Pods:
// deleting one leaves its process running, Terminating, as a container
// that missed its SIGTERM does. The leader stops (SIGTERM: it releases
// the Lease); the Terminating standby stays out, beyond the lease
// duration twice over, and says why (its log, a Leaving Event); a replica
// started in a live Pod then takes the Lease.
func TestTerminatingStandbyStaysOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	const ns = "ha"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	f := newFleet(t, env, ns, "ctl", shortDurations)
	require.NoError(t, f.CreateService(ctx, nil))
	addPodReplicas(ctx, t, f, 3, nil)
	pods := env.Client.CoreV1().Pods(ns)
	first, standby, late := f.Replicas[0], f.Replicas[1], f.Replicas[2]
	require.NoError(t, f.Start(first))
	require.Equal(t, first.ID, waitServing(ctx, t, f, "", time.Minute))
	require.NoError(t, f.Start(standby))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, _, err := f.Get(standby.Address(), "/readyz")
		return err == nil && code == 200, nil
	}), "the standby is not ready")

	require.NoError(t, pods.Delete(ctx, standby.ID, metav1.DeleteOptions{}))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(standby.Proc.Tail(40), "not competing for the Lease"), nil
	}), "the standby did not step aside:\n%s", standby.Proc.Tail(20))
	stopped := time.Now()
	first.Proc.Stop(syscall.SIGTERM, 10*time.Second)
	// Two lease durations: a standby that competed would have taken the
	// released Lease within milliseconds, and an expired one within one.
	time.Sleep(2 * shortDurations.Lease)
	holder, _, err := f.Holder(ctx)
	require.NoError(t, err)
	assert.Empty(t, holder, "the Lease's holder %v after the leader stopped", time.Since(stopped).Round(time.Millisecond))
	assert.True(t, standby.Proc.Running(), "the Terminating standby's process ended")

	evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Leaving"})
	require.NoError(t, err)
	require.Len(t, evs.Items, 1, "Leaving Events")
	assert.Contains(t, evs.Items[0].Message, standby.ID+" does not compete for the Lease: its Pod ha/"+standby.ID+" is Terminating")

	require.NoError(t, f.Start(late))
	require.Equal(t, late.ID, waitServing(ctx, t, f, "", time.Minute), "a replica in a live Pod takes the Lease")
}

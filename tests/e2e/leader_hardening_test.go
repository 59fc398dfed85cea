package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
)

// TestLeaderPublishing: replicas with exactly the documented Role, on an
// API server with OwnerReferencesPermissionEnforcement (as OpenShift),
// publish the leader; a user edit that takes the slice out of the
// leader's cache is undone; a steady leader writes nothing; a handover
// counts no publish error.
func TestLeaderPublishing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	const ns = "publish"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	f := newFleet(t, env, ns, "ctl", shortDurations)
	kubeconfig, err := env.KubeconfigFor(ctx, ns, "ctl", fleet.LeaderRole)
	require.NoError(t, err)
	f.Kubeconfig = kubeconfig
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(2))
	slices := env.Client.DiscoveryV1().EndpointSlices(ns)

	var id string
	t.Run("the documented Role is enough under OwnerReferencesPermissionEnforcement", func(t *testing.T) {
		id = waitServing(ctx, t, f, "", 30*time.Second)
		sl, err := f.Slices(ctx)
		require.NoError(t, err)
		require.Len(t, sl, 1)
		require.Len(t, sl[0].OwnerReferences, 1)
		assert.Nil(t, sl[0].OwnerReferences[0].BlockOwnerDeletion)
	})

	t.Run("a slice whose service-name label is removed is taken back", func(t *testing.T) {
		s, err := slices.Get(ctx, "ctl-fastover", metav1.GetOptions{})
		require.NoError(t, err)
		delete(s.Labels, discoveryv1.LabelServiceName)
		_, err = slices.Update(ctx, s, metav1.UpdateOptions{})
		require.NoError(t, err)
		removed := time.Now()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 3*shortDurations.Lease, true, func(ctx context.Context) (bool, error) {
			s, err := slices.Get(ctx, "ctl-fastover", metav1.GetOptions{})
			return err == nil && s.Labels[discoveryv1.LabelServiceName] == "ctl", nil
		}), "the leader never took its slice back")
		t.Logf("the slice was labelled again %v after the label was removed", time.Since(removed).Round(time.Millisecond))
		got, err := f.Call(ctx)
		require.NoError(t, err)
		assert.Equal(t, id, got)
	})

	t.Run("a steady leader writes nothing", func(t *testing.T) {
		// Others add a label and an annotation to the slice, and the
		// Service changes a few times (each wakes the leader).
		s, err := slices.Get(ctx, "ctl-fastover", metav1.GetOptions{})
		require.NoError(t, err)
		s.Labels["team"] = "payments"
		s.Annotations["note"] = "added by someone else"
		s, err = slices.Update(ctx, s, metav1.UpdateOptions{})
		require.NoError(t, err)
		svcs := env.Client.CoreV1().Services(ns)
		for i := range 5 {
			svc, err := svcs.Get(ctx, "ctl", metav1.GetOptions{})
			require.NoError(t, err)
			if svc.Annotations == nil {
				svc.Annotations = map[string]string{}
			}
			svc.Annotations["touched"] = strings.Repeat("x", i+1)
			_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
			require.NoError(t, err)
			time.Sleep(200 * time.Millisecond)
		}
		// Two lease durations: the periodic pass has run too.
		time.Sleep(2 * shortDurations.Lease)
		after, err := slices.Get(ctx, "ctl-fastover", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, s.ResourceVersion, after.ResourceVersion, "the steady leader rewrote its slice")
		assert.Equal(t, "payments", after.Labels["team"], "the leader removed a label it does not own")
	})

	t.Run("a handover counts no publish error", func(t *testing.T) {
		old := f.ByID(id)
		require.NoError(t, old.Proc.Signal(syscall.SIGTERM))
		next := waitServing(ctx, t, f, id, 10*time.Second)
		var metrics string
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			_, metrics, err = f.Get(f.ByID(next).Address(), "/metrics")
			return err == nil && strings.Contains(metrics, "fastover_leader_endpoint_publish_seconds_count 1"), nil
		}))
		assert.Contains(t, metrics, "fastover_leader_endpoint_publish_errors_total 0")
		_, _ = old.Proc.WaitExit(10 * time.Second)
	})
}

// TestLeaderRefusesAFamilyTheServiceDoesNotServe: an IPv6 address for an
// IPv4 Service is not published; a Warning Event on the Service says why.
func TestLeaderRefusesAFamilyTheServiceDoesNotServe(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, f := startFleet(ctx, t, 0, shortDurations)
	f.Args = append(f.Args, "--address=2001:db8::1") // overrides the fleet's 192.0.2.N
	require.NoError(t, f.Add(1))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := f.Env.Client.CoreV1().Events(f.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=ctl,reason=AddressFamilyMismatch"})
		return err == nil && len(events.Items) > 0, nil
	}), "no AddressFamilyMismatch Event on the Service")
	sl, err := f.Slices(ctx)
	require.NoError(t, err)
	assert.Empty(t, sl, "an address of another family was published")
	assert.NotContains(t, f.Replicas[0].Proc.Tail(50), "published the leader")
}

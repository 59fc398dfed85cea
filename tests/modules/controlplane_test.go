package modules

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/leader"
)

// TestMinimumClientGoOnControlPlane: the client-go v0.35 consumer, built
// against the library at its minimum client-go (as TestConsumerClientGo
// adopts it), runs as three replicas on the v1.37 control plane: one
// leads and is the Service's only endpoint; SIGTERM hands over at once,
// SIGKILL within the lease.
func TestMinimumClientGoOnControlPlane(t *testing.T) {
	r := adoptClientGo(t)
	require.Equal(t, "v0.35.0", r.after["k8s.io/client-go"])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	d := fleet.Durations{Lease: 4 * time.Second, Renew: 3 * time.Second, Retry: time.Second}
	f, err := fleet.New(env, r.binary, "ha", "antrealike", d)
	require.NoError(t, err)
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(3))

	id, err := f.WaitServing(ctx, "", 30*time.Second)
	require.NoError(t, err)
	checkPublished(ctx, t, f, id)

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		old := f.ByID(id)
		start := time.Now()
		require.NoError(t, old.Proc.Signal(sig))
		id, err = f.WaitServing(ctx, old.ID, 30*time.Second)
		require.NoError(t, err, "after %v of the leader", sig)
		took := time.Since(start)
		t.Logf("%v of the leader %s: %s serves after %v", sig, old.ID, id, took.Round(time.Millisecond))
		checkPublished(ctx, t, f, id)
		if sig == syscall.SIGTERM {
			// A released Lease is taken at once; generous for a loaded machine.
			assert.Less(t, took, d.Lease, "a planned handover does not wait out the lease")
		}
		exited, _ := old.Proc.WaitExit(10 * time.Second)
		assert.True(t, exited, "%s exits after %v", old.ID, sig)
	}
}

// checkPublished: the Lease names id and the Service's one EndpointSlice
// publishes its address alone.
func checkPublished(ctx context.Context, t *testing.T, f *fleet.Fleet, id string) {
	t.Helper()
	holder, _, err := f.Holder(ctx)
	require.NoError(t, err)
	assert.Equal(t, id, holder)
	sl, err := f.Slices(ctx)
	require.NoError(t, err)
	require.Len(t, sl, 1)
	assert.Equal(t, []string{f.ByID(id).Address()}, fleet.PublishedAddresses(sl))
	assert.Equal(t, id, sl[0].Annotations[leader.AnnotationIdentity])
	assert.True(t, strings.HasPrefix(id, f.Name), id)
}

package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/opfleet"
)

// TestWarmStandby runs a client-go controller with an informer over 2,000
// ConfigMaps (examples/informer-controller) as warm standbys
// (leader.Config.Prepare): every replica is ready only once its cache is
// synced; on SIGTERM a standby takes over and its first work sees the
// whole cache at once; a killed leader is replaced within about a lease
// duration, again with the whole cache; and a cold fleet (informers
// started when leading) reaches the same cache, later. tests/bench/warmstandby
// measures the difference with 20,000.
func TestWarmStandby(t *testing.T) {
	const objects = 2000
	env := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns = "warm"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	require.NoError(t, opfleet.SeedConfigMaps(ctx, env.Config, ns, objects, 500))
	bin := binary(t, "informer-controller")

	type kind struct {
		f      *opfleet.Fleet
		stamps *opfleet.Stamps
	}
	start := func(name string, warm bool) kind {
		f := opfleet.NewInformerFleet(env, bin, ns, name, warm, shortDurations)
		require.NoError(t, f.Setup(ctx))
		stamps, err := f.WatchStamps(ctx)
		require.NoError(t, err)
		require.NoError(t, f.Add(2))
		t.Cleanup(f.StopAll)
		st, err := stamps.Next(0, "", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, objects, st.Cached, "%s's first leader worked with a partial cache", name)
		require.NoError(t, f.ReadyAll(ctx, time.Minute))
		return kind{f, stamps}
	}
	// handOver signals the leader and returns the time from the signal to
	// the new leader's first work, which must see the whole cache.
	handOver := func(k kind, sig syscall.Signal, timeout time.Duration) time.Duration {
		t.Helper()
		h, err := k.f.HandOver(ctx, k.stamps, nil, sig, timeout)
		require.NoError(t, err)
		assert.Equal(t, objects, h.Stamp.Cached, "the new leader %s worked with a partial cache", h.New.ID)
		require.NoError(t, k.f.Restart(h.Old))
		require.NoError(t, k.f.WaitReady(ctx, h.Old, time.Minute))
		time.Sleep(500 * time.Millisecond) // its Lease watch established
		return h.Work
	}

	warm := start("warm", true)
	cold := start("cold", false)

	planned := handOver(warm, syscall.SIGTERM, 10*time.Second)
	t.Logf("warm, planned: first work %v after SIGTERM", planned)
	assert.Less(t, planned, 2*time.Second, "a warm standby's first work came late after a planned handover")

	killed := handOver(warm, syscall.SIGKILL, shortDurations.Lease+20*time.Second)
	t.Logf("warm, killed: first work %v after SIGKILL (lease %v)", killed, shortDurations.Lease)
	assert.Less(t, killed, shortDurations.Lease+2*time.Second)

	coldPlanned := handOver(cold, syscall.SIGTERM, 30*time.Second)
	t.Logf("cold, planned: first work %v after SIGTERM", coldPlanned)
}

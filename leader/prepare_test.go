package leader

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A replica competes for the Lease only once Prepare has returned: a free
// Lease is left alone while it prepares, Ready fails meanwhile, and the
// work, when it starts, still has Prepare's context alive. The metric
// fastover_leader_ready follows Ready.
func TestPrepareGatesTheCampaign(t *testing.T) {
	client := fake.NewClientset()
	release := make(chan struct{})
	prepCtx := make(chan context.Context, 1)
	metrics, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	r := startRun(t, client, func(c *Config) {
		c.Metrics = metrics
		c.Prepare = func(ctx context.Context) error {
			prepCtx <- ctx
			<-release
			return nil
		}
	}, nil)
	var ctx context.Context
	select {
	case ctx = <-prepCtx:
	case <-time.After(waitFor):
		t.Fatal("Prepare not called")
	}
	req, _ := http.NewRequest(http.MethodGet, "/readyz", nil)
	// The free Lease stays free while the replica prepares, however long.
	for range 20 {
		r.clock.Step(time.Minute)
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, 0, countActions(client, "create", "leases"), "a preparing replica acquired the Lease")
	assert.Error(t, r.el.Ready(req), "ready before Prepare returned")
	assert.Equal(t, float64(0), value(t, metrics.ready))
	assert.False(t, r.el.IsLeader())

	close(release)
	r.awaitLeading()
	assert.NoError(t, r.el.Ready(req))
	assert.Equal(t, float64(1), value(t, metrics.ready))
	assert.NoError(t, ctx.Err(), "Prepare's context ended when the replica took the lead")

	// It ends when Run returns, after the work.
	r.cancel()
	require.NoError(t, r.result())
	select {
	case <-ctx.Done():
	case <-time.After(waitFor):
		t.Fatal("Prepare's context outlived Run")
	}
}

// Warm beats cold: with a warm replica standing by and a cold one still
// preparing, the released Lease goes to the warm one.
func TestAColdReplicaDoesNotTakeOverFromAWarmOne(t *testing.T) {
	client := fake.NewClientset(testLease("5", "old", 15, 2, time.Now()))
	warm := startRun(t, client, func(c *Config) {
		c.Identity = "warm"
		c.Prepare = func(context.Context) error { return nil }
	}, nil)
	cold := startRun(t, client, func(c *Config) {
		c.Identity = "cold"
		c.Prepare = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	}, nil)
	warm.awaitWaiting()
	released := testLease("6", "", 1, 2, time.Now())
	_, err := client.CoordinationV1().Leases("ns").Update(context.Background(), released, metav1.UpdateOptions{})
	require.NoError(t, err)
	warm.awaitLeading()
	assert.Equal(t, "warm", *warm.lease().Spec.HolderIdentity)
	assert.False(t, cold.el.IsLeader())
	// Cancelled while preparing: a clean return.
	cold.cancel()
	assert.NoError(t, cold.result())
}

// Prepare's error ends Run with it, before any campaign.
func TestPrepareErrorEndsRun(t *testing.T) {
	client := fake.NewClientset()
	boom := errors.New("informers refused")
	r := startRun(t, client, func(c *Config) {
		c.Prepare = func(context.Context) error { return boom }
	}, nil)
	err := r.result()
	require.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "leader: Prepare: informers refused")
	assert.Equal(t, 0, countActions(client, "create", "leases"))
}

// A Prepare that ignores its context does not hold Run when Run's context
// ends: Run returns nil.
func TestPrepareIgnoringItsContextDoesNotHang(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	r := startRun(t, fake.NewClientset(), func(c *Config) {
		c.Prepare = func(context.Context) error { <-stuck; return nil }
	}, nil)
	time.Sleep(10 * time.Millisecond)
	r.cancel()
	assert.NoError(t, r.result())
}

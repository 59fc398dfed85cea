// Tests of a standby replica waiting for the Lease.

package leader

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A standby takes a Lease held by another only once it expires, counted
// from when the standby saw its last renewal, and at that moment.
func TestStandbyWaitsForExpiry(t *testing.T) {
	clk := time.Now()
	client := fake.NewClientset(testLease("5", "other", 15, 2, clk))
	r := startRun(t, client, nil, nil)
	r.awaitWaiting()
	require.Equal(t, "other", r.el.Leader())
	r.clock.Step(15*time.Second - time.Millisecond)
	// The standby waits on its timer, a millisecond short of the expiry.
	r.awaitWaiting()
	assert.Equal(t, "other", *r.lease().Spec.HolderIdentity)
	assert.Equal(t, 0, countActions(client, "update", "leases"), "acquired a live Lease")
	r.clock.Step(time.Millisecond)
	r.awaitLeading()
	l := r.lease()
	assert.Equal(t, "me", *l.Spec.HolderIdentity)
	assert.Equal(t, int32(3), *l.Spec.LeaseTransitions)
	assert.Equal(t, int32(3), r.el.Term())
	assert.False(t, r.el.lease.handedOverTerm(), "an expired Lease is no hand-over")
}

// A released Lease is taken at once: the watch reports it, no time passes.
func TestStandbyTakesAReleasedLeaseAtOnce(t *testing.T) {
	client := fake.NewClientset(testLease("5", "other", 15, 2, time.Now()))
	r := startRun(t, client, nil, nil)
	r.awaitWaiting()
	released := testLease("6", "", 1, 2, time.Now())
	_, err := client.CoordinationV1().Leases("ns").Update(context.Background(), released, metav1.UpdateOptions{})
	require.NoError(t, err)
	r.awaitLeading()
	assert.Equal(t, "me", *r.lease().Spec.HolderIdentity)
	assert.True(t, r.el.lease.handedOverTerm(), "a released Lease is a hand-over")
}

// A deleted Lease is free: the standby creates it anew.
func TestStandbyTakesADeletedLease(t *testing.T) {
	client := fake.NewClientset(testLease("5", "other", 15, 2, time.Now()))
	r := startRun(t, client, nil, nil)
	r.awaitWaiting()
	require.NoError(t, client.CoordinationV1().Leases("ns").Delete(context.Background(), "l", metav1.DeleteOptions{}))
	// The API server's delete event carries the deletion's
	// resourceVersion; the fake's carries the object's last one, which
	// is not news. Deliver the event as the API server would.
	r.el.lease.forget(testLease("6", "other", 15, 2, time.Now()))
	r.awaitLeading()
	assert.Equal(t, 1, countActions(client, "create", "leases"))
	assert.Equal(t, int32(0), *r.lease().Spec.LeaseTransitions, "a new Lease")
}

// A lost watch (it never reports the release): the standby still tries
// every LeaseDuration, reads the Lease and takes it.
func TestStandbyWithALostWatchRetriesEveryLeaseDuration(t *testing.T) {
	client := fake.NewClientset(testLease("5", "other", 15, 2, time.Now()))
	client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil // silent
	})
	r := startRun(t, client, func(c *Config) { c.LeaseDuration, c.RenewDeadline = 30*time.Second, 20*time.Second }, nil)
	r.awaitWaiting()
	// The holder renews, then releases; the standby hears of neither.
	require.NoError(t, client.Tracker().Update(leasesGVR, testLease("6", "", 1, 2, time.Now()), "ns"))
	gets := countActions(client, "get", "leases")
	r.clock.Step(15*time.Second - time.Millisecond)
	r.awaitWaiting()
	assert.Equal(t, gets, countActions(client, "get", "leases"), "tried before a lease duration")
	r.clock.Step(time.Millisecond)
	r.awaitLeading()
	assert.Equal(t, "me", *r.lease().Spec.HolderIdentity)
}

// A standby whose watch shows a live holder renewing reads the Lease
// once a minute, not every LeaseDuration: besides its watches, that is
// all it costs the API server.
func TestStandbyWithALiveHolderReadsOnceAMinute(t *testing.T) {
	client := fake.NewClientset(testLease("5", "other", 15, 2, time.Now()))
	r := startRun(t, client, nil, nil)
	r.awaitWaiting()
	gets := countActions(client, "get", "leases")
	// Three minutes of renewals every 2s, each seen through the watch.
	for i := 1; i <= 90; i++ {
		r.clock.Step(2 * time.Second)
		rv := strconv.Itoa(5 + i)
		require.NoError(t, client.Tracker().Update(leasesGVR, testLease(rv, "other", 15, 2, r.clock.Now()), "ns"))
		require.Eventually(t, func() bool {
			l := r.el.lease.latest()
			return l != nil && l.ResourceVersion == rv
		}, waitFor, time.Millisecond, "the standby did not see renewal %s", rv)
		r.awaitWaiting()
	}
	assert.Equal(t, "other", r.el.Leader())
	assert.LessOrEqual(t, countActions(client, "get", "leases")-gets, 3, "a standby read the Lease more than once a minute")
	assert.Zero(t, countActions(client, "update", "leases"), "a standby wrote a live holder's Lease")
}

// An API that fails the acquisition: the standby retries after a
// jittered retry period (not at once, not after a lease duration).
func TestStandbyRetriesAFailedAcquisition(t *testing.T) {
	client := fake.NewClientset()
	var fail atomic.Bool
	fail.Store(true)
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail.Load() {
			return true, nil, errUnavailable
		}
		return false, nil, nil
	})
	r := startRun(t, client, nil, nil)
	r.awaitWaiting()
	require.Equal(t, 1, countActions(client, "create", "leases"))
	fail.Store(false)
	r.clock.Step(DefaultRetryPeriod - time.Millisecond)
	r.awaitWaiting()
	assert.Equal(t, 1, countActions(client, "create", "leases"), "retried before the retry period")
	r.clock.Step(DefaultRetryPeriod*12/10 + time.Millisecond)
	r.awaitLeading()
}

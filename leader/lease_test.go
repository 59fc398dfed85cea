package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// testLease is Lease ns/l at resourceVersion rv, held by holder ("" for
// none) for seconds, renewed at renewed.
func testLease(rv, holder string, seconds, transitions int32, renewed time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", ResourceVersion: rv, UID: "lease-uid"},
		Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: ptr.To(seconds),
			LeaseTransitions:     ptr.To(transitions),
			AcquireTime:          &metav1.MicroTime{Time: renewed},
			RenewTime:            &metav1.MicroTime{Time: renewed},
		},
	}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	return l
}

func testElection(t *testing.T, identity string, objs ...runtime.Object) (*leaseState, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	cfg := Config{Client: client, Namespace: "ns", LeaseName: "l", Identity: identity,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 500 * time.Millisecond}
	require.NoError(t, cfg.Validate())
	cfg = cfg.withDefaults()
	return newLeaseState(&cfg), client
}

// A record is dated when the standby had it, not when it asked for it:
// a read slowed down by 700 ms that returns a renewal made during the
// delay must not shorten the standby's view of that renewal, or the
// standby could acquire while the holder still acts within its renew
// deadline (lease 2 s, deadline 1.5 s: 200 ms of two leaders).
func TestSlowReadDoesNotShortenTheLease(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	e, client := testElection(t, "standby", testLease("10", "holder", 2, 3, old))
	// The standby saw the holder's earlier record long ago: expired.
	e.observe(testLease("10", "holder", 2, 3, old), time.Now().Add(-time.Hour))

	var renewedAt time.Time
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		// The request is on its way (a slow network, a loaded API
		// server); meanwhile the holder renews, and the read returns
		// that renewal 100 ms later.
		time.Sleep(600 * time.Millisecond)
		renewedAt = time.Now()
		require.NoError(t, client.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"),
			testLease("11", "holder", 2, 3, renewedAt), "ns"))
		time.Sleep(100 * time.Millisecond)
		return false, nil, nil
	})
	ok, err := e.tryAcquire(context.Background(), nil)
	require.NoError(t, err)
	assert.False(t, ok, "the holder has just renewed")
	// The holder acts until it renewed + 1.5 s (from before its request,
	// at the latest renewedAt); the standby must not take the Lease
	// before renewedAt + 2 s.
	assert.False(t, e.expiry().Before(renewedAt.Add(2*time.Second)),
		"the standby's view of the Lease ends %v after the renewal, before the lease duration (2s)", e.expiry().Sub(renewedAt))
}

// A watch that lags behind a read must not make the leader believe an
// older record: observations are ordered by resourceVersion.
func TestStaleRecordIsIgnored(t *testing.T) {
	old := testLease("20", "other", 2, 4, time.Now().Add(-time.Hour))
	e, _ := testElection(t, "me", old)
	e.observe(old, time.Now().Add(-time.Hour)) // seen an hour ago
	ok, err := e.tryAcquire(context.Background(), nil)
	require.NoError(t, err)
	require.True(t, ok, "the other holder's Lease expired an hour ago")
	require.True(t, e.mine())
	assert.Equal(t, int32(5), e.currentTerm(), "a new term counts a transition")

	// The watch now delivers the other holder's older renewals.
	e.observeLease(testLease("19", "other", 2, 4, time.Now()))
	e.observeLease(testLease("20", "other", 2, 4, time.Now()))
	assert.True(t, e.mine(), "a stale record replaced the leader's own")
	assert.Equal(t, "me", e.holder())
}

// The leader steps down only on a record that is really newer, and
// confirms it with a read when versions cannot be ordered.
func TestLeaderSurvivesStaleWatch(t *testing.T) {
	client := fake.NewClientset(testLease("20", "other", 1, 4, time.Now().Add(-time.Hour)))
	el, err := New(Config{Client: client, Namespace: "ns", LeaseName: "l", Identity: "me",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- el.Run(ctx, func(ctx context.Context) error {
			close(leading)
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-leading:
	case err := <-done:
		t.Fatalf("Run returned before leading: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not leading after 10s")
	}
	// Records older than the leader's own, naming another holder, and one
	// without a version that a read must confirm.
	el.lease.observeLease(testLease("19", "other", 2, 4, time.Now()))
	el.lease.observeLease(testLease("", "other", 2, 4, time.Now()))
	select {
	case err := <-done:
		t.Fatalf("a stale record deposed the leader: Run returned %v", err)
	case <-time.After(time.Second):
	}
	assert.True(t, el.IsLeader())
	cancel()
	require.NoError(t, <-done)
}

// A record naming this replica's identity that this process did not write
// (a Pod recreated under the same name) is waited out like another's.
func TestSameIdentityFromAnotherProcessIsWaitedOut(t *testing.T) {
	e, _ := testElection(t, "ctl-0", testLease("30", "ctl-0", 2, 7, time.Now()))
	ok, err := e.tryAcquire(context.Background(), nil)
	require.NoError(t, err)
	assert.False(t, ok, "took a live Lease of a previous process with the same identity")
	assert.False(t, e.mine())
}

// Renewing after another process of the same identity acquired (a new term
// under the same name) is a lost Lease, not a renewal.
func TestRenewDetectsAnotherTermOfTheSameIdentity(t *testing.T) {
	e, client := testElection(t, "ctl-0", testLease("40", "", 1, 2, time.Now().Add(-time.Hour)))
	ok, err := e.tryAcquire(context.Background(), nil)
	require.NoError(t, err)
	require.True(t, ok)
	// Another incarnation takes a new term under the same identity.
	require.NoError(t, client.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"),
		testLease("50", "ctl-0", 2, e.currentTerm()+1, time.Now()), "ns"))
	// The fake client does not check versions: make the update conflict
	// as the API server would.
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errConflict
	})
	err = e.renew(context.Background())
	assert.ErrorIs(t, err, ErrLeadershipLost)
}

var errConflict = apierrors.NewConflict(coordinationv1.Resource("leases"), "l", errors.New("the object has been modified"))

// A renewal that finds a foreign record observed reads the Lease before it
// gives up: the record may be old news whose version could not be ordered.
func TestRenewConfirmsAForeignObservation(t *testing.T) {
	e, _ := testElection(t, "me", testLease("60", "", 1, 2, time.Now().Add(-time.Hour)))
	ok, err := e.tryAcquire(context.Background(), nil)
	require.NoError(t, err)
	require.True(t, ok)
	e.observeLease(testLease("", "other", 2, 2, time.Now())) // no version: cannot be ordered
	require.False(t, e.mine())
	require.NoError(t, e.renew(context.Background()), "a stale foreign record made the renewal give up")
	assert.True(t, e.mine())
}

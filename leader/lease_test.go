package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
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

// strictLeases makes the fake API write Leases as the API server does: an
// update from an older resourceVersion conflicts, and each write gets a
// new version (the fake tracker applies any update and versions nothing).
// A non-nil error stored in unanswered is the answer to the next update,
// which is applied all the same: a request cancelled or timed out on its
// way back.
func strictLeases(t *testing.T, client *fake.Clientset) (unanswered *atomic.Pointer[error]) {
	t.Helper()
	unanswered = &atomic.Pointer[error]{}
	var mu sync.Mutex
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		lease := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		cur, err := client.Tracker().Get(leasesGVR, lease.Namespace, lease.Name)
		if err != nil {
			return true, nil, err
		}
		version := cur.(*coordinationv1.Lease).ResourceVersion
		if lease.ResourceVersion != version {
			return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), lease.Name,
				fmt.Errorf("the object has been modified (version %s, not %s)", version, lease.ResourceVersion))
		}
		n, err := strconv.Atoi(version)
		require.NoError(t, err)
		lease.ResourceVersion = strconv.Itoa(n + 1)
		if err := client.Tracker().Update(leasesGVR, lease, lease.Namespace); err != nil {
			return true, nil, err
		}
		if answer := unanswered.Swap(nil); answer != nil {
			return true, nil, *answer
		}
		return true, lease, nil
	})
	return unanswered
}

// A renewal that the API applied but whose answer never came (SIGTERM
// cancelled it on its way back, or it timed out) leaves the replica with
// the Lease's previous version. The release that follows conflicts with
// the renewal; it learns what the API has, and releases from there, in the
// same call: the Lease ends free, not left to expire.
func TestReleaseAfterAnUnansweredRenewal(t *testing.T) {
	for name, answer := range map[string]error{
		"cancelled":         &url.Error{Op: "Put", URL: "https://api/leases/l", Err: context.Canceled},
		"client timeout":    &url.Error{Op: "Put", URL: "https://api/leases/l", Err: context.DeadlineExceeded},
		"server timeout":    apierrors.NewTimeoutError("request did not complete within requested timeout", 0),
		"connection broken": &url.Error{Op: "Put", URL: "https://api/leases/l", Err: io.ErrUnexpectedEOF},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e, client := testElection(t, "me", testLease("10", "", 1, 3, time.Now().Add(-time.Hour)))
			unanswered := strictLeases(t, client)
			ok, err := e.tryAcquire(ctx, nil)
			require.NoError(t, err)
			require.True(t, ok)

			unanswered.Store(&answer)
			require.Error(t, e.renew(ctx), "the renewal got no answer")
			l, err := client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, "12", l.ResourceVersion, "the API applied the renewal")
			require.Equal(t, "11", e.latest().ResourceVersion, "the replica has the version before it")

			require.NoError(t, e.release(ctx))
			l, err = client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Nil(t, l.Spec.HolderIdentity, "the Lease was not released")
			assert.Equal(t, int32(1), *l.Spec.LeaseDurationSeconds)
			assert.Equal(t, "13", l.ResourceVersion, "one release written after the renewal")
			assert.Empty(t, e.holder())
		})
	}
}

// Release stops only when the Lease no longer records this term: a
// release the API applied without answering is found done by the read
// that follows; a Lease another replica took meanwhile is left alone; a
// deleted one names nobody; a refusal (no RBAC) is an error.
func TestReleaseLearnsTheOutcome(t *testing.T) {
	ctx := context.Background()
	acquired := func(t *testing.T) (*leaseState, *fake.Clientset, *atomic.Pointer[error]) {
		e, client := testElection(t, "me", testLease("10", "", 1, 3, time.Now().Add(-time.Hour)))
		unanswered := strictLeases(t, client)
		ok, err := e.tryAcquire(ctx, nil)
		require.NoError(t, err)
		require.True(t, ok)
		return e, client, unanswered
	}
	lease := func(t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
		l, err := client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
		require.NoError(t, err)
		return l
	}

	t.Run("its own release unanswered", func(t *testing.T) {
		e, client, unanswered := acquired(t)
		var cancelled error = &url.Error{Op: "Put", URL: "https://api/leases/l", Err: context.Canceled}
		unanswered.Store(&cancelled)
		require.NoError(t, e.release(ctx))
		assert.Nil(t, lease(t, client).Spec.HolderIdentity)
		assert.Equal(t, 2, countActions(client, "update", "leases"), "the acquisition and one release: the read showed it done")
	})
	t.Run("taken meanwhile", func(t *testing.T) {
		e, client, _ := acquired(t)
		taken := lease(t, client)
		taken.Spec.HolderIdentity = ptr.To("other")
		taken.Spec.LeaseTransitions = ptr.To[int32](5)
		_, err := client.CoordinationV1().Leases("ns").Update(ctx, taken, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.NoError(t, e.release(ctx), "nothing of this term to release")
		assert.Equal(t, "other", *lease(t, client).Spec.HolderIdentity, "another's Lease was released")
	})
	t.Run("deleted meanwhile", func(t *testing.T) {
		e, client, _ := acquired(t)
		require.NoError(t, client.Tracker().Delete(leasesGVR, "ns", "l"))
		require.NoError(t, e.release(ctx))
	})
	t.Run("refused", func(t *testing.T) {
		e, client, _ := acquired(t)
		client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(leasesGVR.GroupResource(), "l", errors.New("no RBAC"))
		})
		assert.ErrorContains(t, e.release(ctx), "forbidden")
		assert.Equal(t, "me", *lease(t, client).Spec.HolderIdentity)
	})
	t.Run("the API does not answer until the deadline", func(t *testing.T) {
		e, client, _ := acquired(t)
		client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, &url.Error{Op: "Put", URL: "https://api/leases/l", Err: io.ErrUnexpectedEOF}
		})
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		assert.Error(t, e.release(dctx))
		assert.Less(t, time.Since(start), 5*time.Second, "release outlived its deadline")
		l, err := client.Tracker().Get(leasesGVR, "ns", "l")
		require.NoError(t, err)
		assert.Equal(t, "me", *l.(*coordinationv1.Lease).Spec.HolderIdentity)
	})
}

// An acquisition that got no answer but was applied leaves the Lease
// naming this replica. The next attempt's read shows it: the replica
// renews that term and leads, instead of taking its own term for a
// previous process's and waiting for it to expire; a replica that stops
// instead releases it.
func TestUnansweredAcquisition(t *testing.T) {
	ctx := context.Background()
	var cancelled error = &url.Error{Op: "Put", URL: "https://api/leases/l", Err: context.Canceled}
	unansweredAcquire := func(t *testing.T) (*leaseState, *fake.Clientset) {
		e, client := testElection(t, "me", testLease("10", "", 1, 3, time.Now().Add(-time.Hour)))
		unanswered := strictLeases(t, client)
		unanswered.Store(&cancelled)
		ok, err := e.tryAcquire(ctx, nil)
		require.Error(t, err)
		require.False(t, ok)
		l, err := client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "me", *l.Spec.HolderIdentity, "the API applied the acquisition")
		return e, client
	}

	t.Run("resumed by the next attempt", func(t *testing.T) {
		e, client := unansweredAcquire(t)
		ok, err := e.tryAcquire(ctx, nil)
		require.NoError(t, err)
		require.True(t, ok, "its own applied acquisition was taken for another's")
		assert.True(t, e.leading())
		assert.Equal(t, int32(4), e.currentTerm())
		assert.True(t, e.handedOverTerm(), "the term began on a released Lease")
		l, err := client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "me", *l.Spec.HolderIdentity)
		assert.Equal(t, int32(4), *l.Spec.LeaseTransitions, "the same term, renewed")
		assert.Equal(t, 2, countActions(client, "update", "leases"), "the acquisition, one renewal")
	})
	t.Run("released by a replica that stops", func(t *testing.T) {
		e, client := unansweredAcquire(t)
		require.NoError(t, e.abandon(ctx))
		l, err := client.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Nil(t, l.Spec.HolderIdentity, "the applied acquisition was left to expire")
	})
	t.Run("not applied", func(t *testing.T) {
		e, client := testElection(t, "me", testLease("10", "other", 15, 3, time.Now()))
		strictLeases(t, client)
		// An acquisition whose answer was lost, and which the API did
		// not apply: the Lease is another's.
		e.unanswered(cancelled, testLease("10", "me", 15, 4, time.Now()), termBeginning{})
		ok, err := e.tryAcquire(ctx, nil)
		require.NoError(t, err)
		assert.False(t, ok, "another's live Lease")
		require.NoError(t, e.abandon(ctx), "nothing to release")
		assert.Equal(t, 0, countActions(client, "update", "leases"))
	})
	t.Run("a refusal is no unknown outcome", func(t *testing.T) {
		e, _ := testElection(t, "me")
		e.unanswered(apierrors.NewConflict(leasesGVR.GroupResource(), "l", errors.New("modified")),
			testLease("10", "me", 15, 4, time.Now()), termBeginning{})
		assert.Nil(t, e.pending)
	})
}

func TestOutcomeUnknown(t *testing.T) {
	for err, unknown := range map[error]bool{
		nil:              false,
		context.Canceled: true,
		&url.Error{Op: "Put", Err: context.DeadlineExceeded}: true,
		io.ErrUnexpectedEOF:                                                           true,
		apierrors.NewTimeoutError("timed out", 0):                                     true,
		apierrors.NewServerTimeout(leasesGVR.GroupResource(), "update", 1):            true,
		apierrors.NewInternalError(errors.New("etcd")):                                true,
		apierrors.NewConflict(leasesGVR.GroupResource(), "l", errors.New("modified")): false,
		apierrors.NewNotFound(leasesGVR.GroupResource(), "l"):                         false,
		apierrors.NewForbidden(leasesGVR.GroupResource(), "l", errors.New("no RBAC")): false,
		apierrors.NewTooManyRequests("slow down", 1):                                  false,
		fmt.Errorf("renew lease: %w", apierrors.NewTimeoutError("timed out", 0)):      true,
		fmt.Errorf("renew lease: %w", apierrors.NewBadRequest("bad")):                 false,
	} {
		assert.Equal(t, unknown, outcomeUnknown(err), "%v", err)
	}
}

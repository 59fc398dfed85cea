package leader

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// myPod is this replica's Pod, ns/me-0 (uid-me), with one container;
// Terminating if deleting.
func myPod(deleting bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "me-0", UID: "uid-me"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ctl"}}},
	}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(30 * time.Second)}
		p.DeletionGracePeriodSeconds = ptr.To[int64](30)
	}
	return p
}

// startInPod runs "me" in Pod ns/me-0 beside objs.
func startInPod(t *testing.T, objs ...runtime.Object) *testRun {
	t.Helper()
	return startRun(t, fake.NewClientset(objs...), func(c *Config) { c.Pod = &PodConfig{Name: "me-0"} }, nil)
}

// A replica that starts in a Pod already Terminating (its process began
// after the deletion, and missed the SIGTERM): however free the Lease, it
// never takes it; it says so once, and Run returns when its context ends.
func TestTerminatingReplicaDoesNotCompete(t *testing.T) {
	r := startInPod(t, testLease("5", "", 1, 2, time.Now().Add(-time.Hour)), myPod(true))
	evs := r.awaitEvents("Leaving")
	for range 3 {
		r.awaitWaiting()
		r.clock.Step(standbyRecheck)
		time.Sleep(10 * time.Millisecond) // an attempt, if it made one
	}
	assert.Nil(t, r.lease().Spec.HolderIdentity, "a Terminating replica took the Lease")
	assert.Zero(t, countActions(r.client, "update", "leases")+countActions(r.client, "create", "leases"), "it wrote the Lease")
	evs = append(evs, r.eventsOf("Leaving")...)
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0], "Normal Leaving me does not compete for the Lease: its Pod ns/me-0 is Terminating (deleted, to end by ")
	r.cancel()
	require.NoError(t, r.result())
}

// A standby beside a live leader whose Pod is then deleted (the watch
// reports the deletionTimestamp) does not take the Lease the leader
// releases.
func TestStandbyWhosePodIsDeletedStepsAside(t *testing.T) {
	r := startInPod(t, testLease("5", "other", 15, 2, time.Now()), myPod(false))
	r.awaitWaiting()
	// The fake client's watch gets only the changes made after it began
	// (a real API server's resumes from its list): the deletion is made
	// once the Pod is watched, and again until it is seen, for the moment
	// between the watch's start and its registration. On a busy machine
	// the update once came first, and no Leaving Event followed.
	r.awaitWatch("pods")
	var evs []string
	require.Eventually(t, func() bool {
		_, err := r.client.CoreV1().Pods("ns").Update(context.Background(), myPod(true), metav1.UpdateOptions{})
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
		evs = append(evs, r.eventsOf("Leaving")...)
		return len(evs) > 0
	}, waitFor, time.Millisecond, "no Leaving Event")
	_, err := r.client.CoordinationV1().Leases("ns").Update(context.Background(), testLease("6", "", 1, 2, time.Now()), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.el.Leader() == "" }, waitFor, time.Millisecond)
	r.awaitWaiting()
	r.clock.Step(DefaultLeaseDuration)
	time.Sleep(10 * time.Millisecond) // an attempt, if it made one
	assert.Nil(t, r.lease().Spec.HolderIdentity, "the leaving standby took the released Lease")
	assert.Len(t, append(evs, r.eventsOf("Leaving")...), 1)
}

// awaitEvents waits for Events of reason and returns them.
func (r *testRun) awaitEvents(reason string) []string {
	r.t.Helper()
	var evs []string
	require.Eventually(r.t, func() bool {
		evs = append(evs, r.eventsOf(reason)...)
		return len(evs) > 0
	}, waitFor, time.Millisecond, "no %s Event", reason)
	return evs
}

// The same standby, its Pod not deleted, takes the released Lease: the
// watch of its own Pod changes nothing else.
func TestStandbyInALivePodTakesTheLease(t *testing.T) {
	r := startInPod(t, testLease("5", "other", 15, 2, time.Now()), myPod(false))
	r.awaitWaiting()
	_, err := r.client.CoordinationV1().Leases("ns").Update(context.Background(), testLease("6", "", 1, 2, time.Now()), metav1.UpdateOptions{})
	require.NoError(t, err)
	r.awaitLeading()
	assert.Empty(t, r.eventsOf("Leaving"))
}

// What the watch of its own Pod reads as leaving.
func TestPodWatchLeaving(t *testing.T) {
	self := instance{Namespace: "ns", Pod: "me-0", UID: "uid-me"}
	other := myPod(false)
	other.UID = "uid-new"
	for name, tc := range map[string]struct {
		pod     *corev1.Pod
		deleted bool
		off     bool
		want    string
	}{
		"not seen yet":    {},
		"running":         {pod: myPod(false)},
		"terminating":     {pod: myPod(true), want: "its Pod ns/me-0 is Terminating (deleted, to end by "},
		"deleted":         {pod: myPod(false), deleted: true, want: "its Pod ns/me-0 was deleted"},
		"replaced":        {pod: other, want: "its Pod ns/me-0 was replaced (uid uid-new, this replica's uid-me)"},
		"watch forbidden": {pod: myPod(true), off: true},
	} {
		t.Run(name, func(t *testing.T) {
			w := &podWatch{target: self, pod: tc.pod, deleted: tc.deleted, off: tc.off}
			why, out := w.leaving(self)
			assert.Equal(t, tc.want != "", out)
			assert.Contains(t, why, tc.want)
		})
	}
}

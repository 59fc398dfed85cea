package leader

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The crash takeover's tests: a Lease held by "ctl-0_1" (term 4), live,
// recording container "ctl" of Pod ns/ctl-0 since the term began; a
// standby "me" on a fake clock, which the kubelet's reports (the Pod's
// status, written through the fake clientset) wake.

// crashLease is the holder's Lease, renewed at now, its term begun at
// since, with its record (nil: none).
func crashLease(now, since time.Time, inst *instance) *coordinationv1.Lease {
	l := testLease("5", "ctl-0_1", 15, 4, now)
	l.Spec.AcquireTime = &metav1.MicroTime{Time: since}
	setInstance(l, inst)
	return l
}

// crashSetup starts the standby beside the live holder, whose Pod's
// container runs since a minute before its term.
func crashSetup(t *testing.T, mutate func(*Config), objs ...runtime.Object) (*testRun, instance) {
	t.Helper()
	now := time.Now()
	inst := testInstance()
	inst.Since = now.Add(-10 * time.Second)
	pod := ctlPod(running(metav1.NewTime(inst.Since.Add(-time.Minute).Truncate(time.Second))), corev1.ContainerState{}, 0)
	client := fake.NewClientset(append([]runtime.Object{crashLease(now, inst.Since, &inst), pod}, objs...)...)
	// The fake's watches replay nothing: a report made before the Pod's
	// watch is open would be lost. The tests report once it is.
	watching := make(chan struct{}, 1)
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(corev1.SchemeGroupVersion.WithResource("pods"), a.GetNamespace())
		select {
		case watching <- struct{}{}:
		default:
		}
		return true, w, err
	})
	r := startRun(t, client, mutate, nil)
	r.awaitWaiting()
	if !r.el.cfg.DisableCrashTakeover {
		select {
		case <-watching:
		case <-time.After(waitFor):
			t.Fatal("the standby does not watch the leader's Pod")
		}
	}
	require.Equal(t, "ctl-0_1", r.el.Leader())
	return r, inst
}

// report writes the Pod as the kubelet reports it.
func (r *testRun) report(mutate func(*corev1.Pod)) {
	r.t.Helper()
	pods := r.client.CoreV1().Pods("ns")
	pod, err := pods.Get(context.Background(), "ctl-0", metav1.GetOptions{})
	require.NoError(r.t, err)
	mutate(pod)
	_, err = pods.UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
	require.NoError(r.t, err)
}

// ctlEnded sets the "ctl" container's state to terminated, d after the
// term began (in whole seconds, as the kubelet dates).
func ctlEnded(inst instance, reason string, code int32, d time.Duration) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		st := &pod.Status.ContainerStatuses[1]
		st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: reason, ExitCode: code, FinishedAt: metav1.NewTime(inst.Since.Add(d).Truncate(time.Second)),
			StartedAt: st.State.Running.StartedAt}}
	}
}

// eventsOf drains the recorder and returns the Events of reason.
func (r *testRun) eventsOf(reason string) []string {
	var out []string
	for {
		select {
		case ev := <-r.events.Events:
			if strings.Contains(ev, " "+reason+" ") {
				out = append(out, ev)
			}
		default:
			return out
		}
	}
}

// The kubelet reports the leader's container ended (OOMKilled): the
// standby takes the live Lease at once, no time passing on its clock, as
// a new term; the Event and the metric say so.
func TestCrashedLeaderIsReplacedAtOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	require.NoError(t, err)
	r, inst := crashSetup(t, func(c *Config) { c.Metrics = metrics })
	before := r.clock.Now()
	r.report(ctlEnded(inst, "OOMKilled", 137, 3*time.Second))
	r.awaitLeading()
	assert.Equal(t, before, r.clock.Now(), "waited on the clock")
	l := r.lease()
	assert.Equal(t, "me", *l.Spec.HolderIdentity)
	assert.Equal(t, int32(5), *l.Spec.LeaseTransitions, "a new term")
	assert.NotContains(t, l.Annotations, AnnotationHolderPod, "a replica without a Pod records none, and the previous record goes")
	assert.True(t, r.el.lease.crashTakeoverTerm())
	assert.False(t, r.el.lease.handedOverTerm())
	evs := r.eventsOf("CrashTakeover")
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0], `me took over from ctl-0_1 before its Lease expired: its container "ctl" ended at`)
	assert.Contains(t, evs[0], "(OOMKilled, exit code 137)")
	assert.Equal(t, 1.0, value(t, metrics.crashes))
	assert.Equal(t, uint64(1), observations(t, metrics.leaderless, beganCrashTakeover), "the term counted by how it began")
	assert.Equal(t, uint64(0), observations(t, metrics.leaderless, beganExpiry))
}

// A restart reported with the previous instance's end in lastState: at
// once too.
func TestRestartedLeaderIsReplacedAtOnce(t *testing.T) {
	r, inst := crashSetup(t, nil)
	r.report(func(pod *corev1.Pod) {
		ctlEnded(inst, "Error", 2, 2*time.Second)(pod)
		st := &pod.Status.ContainerStatuses[1]
		st.LastTerminationState, st.RestartCount = st.State, 1
		st.State = running(metav1.NewTime(inst.Since.Add(3 * time.Second).Truncate(time.Second)))
	})
	r.awaitLeading()
	assert.True(t, r.el.lease.crashTakeoverTerm())
}

// What must not shorten the wait: a status lagging behind a restart (the
// previous instance's end, before the term), a terminating Pod whose
// container still runs, another Pod under the same name, a record of an
// earlier term, a Pod deleted while its container ran (a force delete on a
// lost node). The standby takes the Lease when it expires, 15 s on.
func TestNoEarlyTakeover(t *testing.T) {
	for name, tc := range map[string]struct {
		report func(instance) func(*corev1.Pod)
		lease  func(l *coordinationv1.Lease, inst instance)
		delete bool
	}{
		"lagging status": {report: func(inst instance) func(*corev1.Pod) { return ctlEnded(inst, "Error", 1, -time.Second) }},
		"terminating": {report: func(instance) func(*corev1.Pod) {
			return func(pod *corev1.Pod) {
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
			}
		}},
		"another Pod under the same name": {report: func(inst instance) func(*corev1.Pod) {
			return func(pod *corev1.Pod) {
				ctlEnded(inst, "Error", 1, time.Second)(pod)
				pod.UID = "uid-2"
			}
		}},
		"a record of an earlier term": {
			report: func(inst instance) func(*corev1.Pod) { return ctlEnded(inst, "Error", 1, 2*time.Second) },
			lease: func(l *coordinationv1.Lease, inst instance) {
				inst.Term = 3
				setInstance(l, &inst)
			},
		},
		"force-deleted while running": {delete: true},
	} {
		t.Run(name, func(t *testing.T) {
			r, inst := crashSetup(t, nil)
			updates := countActions(r.client, "update", "leases")
			if tc.lease != nil {
				l := r.lease()
				tc.lease(l, inst)
				l.ResourceVersion = "6"
				_, err := r.client.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{})
				require.NoError(t, err)
				updates++
				// Seen before the clock moves, or its expiry would
				// count from later.
				require.Eventually(t, func() bool { return r.el.lease.latest().ResourceVersion == "6" }, waitFor, time.Millisecond)
			}
			if tc.report != nil {
				r.report(tc.report(inst))
			}
			if tc.delete {
				require.NoError(t, r.client.CoreV1().Pods("ns").Delete(context.Background(), "ctl-0", metav1.DeleteOptions{}))
			}
			r.clock.Step(15*time.Second - time.Millisecond)
			r.awaitWaiting()
			time.Sleep(50 * time.Millisecond) // for the watch's news to arrive
			r.awaitWaiting()
			assert.Equal(t, updates, countActions(r.client, "update", "leases"), "took a live Lease")
			r.clock.Step(time.Millisecond)
			r.awaitLeading()
			assert.False(t, r.el.lease.crashTakeoverTerm())
			assert.Empty(t, r.eventsOf("CrashTakeover"))
		})
	}
}

// A Role without list and watch on pods: one Warning Event, no retry
// loop, and the Lease decides.
func TestForbiddenPodWatchFallsBackToTheLease(t *testing.T) {
	now := time.Now()
	inst := testInstance()
	inst.Since = now.Add(-10 * time.Second)
	client := fake.NewClientset(crashLease(now, inst.Since, &inst))
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil)
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, forbidden })
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) { return true, nil, forbidden })
	r := startRun(t, client, nil, nil)
	r.awaitWaiting()
	require.Eventually(t, func() bool { return len(r.eventsOf("CrashTakeoverOff")) == 1 }, waitFor, time.Millisecond)
	asked := func() int { return countActions(client, "list", "pods") + countActions(client, "watch", "pods") }
	first := asked()
	assert.LessOrEqual(t, first, 2, "one list, or a streaming list and the list it falls back to")
	time.Sleep(time.Second) // the reflector's backoff starts at 800 ms
	assert.Equal(t, first, asked(), "asked for pods again after a refusal")
	r.clock.Step(DefaultLeaseDuration)
	r.awaitLeading()
	assert.False(t, r.el.lease.crashTakeoverTerm())
}

// A replica in a Pod records it on the Lease with its term, and its planned
// stop removes the record with the holder.
func TestLeaderRecordsItsPod(t *testing.T) {
	mine := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "me-0", UID: "uid-me"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ctl"}}},
	}
	client := fake.NewClientset(testLease("5", "", 1, 2, time.Now().Add(-time.Hour)), mine)
	r := startRun(t, client, func(c *Config) { c.Pod = &PodConfig{Name: "me-0"} }, nil)
	r.awaitLeading()
	l := r.lease()
	rec, err := recordedInstance(l)
	require.NoError(t, err)
	assert.True(t, rec.Since.Equal(r.clock.Now()), "since: when the acquire was sent")
	rec.Since = time.Time{}
	assert.Equal(t, instance{Holder: "me", Term: 3, Namespace: "ns", Pod: "me-0", UID: "uid-me", Container: "ctl"}, rec)
	r.cancel()
	require.NoError(t, r.result())
	l = r.lease()
	assert.Nil(t, l.Spec.HolderIdentity)
	assert.NotContains(t, l.Annotations, AnnotationHolderPod)
}

// A Pod the replica cannot name itself by (several containers and none
// given, not found, another UID): a Warning Event, and its term records
// nothing.
func TestLeaderWithoutItsPodRecordsNothing(t *testing.T) {
	two := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "me-0", UID: "uid-me"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ctl"}, {Name: "proxy"}}},
	}
	for name, tc := range map[string]struct {
		pod  PodConfig
		want string
	}{
		"two containers, none named": {PodConfig{Name: "me-0"}, "me leads without recording its Pod, so if it crashes, it is replaced when its Lease expires: the Pod ns/me-0 has 2 containers: set Config.Pod.Container ($CONTAINER_NAME)"},
		"no such container":          {PodConfig{Name: "me-0", Container: "app"}, `has no container "app"`},
		"another UID":                {PodConfig{Name: "me-0", UID: "uid-old"}, "has uid uid-me, not this replica's uid-old"},
		"no such Pod":                {PodConfig{Name: "me-1"}, `pods "me-1" not found`},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(testLease("5", "", 1, 2, time.Now().Add(-time.Hour)), two)
			r := startRun(t, client, func(c *Config) { c.Pod = &tc.pod }, nil)
			r.awaitLeading()
			assert.NotContains(t, r.lease().Annotations, AnnotationHolderPod)
			evs := r.eventsOf("CrashTakeoverOff")
			require.Len(t, evs, 1)
			assert.Contains(t, evs[0], tc.want)
		})
	}
}

// DisableCrashTakeover: no Pod is read or watched, and none recorded.
func TestDisableCrashTakeover(t *testing.T) {
	t.Setenv("POD_NAME", "ctl-1")
	r, inst := crashSetup(t, func(c *Config) { c.DisableCrashTakeover = true })
	r.report(ctlEnded(inst, "OOMKilled", 137, 3*time.Second))
	r.clock.Step(DefaultLeaseDuration)
	r.awaitLeading()
	for _, verb := range []string{"list", "watch"} {
		assert.Equal(t, 0, countActions(r.client, verb, "pods"), verb)
	}
	assert.Equal(t, 1, countActions(r.client, "get", "pods"), "the test's own read only")
	assert.False(t, r.el.lease.crashTakeoverTerm())
}

package leader

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The instance of the tests: container "ctl" of Pod ns/ctl-0, whose term
// began at since, 12.3 s into a second (the kubelet dates in whole
// seconds).
var since = time.Date(2026, 12, 3, 10, 0, 12, 300_000_000, time.UTC)

func testInstance() instance {
	return instance{Holder: "ctl-0_1", Term: 4, Namespace: "ns", Pod: "ctl-0", UID: "uid-1", Container: "ctl", Since: since}
}

// at is since plus d, dated as the kubelet dates: in whole seconds,
// rounded down.
func at(d time.Duration) metav1.Time {
	return metav1.NewTime(since.Add(d).Truncate(time.Second))
}

func running(started metav1.Time) corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
}

func terminated(reason string, code int32, started, finished metav1.Time) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		Reason: reason, ExitCode: code, StartedAt: started, FinishedAt: finished, ContainerID: "containerd://" + reason}}
}

// ctlPod is Pod ns/ctl-0 (uid-1) whose container "ctl" has the given
// state and last state, beside a sidecar "proxy" that runs.
func ctlPod(state, last corev1.ContainerState, restarts int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ctl-0", UID: "uid-1"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "proxy", State: running(at(-time.Hour))},
			{Name: "ctl", State: state, LastTerminationState: last, RestartCount: restarts},
		}},
	}
}

// Every status that shows the recorded instance ended: the standby takes
// over at once.
func TestEndedTakesOver(t *testing.T) {
	for name, pod := range map[string]*corev1.Pod{
		"killed (SIGKILL from the node), not restarted yet": ctlPod(terminated("Error", 137, at(-time.Minute), at(2*time.Second)), corev1.ContainerState{}, 0),
		"OOMKilled": ctlPod(terminated("OOMKilled", 137, at(-time.Minute), at(30*time.Second)), corev1.ContainerState{}, 0),
		"a panic: exit code 2, then restarted": ctlPod(running(at(3*time.Second)),
			terminated("Error", 2, at(-time.Minute), at(2*time.Second)), 1),
		"restarting after its crash (CrashLoopBackOff)": ctlPod(
			corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			terminated("Error", 1, at(-time.Minute), at(5*time.Second)), 3),
		"ended in the second after the term began":     ctlPod(terminated("Error", 137, at(-time.Minute), at(time.Second)), corev1.ContainerState{}, 0),
		"a newer instance runs (its end not reported)": ctlPod(running(at(4*time.Second)), corev1.ContainerState{}, 2),
		"two restarts between observations": ctlPod(running(at(9*time.Second)),
			terminated("Error", 1, at(4*time.Second), at(8*time.Second)), 2),
		"the liveness probe failed: killed":                   ctlPod(terminated("Error", 137, at(-time.Minute), at(20*time.Second)), corev1.ContainerState{}, 0),
		"deleted after a graceful termination (final status)": deleting(ctlPod(terminated("Completed", 0, at(-time.Minute), at(40*time.Second)), corev1.ContainerState{}, 0)),
	} {
		t.Run(name, func(t *testing.T) {
			reason, ok := ended(testInstance(), pod)
			assert.True(t, ok)
			assert.Contains(t, reason, `container "ctl"`)
		})
	}
}

// Every status that does not show the recorded instance ended, or cannot
// be tied to it: the standby waits for the Lease.
func TestEndedWaits(t *testing.T) {
	other := ctlPod(terminated("Error", 1, at(-time.Minute), at(5*time.Second)), corev1.ContainerState{}, 0)
	other.UID = "uid-2"
	sidecarDied := ctlPod(running(at(-time.Minute)), corev1.ContainerState{}, 0)
	sidecarDied.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: "proxy", State: terminated("Error", 1, at(-time.Minute), at(5*time.Second))}
	lostNode := ctlPod(running(at(-time.Minute)), corev1.ContainerState{}, 0)
	lostNode.Status.Phase = corev1.PodFailed // as PodGC marks a Pod it deletes
	lostNode.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "NodeLost"}}
	lostNode = deleting(lostNode)
	unknown := ctlPod(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", ExitCode: 137}}, corev1.ContainerState{}, 0)
	for name, pod := range map[string]*corev1.Pod{
		"running, the one of the term": ctlPod(running(at(-time.Minute)), corev1.ContainerState{}, 0),
		// The kubelet restarted the container before the term began and
		// reports it late: the status still shows the previous
		// instance, ended before the term.
		"lagging status: the previous instance ended":             ctlPod(terminated("Error", 1, at(-3*time.Second), at(-time.Second)), corev1.ContainerState{}, 0),
		"lagging status: ended in the second the term began":      ctlPod(terminated("Error", 1, at(-3*time.Second), at(-200*time.Millisecond)), corev1.ContainerState{}, 0),
		"lagging status: the previous instance still running":     ctlPod(running(at(-2*time.Second)), corev1.ContainerState{}, 0),
		"restarted before the term: the last state is older":      ctlPod(running(at(-time.Second)), terminated("Error", 1, at(-time.Minute), at(-2*time.Second)), 1),
		"terminating: deletionTimestamp set, running":             deleting(ctlPod(running(at(-time.Minute)), corev1.ContainerState{}, 0)),
		"another container ended":                                 sidecarDied,
		"another Pod with the same name (another UID)":            other,
		"a Pod on a lost node: marked not ready, failed, deleted": lostNode,
		"no status yet": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ctl-0", UID: "uid-1"}},
		"ended, at an unknown time (ContainerStatusUnknown)": unknown,
		"gone (never observed)":                              nil,
	} {
		t.Run(name, func(t *testing.T) {
			reason, ok := ended(testInstance(), pod)
			assert.False(t, ok, reason)
		})
	}
}

func deleting(pod *corev1.Pod) *corev1.Pod {
	pod.DeletionTimestamp = ptrTime(at(10 * time.Second))
	return pod
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

// A leader in a sidecar (an init container that keeps running) is found
// in the init containers' statuses.
func TestEndedInASidecar(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ctl-0", UID: "uid-1"},
		Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{
			{Name: "ctl", State: terminated("OOMKilled", 137, at(-time.Minute), at(3*time.Second))},
		}},
	}
	reason, ok := ended(testInstance(), pod)
	assert.True(t, ok)
	assert.Contains(t, reason, "OOMKilled, exit code 137")
}

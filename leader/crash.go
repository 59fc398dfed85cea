package leader

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Crash takeover: a leader whose process has ended cannot act, so a
// standby may take its Lease at once instead of waiting it out, once the
// kubelet has reported the end. The evidence must be tied to the process
// that holds the Lease, never to a previous one:
//
//   - The leader records its Pod (UID included) and container on the Lease
//     with its term, and the moment the term began (Since), which its own
//     clock gives: the clock of the node it runs on, the clock the kubelet
//     and the container runtime date the container's start and end with.
//   - The process that holds the Lease ran at Since. So a container
//     instance that ended at or after Since, or one that started at or
//     after it, is that process's end or comes after it: only one instance
//     of a container runs at a time, and the kubelet starts the next only
//     once the previous one has exited. An instance that ended before
//     Since is a previous restart's, whatever the status says next to it
//     (the kubelet reports a restart a moment after it happens: its
//     containerID or restartCount may still be the previous instance's).
//     The kubelet dates in whole seconds, rounded down, which only ever
//     makes an end look earlier: a crash in the first second of a term
//     waits for the Lease, a previous instance never looks recent.
//   - A node that is lost or partitioned reports nothing: its Pod keeps
//     the status it last had (containers running), so its leader is
//     replaced when the Lease expires. A Pod that is only terminating has
//     running containers too: its leader hands over itself. A Pod removed
//     from the API counts only by the status it last had (a force delete
//     leaves containers running on a lost node).
//   - The takeover is a Lease update at the resourceVersion whose record
//     the evidence is tied to: if the holder renewed meanwhile, it
//     conflicts and nothing changes.
//
// What must hold: the recorded container is the one the leader's process
// runs in, as its main process (PodFromEnv's $CONTAINER_NAME, or the Pod's
// only container); and the node's clock does not step back between a
// container's end and its successor's term (NTP slews it; a step back
// could make a previous instance's end look later than Since).

// ended reports whether pod shows that the recorded instance has ended,
// and how, from the status of its container; "" and false if not, or if the
// status cannot be tied to it (another Pod under the same name, another
// container, an end dated before the term).
func ended(inst instance, pod *corev1.Pod) (string, bool) {
	if pod == nil || pod.UID != inst.UID || pod.Namespace != inst.Namespace || pod.Name != inst.Pod {
		return "", false
	}
	st, ok := containerStatus(pod, inst.Container)
	if !ok {
		return "", false
	}
	since := inst.Since
	after := func(t time.Time) bool { return !t.IsZero() && !t.Before(since) }
	for _, term := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
		if term != nil && after(term.FinishedAt.Time) {
			return fmt.Sprintf("its container %q ended at %s (%s, exit code %d)",
				inst.Container, term.FinishedAt.UTC().Format(time.RFC3339), reasonOf(term), term.ExitCode), true
		}
	}
	if run := st.State.Running; run != nil && after(run.StartedAt.Time) {
		return fmt.Sprintf("its container %q was restarted at %s (restart %d)",
			inst.Container, run.StartedAt.UTC().Format(time.RFC3339), st.RestartCount), true
	}
	return "", false
}

// containerStatus returns the status of the named container, a sidecar
// (an init container that keeps running) included.
func containerStatus(pod *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, st := range list {
			if st.Name == name {
				return st, true
			}
		}
	}
	return corev1.ContainerStatus{}, false
}

func reasonOf(t *corev1.ContainerStateTerminated) string {
	if t.Reason != "" {
		return t.Reason
	}
	if t.Signal != 0 {
		return fmt.Sprintf("signal %d", t.Signal)
	}
	return "exited"
}

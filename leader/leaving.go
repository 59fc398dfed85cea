// Leaving: a replica whose own Pod is being deleted does not compete for
// the Lease.

package leader

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// A replica's process normally learns of its Pod's deletion from the
// kubelet's SIGTERM, and Run's context ends. Not always: a container that
// was starting when the Pod was deleted (restarted after a crash, say)
// can miss the signal and run on, Terminating, until the grace period
// ends and the kubelet kills it. A term such a replica began would end in
// that kill, and its successor would wait for crash takeover or the
// Lease. So a standby watches its own Pod (the one its terms record,
// nameSelf) and, once the Pod is Terminating, deleted or replaced by one
// of another UID, stops competing: it says so once (log and a Normal
// Event "Leaving" on the Lease) and waits for its context to end. A
// leader is left alone: the SIGTERM, or crash takeover when the kill
// comes, ends its term. Without a Pod (crash takeover off, or a replica
// that could not name its Pod) there is nothing to watch, and a standby
// competes until its context ends, as before.

// watchOwnPod starts the watch of this replica's Pod, read as pod
// (nameSelf; nil: none), and returns what stops it (nil if none started).
func (e *Elector) watchOwnPod(pod *corev1.Pod) func() {
	if e.own == nil || e.lease.self == nil || pod == nil {
		return nil
	}
	e.own.follow(*e.lease.self)
	e.own.seed(pod)
	return e.own.stop
}

// leaving reports why this replica's Pod is on its way out, if it is.
func (e *Elector) leaving() (string, bool) {
	if e.own == nil || e.lease.self == nil {
		return "", false
	}
	return e.own.leaving(*e.lease.self)
}

// aside is what a standby that stepped aside has said of it.
type aside struct{ logged, recorded bool }

// stepAside reports, once per Run, that this standby no longer competes:
// in its log at once, and with an Event on the Lease once the Lease's
// cache has delivered it (right after the caches sync, it may not have).
func (e *Elector) stepAside(a *aside, why string) {
	if !a.logged {
		e.lease.log.Info("not competing for the Lease: this replica's Pod is leaving", "reason", why)
		a.logged = true
	}
	if !a.recorded && e.lease.latest() != nil {
		e.lease.recordEvent("Leaving", fmt.Sprintf("does not compete for the Lease: %s; its process ends within the Pod's grace period", why))
		a.recorded = true
	}
}

// ownPodUnwatched reports that this replica cannot watch its own Pod: if
// it is deleted while the replica misses its SIGTERM, the replica still
// competes.
func (e *Elector) ownPodUnwatched(err error) {
	e.lease.log.Error(err, "cannot watch this replica's own Pod; if it misses the SIGTERM of its Pod's deletion, it competes for the Lease until it is killed (the Role needs get, list, watch on pods: leader.PolicyRules)")
}

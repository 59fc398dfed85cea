package leader

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// takeover is the evidence that the leader's process ended: the instance
// the Lease records, and what its Pod's status says of it.
type takeover struct {
	inst   instance
	reason string
}

// crashed returns the evidence that the Lease's holder has ended, if the
// Lease records its instance and the watch of its Pod shows it; nil
// otherwise, and always with crash takeover off. It starts the watch of a
// newly recorded Pod, and stops the watch while the Lease records none.
func (e *Elector) crashed() *takeover {
	if e.pods == nil {
		return nil
	}
	inst, err := recordedInstance(e.lease.latest())
	if err != nil {
		e.pods.stop()
		return nil
	}
	e.pods.follow(inst)
	reason, ok := e.pods.ended(inst)
	if !ok {
		return nil
	}
	return &takeover{inst: inst, reason: reason}
}

// tookOverFromACrash reports a term begun on a crashed leader's Lease.
func (e *Elector) tookOverFromACrash(t takeover) {
	e.lease.log.Info("took over from a leader whose process ended", "leader", t.inst.Holder, "term", t.inst.Term, "pod", t.inst.Namespace+"/"+t.inst.Pod, "evidence", t.reason)
	e.lease.recordEvent("CrashTakeover", fmt.Sprintf("took over from %s before its Lease expired: %s", t.inst.Holder, t.reason))
	e.cfg.Metrics.crashTakeover()
}

// crashTakeoverOff reports that this replica cannot watch the leader's
// Pod: it waits for the Lease to expire instead.
func (e *Elector) crashTakeoverOff(err error) {
	msg := fmt.Sprintf("cannot watch the leader's Pod, so a crashed leader is replaced when its Lease expires: %v (the Role needs get, list, watch on pods: leader.PolicyRules)", err)
	e.lease.log.Error(err, "crash takeover off")
	e.lease.recordWarning("CrashTakeoverOff", msg)
}

// nameSelf resolves this replica's Pod, which its terms record on the
// Lease, and returns it as read; if it cannot, its terms record nothing
// (and end at the Lease's expiry, as without crash takeover): it logs why,
// and its term starts with a Warning Event that says so (unnamedTerm).
func (e *Elector) nameSelf(ctx context.Context) *corev1.Pod {
	if e.pods == nil || e.cfg.Pod == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	s, pod, err := e.resolveSelf(rctx)
	if err != nil {
		e.lease.log.Error(err, "this replica's terms record no Pod: if it crashes while it leads, it is replaced when its Lease expires")
		e.selfErr = err
		return nil
	}
	e.lease.self = s
	e.lease.log.V(1).Info("its terms record its Pod", "pod", s.Namespace+"/"+s.Pod, "uid", s.UID, "container", s.Container)
	return pod
}

// unnamedTerm is called as a term starts: if this replica could not name
// its Pod, a Warning Event on the Lease says what that costs.
func (e *Elector) unnamedTerm() {
	if e.selfErr != nil {
		e.lease.recordWarning("CrashTakeoverOff", fmt.Sprintf("leads without recording its Pod, so if it crashes, it is replaced when its Lease expires: %v", e.selfErr))
	}
}

// Package webhook is fastover's mutating admission webhook. It makes the
// effective toleration of pods for the node.kubernetes.io/unreachable
// NoExecute taint (and, if asked, node.kubernetes.io/not-ready) last a
// configured number of seconds, 0 by default, so that a pod on a lost node
// is evicted and replaced as soon as the node is tainted, not 300s later.
//
// The data flows one way: an AdmissionReview's pod is read into a Pod (only
// the fields the rule needs), Rule.Decide turns it into a Decision (pure,
// no I/O), Decision.Patch turns that into a minimal JSON Patch, and Handler
// answers the review. NewServer serves Handler on /mutate-v1-pod with
// controller-runtime's webhook server, with metrics and health probes.
//
// The rule, in short (see Rule.Decide): for each taint it manages, the
// first toleration that matches the taint is the one the taint-eviction
// controller applies. If that is the API server's default (operator
// Exists, effect NoExecute, the default seconds) it is rewritten in place;
// if none matches, one is added; if the user chose it (other seconds, none,
// or a broader toleration), it is left alone and the mark annotation says
// so. Pods owned by a DaemonSet, mirror pods and pods annotated
// fastover.io/inject: "false" are skipped.
package webhook

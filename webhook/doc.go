// Package webhook is fastover's mutating admission webhook: the admission
// transport around the toleration rule of package toleration. It makes the
// effective toleration of pods for the node.kubernetes.io/unreachable
// NoExecute taint (and, if asked, node.kubernetes.io/not-ready) last a
// configured number of seconds, 0 by default, so that a pod on a lost node
// is evicted and replaced as soon as the node is tainted, not 300s later.
//
// The data flows one way: Handler bounds and reads an AdmissionReview's pod
// (toleration.DecodePod, only the fields the rule needs),
// toleration.Rule.Decide turns it into a Decision (pure, no I/O),
// Decision.Patch turns that into a minimal JSON Patch, and Handler answers
// the review, counting each outcome in Metrics. NewServer serves Handler on
// /mutate-v1-pod with controller-runtime's webhook server, with request
// limits (see MaxPodListEntries), metrics and health probes.
//
// The rule itself (which pods are skipped, which tolerations are the user's
// and which are rewritten or added) is documented in package toleration.
package webhook

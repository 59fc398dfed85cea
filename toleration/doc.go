// Package toleration is fastover's toleration rule: what a pod's effective
// NoExecute tolerations for node.kubernetes.io/unreachable (and, if asked,
// node.kubernetes.io/not-ready) should be, and the JSON Patch that makes
// them so. Deciding does no I/O, and the package depends on nothing but
// the Kubernetes API types: the admission webhook (package webhook), the retrofit audit, fix
// and reconciler (package retrofit), kubectl-fastover and the demo all
// decide with it, so that they agree on every pod.
//
// The data flows one way: a pod is read into a Pod (DecodePod from an
// admission request's JSON, DocumentOf from a pod read from the API),
// Rule.Decide turns it into a Decision (pure: same pod, same decision), and
// Decision.Patch turns that into a minimal JSON Patch.
//
// The rule, in short (see Rule.Decide): for each taint it manages, the
// first toleration that matches the taint is the one the taint-eviction
// controller applies (EffectiveToleration). If that is the API server's
// default (Rule.IsAPIServerDefault: operator Exists, effect NoExecute, the
// default seconds) or one fastover set under another rule (IsMarked), its
// seconds are rewritten in place; if none matches, one is added; if the
// user chose it (other seconds, none, or a broader toleration), it is left
// alone and the mark annotation (AnnotationInjected) says so. Pods owned
// by a DaemonSet, mirror pods and pods annotated fastover.io/inject:
// "false" are skipped; an invalid fastover.io/toleration-seconds override
// is a denial.
//
// The rule's knobs are the fields of Rule (DefaultRule gives fastover's
// defaults; Validate reports every bad field). Its one published home is
// the ConfigMap fastover-system/fastover-rule, one key per field
// (ParseRuleData reads its data; LoadRuleFile and RuleWatcher the
// directory it is mounted as, or a rule file in the format of
// ParseRuleConfig); the MutatingAdmissionPolicy of policy mode reads the
// same keys in CEL. AddFlags binds the same knobs to command-line
// flags, shared by fastover-webhook and kubectl-fastover, which override
// the ConfigMap for that process only (Rule.WithFlags).
package toleration

package toleration

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// User-facing names.
const (
	// NamespaceLabel on a namespace, with the value NamespaceLabelValue,
	// selects its pods for the webhook.
	NamespaceLabel      = "fastover.io/inject"
	NamespaceLabelValue = "enabled"
	// AnnotationInject set to "false" on a pod opts it out.
	AnnotationInject = "fastover.io/inject"
	// AnnotationTolerationSeconds on a pod overrides the configured
	// seconds for that pod: a non-negative integer.
	AnnotationTolerationSeconds = "fastover.io/toleration-seconds"
	// AnnotationInjected marks a pod the webhook handled, saying what its
	// effective tolerations are, e.g. "unreachable=0s" or
	// "unreachable=user:forever".
	AnnotationInjected = "fastover.io/injected"
)

// DefaultTolerationSeconds is the API server's default for the not-ready
// and unreachable tolerations (--default-unreachable-toleration-seconds).
const DefaultTolerationSeconds = 300

// Rule says what a pod's tolerations should be. The zero value is not
// valid for DefaultTolerationSeconds; start from DefaultRule.
type Rule struct {
	// TolerationSeconds is the wanted tolerationSeconds of the effective
	// unreachable toleration.
	TolerationSeconds int64
	// NotReadyTolerationSeconds, if set, makes the rule also manage the
	// not-ready toleration, with this value. Nil leaves not-ready alone.
	NotReadyTolerationSeconds *int64
	// DefaultTolerationSeconds is the value the API server's
	// DefaultTolerationSeconds admission plugin gives: a toleration with
	// exactly that value and the plugin's shape is rewritten.
	DefaultTolerationSeconds int64
}

// DefaultRule returns the rule with fastover's defaults: unreachable 0s,
// not-ready left alone, API server default 300s.
func DefaultRule() Rule {
	return Rule{TolerationSeconds: 0, DefaultTolerationSeconds: DefaultTolerationSeconds}
}

// Validate reports every problem of the rule at once (errors.Join), each
// naming its field as the rule's configuration spells it: negative
// seconds. It reads nothing but r.
func (r Rule) Validate() error {
	var errs []error
	nonNegative := func(field string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %d", field, v))
		}
	}
	nonNegative("tolerationSeconds", r.TolerationSeconds)
	if r.NotReadyTolerationSeconds != nil {
		nonNegative("notReadyTolerationSeconds", *r.NotReadyTolerationSeconds)
	}
	nonNegative("defaultTolerationSeconds", r.DefaultTolerationSeconds)
	return errors.Join(errs...)
}

// Pod is what the rule reads of a pod.
type Pod struct {
	Annotations     map[string]string
	OwnerReferences []metav1.OwnerReference
	Tolerations     []corev1.Toleration
}

// SkipReason says why a pod is left alone as a whole.
type SkipReason string

// Reasons to skip a pod.
const (
	SkipNone      SkipReason = ""
	SkipDaemonSet SkipReason = "daemonset" // tolerates node loss forever on purpose
	SkipMirror    SkipReason = "mirror"    // static pod: not evictable
	SkipOptOut    SkipReason = "opt-out"   // annotated fastover.io/inject: "false"
)

// Action is what the rule does about one taint.
type Action string

// Actions on a taint's effective toleration.
const (
	// ActionNone: the effective toleration already has the wanted seconds.
	ActionNone Action = "none"
	// ActionRewrite: the effective toleration is the API server's default,
	// or the one fastover set (the pod's mark says fastover set exactly its
	// seconds, under a rule that wanted other seconds); its
	// tolerationSeconds is set to the wanted value.
	ActionRewrite Action = "rewrite"
	// ActionAdd: no toleration matches; one is appended.
	ActionAdd Action = "add"
	// ActionKeepUser: the user chose the effective toleration; it stays.
	ActionKeepUser Action = "keep-user"
)

// TaintDecision is the rule's decision for one taint.
type TaintDecision struct {
	// Name is the short name used in the mark: "unreachable" or "not-ready".
	Name string
	// Key is the taint key, e.g. node.kubernetes.io/unreachable.
	Key string
	// Action is what is done.
	Action Action
	// Index is the position of the effective toleration in the pod's
	// tolerations, or -1 when none matches (ActionAdd).
	Index int
	// Seconds is the effective tolerationSeconds once the decision is
	// applied; nil means forever.
	Seconds *int64
}

// Decision is the rule's verdict on a pod.
type Decision struct {
	// Skip, if not empty, says why the pod is left alone entirely.
	Skip SkipReason
	// Deny, if not empty, is why the pod must be refused.
	Deny string
	// Taints has one entry per managed taint, unreachable first.
	Taints []TaintDecision
}

// Changed reports whether applying the decision changes the pod's
// tolerations.
func (d Decision) Changed() bool {
	for _, t := range d.Taints {
		if t.Action == ActionRewrite || t.Action == ActionAdd {
			return true
		}
	}
	return false
}

// Mark is the value of the fastover.io/injected annotation: each managed
// taint and its effective seconds, "user:" before a value the user chose.
// It is empty for skipped or denied pods.
func (d Decision) Mark() string {
	if d.Skip != SkipNone || d.Deny != "" {
		return ""
	}
	parts := make([]string, 0, len(d.Taints))
	for _, t := range d.Taints {
		v := "forever"
		if t.Seconds != nil {
			v = strconv.FormatInt(*t.Seconds, 10) + "s"
		}
		if t.Action == ActionKeepUser {
			v = "user:" + v
		}
		parts = append(parts, t.Name+"="+v)
	}
	return strings.Join(parts, ",")
}

// Decide applies the rule to a pod. It is pure: same pod, same decision.
func (r Rule) Decide(pod Pod) Decision {
	if reason := skipReason(pod); reason != SkipNone {
		return Decision{Skip: reason}
	}
	unreachable, notReady := r.TolerationSeconds, r.NotReadyTolerationSeconds
	if v, ok := pod.Annotations[AnnotationTolerationSeconds]; ok {
		n, err := parseSeconds(v)
		if err != nil {
			return Decision{Deny: err.Error()}
		}
		unreachable = n
		if notReady != nil {
			notReady = &n
		}
	}
	mark := pod.Annotations[AnnotationInjected]
	d := Decision{Taints: []TaintDecision{
		r.decideTaint(pod.Tolerations, mark, "unreachable", corev1.TaintNodeUnreachable, unreachable),
	}}
	if notReady != nil {
		d.Taints = append(d.Taints, r.decideTaint(pod.Tolerations, mark, "not-ready", corev1.TaintNodeNotReady, *notReady))
	}
	return d
}

// decideTaint decides for one NoExecute taint, which the taint-eviction
// controller tolerates with the first toleration that matches it. mark is
// the pod's fastover.io/injected annotation.
func (r Rule) decideTaint(tols []corev1.Toleration, mark, name, key string, want int64) TaintDecision {
	td := TaintDecision{Name: name, Key: key, Index: EffectiveToleration(tols, key)}
	if td.Index < 0 {
		td.Action, td.Seconds = ActionAdd, &want
		return td
	}
	eff := tols[td.Index]
	switch {
	case eff.TolerationSeconds != nil && *eff.TolerationSeconds == want:
		td.Action, td.Seconds = ActionNone, &want
	case r.IsAPIServerDefault(eff, key), IsMarked(eff, mark, name, key):
		td.Action, td.Seconds = ActionRewrite, &want
	default:
		// Other seconds, none (forever), or a broader toleration that
		// wins over any later one: the user's choice.
		td.Action, td.Seconds = ActionKeepUser, eff.TolerationSeconds
	}
	return td
}

// IsAPIServerDefault reports whether t is exactly what the API server's
// DefaultTolerationSeconds admission plugin adds for the taint key: the
// key, operator Exists, no value, effect NoExecute and the rule's
// DefaultTolerationSeconds. Such a toleration is not the user's choice, so
// the rule rewrites it. The webhook, the retrofit audit, the reconciler
// and the demo all ask this one function.
func (r Rule) IsAPIServerDefault(t corev1.Toleration, key string) bool {
	return t.Key == key && t.Operator == corev1.TolerationOpExists && t.Value == "" &&
		t.Effect == corev1.TaintEffectNoExecute &&
		t.TolerationSeconds != nil && *t.TolerationSeconds == r.DefaultTolerationSeconds
}

// IsMarked reports whether t is a toleration fastover set: it has the shape
// fastover writes for the taint key (the API server default's shape), and
// the mark (a fastover.io/injected value) says fastover set the taint name
// to exactly its seconds. Such a toleration follows the rule when the rule
// changes; one the mark calls the user's ("user:"), or whose seconds were
// changed since, stays the user's.
func IsMarked(t corev1.Toleration, mark, name, key string) bool {
	if t.Key != key || t.Operator != corev1.TolerationOpExists || t.Value != "" ||
		t.Effect != corev1.TaintEffectNoExecute || t.TolerationSeconds == nil {
		return false
	}
	s, ok := markedSeconds(mark, name)
	return ok && s == *t.TolerationSeconds
}

// markedSeconds returns the seconds a mark says fastover set for the taint
// name ("unreachable=0s,not-ready=30s" has 30 for not-ready), and false if
// the mark does not name it, names the user's value or cannot be read.
func markedSeconds(mark, name string) (int64, bool) {
	for mark != "" {
		var part string
		part, mark, _ = strings.Cut(mark, ",")
		n, v, ok := strings.Cut(part, "=")
		if !ok || n != name {
			continue
		}
		digits, ok := strings.CutSuffix(v, "s")
		if !ok {
			return 0, false
		}
		s, err := parseSeconds(digits)
		return s, err == nil
	}
	return 0, false
}

// EffectiveToleration returns the index of the toleration that the
// taint-eviction controller applies to the NoExecute taint with the key
// (and no value): the first one that matches it, including broader ones
// (empty key with operator Exists, or empty effect). It returns -1 if none
// matches.
func EffectiveToleration(tols []corev1.Toleration, key string) int {
	taint := &corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute}
	for i := range tols {
		if tols[i].ToleratesTaint(logr.Discard(), taint, false) {
			return i
		}
	}
	return -1
}

func skipReason(pod Pod) SkipReason {
	if pod.Annotations[AnnotationInject] == "false" {
		return SkipOptOut
	}
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return SkipMirror
	}
	// Any DaemonSet kind: apps/v1's, or another group's drop-in (such as
	// OpenKruise's Advanced DaemonSet), whose pods are daemons too.
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return SkipDaemonSet
		}
	}
	return SkipNone
}

// maxSecondsDigits bounds the seconds fastover reads (override, rule,
// mark): 15 digits is over 31 million years, and keeps every value below
// 2^53, the largest integer the API server's CEL writes as a JSON number
// (a larger one becomes a JSON string, which a MutatingAdmissionPolicy's
// patch of tolerationSeconds cannot carry: the create fails), so the
// webhook and the policy accept the same values.
const maxSecondsDigits = 15

// parseSeconds parses the override annotation: decimal digits only.
func parseSeconds(v string) (int64, error) {
	ok := v != "" && len(v) <= maxSecondsDigits
	for i := 0; ok && i < len(v); i++ {
		ok = v[i] >= '0' && v[i] <= '9'
	}
	if !ok {
		return 0, fmt.Errorf("annotation %s: %q is not a valid number of seconds; it accepts a non-negative integer of at most %d digits, such as \"0\" or \"30\"",
			AnnotationTolerationSeconds, v, maxSecondsDigits)
	}
	return strconv.ParseInt(v, 10, 64)
}

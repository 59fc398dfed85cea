package podgen

import (
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

// Outcome is what admission made of a pod: denied with a reason, or
// admitted with these tolerations and this fastover.io/injected mark.
type Outcome struct {
	Denied bool
	// Reason is the rule's reason to deny (Expect), or the API server's
	// error (Observe).
	Reason      string
	Tolerations []corev1.Toleration
	// Mark is the fastover.io/injected annotation, if Marked.
	Mark   string
	Marked bool
	// Error, if not empty, is an error that is no admission decision
	// (Observe): the create failed.
	Error string
}

// String is a one-line account of the outcome.
func (o Outcome) String() string {
	if o.Error != "" {
		return "failed: " + o.Error
	}
	if o.Denied {
		return "denied: " + o.Reason
	}
	mark := "no mark"
	if o.Marked {
		mark = fmt.Sprintf("mark %q", o.Mark)
	}
	return fmt.Sprintf("allowed, %s, tolerations %s", mark, FormatTolerations(o.Tolerations))
}

// FormatTolerations writes tolerations compactly: key op value effect
// seconds, "*" for an empty key or effect.
func FormatTolerations(tols []corev1.Toleration) string {
	parts := make([]string, len(tols))
	for i, t := range tols {
		key, effect := t.Key, string(t.Effect)
		if key == "" {
			key = "*"
		}
		if effect == "" {
			effect = "*"
		}
		op := string(t.Operator)
		if op == "" {
			op = `""`
		}
		if t.Value != "" {
			op += "=" + t.Value
		}
		secs := "forever"
		if t.TolerationSeconds != nil {
			secs = fmt.Sprintf("%ds", *t.TolerationSeconds)
		}
		parts[i] = fmt.Sprintf("{%s %s %s %s}", key, op, effect, secs)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Expect is what fastover's rule, as the Go package decides it, makes of
// the case: the pod as the API server presents it (APIServerDefaults with
// its default seconds), decided by rule and the decision applied: the
// effective toleration's seconds rewritten, missing ones appended, the
// mark set; a skipped pod is left as it came, a pod with an invalid
// override is denied.
func Expect(rule toleration.Rule, c Case, apiServerDefault int64) Outcome {
	pod := c.Pod("expected")
	tols := APIServerDefaults(pod.Spec.Tolerations, apiServerDefault)
	d := rule.Decide(toleration.Pod{Annotations: pod.Annotations, OwnerReferences: pod.OwnerReferences, Tolerations: tols})
	if d.Deny != "" {
		return Outcome{Denied: true, Reason: d.Deny}
	}
	mark, marked := pod.Annotations[toleration.AnnotationInjected]
	if d.Skip != toleration.SkipNone {
		return Outcome{Tolerations: tols, Mark: mark, Marked: marked}
	}
	for _, t := range d.Taints {
		switch t.Action {
		case toleration.ActionRewrite:
			tols[t.Index].TolerationSeconds = ptr.To(*t.Seconds)
		case toleration.ActionAdd:
			tols = append(tols, corev1.Toleration{
				Key: t.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
				TolerationSeconds: ptr.To(*t.Seconds),
			})
		}
	}
	return Outcome{Tolerations: tols, Mark: d.Mark(), Marked: true}
}

// Unmutated is what an API server that runs no fastover makes of the case:
// its own defaults, nothing else.
func Unmutated(c Case, apiServerDefault int64) Outcome {
	pod := c.Pod("unmutated")
	mark, marked := pod.Annotations[toleration.AnnotationInjected]
	return Outcome{Tolerations: APIServerDefaults(pod.Spec.Tolerations, apiServerDefault), Mark: mark, Marked: marked}
}

// Observe is the outcome of a create: the pod the API server returned, or
// its error. Only a refusal (403 Forbidden, or 422 Invalid as a
// ValidatingAdmissionPolicy says it by default) counts as a denial; any
// other error (a failed mutation, a timeout) is no admission decision, and
// is kept in Error.
func Observe(pod *corev1.Pod, err error) Outcome {
	switch {
	case err == nil:
		mark, marked := pod.Annotations[toleration.AnnotationInjected]
		return Outcome{Tolerations: pod.Spec.Tolerations, Mark: mark, Marked: marked}
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		return Outcome{Denied: true, Reason: err.Error()}
	default:
		return Outcome{Error: err.Error()}
	}
}

// Diff says how got differs from want, or "" when they agree: both
// denied, got's reason containing want's (the rule's message, in the API
// server's words around it); or both failed; or both allowed with the same tolerations, in
// the same order, and the same mark.
func Diff(want, got Outcome) string {
	switch {
	case (want.Error != "") != (got.Error != ""):
		return fmt.Sprintf("want %s; got %s", want, got)
	case want.Error != "":
		return ""
	case want.Denied != got.Denied:
		return fmt.Sprintf("want %s; got %s", want, got)
	case want.Denied:
		if !strings.Contains(got.Reason, want.Reason) {
			return fmt.Sprintf("denied with another message: want one containing %q; got %q", want.Reason, got.Reason)
		}
		return ""
	}
	var d []string
	if want.Marked != got.Marked || want.Mark != got.Mark {
		d = append(d, fmt.Sprintf("mark: want %s, got %s", markString(want), markString(got)))
	}
	if !equalTolerations(want.Tolerations, got.Tolerations) {
		d = append(d, fmt.Sprintf("tolerations: want %s, got %s", FormatTolerations(want.Tolerations), FormatTolerations(got.Tolerations)))
	}
	return strings.Join(d, "; ")
}

func markString(o Outcome) string {
	if !o.Marked {
		return "none"
	}
	return fmt.Sprintf("%q", o.Mark)
}

// equalTolerations compares two lists field by field; nil and empty are
// the same list.
func equalTolerations(a, b []corev1.Toleration) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

package podgen

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Shrink makes a failing case smaller while it still fails: it drops one
// toleration, annotation or label at a time, or the owner, keeping each
// change after which fails still reports true, until no single change
// does. fails is called on candidates only (c is taken to fail), at most
// maxTries times in all; the case returned fails. The name says it was
// shrunk.
func Shrink(c Case, fails func(Case) bool, maxTries int) Case {
	tries := 0
	try := func(cand Case) bool {
		if tries >= maxTries {
			return false
		}
		tries++
		return fails(cand)
	}
	for progress := true; progress && tries < maxTries; {
		progress = false
		for _, cand := range smaller(c) {
			if try(cand) {
				c, progress = cand, true
				break
			}
		}
	}
	if !strings.HasSuffix(c.Name, ", shrunk") {
		c.Name += ", shrunk"
	}
	return c
}

// smaller lists the cases one step smaller than c: without one of its
// tolerations, annotations or labels, or without its owner.
func smaller(c Case) []Case {
	var out []Case
	for i := range c.Tolerations {
		cand := c.Clone()
		cand.Tolerations = slices.Delete(cand.Tolerations, i, i+1)
		if len(cand.Tolerations) == 0 {
			cand.Tolerations = nil
		}
		out = append(out, cand)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Annotations)) {
		cand := c.Clone()
		delete(cand.Annotations, k)
		if len(cand.Annotations) == 0 {
			cand.Annotations = nil
		}
		out = append(out, cand)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		cand := c.Clone()
		delete(cand.Labels, k)
		if len(cand.Labels) == 0 {
			cand.Labels = nil
		}
		out = append(out, cand)
	}
	if c.Owner != NoOwner {
		cand := c.Clone()
		cand.Owner = NoOwner
		out = append(out, cand)
	}
	return out
}

// GoString writes c as a Go composite literal of type podgen.Case, for a
// table of fixed cases in a file that imports corev1
// ("k8s.io/api/core/v1"), ptr ("k8s.io/utils/ptr") and podgen.
func (c Case) GoString() string {
	var b strings.Builder
	b.WriteString("{\n")
	fmt.Fprintf(&b, "\tName: %q,\n", c.Name)
	if c.Owner != NoOwner {
		fmt.Fprintf(&b, "\tOwner: %s,\n", ownerSource(c.Owner))
	}
	writeMap(&b, "Labels", c.Labels)
	writeMap(&b, "Annotations", c.Annotations)
	if c.Tolerations != nil {
		b.WriteString("\tTolerations: []corev1.Toleration{\n")
		for _, t := range c.Tolerations {
			fmt.Fprintf(&b, "\t\t%s,\n", tolerationSource(t))
		}
		b.WriteString("\t},\n")
	}
	b.WriteString("}")
	return b.String()
}

func ownerSource(o Owner) string {
	switch o {
	case ReplicaSet:
		return "podgen.ReplicaSet"
	case StatefulSet:
		return "podgen.StatefulSet"
	case Job:
		return "podgen.Job"
	case DaemonSet:
		return "podgen.DaemonSet"
	case KruiseDaemonSet:
		return "podgen.KruiseDaemonSet"
	}
	return fmt.Sprintf("podgen.Owner(%q)", string(o))
}

func writeMap(b *strings.Builder, field string, m map[string]string) {
	if m == nil {
		return
	}
	fmt.Fprintf(b, "\t%s: map[string]string{", field)
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%q: %q", k, m[k])
	}
	b.WriteString("},\n")
}

func tolerationSource(t corev1.Toleration) string {
	var f []string
	if t.Key != "" {
		f = append(f, "Key: "+constOr(t.Key, map[string]string{
			corev1.TaintNodeUnreachable: "corev1.TaintNodeUnreachable",
			corev1.TaintNodeNotReady:    "corev1.TaintNodeNotReady",
		}))
	}
	if t.Operator != "" {
		f = append(f, "Operator: "+constOr(string(t.Operator), map[string]string{
			string(corev1.TolerationOpExists): "corev1.TolerationOpExists",
			string(corev1.TolerationOpEqual):  "corev1.TolerationOpEqual",
		}))
	}
	if t.Value != "" {
		f = append(f, fmt.Sprintf("Value: %q", t.Value))
	}
	if t.Effect != "" {
		f = append(f, "Effect: "+constOr(string(t.Effect), map[string]string{
			string(corev1.TaintEffectNoExecute):        "corev1.TaintEffectNoExecute",
			string(corev1.TaintEffectNoSchedule):       "corev1.TaintEffectNoSchedule",
			string(corev1.TaintEffectPreferNoSchedule): "corev1.TaintEffectPreferNoSchedule",
		}))
	}
	if t.TolerationSeconds != nil {
		f = append(f, fmt.Sprintf("TolerationSeconds: ptr.To[int64](%d)", *t.TolerationSeconds))
	}
	return "{" + strings.Join(f, ", ") + "}"
}

// constOr names v by its constant in consts, else quotes it (a string
// literal converts to the field's string type).
func constOr(v string, consts map[string]string) string {
	if c, ok := consts[v]; ok {
		return c
	}
	return fmt.Sprintf("%q", v)
}

package toleration

import (
	"fmt"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// PodDocument is a pod read from its JSON: the fields the rule needs, and
// which of the objects on the patch paths exist, since a JSON Patch must add
// a missing (or null) parent before it can add into it.
type PodDocument struct {
	Pod
	HasMetadata    bool
	HasAnnotations bool
	HasSpec        bool
	HasTolerations bool
}

// podJSON is the part of a pod's JSON that the webhook decodes; the rest
// of the document is skipped, not decoded.
type podJSON struct {
	Metadata *struct {
		Annotations     map[string]string       `json:"annotations"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
	Spec *struct {
		Tolerations []corev1.Toleration `json:"tolerations"`
	} `json:"spec"`
}

// DecodePod reads the fields the rule needs from a pod's JSON and skips the
// rest without decoding it. It is strict: field names are case-sensitive,
// as the API server reads them, and duplicate names are an error (the API
// server, which re-encodes every object, never sends them).
func DecodePod(raw []byte) (PodDocument, error) {
	var p *podJSON
	if err := jsonv2.Unmarshal(raw, &p); err != nil {
		return PodDocument{}, fmt.Errorf("decode pod: %w", err)
	}
	if p == nil {
		return PodDocument{}, fmt.Errorf("decode pod: the object is null, not a pod")
	}
	var doc PodDocument
	if p.Metadata != nil {
		doc.HasMetadata = true
		doc.HasAnnotations = p.Metadata.Annotations != nil
		doc.Annotations = p.Metadata.Annotations
		doc.OwnerReferences = p.Metadata.OwnerReferences
	}
	if p.Spec != nil {
		doc.HasSpec = true
		doc.HasTolerations = p.Spec.Tolerations != nil
		doc.Tolerations = p.Spec.Tolerations
	}
	return doc, nil
}

// DocumentOf is the PodDocument of a pod read from the API, for patching
// a pod that exists (kubectl fastover fix, the reconciler). Empty maps and
// lists count as missing: the API server's JSON leaves them out.
func DocumentOf(pod *corev1.Pod) PodDocument {
	return PodDocument{
		Pod: Pod{
			Annotations:     pod.Annotations,
			OwnerReferences: pod.OwnerReferences,
			Tolerations:     pod.Spec.Tolerations,
		},
		HasMetadata:    true,
		HasAnnotations: len(pod.Annotations) > 0,
		HasSpec:        true,
		HasTolerations: len(pod.Spec.Tolerations) > 0,
	}
}

// Patch returns the JSON Patch that applies the decision to the pod: one
// replace per rewritten toleration, one add per added toleration, and the
// mark annotation if it is not already what the decision says. It returns
// nil when nothing changes, so a second pass over a pod it patched yields
// no patch.
func (d Decision) Patch(doc PodDocument) []jsonpatch.Operation {
	if d.Skip != SkipNone || d.Deny != "" {
		return nil
	}
	var ops []jsonpatch.Operation
	var added []corev1.Toleration
	for _, t := range d.Taints {
		switch t.Action {
		case ActionRewrite:
			ops = append(ops, jsonpatch.NewOperation("replace",
				"/spec/tolerations/"+strconv.Itoa(t.Index)+"/tolerationSeconds", *t.Seconds))
		case ActionAdd:
			added = append(added, corev1.Toleration{
				Key:               t.Key,
				Operator:          corev1.TolerationOpExists,
				Effect:            corev1.TaintEffectNoExecute,
				TolerationSeconds: ptr.To(*t.Seconds),
			})
		}
	}
	switch {
	case len(added) == 0:
	case doc.HasTolerations:
		for _, t := range added {
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/tolerations/-", t))
		}
	case doc.HasSpec:
		ops = append(ops, jsonpatch.NewOperation("add", "/spec/tolerations", added))
	default:
		ops = append(ops, jsonpatch.NewOperation("add", "/spec", map[string]any{"tolerations": added}))
	}

	mark := d.Mark()
	if v, ok := doc.Annotations[AnnotationInjected]; !ok || v != mark {
		switch {
		case doc.HasAnnotations:
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/annotations/"+escapePointer(AnnotationInjected), mark))
		case doc.HasMetadata:
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{AnnotationInjected: mark}))
		default:
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata",
				map[string]any{"annotations": map[string]string{AnnotationInjected: mark}}))
		}
	}
	return ops
}

// pointerEscaper escapes a JSON Pointer reference token (RFC 6901).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePointer(s string) string { return pointerEscaper.Replace(s) }

package retrofit

import (
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastover/fastover/toleration"
)

// The reconciler caches every pod of the cluster, so it keeps of each only
// what it reads: a realistic pod of some KiB becomes a few hundred bytes.

// SlimPod returns the part of a pod that the reconciler reads, as a new
// pod sharing nothing with the one given:
//
//   - metadata: namespace, name, UID, resourceVersion (the guard of
//     Fix's patch), creation and deletion times (the audit's reasons, and
//     settled pods), owner references (DaemonSet pods), and the
//     annotations: every key, so that a patch knows the map exists (a
//     JSON Patch "add" of the whole map would replace it), but the values
//     of fastover's own and the mirror-pod annotation only;
//   - spec: the node name and the tolerations (the rule's input);
//   - status: the phase (finished pods).
//
// Labels, managed fields, containers, volumes and the rest of the status
// are dropped. Strings shared by many pods (namespaces, annotation keys,
// owner names, toleration keys) are interned. It is idempotent, as an
// informer's transform must be.
func SlimPod(pod *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         intern(pod.Namespace),
			Name:              pod.Name,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			CreationTimestamp: pod.CreationTimestamp,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{
			NodeName: intern(pod.Spec.NodeName),
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	if len(pod.Annotations) > 0 {
		out.Annotations = make(map[string]string, len(pod.Annotations))
		for k, v := range pod.Annotations {
			if !readAnnotation(k) {
				v = ""
			}
			out.Annotations[intern(k)] = v
		}
	}
	if len(pod.OwnerReferences) > 0 {
		out.OwnerReferences = make([]metav1.OwnerReference, len(pod.OwnerReferences))
		for i, o := range pod.OwnerReferences {
			out.OwnerReferences[i] = metav1.OwnerReference{
				APIVersion: intern(o.APIVersion),
				Kind:       intern(o.Kind),
				Name:       intern(o.Name),
				UID:        types.UID(intern(string(o.UID))),
				Controller: o.Controller,
			}
		}
	}
	if len(pod.Spec.Tolerations) > 0 {
		out.Spec.Tolerations = make([]corev1.Toleration, len(pod.Spec.Tolerations))
		for i, t := range pod.Spec.Tolerations {
			out.Spec.Tolerations[i] = corev1.Toleration{
				Key:               intern(t.Key),
				Operator:          corev1.TolerationOperator(intern(string(t.Operator))),
				Value:             intern(t.Value),
				Effect:            corev1.TaintEffect(intern(string(t.Effect))),
				TolerationSeconds: t.TolerationSeconds,
			}
		}
	}
	return out
}

// readAnnotation reports whether the rule or the audit reads the value of
// the annotation.
func readAnnotation(key string) bool {
	switch key {
	case toleration.AnnotationInject, toleration.AnnotationTolerationSeconds, toleration.AnnotationInjected, corev1.MirrorPodAnnotationKey:
		return true
	}
	return false
}

// internCap bounds the strings the interner holds: past it, it starts
// afresh (the strings already shared stay shared), so that names that
// come and go (owners, namespaces) cannot grow it without end.
const internCap = 8192

var interned struct {
	sync.Mutex
	m map[string]string
}

// intern returns the copy of s that the pods cached since the interner
// last started afresh share.
func intern(s string) string {
	if s == "" {
		return ""
	}
	interned.Lock()
	defer interned.Unlock()
	if v, ok := interned.m[s]; ok {
		return v
	}
	if interned.m == nil || len(interned.m) >= internCap {
		interned.m = make(map[string]string, 256)
	}
	s = strings.Clone(s)
	interned.m[s] = s
	return s
}

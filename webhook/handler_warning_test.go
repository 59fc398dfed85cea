package webhook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

func TestStatefulSetPodWarning(t *testing.T) {
	owned := func(kind, apiVersion string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "db-0", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: apiVersion, Kind: kind, Name: "db", UID: "6d0c", Controller: ptr.To(true),
			}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "db"}}, Tolerations: []corev1.Toleration{defaultUnreachable}},
		}
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		rule func(*toleration.Rule)
		want string // a part of the one warning; "" for none
	}{
		{name: "StatefulSet pod, injected", pod: owned("StatefulSet", "apps/v1"), want: "toleration to 0s: on a lost node it is evicted but stays Terminating"},
		{name: "a drop-in StatefulSet's pod", pod: owned("StatefulSet", "apps.kruise.io/v1beta1"), want: "node.kubernetes.io/out-of-service taint or the pod is force-deleted"},
		{name: "another rule's seconds", pod: owned("StatefulSet", "apps/v1"), rule: func(r *toleration.Rule) { r.TolerationSeconds = 5 }, want: "toleration to 5s:"},
		{name: "ReplicaSet pod", pod: owned("ReplicaSet", "apps/v1")},
		{name: "bare pod", pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "a"}}}}},
		{name: "DaemonSet pod (skipped)", pod: owned("DaemonSet", "apps/v1")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHandler(t)
			if tc.rule != nil {
				tc.rule(&h.Rule)
			}
			resp := h.Handle(context.Background(), request(podJSONOf(t, tc.pod)))
			require.True(t, resp.Allowed)
			if tc.want == "" {
				assert.Empty(t, resp.Warnings)
				return
			}
			require.Len(t, resp.Warnings, 1)
			assert.Contains(t, resp.Warnings[0], tc.want)
			assert.LessOrEqual(t, len(resp.Warnings[0]), 256, "the API server passes on warnings of up to 256 characters")
			assert.NotEmpty(t, resp.Patches, "the warning comes with the patch")
		})
	}
}

// TestStatefulSetPodWarningOnce: a pod the webhook leaves unchanged (already
// as the rule wants, as on a reinvocation, or opted out) gets no warning.
func TestStatefulSetPodWarningOnce(t *testing.T) {
	h, _ := newHandler(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "6d0c"}}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "db"}}},
	}
	req := request(podJSONOf(t, pod))
	first := h.Handle(context.Background(), req)
	require.Len(t, first.Warnings, 1)
	again := h.Handle(context.Background(), request(applyResponse(t, req, first, req.Object.Raw)))
	assert.Empty(t, again.Patches)
	assert.Empty(t, again.Warnings)

	pod.Annotations = map[string]string{toleration.AnnotationInject: "false"}
	optedOut := h.Handle(context.Background(), request(podJSONOf(t, pod)))
	assert.Empty(t, optedOut.Warnings)
}

package retrofit

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

// realistic is the webhook's test pod (three containers, env, volumes,
// labels, annotations, managed fields), as the API server would store it.
func realistic(t *testing.T) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile("../webhook/testdata/pod.json")
	require.NoError(t, err)
	var pod corev1.Pod
	require.NoError(t, json.Unmarshal(raw, &pod))
	pod.Name, pod.ResourceVersion = "checkout-7d9f8b6c5d-x2x9z", "4711"
	pod.CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 20, 9, 12, 45, 0, time.UTC))
	pod.Spec.NodeName = "node-a"
	pod.Status.Phase = corev1.PodRunning
	return &pod
}

func TestSlimPod(t *testing.T) {
	pod := realistic(t)
	pod.Annotations[toleration.AnnotationInjected] = "unreachable=0s"
	pod.Annotations[toleration.AnnotationTolerationSeconds] = "7"
	pod.Annotations[corev1.MirrorPodAnnotationKey] = "hash"
	require.NotEmpty(t, pod.Labels)
	require.NotEmpty(t, pod.ManagedFields)
	require.NotEmpty(t, pod.Spec.Containers)
	full := pod.DeepCopy()

	slim := SlimPod(pod)
	assert.Equal(t, full, pod, "SlimPod changed the pod it was given")
	assert.Equal(t, pod.Namespace, slim.Namespace)
	assert.Equal(t, pod.Name, slim.Name)
	assert.Equal(t, pod.UID, slim.UID)
	assert.Equal(t, pod.ResourceVersion, slim.ResourceVersion)
	assert.Equal(t, pod.CreationTimestamp, slim.CreationTimestamp)
	assert.Equal(t, pod.Spec.NodeName, slim.Spec.NodeName)
	assert.Equal(t, pod.Spec.Tolerations, slim.Spec.Tolerations)
	assert.Equal(t, pod.Status.Phase, slim.Status.Phase)
	require.Len(t, slim.OwnerReferences, 1)
	assert.Equal(t, pod.OwnerReferences[0].Kind, slim.OwnerReferences[0].Kind)
	assert.Equal(t, pod.OwnerReferences[0].UID, slim.OwnerReferences[0].UID)

	// Every annotation key; the values of those the rule reads.
	assert.Len(t, slim.Annotations, len(pod.Annotations))
	for k, v := range pod.Annotations {
		switch k {
		case toleration.AnnotationInjected, toleration.AnnotationTolerationSeconds, corev1.MirrorPodAnnotationKey:
			assert.Equal(t, v, slim.Annotations[k], k)
		default:
			assert.Contains(t, slim.Annotations, k)
			assert.Empty(t, slim.Annotations[k], k)
		}
	}
	assert.Nil(t, slim.Labels)
	assert.Nil(t, slim.ManagedFields)
	assert.Nil(t, slim.Spec.Containers)
	assert.Nil(t, slim.Spec.Volumes)
	assert.Nil(t, slim.Status.Conditions)

	assert.Equal(t, slim, SlimPod(slim), "not idempotent")

	// Shares nothing with the pod given.
	slim.Spec.Tolerations[0].TolerationSeconds = ptr.To[int64](12345)
	slim.Annotations["x"] = "y"
	assert.Equal(t, full, pod)
	require.NotNil(t, SlimPod(&corev1.Pod{}), "an empty pod")
}

// TestSlimPodDecidesAlike: the cached, slim pod is audited and patched
// exactly as the whole pod.
func TestSlimPodDecidesAlike(t *testing.T) {
	installed := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	base := realistic(t)
	variants := map[string]func(p *corev1.Pod){
		"as stored":        func(*corev1.Pod) {},
		"no annotations":   func(p *corev1.Pod) { p.Annotations = nil },
		"no tolerations":   func(p *corev1.Pod) { p.Spec.Tolerations = nil },
		"opted out":        func(p *corev1.Pod) { p.Annotations[toleration.AnnotationInject] = "false" },
		"override":         func(p *corev1.Pod) { p.Annotations[toleration.AnnotationTolerationSeconds] = "9" },
		"invalid override": func(p *corev1.Pod) { p.Annotations[toleration.AnnotationTolerationSeconds] = "x" },
		"mirror":           func(p *corev1.Pod) { p.Annotations[corev1.MirrorPodAnnotationKey] = "h" },
		"daemonset": func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "d", UID: "u"}}
		},
		"finished":    func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
		"terminating": func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) },
		"injected": func(p *corev1.Pod) {
			p.Annotations[toleration.AnnotationInjected] = "unreachable=0s"
			i := toleration.EffectiveToleration(p.Spec.Tolerations, corev1.TaintNodeUnreachable)
			p.Spec.Tolerations[i].TolerationSeconds = ptr.To[int64](0)
		},
		"injected under another rule": func(p *corev1.Pod) {
			p.Annotations[toleration.AnnotationInjected] = "unreachable=30s"
			i := toleration.EffectiveToleration(p.Spec.Tolerations, corev1.TaintNodeUnreachable)
			p.Spec.Tolerations[i].TolerationSeconds = ptr.To[int64](30)
		},
	}
	for name, change := range variants {
		t.Run(name, func(t *testing.T) {
			pod := base.DeepCopy()
			change(pod)
			slim := SlimPod(pod)
			for _, rule := range []toleration.Rule{toleration.DefaultRule(), {TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](20), DefaultTolerationSeconds: 300}} {
				a := Auditor{Rule: rule, InstalledAt: installed}
				want, got := a.Classify(pod, true), a.Classify(slim, true)
				want.pod, got.pod = nil, nil
				assert.Equal(t, want, got)
				wantPatch := rule.Decide(toleration.DocumentOf(pod).Pod).Patch(toleration.DocumentOf(pod))
				gotPatch := rule.Decide(toleration.DocumentOf(slim).Pod).Patch(toleration.DocumentOf(slim))
				assert.Equal(t, wantPatch, gotPatch)
			}
		})
	}
}

// TestFixSlimPodKeepsAnnotations: a patch made from the slim pod adds the
// mark beside the pod's annotations, never in place of them.
func TestFixSlimPodKeepsAnnotations(t *testing.T) {
	pod := realistic(t)
	client := fake.NewClientset(pod)
	res, err := Fixer{Client: client, Rule: toleration.DefaultRule()}.Fix(context.Background(), SlimPod(pod))
	require.NoError(t, err)
	require.True(t, res.Patched)
	got, err := client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	for k, v := range pod.Annotations {
		assert.Equal(t, v, got.Annotations[k], k)
	}
	assert.Equal(t, "unreachable=0s", got.Annotations[toleration.AnnotationInjected])
	assert.Equal(t, pod.Spec.Containers, got.Spec.Containers)
	assert.Equal(t, pod.Labels, got.Labels)
}

// TestFixAfterRuleChange: a pod fastover set under the rule of 0 s gets
// the rule's new 5 s in place, and a pod with the user's own 0 s does not.
func TestFixAfterRuleChange(t *testing.T) {
	set := defaulted("set", time.Now())
	set.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](0)
	set.Annotations = map[string]string{toleration.AnnotationInjected: "unreachable=0s"}
	users := defaulted("users", time.Now())
	users.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](0)
	users.Annotations = map[string]string{toleration.AnnotationInjected: "unreachable=user:0s"}
	set.ResourceVersion, users.ResourceVersion = "1", "2"
	client := fake.NewClientset(set, users)
	fixer := Fixer{Client: client, Rule: toleration.Rule{TolerationSeconds: 5, DefaultTolerationSeconds: 300}}
	a := Auditor{Rule: fixer.Rule}

	assert.Equal(t, StatusNeedsFix, a.Classify(set, true).Status)
	res, err := fixer.Fix(context.Background(), set)
	require.NoError(t, err)
	assert.True(t, res.Patched)
	assert.Equal(t, "unreachable=5s", res.Mark)
	got, err := client.CoreV1().Pods("ns").Get(context.Background(), "set", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(5), *got.Spec.Tolerations[1].TolerationSeconds)
	assert.Equal(t, int64(300), *got.Spec.Tolerations[0].TolerationSeconds, "not-ready is not managed")
	assert.Equal(t, "unreachable=5s", got.Annotations[toleration.AnnotationInjected])
	assert.Equal(t, StatusFast, a.Classify(got, true).Status)

	assert.Equal(t, StatusKept, a.Classify(users, true).Status)
	res, err = fixer.Fix(context.Background(), users)
	require.NoError(t, err)
	assert.False(t, res.Patched)
}

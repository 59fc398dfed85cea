package retrofit

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

var podsResource = schema.GroupResource{Resource: "pods"}

// patches records the pod patches a client receives, in order, and lets
// the test answer them.
type patches struct {
	actions []k8stesting.PatchActionImpl
}

func (p *patches) record(client *fake.Clientset, answer func(n int) error) {
	client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		p.actions = append(p.actions, action.(k8stesting.PatchActionImpl))
		if err := answer(len(p.actions)); err != nil {
			return true, nil, err
		}
		return false, nil, nil // the tracker applies it
	})
}

func (p *patches) ops(t *testing.T, i int) []map[string]any {
	t.Helper()
	var ops []map[string]any
	require.NoError(t, json.Unmarshal(p.actions[i].Patch, &ops))
	return ops
}

func conflict() error {
	return apierrors.NewConflict(podsResource, "a", errors.New("the object has been modified"))
}

func TestFix(t *testing.T) {
	ctx := context.Background()
	pod := podIn("shop", "a")
	client := fake.NewClientset(pod)
	var p patches
	p.record(client, func(int) error { return nil })
	res, err := Fixer{Client: client, Rule: toleration.DefaultRule(), FieldManager: "test"}.Fix(ctx, pod)
	require.NoError(t, err)
	assert.True(t, res.Patched)
	assert.False(t, res.Gone)
	assert.Equal(t, "unreachable=0s", res.Mark)

	require.Len(t, p.actions, 1)
	assert.Equal(t, types.JSONPatchType, p.actions[0].PatchType)
	assert.Equal(t, "test", p.actions[0].PatchOptions.FieldManager)
	assert.Empty(t, p.actions[0].PatchOptions.DryRun)
	assert.Equal(t, []map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
		{"op": "replace", "path": "/spec/tolerations/1/tolerationSeconds", "value": float64(0)},
		{"op": "add", "path": "/metadata/annotations", "value": map[string]any{toleration.AnnotationInjected: "unreachable=0s"}},
	}, p.ops(t, 0), "guarded by the resourceVersion it was decided on")

	stored, err := client.CoreV1().Pods("shop").Get(ctx, "a", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(0), *stored.Spec.Tolerations[1].TolerationSeconds)
	assert.Equal(t, "unreachable=0s", stored.Annotations[toleration.AnnotationInjected])
	assert.Equal(t, stored, res.Pod, "the result is the pod the API server returned")

	// Fixed, it needs nothing more: no second patch.
	res, err = Fixer{Client: client, Rule: toleration.DefaultRule()}.Fix(ctx, stored)
	require.NoError(t, err)
	assert.False(t, res.Patched)
	assert.Len(t, p.actions, 1)
}

func TestFixDryRun(t *testing.T) {
	pod := podIn("shop", "a")
	client := fake.NewClientset(pod)
	var p patches
	p.record(client, func(int) error { return nil })
	res, err := Fixer{Client: client, Rule: toleration.DefaultRule(), DryRun: true}.Fix(context.Background(), pod)
	require.NoError(t, err)
	assert.True(t, res.Patched, "would have been patched")
	require.Len(t, p.actions, 1)
	assert.Equal(t, []string{metav1.DryRunAll}, p.actions[0].PatchOptions.DryRun)
}

// TestFixLeavesAlone: pods the rule leaves alone, or that have nothing
// left to lose, are not patched at all.
func TestFixLeavesAlone(t *testing.T) {
	optOut := podIn("shop", "opt-out")
	optOut.Annotations = map[string]string{toleration.AnnotationInject: "false"}
	user := podIn("shop", "user")
	user.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](600)
	finished := podIn("shop", "finished")
	finished.Status.Phase = corev1.PodFailed
	terminating := podIn("shop", "terminating")
	terminating.DeletionTimestamp = ptr.To(metav1.Now())
	daemon := podIn("shop", "daemon")
	daemon.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "d"}}
	for _, pod := range []*corev1.Pod{optOut, user, finished, terminating, daemon} {
		t.Run(pod.Name, func(t *testing.T) {
			client := fake.NewClientset(pod)
			var p patches
			p.record(client, func(int) error { return nil })
			res, err := Fixer{Client: client, Rule: toleration.DefaultRule()}.Fix(context.Background(), pod)
			require.NoError(t, err)
			assert.False(t, res.Patched)
			assert.Same(t, pod, res.Pod)
			assert.Empty(t, p.actions)
		})
	}
}

// TestFixRetries: a pod that changed under the patch (a Conflict, or an
// Invalid error from the failed test operation) is read again and decided
// again, up to three attempts.
func TestFixRetries(t *testing.T) {
	ctx := context.Background()
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "a",
		field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), "1", "test failed")})

	t.Run("conflict, then the pod as it is now", func(t *testing.T) {
		pod := podIn("shop", "a")
		client := fake.NewClientset(pod)
		// Meanwhile, the user set a not-ready toleration of their own and
		// the resourceVersion moved on.
		changed := pod.DeepCopy()
		changed.ResourceVersion = "2"
		changed.Spec.Tolerations[0].TolerationSeconds = ptr.To[int64](60)
		require.NoError(t, client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), changed, "shop"))
		var p patches
		p.record(client, func(n int) error {
			if n == 1 {
				return conflict()
			}
			return nil
		})
		rule := toleration.DefaultRule()
		rule.NotReadyTolerationSeconds = ptr.To[int64](5)
		res, err := Fixer{Client: client, Rule: rule}.Fix(ctx, pod)
		require.NoError(t, err)
		assert.True(t, res.Patched)
		require.Len(t, p.actions, 2)
		assert.Equal(t, map[string]any{"op": "test", "path": "/metadata/resourceVersion", "value": "2"}, p.ops(t, 1)[0],
			"the second patch is guarded by the pod read again")
		assert.Equal(t, "unreachable=0s,not-ready=user:60s", res.Mark, "decided again on the pod as it is now")
	})

	t.Run("invalid (the test operation failed), then patched", func(t *testing.T) {
		pod := podIn("shop", "a")
		client := fake.NewClientset(pod)
		var p patches
		p.record(client, func(n int) error {
			if n == 1 {
				return invalid
			}
			return nil
		})
		res, err := Fixer{Client: client, Rule: toleration.DefaultRule()}.Fix(ctx, pod)
		require.NoError(t, err)
		assert.True(t, res.Patched)
		assert.Len(t, p.actions, 2)
	})

	t.Run("changed at every attempt: an error after three", func(t *testing.T) {
		pod := podIn("shop", "a")
		client := fake.NewClientset(pod)
		var p patches
		p.record(client, func(int) error { return conflict() })
		res, err := Fixer{Client: client, Rule: toleration.DefaultRule()}.Fix(ctx, pod)
		require.Error(t, err)
		assert.True(t, apierrors.IsConflict(err))
		assert.Contains(t, err.Error(), "patch pod shop/a:")
		assert.False(t, res.Patched)
		assert.Len(t, p.actions, maxAttempts)
	})

	t.Run("changed into a pod that needs nothing", func(t *testing.T) {
		pod := podIn("shop", "a")
		client := fake.NewClientset(pod)
		fixed := pod.DeepCopy()
		fixed.ResourceVersion = "2"
		fixed.Annotations = map[string]string{toleration.AnnotationInject: "false"}
		require.NoError(t, client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), fixed, "shop"))
		var p patches
		p.record(client, func(int) error { return conflict() })
		res, err := Fixer{Client: client, Rule: toleration.DefaultRule()}.Fix(ctx, pod)
		require.NoError(t, err)
		assert.False(t, res.Patched)
		assert.Equal(t, "2", res.Pod.ResourceVersion, "the pod as read again")
		assert.Len(t, p.actions, 1)
	})
}

func TestFixGoneAndErrors(t *testing.T) {
	ctx := context.Background()
	fixer := func(client *fake.Clientset) Fixer { return Fixer{Client: client, Rule: toleration.DefaultRule()} }

	t.Run("deleted before the patch", func(t *testing.T) {
		pod := podIn("shop", "a")
		res, err := fixer(fake.NewClientset()).Fix(ctx, pod)
		require.NoError(t, err)
		assert.True(t, res.Gone)
		assert.False(t, res.Patched)
	})

	t.Run("deleted after a conflict", func(t *testing.T) {
		pod := podIn("shop", "a")
		client := fake.NewClientset(pod)
		var p patches
		p.record(client, func(int) error {
			require.NoError(t, client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "shop", "a"))
			return conflict()
		})
		res, err := fixer(client).Fix(ctx, pod)
		require.NoError(t, err)
		assert.True(t, res.Gone)
	})

	t.Run("replaced by a pod of the same name", func(t *testing.T) {
		pod := podIn("shop", "a")
		client := fake.NewClientset(pod)
		other := pod.DeepCopy()
		other.UID, other.ResourceVersion = "another-uid", "7"
		require.NoError(t, client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), other, "shop"))
		var p patches
		p.record(client, func(int) error { return conflict() })
		res, err := fixer(client).Fix(ctx, pod)
		require.NoError(t, err)
		assert.True(t, res.Gone, "another pod: the one to fix is gone")
		assert.Len(t, p.actions, 1, "the new pod is not patched here")
	})

	t.Run("an error that is not a change", func(t *testing.T) {
		pod := podIn("shop", "a")
		client := fake.NewClientset(pod)
		var p patches
		p.record(client, func(int) error { return apierrors.NewForbidden(podsResource, "a", errors.New("policy")) })
		res, err := fixer(client).Fix(ctx, pod)
		require.Error(t, err)
		assert.True(t, apierrors.IsForbidden(err))
		assert.Contains(t, err.Error(), "patch pod shop/a:")
		assert.False(t, res.Patched)
		assert.Len(t, p.actions, 1, "not retried")
	})

	t.Run("reading it again fails", func(t *testing.T) {
		pod := podIn("shop", "a")
		client := fake.NewClientset(pod)
		var p patches
		p.record(client, func(int) error { return conflict() })
		client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("down")
		})
		_, err := fixer(client).Fix(ctx, pod)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "read pod shop/a again:")
		assert.True(t, apierrors.IsServiceUnavailable(err))
	})
}

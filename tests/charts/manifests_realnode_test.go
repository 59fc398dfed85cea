package charts_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/charts"
	"github.com/fastover/fastover/toleration"
)

// TestManifestsOnRealNodes is `kubectl apply --server-side -k manifests/`
// onto two real nodes, then the reconcile overlay over it, pulling the
// images the kustomizations name from the test's registry:
//   - the webhook's two pods get Ready and a pod of a labelled namespace is
//     injected through the Service;
//   - with the overlay, the reconciler's pod gets Ready; the webhook scaled
//     to zero (failurePolicy Ignore: pods are admitted as they are), a pod
//     created then is fixed in place by the reconciler (the 0 s toleration,
//     the same pod), and the webhook scaled back serves again.
func TestManifestsOnRealNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, _ := realEnv(ctx, t, cluster.Options{}, "real-1", "real-2")
	ch, err := charts.Load(charts.Webhook)
	require.NoError(t, err)
	_, err = env.PushImages(ctx, ch.Metadata.AppVersion)
	require.NoError(t, err)
	root, err := cluster.ModuleRoot()
	require.NoError(t, err)
	applier, err := install.NewApplier(env.Config)
	require.NoError(t, err)

	began := time.Now()
	res, err := applier.ApplyDir(ctx, filepath.Join(root, "manifests"), install.ApplyOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Warnings)
	require.NoError(t, waitAvailable(ctx, env, systemNS, "fastover-webhook", 3*time.Minute), "the webhook's Deployment")
	const ns = "real-manifests"
	require.NoError(t, env.CreateNamespace(ctx, ns, map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}))
	require.NoError(t, install.WaitInjecting(ctx, env.Client, ns, time.Minute))
	t.Logf("kubectl apply -k manifests/: the webhook's pods Ready and injecting %v after the apply", time.Since(began).Round(100*time.Millisecond))
	for _, p := range webhookPods(ctx, t, env) {
		assert.Equal(t, cluster.ImageRepository+"/fastover-webhook:"+ch.Metadata.AppVersion, p.Status.ContainerStatuses[0].Image)
	}

	began = time.Now()
	res, err = applier.ApplyDir(ctx, filepath.Join(root, "manifests", "overlays", "reconcile"), install.ApplyOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Warnings)
	require.NoError(t, waitAvailable(ctx, env, systemNS, "fastover-reconciler", 3*time.Minute), "the reconciler's Deployment")
	t.Logf("the reconcile overlay: the reconciler Ready %v after the apply", time.Since(began).Round(100*time.Millisecond))

	scale(ctx, t, env, "fastover-webhook", 0)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(webhookPods(ctx, t, env)) == 0, nil
	}), "the webhook's pods are still there")
	pod, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "missed"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: cluster.PauseImage}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Empty(t, pod.Annotations[toleration.AnnotationInjected], "the webhook at zero injected a pod")
	created := time.Now()
	var fixed *corev1.Pod
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		fixed = p
		i := toleration.EffectiveToleration(p.Spec.Tolerations, corev1.TaintNodeUnreachable)
		return i >= 0 && p.Spec.Tolerations[i].TolerationSeconds != nil && *p.Spec.Tolerations[i].TolerationSeconds == 0, nil
	}), "the reconciler did not fix the pod")
	assert.Equal(t, pod.UID, fixed.UID, "fixed in place")
	t.Logf("a pod created with the webhook at zero fixed in place by the reconciler %v after its creation", time.Since(created).Round(100*time.Millisecond))

	scale(ctx, t, env, "fastover-webhook", 2)
	require.NoError(t, waitAvailable(ctx, env, systemNS, "fastover-webhook", 3*time.Minute), "the webhook scaled back")
	require.NoError(t, install.WaitInjecting(ctx, env.Client, ns, time.Minute))
}

// scale sets the Deployment's replicas in the release namespace.
func scale(ctx context.Context, t *testing.T, env *cluster.Env, name string, replicas int32) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	_, err := env.Client.AppsV1().Deployments(systemNS).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// waitAvailable waits until the Deployment's rollout is complete (as
// `kubectl rollout status`).
func waitAvailable(ctx context.Context, env *cluster.Env, ns, name string, timeout time.Duration) error {
	d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return waitRollout(ctx, env, ns, name, d.Generation, timeout)
}

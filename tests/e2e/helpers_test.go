package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
)

type appsDeployment = appsv1.Deployment

// deployment is a one-replica Deployment of a pod that kwok runs.
func deployment(name string, tolerations []corev1.Toleration) *appsv1.Deployment {
	lbl := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					Containers:  []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
					Tolerations: tolerations,
				},
			},
		},
	}
}

// waitRunning waits until app has a running pod and returns it.
func waitRunning(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, app string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pods, err := cluster.PodsOf(ctx, c, ns, app)
		if err != nil {
			t.Fatalf("list pods of %s: %v", app, err)
		}
		if p := cluster.RunningPod(pods, ""); p != nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running pod of %s after %v: %s", app, timeout, describePods(pods))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describePods(pods []corev1.Pod) string {
	s := fmt.Sprintf("%d pods:", len(pods))
	for _, p := range pods {
		s += fmt.Sprintf(" [%s node=%q phase=%s ready=%t deleting=%t]",
			p.Name, p.Spec.NodeName, p.Status.Phase, cluster.PodReady(&p), p.DeletionTimestamp != nil)
	}
	return s
}

// effectiveToleration returns the toleration the taint-eviction controller
// would apply to a NoExecute taint with the key: the first that matches.
func effectiveToleration(tols []corev1.Toleration, key string) *corev1.Toleration {
	taint := &corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute}
	for i := range tols {
		if tols[i].ToleratesTaint(klog.Background(), taint, false) {
			return &tols[i]
		}
	}
	return nil
}

// assertEffectiveSeconds checks the tolerationSeconds of the pod's
// effective toleration for the NoExecute taint key (nil: forever).
func assertEffectiveSeconds(t *testing.T, pod *corev1.Pod, key string, want *int64) {
	t.Helper()
	tol := effectiveToleration(pod.Spec.Tolerations, key)
	if tol == nil {
		t.Errorf("pod %s: no toleration matches %s:NoExecute; tolerations %+v", pod.Name, key, pod.Spec.Tolerations)
		return
	}
	if (want == nil) != (tol.TolerationSeconds == nil) || (want != nil && *want != *tol.TolerationSeconds) {
		t.Errorf("pod %s: effective %s toleration %s, want %s", pod.Name, key, secondsString(tol.TolerationSeconds), secondsString(want))
	}
}

func secondsString(s *int64) string {
	if s == nil {
		return "forever"
	}
	return fmt.Sprintf("%ds", *s)
}

// envCount is a positive count from the environment variable name, def
// where it is unset: a test's size, larger by hand than in make test.
func envCount(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/toleration"
)

// TestWebhookInjection runs fastover-webhook behind the real API server's
// admission chain and checks, for each kind of pod, the effective
// tolerations the taint-eviction controller would apply.
func TestWebhookInjection(t *testing.T) {
	t.Parallel()
	env := cluster.Start(t, cluster.Options{Nodes: []string{"node-a"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wh := startWebhook(t, env)
	wh.register(ctx, t, env, admissionregistrationv1.Fail)
	c := env.Client

	const on, off = "injected", "plain"
	require.NoError(t, env.CreateNamespace(ctx, on, injectLabel()))
	require.NoError(t, env.CreateNamespace(ctx, off, nil))

	create := func(t *testing.T, ns string, pod *corev1.Pod) *corev1.Pod {
		t.Helper()
		got, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		return got
	}
	withAnnotation := func(name, key, value string) *corev1.Pod {
		p := bare(name)
		p.Annotations[key] = value
		return p
	}

	t.Run("pod in a labelled namespace", func(t *testing.T) {
		pod := create(t, on, bare("direct"))
		assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To[int64](0))
		assertEffectiveSeconds(t, pod, corev1.TaintNodeNotReady, ptr.To[int64](300))
		assert.Equal(t, "unreachable=0s", pod.Annotations[toleration.AnnotationInjected])
	})
	t.Run("pod in an unlabelled namespace", func(t *testing.T) {
		pod := create(t, off, bare("direct"))
		assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To[int64](300))
		assert.NotContains(t, pod.Annotations, toleration.AnnotationInjected)
	})
	t.Run("deployments", func(t *testing.T) {
		for ns, want := range map[string]int64{on: 0, off: 300} {
			_, err := c.AppsV1().Deployments(ns).Create(ctx, deployment("web", nil), metav1.CreateOptions{})
			require.NoError(t, err)
			pod := waitRunning(ctx, t, c, ns, "web", time.Minute)
			assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To(want))
		}
	})
	t.Run("DaemonSet pods are left alone", func(t *testing.T) {
		lbl := map[string]string{"app": "agent"}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: lbl},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: bare("").Spec},
			},
		}
		_, err := c.AppsV1().DaemonSets(on).Create(ctx, ds, metav1.CreateOptions{})
		require.NoError(t, err)
		pod := waitRunning(ctx, t, c, on, "agent", time.Minute)
		// The DaemonSet controller's own toleration: forever.
		assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, nil)
		assert.NotContains(t, pod.Annotations, toleration.AnnotationInjected)
	})
	t.Run("opt-out", func(t *testing.T) {
		pod := create(t, on, withAnnotation("opted-out", toleration.AnnotationInject, "false"))
		assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To[int64](300))
		assert.NotContains(t, pod.Annotations, toleration.AnnotationInjected)
	})
	t.Run("override", func(t *testing.T) {
		pod := create(t, on, withAnnotation("override", toleration.AnnotationTolerationSeconds, "30"))
		assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To[int64](30))
		assert.Equal(t, "unreachable=30s", pod.Annotations[toleration.AnnotationInjected])
	})
	t.Run("invalid override is denied with its reason", func(t *testing.T) {
		_, err := c.CoreV1().Pods(on).Create(ctx, withAnnotation("bad", toleration.AnnotationTolerationSeconds, "soon"), metav1.CreateOptions{})
		require.Error(t, err)
		assert.True(t, apierrors.IsForbidden(err), "%v", err)
		assert.Contains(t, err.Error(), `admission webhook "pods.fastover.io" denied the request`)
		assert.Contains(t, err.Error(), toleration.AnnotationTolerationSeconds)
		assert.Contains(t, err.Error(), "non-negative integer")
		t.Logf("the client sees: %v", err)
	})
	t.Run("user's toleration is kept", func(t *testing.T) {
		p := bare("user")
		p.Spec.Tolerations = []corev1.Toleration{{
			Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](600),
		}}
		pod := create(t, on, p)
		assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To[int64](600))
		assert.Equal(t, "unreachable=user:600s", pod.Annotations[toleration.AnnotationInjected])
	})
	t.Run("dry run", func(t *testing.T) {
		pod, err := c.CoreV1().Pods(on).Create(ctx, bare("dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To[int64](0))
		assert.Equal(t, "unreachable=0s", pod.Annotations[toleration.AnnotationInjected])
		_, err = c.CoreV1().Pods(on).Get(ctx, "dry", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "a dry-run pod is not stored: %v", err)
	})
	t.Run("metrics", func(t *testing.T) {
		assert.GreaterOrEqual(t, wh.scrape(t, "fastover_webhook_pods_mutated_total"), 3.0)
		assert.Equal(t, 1.0, wh.scrape(t, "fastover_webhook_pods_denied_total"))
		assert.Equal(t, 1.0, wh.scrape(t, `fastover_webhook_pods_skipped_total{reason="opt-out"}`))
		assert.GreaterOrEqual(t, wh.scrape(t, `fastover_webhook_pods_skipped_total{reason="daemonset"}`), 1.0)
		assert.GreaterOrEqual(t, wh.scrape(t, `fastover_webhook_pods_unchanged_total`), 1.0)
		assert.Positive(t, wh.scrape(t, `controller_runtime_webhook_requests_total{code="200",webhook="/mutate-v1-pod"}`))
	})
	t.Run("graceful shutdown on SIGTERM", func(t *testing.T) {
		require.NoError(t, wh.proc.Signal(syscall.SIGTERM))
		exited, err := wh.proc.WaitExit(15 * time.Second)
		require.True(t, exited, "fastover-webhook still running 15s after SIGTERM")
		assert.NoError(t, err, "exit status after SIGTERM")
	})
}

// TestWebhookNodeLoss is the point of it all, through the real admission
// chain: two Deployments with no tolerations of their own, one in a
// labelled namespace, on the same node; the node vanishes; the injected pod
// is replaced within grace + 10s, the other stays.
func TestWebhookNodeLoss(t *testing.T) {
	t.Parallel()
	const grace = 10 * time.Second
	env := cluster.Start(t, cluster.Options{NodeMonitorGracePeriod: grace, Nodes: []string{"node-a"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	injectedAndControl(ctx, t, env)
	env.AddNodes(t, "node-b")

	nodeLoss(ctx, t, env, "node-a", grace, app{"labelled", "app"}, app{"unlabelled", "app"})
}

// injectedAndControl runs the webhook, registered as installed
// (failurePolicy Ignore: an outage never blocks pod creation), and the
// same one-replica Deployment "app" in the labelled namespace "labelled"
// and in "unlabelled", the control group; it waits until both pods run,
// injected (0 s) and not (300 s).
func injectedAndControl(ctx context.Context, t *testing.T, env *cluster.Env) {
	t.Helper()
	wh := startWebhook(t, env)
	wh.register(ctx, t, env, admissionregistrationv1.Ignore)
	require.NoError(t, env.CreateNamespace(ctx, "labelled", injectLabel()))
	require.NoError(t, env.CreateNamespace(ctx, "unlabelled", nil))
	for _, ns := range []string{"labelled", "unlabelled"} {
		_, err := env.Client.AppsV1().Deployments(ns).Create(ctx, deployment("app", nil), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	assertEffectiveSeconds(t, waitRunning(ctx, t, env.Client, "labelled", "app", time.Minute), corev1.TaintNodeUnreachable, ptr.To[int64](0))
	assertEffectiveSeconds(t, waitRunning(ctx, t, env.Client, "unlabelled", "app", time.Minute), corev1.TaintNodeUnreachable, ptr.To[int64](300))
}

// TestWebhookCertRotation replaces the webhook's certificate files while a
// client keeps creating pods through the API server, with failurePolicy
// Fail so that any failed admission is an error: none may fail, and new
// TLS handshakes present the new certificate, without a restart.
func TestWebhookCertRotation(t *testing.T) {
	t.Parallel()
	env := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wh := startWebhook(t, env)
	wh.register(ctx, t, env, admissionregistrationv1.Fail)
	const ns = "rotation"
	require.NoError(t, env.CreateNamespace(ctx, ns, injectLabel()))
	oldSerial := wh.serial
	pid := wh.proc.Pid()

	stream := startPodStream(ctx, env, ns)
	stream.waitMore(ctx, t, 20)
	// Three rotations; after each, new handshakes must present the new
	// certificate and admissions must go on through it.
	const rotations = 3
	before := stream.count()
	var pickups []string
	for range rotations {
		wh.rotate(t)
		rotated := time.Now()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			serial, err := wh.servedSerial()
			return err == nil && serial.Cmp(wh.serial) == 0, nil
		}), "new handshakes never presented the new certificate")
		pickups = append(pickups, fmt.Sprintf("%dms", time.Since(rotated).Milliseconds()))
		stream.waitMore(ctx, t, 20)
	}
	stream.finish(t)

	assert.NotEqual(t, oldSerial, wh.serial)
	assert.Equal(t, pid, wh.proc.Pid(), "the webhook was not restarted")
	t.Logf("rotation: %d pods admitted before the first rotation, %d during and after %d rotations, 0 failed; new certificate served %s after the files changed",
		before, stream.count()-before, rotations, strings.Join(pickups, ", "))
}

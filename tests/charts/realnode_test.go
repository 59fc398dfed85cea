package charts_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/certmanager"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/charts"
	"github.com/fastover/fastover/toleration"
)

// webhookSelector selects the chart's webhook pods.
const webhookSelector = "app.kubernetes.io/name=fastover-webhook"

// TestChartOnRealNodes is `helm install` of charts/fastover with its
// default values (cert-manager mode) onto two real nodes, pulling the image
// fastover's image build made (pushed to the test's registry under the
// reference the chart names):
//   - helm's --wait returns with the webhook's two pods Ready, one per
//     node, running the image of the digest pushed: the kubelet mounted
//     cert-manager's Secret and the rule's ConfigMap where the webhook reads
//     them, under the chart's restricted securityContext;
//   - kube-apiserver calls the webhook through the chart's Service (its
//     ClusterIP, by the kube-proxy of its machine: realEnv), as the chart
//     configures it (failurePolicy, timeoutSeconds), and a pod of a
//     labelled namespace gets the 0 s unreachable toleration;
//   - a renewed certificate is served by both pods, and `helm upgrade`
//     that changes the rule (tolerationSeconds 0 → 5) is applied, both
//     without a restart (the same pods, no container restarted);
//   - with failurePolicy Fail and a client creating a pod every 20 ms: a
//     `helm upgrade` of the rule, `kubectl rollout restart` of the
//     webhook and a drain (evictions, the PodDisruptionBudget holding) of
//     one webhook pod's node fail no admission and leave no pod uninjected.
func TestChartOnRealNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	nodes := []string{"real-1", "real-2"}
	env, _ := realEnv(ctx, t, cluster.Options{}, nodes...)
	ch, err := charts.Load(charts.Webhook)
	require.NoError(t, err)
	began := time.Now()
	digests, err := env.PushImages(ctx, ch.Metadata.AppVersion)
	require.NoError(t, err)
	t.Logf("fastover's images built and pushed as %s/*:%s in %v", cluster.ImageRepository, ch.Metadata.AppVersion, time.Since(began).Round(100*time.Millisecond))

	require.NoError(t, env.CreateNamespace(ctx, systemNS, restricted(nil)))
	h := newHelm(t, env, "fastover", systemNS)
	began = time.Now()
	h.install(ctx, t, charts.Webhook, 3*time.Minute)
	t.Logf("helm install --wait returned after %v", time.Since(began).Round(100*time.Millisecond))

	pods := webhookPods(ctx, t, env)
	require.Len(t, pods, 2)
	var on []string
	for _, p := range pods {
		on = append(on, p.Spec.NodeName)
		require.Len(t, p.Status.ContainerStatuses, 1)
		cs := p.Status.ContainerStatuses[0]
		assert.True(t, cs.Ready, "pod %s Ready", p.Name)
		assert.Equal(t, cluster.ImageRepository+"/fastover-webhook:"+ch.Metadata.AppVersion, cs.Image)
		assert.Contains(t, cs.ImageID, "@"+digests["fastover-webhook"].String(), "pod %s runs the image pushed", p.Name)
	}
	slices.Sort(on)
	assert.Equal(t, nodes, on, "one webhook pod per node")

	mwc, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "fastover", metav1.GetOptions{})
	require.NoError(t, err)
	wh := mwc.Webhooks[0]
	require.NotNil(t, wh.ClientConfig.Service)
	assert.Equal(t, "fastover-webhook", wh.ClientConfig.Service.Name)
	values := ch.Values["webhook"].(map[string]any)
	assert.EqualValues(t, values["failurePolicy"], *wh.FailurePolicy)
	assert.EqualValues(t, values["timeoutSeconds"], *wh.TimeoutSeconds)

	const probeNS = "real-probe"
	require.NoError(t, env.CreateNamespace(ctx, probeNS, map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}))
	require.NoError(t, install.WaitInjecting(ctx, env.Client, probeNS, time.Minute))
	assert.Equal(t, int64(0), injectedSeconds(ctx, t, env, probeNS))

	t.Run("RenewalWithoutRestart", func(t *testing.T) {
		old := secretSerial(ctx, t, env)
		for _, p := range pods {
			require.Equal(t, old, servedSerial(ctx, t, env, p), "pod %s serves the Secret's certificate", p.Name)
		}
		rev, err := certmanager.Revision(ctx, env, systemNS, "fastover-webhook")
		require.NoError(t, err)
		require.NoError(t, certmanager.Renew(ctx, env, systemNS, "fastover-webhook"))
		renewed := time.Now()
		require.NoError(t, certmanager.WaitRevision(ctx, env, systemNS, "fastover-webhook", rev+1))
		current := secretSerial(ctx, t, env)
		require.NotEqual(t, old, current, "the renewal issued a new certificate")
		t.Logf("certificate renewed (revision %d) %v after the request", rev+1, time.Since(renewed).Round(100*time.Millisecond))
		for _, p := range pods {
			require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
				return servedSerial(ctx, t, env, p) == current, nil
			}), "pod %s does not serve the renewed certificate", p.Name)
			t.Logf("pod %s on %s serves the renewed certificate %v after the request", p.Name, p.Spec.NodeName, time.Since(renewed).Round(100*time.Millisecond))
		}
		assertSamePods(ctx, t, env, pods)
	})

	t.Run("RuleChangeWithoutRestart", func(t *testing.T) {
		began := time.Now()
		h.upgrade(ctx, t, charts.Webhook, 3*time.Minute, "rule.tolerationSeconds=5")
		require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			return injectedSeconds(ctx, t, env, probeNS) == 5, nil
		}), "pods are not injected with the upgraded rule")
		t.Logf("helm upgrade (tolerationSeconds 0 → 5): pods injected with 5 s %v after the upgrade began", time.Since(began).Round(100*time.Millisecond))
		assertSamePods(ctx, t, env, pods)
	})

	t.Run("UpgradeRestartDrainUnderFail", func(t *testing.T) {
		h.upgrade(ctx, t, charts.Webhook, 3*time.Minute, "webhook.failurePolicy=Fail")
		const ns = "real-stream"
		require.NoError(t, env.CreateNamespace(ctx, ns, restricted(map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue})))
		stream := startPodStream(ctx, env, ns)
		defer stream.finish()
		stream.waitMark(ctx, t, "unreachable=0s", 20)

		began := time.Now()
		h.upgrade(ctx, t, charts.Webhook, 3*time.Minute, "webhook.failurePolicy=Fail", "rule.tolerationSeconds=5")
		stream.waitMark(ctx, t, "unreachable=5s", 20)
		t.Logf("helm upgrade (rule 0 → 5 s) served %v after it began", time.Since(began).Round(100*time.Millisecond))

		began = time.Now()
		rolloutRestart(ctx, t, env, systemNS, "fastover-webhook")
		t.Logf("rollout restart of the webhook's Deployment complete after %v", time.Since(began).Round(100*time.Millisecond))
		stream.waitMark(ctx, t, "unreachable=5s", 20)

		var webhooks []corev1.Pod
		for _, p := range webhookPods(ctx, t, env) {
			if p.DeletionTimestamp == nil {
				webhooks = append(webhooks, p)
			}
		}
		node := webhooks[0].Spec.NodeName
		// The PodDisruptionBudget (minAvailable 1) holds: once the
		// drain has evicted a webhook pod, the eviction of one on the
		// other node is refused until the replacement is Ready.
		refused := -1
		checkPDB := func() {
			for _, p := range webhooks {
				if p.Spec.NodeName != node {
					err := env.Client.PolicyV1().Evictions(systemNS).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: systemNS}})
					assert.True(t, apierrors.IsTooManyRequests(err), "evicting %s while the drained pod is replaced: %v, want 429 from the PodDisruptionBudget", p.Name, err)
					refused = 0
					if apierrors.IsTooManyRequests(err) {
						refused = 1
					}
					return
				}
			}
		}
		began = time.Now()
		evictions := drain(ctx, t, env, node, checkPDB)
		if refused >= 0 {
			t.Logf("the PodDisruptionBudget refused the eviction of the other node's webhook pod during the drain: %t", refused == 1)
		}
		t.Logf("drain of %s (%s): %d eviction requests (%d refused by the PodDisruptionBudget), the pods replaced after %v",
			node, strings.Join(evictions.pods, ", "), evictions.requests, evictions.refused, time.Since(began).Round(100*time.Millisecond))
		stream.waitMark(ctx, t, "unreachable=5s", 20)
		uncordon(ctx, t, env, node)

		stream.finish()
		stream.mu.Lock()
		defer stream.mu.Unlock()
		t.Logf("failurePolicy Fail, a pod every 20 ms through upgrade, rollout restart and drain: %d pods tried, %d with 0 s, %d with 5 s, %d failed, %d not injected, slowest creation %v",
			stream.attempts, stream.marks["unreachable=0s"], stream.marks["unreachable=5s"], len(stream.errs), len(stream.notInjected), stream.maxLatency.Round(time.Millisecond))
		assert.Empty(t, stream.errs, "failed admissions")
		assert.Empty(t, stream.notInjected, "pods admitted without injection")
		for _, p := range webhookPods(ctx, t, env) {
			assert.NotEqual(t, node, p.Spec.NodeName, "pod %s on the drained node", p.Name)
		}
	})
}

// rolloutRestart is `kubectl rollout restart` of the Deployment and
// `kubectl rollout status`: it returns once the rollout is complete.
func rolloutRestart(ctx context.Context, t *testing.T, env *cluster.Env, ns, name string) {
	t.Helper()
	generation := rolloutRestartStart(ctx, t, env, ns, name)
	require.NoError(t, waitRollout(ctx, env, ns, name, generation, 3*time.Minute), "rollout of %s/%s", ns, name)
}

// rolloutRestartStart is `kubectl rollout restart`: it changes the pod
// template's restartedAt annotation and returns the Deployment's new
// generation.
func rolloutRestartStart(ctx context.Context, t *testing.T, env *cluster.Env, ns, name string) int64 {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	d, err := env.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	return d.Generation
}

// waitRollout waits as `kubectl rollout status` does: the Deployment's
// controller saw generation, every replica updated and available, no old
// one left.
func waitRollout(ctx context.Context, env *cluster.Env, ns, name string, generation int64, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || d.Status.ObservedGeneration < generation {
			return false, nil
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		s := d.Status
		return s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want, nil
	})
}

// evictions counts a drain's eviction requests.
type evictions struct {
	pods              []string
	requests, refused int
}

// drain is `kubectl drain --ignore-daemonsets`: it cordons the node, evicts
// each of its pods through the Eviction API (retrying those a
// PodDisruptionBudget refuses, with 429, every 500 ms as kubectl does
// every 5 s) and waits until they are gone and the webhook's Deployment
// is whole again. afterFirst, if set, runs right after the first webhook
// pod that was not terminating is evicted.
func drain(ctx context.Context, t *testing.T, env *cluster.Env, node string, afterFirst func()) evictions {
	t.Helper()
	var ev evictions
	first := true
	_, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	list, err := env.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	require.NoError(t, err)
	for _, p := range list.Items {
		ev.pods = append(ev.pods, p.Namespace+"/"+p.Name)
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			ev.requests++
			err := env.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
			switch {
			case err == nil || apierrors.IsNotFound(err):
				if err == nil && first && afterFirst != nil && p.DeletionTimestamp == nil && p.Labels["app.kubernetes.io/name"] == "fastover-webhook" {
					first = false
					afterFirst()
				}
				return true, nil
			case apierrors.IsTooManyRequests(err):
				ev.refused++
				return false, nil
			}
			return false, err
		}), "evict %s/%s", p.Namespace, p.Name)
	}
	for _, p := range list.Items {
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err) || (err == nil && got.UID != p.UID), nil
		}), "pod %s/%s still on %s", p.Namespace, p.Name, node)
	}
	d, err := env.Client.AppsV1().Deployments(systemNS).Get(ctx, "fastover-webhook", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, waitRollout(ctx, env, systemNS, "fastover-webhook", d.Generation, 2*time.Minute))
	return ev
}

// uncordon is `kubectl uncordon`.
func uncordon(ctx context.Context, t *testing.T, env *cluster.Env, node string) {
	t.Helper()
	_, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{})
	require.NoError(t, err)
}

// webhookPods are the chart's webhook pods.
func webhookPods(ctx context.Context, t *testing.T, env *cluster.Env) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{LabelSelector: webhookSelector})
	require.NoError(t, err)
	return list.Items
}

// assertSamePods asserts that the webhook's pods are those given, none of
// their containers restarted.
func assertSamePods(ctx context.Context, t *testing.T, env *cluster.Env, pods []corev1.Pod) {
	t.Helper()
	now := webhookPods(ctx, t, env)
	require.Len(t, now, len(pods))
	uids := map[string]bool{}
	for _, p := range pods {
		uids[string(p.UID)] = true
	}
	for _, p := range now {
		assert.True(t, uids[string(p.UID)], "pod %s is new", p.Name)
		for _, cs := range p.Status.ContainerStatuses {
			assert.Zero(t, cs.RestartCount, "pod %s's container %s restarted", p.Name, cs.Name)
		}
	}
}

// injectedSeconds creates (dry run) a pod in ns and returns the
// unreachable toleration's seconds the webhook gave it (-1: none).
func injectedSeconds(ctx context.Context, t *testing.T, env *cluster.Env, ns string) int64 {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: cluster.PauseImage}}},
	}
	got, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	i := toleration.EffectiveToleration(got.Spec.Tolerations, corev1.TaintNodeUnreachable)
	if i < 0 || got.Spec.Tolerations[i].TolerationSeconds == nil {
		return -1
	}
	return *got.Spec.Tolerations[i].TolerationSeconds
}

// secretSerial is the serial number of the certificate in the webhook's
// serving Secret.
func secretSerial(ctx context.Context, t *testing.T, env *cluster.Env) string {
	t.Helper()
	s, err := env.Client.CoreV1().Secrets(systemNS).Get(ctx, "fastover-webhook-tls", metav1.GetOptions{})
	require.NoError(t, err)
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	require.NotNil(t, block, "the Secret's %s", corev1.TLSCertKey)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return fmt.Sprint(cert.SerialNumber)
}

// servedSerial is the serial number of the certificate the pod's webhook
// port serves ("" if it cannot be reached).
func servedSerial(ctx context.Context, t *testing.T, env *cluster.Env, p corev1.Pod) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	raw, err := env.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, "9443"))
	if err != nil {
		return ""
	}
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the serial is read, nothing trusted
	defer func() { _ = c.Close() }()
	if err := c.HandshakeContext(ctx); err != nil {
		return ""
	}
	return fmt.Sprint(c.ConnectionState().PeerCertificates[0].SerialNumber)
}

package charts_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/tests/charts"
)

// helm runs helm's own install and upgrade (its SDK: what `helm install
// --wait` and `helm upgrade --wait` do, server-side apply and kstatus
// waits included) against the control plane, for one release.
type helm struct {
	cfg       *action.Configuration
	client    kubernetes.Interface
	release   string
	namespace string
}

// newHelm is helm for the release in namespace, with the control plane's
// kubeconfig (dialled through its network namespace) and helm's log in
// the test's.
func newHelm(t *testing.T, env *cluster.Env, release, namespace string) *helm {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &env.Kubeconfig
	flags.Namespace = &namespace
	cache := t.TempDir()
	flags.CacheDir = &cache
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.Dial = env.DialContext
		return c
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, cfg.Init(flags, namespace, "secret"))
	return &helm{cfg: cfg, client: env.Client, release: release, namespace: namespace}
}

// install is `helm install --wait --timeout timeout RELEASE chart --set ...`.
func (h *helm) install(ctx context.Context, t *testing.T, chart string, timeout time.Duration, sets ...string) {
	t.Helper()
	ch, err := charts.Load(chart)
	require.NoError(t, err)
	vals, err := charts.Values(sets...)
	require.NoError(t, err)
	in := action.NewInstall(h.cfg)
	in.ReleaseName, in.Namespace = h.release, h.namespace
	in.WaitStrategy, in.Timeout = kube.StatusWatcherStrategy, timeout
	_, err = in.RunWithContext(ctx, ch, vals)
	require.NoError(t, err, "helm install %s %s %v\n%s", h.release, chart, sets, h.describePods(ctx))
}

// upgrade is `helm upgrade --wait --timeout timeout RELEASE chart --set ...`
// (values not given are the chart's defaults, as without --reuse-values).
func (h *helm) upgrade(ctx context.Context, t *testing.T, chart string, timeout time.Duration, sets ...string) {
	t.Helper()
	ch, err := charts.Load(chart)
	require.NoError(t, err)
	vals, err := charts.Values(sets...)
	require.NoError(t, err)
	up := action.NewUpgrade(h.cfg)
	up.Namespace = h.namespace
	up.WaitStrategy, up.Timeout = kube.StatusWatcherStrategy, timeout
	_, err = up.RunWithContext(ctx, h.release, ch, vals)
	require.NoError(t, err, "helm upgrade %s %s %v\n%s", h.release, chart, sets, h.describePods(ctx))
}

// describePods says, for a failure, how the pods of the release's
// namespace are: phase, node, containers' states and the end of their logs.
func (h *helm) describePods(ctx context.Context) string {
	client := h.client
	list, err := client.CoreV1().Pods(h.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range list.Items {
		fmt.Fprintf(&b, "pod %s on %s: %s %s\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s\n", c.Type, c.Status, c.Message)
		}
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s ready=%t restarts=%d state=%+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State)
		}
		tail := int64(15)
		logs, err := client.CoreV1().Pods(h.namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
		fmt.Fprintf(&b, "  log (%v):\n%s\n", err, logs)
	}
	return b.String()
}

// tlogWriter writes to the test's log.
type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

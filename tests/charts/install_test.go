package charts_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fastover/fastover/internal/certmanager"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/charts"
	"github.com/fastover/fastover/toleration"
)

const (
	systemNS  = "fastover-system"
	exampleNS = "fastover-example"
)

// TestChartInstall installs charts/fastover on the local control plane as
// the README says, with the real cert-manager of the harness:
//   - every helm command of the README renders and is applied server-side
//     (a dry run, through validation and admission) into namespaces that
//     enforce the restricted Pod Security Standard, without a warning;
//   - the default render for real: cert-manager issues the chain and its
//     cainjector sets the caBundle; the webhook, as local processes behind
//     the chart's Service, injects pods through the chart's configuration;
//   - an upgrade that changes the rule (tolerationSeconds 0 → 5) in the
//     ConfigMap fastover-rule, which the replicas reload, and rolled
//     out as the Deployment would (maxSurge 1, maxUnavailable 0), while a
//     client creates a pod every 20 ms: no admission fails or misses
//     injection.
func TestChartInstall(t *testing.T) {
	ip := machineIPv4(t)
	env := cluster.Start(t, cluster.Options{
		Nodes:          []string{"node-a"},
		APIServerFlags: []string{"--enable-aggregator-routing=true"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	certmanager.Start(t, env)
	applier, err := install.NewApplier(env.Config)
	require.NoError(t, err)

	require.NoError(t, env.CreateNamespace(ctx, systemNS, restricted(nil)))
	require.NoError(t, env.CreateNamespace(ctx, exampleNS, restricted(map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue})))

	// The monitoring values render the Prometheus Operator's kinds: its
	// CRDs first, so that the API server validates them too.
	require.NoError(t, install.ApplyPrometheusOperatorCRDs(ctx, env.Config, "charts-test"))

	t.Run("ReadmeCombinations", func(t *testing.T) {
		for _, in := range readmeInstalls(t) {
			objs := render(t, in.chart, in.namespace, in.sets...)
			res, err := applier.Apply(ctx, objs, install.ApplyOptions{DryRun: true})
			require.NoError(t, err, "%s", in.line)
			assert.Empty(t, res.Warnings, "warnings applying %s", in.line)
		}
	})

	// The default install for real, but for the webhook's pods: local
	// processes stand for them (kwok's pods run nothing).
	objs := render(t, charts.Webhook, systemNS)
	start := time.Now()
	res, err := applier.Apply(ctx, charts.Without(objs, "Deployment", "PodDisruptionBudget"), install.ApplyOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Warnings)
	require.NoError(t, certmanager.WaitReady(ctx, env, systemNS, "fastover-webhook"))
	issued := time.Since(start)
	_, err = install.WaitCABundle(ctx, env.Client, "fastover", systemNS, "fastover-webhook-tls", time.Minute)
	require.NoError(t, err)
	injected := time.Since(start)

	certDir := filepath.Join(t.TempDir(), "tls")
	require.NoError(t, install.MirrorSecret(ctx, env.Client, systemNS, "fastover-webhook-tls", certDir, 100*time.Millisecond))
	// The rule: the chart's ConfigMap, mirrored as the kubelet mounts it,
	// where the Deployment's --rule-file reads it.
	assert.Contains(t, containerArgs(t, objs, "fastover-webhook"), "--rule-file="+toleration.RuleFile)
	assert.Equal(t, int64(0), renderedRule(t, objs).TolerationSeconds)
	ruleDir := filepath.Join(t.TempDir(), "rule")
	require.NoError(t, install.MirrorConfigMap(ctx, env.Client, systemNS, toleration.RuleConfigMapName, ruleDir, 100*time.Millisecond))
	ruleFile := []string{"--rule-file=" + ruleDir}
	binary(t, "fastover-webhook")
	var replicas []*replica
	for range 2 {
		r := startReplica(ctx, t, env, systemNS, "fastover-webhook", ip, certDir, len(replicas), ruleFile)
		replicas = append(replicas, r)
	}
	for _, r := range replicas {
		require.NoError(t, r.WaitReady(ctx))
	}
	// The probe pods are bare: a labelled namespace without Pod Security.
	require.NoError(t, env.CreateNamespace(ctx, "chart-probe", map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}))
	require.NoError(t, install.WaitInjecting(ctx, env.Client, "chart-probe", time.Minute))
	t.Logf("chart install: serving certificate Ready %v after the apply, caBundle injected at %v",
		issued.Round(time.Millisecond), injected.Round(time.Millisecond))

	// The upgrade: a new rule, rolled out one replica at a time.
	const ns = "chart-upgrade"
	require.NoError(t, env.CreateNamespace(ctx, ns, restricted(map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue})))
	stream := startPodStream(ctx, env, ns)
	defer stream.finish()
	stream.waitMark(ctx, t, "unreachable=0s", 20)

	upgraded := render(t, charts.Webhook, systemNS, "rule.tolerationSeconds=5")
	res, err = applier.Apply(ctx, charts.Without(upgraded, "Deployment", "PodDisruptionBudget"), install.ApplyOptions{})
	require.NoError(t, err)
	assert.Empty(t, res.Warnings)
	assert.Equal(t, int64(5), renderedRule(t, upgraded).TolerationSeconds)
	began := time.Now()
	for _, old := range append([]*replica(nil), replicas...) {
		n := startReplica(ctx, t, env, systemNS, "fastover-webhook", ip, certDir, len(replicas), ruleFile)
		replicas = append(replicas, n)
		require.NoError(t, n.WaitReady(ctx))
		require.NoError(t, old.Proc.Signal(syscall.SIGTERM))
		exited, _ := old.Proc.WaitExit(30 * time.Second)
		require.True(t, exited, "replica %d still running 30s after SIGTERM", old.ID)
	}
	rolled := time.Since(began)
	stream.waitMark(ctx, t, "unreachable=5s", 20)
	stream.finish()
	stream.mu.Lock()
	defer stream.mu.Unlock()
	t.Logf("chart upgrade (tolerationSeconds 0 → 5) rolled over 2 replicas in %v under a pod every 20 ms: %d pods tried, %d with 0s, %d with 5s, %d failed, %d not injected, slowest creation %v",
		rolled.Round(100*time.Millisecond), stream.attempts, stream.marks["unreachable=0s"], stream.marks["unreachable=5s"],
		len(stream.errs), len(stream.notInjected), stream.maxLatency.Round(time.Millisecond))
	assert.Empty(t, stream.errs, "failed admissions")
	assert.Empty(t, stream.notInjected, "pods admitted without injection")
	assert.Equal(t, stream.attempts, stream.marks["unreachable=0s"]+stream.marks["unreachable=5s"])

	// The caBundle and the configuration are the chart's.
	mwc, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "fastover", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, mwc.Webhooks[0].ClientConfig.Service)
	assert.Equal(t, "fastover-webhook", mwc.Webhooks[0].ClientConfig.Service.Name)
}

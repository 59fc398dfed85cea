package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/toleration"
)

// TestRuleConfigMap: the rule's one home is the ConfigMap fastover-rule.
// fastover is installed with it (from manifests/webhook), and the webhook
// process reads it as the kubelet mounts it (--rule-file on a directory
// the test mirrors the ConfigMap into, with the kubelet's ..data swap). A
// change of the ConfigMap in the API reaches the running webhook: a pod
// created afterwards gets the new seconds within a bounded time, with no
// restart (the same process); `kubectl fastover audit` run afterwards
// judges with the new rule. A bad edit keeps the last good rule in the
// webhook, is counted in fastover_webhook_rule_reload_errors_total, and
// is a clear error of the plugin.
func TestRuleConfigMap(t *testing.T) {
	t.Parallel()
	env := cluster.Start(t, cluster.Options{Nodes: []string{"node-a"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := env.Client

	// fastover's namespace and its ConfigMap, as manifests/webhook has them.
	applyRuleConfigMap(ctx, t, env, "webhook")

	ruleDir := filepath.Join(t.TempDir(), "rule")
	require.NoError(t, install.MirrorConfigMap(ctx, c, systemNS, toleration.RuleConfigMapName, ruleDir, 100*time.Millisecond))
	wh := startWebhook(t, env, "--rule-file="+ruleDir)
	wh.register(ctx, t, env, admissionregistrationv1.Fail)
	pid := wh.proc.Pid()

	const ns = "rules"
	require.NoError(t, env.CreateNamespace(ctx, ns, injectLabel()))
	waitInjecting(ctx, t, env)
	create := func(t *testing.T) *corev1.Pod {
		t.Helper()
		p := bare("")
		p.GenerateName = "p-"
		p, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		return p
	}
	before := create(t)
	assert.Equal(t, "unreachable=0s", before.Annotations[toleration.AnnotationInjected], "the installed rule: 0s")
	assert.Equal(t, 1.0, wh.scrapeSum(t, "fastover_webhook_rule_info", `toleration_seconds="0"`, `source="file"`))

	setRule := func(t *testing.T, data map[string]string) {
		t.Helper()
		got, err := c.CoreV1().ConfigMaps(systemNS).Get(ctx, toleration.RuleConfigMapName, metav1.GetOptions{})
		require.NoError(t, err)
		got.Data = data
		_, err = c.CoreV1().ConfigMaps(systemNS).Update(ctx, got, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	t.Run("ChangeReachesTheRunningWebhook", func(t *testing.T) {
		newRule := toleration.Rule{TolerationSeconds: 7, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 300}
		data, err := toleration.MarshalRuleData(newRule)
		require.NoError(t, err)
		changed := time.Now()
		setRule(t, data)
		var after *corev1.Pod
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			after = create(t)
			return after.Annotations[toleration.AnnotationInjected] != "unreachable=0s", nil
		}), "no pod got the new rule within 30s of the ConfigMap's change")
		took := time.Since(changed)
		assert.Equal(t, "unreachable=7s,not-ready=30s", after.Annotations[toleration.AnnotationInjected])
		assertEffectiveSeconds(t, after, corev1.TaintNodeUnreachable, ptr.To[int64](7))
		assertEffectiveSeconds(t, after, corev1.TaintNodeNotReady, ptr.To[int64](30))
		assert.True(t, wh.proc.Running(), "the webhook exited")
		assert.Equal(t, pid, wh.proc.Pid(), "the webhook was restarted")
		assert.Equal(t, 1.0, wh.scrape(t, "fastover_webhook_rule_reloads_total"))
		assert.Equal(t, 1.0, wh.scrapeSum(t, "fastover_webhook_rule_info", `toleration_seconds="7"`, `not_ready_toleration_seconds="30"`))
		t.Logf("rule change (ConfigMap update → a pod with the new seconds): %v, through the mirror's 100 ms poll and the webhook's 2 s poll, same process (pid %d)",
			took.Round(10*time.Millisecond), pid)

		// The plugin reads the same ConfigMap: the pod created under the
		// old rule is to fix, the new one is fast.
		a, code := audit(ctx, t, env, "-n", ns)
		assert.Equal(t, 1, code)
		assert.Equal(t, newRule.Flags(), a.Rule)
		assert.Equal(t, "ConfigMap "+systemNS+"/"+toleration.RuleConfigMapName, a.RuleFrom)
		m := byName(a)
		assert.Equal(t, retrofit.StatusNeedsFix, m[ns+"/"+before.Name].Status)
		assert.Contains(t, m[ns+"/"+before.Name].Reason, "under another rule")
		assert.Equal(t, retrofit.StatusFast, m[ns+"/"+after.Name].Status)
	})

	t.Run("BadEditKeepsTheLastGoodRule", func(t *testing.T) {
		errorsBefore := wh.scrape(t, "fastover_webhook_rule_reload_errors_total")
		setRule(t, map[string]string{toleration.RuleKeyTolerationSeconds: "-1"})
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return wh.scrape(t, "fastover_webhook_rule_reload_errors_total") == errorsBefore+1, nil
		}), "the bad edit was not counted within 30s")
		p := create(t)
		assert.Equal(t, "unreachable=7s,not-ready=30s", p.Annotations[toleration.AnnotationInjected], "the last good rule")
		assert.Equal(t, pid, wh.proc.Pid())
		assert.True(t, wh.proc.Running())
		assert.Contains(t, wh.proc.Tail(50), `tolerationSeconds: want a whole number of seconds, decimal digits only (at most 15), got \"-1\"`, "in the JSON log")

		// The plugin refuses the bad ConfigMap, naming it and the field.
		cmd := exec.CommandContext(ctx, binary(t, "kubectl-fastover"), "audit", "-n", ns, "--kubeconfig="+env.Kubeconfig)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, 2, exit.ExitCode())
		assert.Contains(t, stderr.String(), "ConfigMap fastover-system/fastover-rule")
		assert.Contains(t, stderr.String(), `tolerationSeconds: want a whole number of seconds, decimal digits only (at most 15), got "-1"`)
	})
}

// applyRuleConfigMap applies the rule's ConfigMap (and fastover's
// namespace) as the kustomization of manifests/ has them.
func applyRuleConfigMap(ctx context.Context, t *testing.T, env *cluster.Env, kustomization string) {
	t.Helper()
	dir, err := install.Dir()
	require.NoError(t, err)
	objs, err := install.Render(filepath.Join(dir, kustomization))
	require.NoError(t, err)
	cm := install.Find(objs, "ConfigMap", toleration.RuleConfigMapName)
	require.NotNil(t, cm, "%s has no ConfigMap %s", kustomization, toleration.RuleConfigMapName)
	applier, err := install.NewApplier(env.Config)
	require.NoError(t, err)
	_, err = applier.Apply(ctx, []*unstructured.Unstructured{install.Find(objs, "Namespace", systemNS), cm}, install.ApplyOptions{})
	require.NoError(t, err)
}

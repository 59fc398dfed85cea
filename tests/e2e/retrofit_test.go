package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/toleration"
)

// kubectlFastover runs the plugin against the cluster and returns its
// standard output and exit code.
func kubectlFastover(ctx context.Context, t *testing.T, env *cluster.Env, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, binary(t, "kubectl-fastover"), append(args, "--kubeconfig="+env.Kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), 0
	case errors.As(err, &exit):
		if exit.ExitCode() == 2 {
			t.Fatalf("kubectl fastover %s: %s", strings.Join(args, " "), stderr.String())
		}
		return stdout.String(), exit.ExitCode()
	default:
		t.Fatalf("kubectl fastover %s: %v", strings.Join(args, " "), err)
		return "", -1
	}
}

type auditJSON struct {
	Pods     []retrofit.Finding `json:"pods"`
	Summary  map[string]int     `json:"summary"`
	Rule     []string           `json:"rule"`
	RuleFrom string             `json:"ruleFrom"`
}

func audit(ctx context.Context, t *testing.T, env *cluster.Env, args ...string) (auditJSON, int) {
	t.Helper()
	out, code := kubectlFastover(ctx, t, env, append([]string{"audit", "-o", "json"}, args...)...)
	var a auditJSON
	require.NoError(t, json.Unmarshal([]byte(out), &a), out)
	return a, code
}

func byName(a auditJSON) map[string]retrofit.Finding {
	m := map[string]retrofit.Finding{}
	for _, f := range a.Pods {
		m[f.Namespace+"/"+f.Name] = f
	}
	return m
}

// podVersions maps each pod of ns to its UID and resourceVersion.
func podVersions(ctx context.Context, t *testing.T, env *cluster.Env, ns string) map[string]string {
	t.Helper()
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	m := map[string]string{}
	for _, p := range pods.Items {
		m[p.Name] = string(p.UID) + "@" + p.ResourceVersion
	}
	return m
}

// TestRetrofit: pods that predate fastover, or were created while the
// webhook was down, or in a namespace labelled later, are reported by
// `kubectl fastover audit`, fixed in place by `fix` and by the reconciler,
// and then leave a lost node as fast as injected pods. Pods the rule
// leaves alone are never touched.
// TestRetrofit: pods created before fastover was installed, or while its
// webhook was down, are found by `kubectl fastover audit`, fixed in place
// by `kubectl fastover fix` or the reconciler, and then leave a lost node
// like injected ones.
func TestRetrofit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	r := newLegacyCluster(ctx, t)
	t.Run("Audit", r.audit)
	t.Run("Fix", r.fix)
	t.Run("RuleOfTheInstalledWebhook", r.ruleOfTheInstalledWebhook)
	t.Run("Reconciler", r.reconciler)
	t.Run("NodeLoss", r.nodeLoss)
}

// legacyCluster is TestRetrofit's cluster: workloads that predate
// fastover in namespace ns (oldPod is the Deployment "old"'s pod), a
// control namespace, and fastover's webhook installed afterwards.
type legacyCluster struct {
	ctx    context.Context
	env    *cluster.Env
	c      kubernetes.Interface
	ns     string
	oldPod *corev1.Pod
	wh     *webhookServer
}

// retrofitGrace is TestRetrofit's node-monitor grace period.
const retrofitGrace = 10 * time.Second

func newLegacyCluster(ctx context.Context, t *testing.T) *legacyCluster {
	env := cluster.Start(t, cluster.Options{NodeMonitorGracePeriod: retrofitGrace, Nodes: []string{"node-a"}})
	c := env.Client

	// Before fastover: a Deployment, a pod that opts out, one with a
	// toleration of its own, a DaemonSet; and a control namespace.
	const ns = "legacy"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	require.NoError(t, env.CreateNamespace(ctx, "control", nil))
	_, err := c.AppsV1().Deployments(ns).Create(ctx, deployment("old", nil), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.AppsV1().Deployments("control").Create(ctx, deployment("app", nil), metav1.CreateOptions{})
	require.NoError(t, err)
	optOut := bare("opt-out")
	optOut.Annotations[toleration.AnnotationInject] = "false"
	user := bare("user-600")
	user.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
		Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](600)}}
	for _, p := range []*corev1.Pod{optOut, user} {
		_, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err = c.AppsV1().DaemonSets(ns).Create(ctx, daemonSet("daemon"), metav1.CreateOptions{})
	require.NoError(t, err)
	waitRunning(ctx, t, c, ns, "old", time.Minute)
	waitRunning(ctx, t, c, ns, "daemon", time.Minute)
	waitRunning(ctx, t, c, "control", "app", time.Minute)
	oldPod := waitRunning(ctx, t, c, ns, "old", time.Minute)

	// fastover is installed (failing open), with its rule's ConfigMap,
	// then the namespace labelled.
	wh := startWebhook(t, env)
	wh.register(ctx, t, env, admissionregistrationv1.Ignore)
	applyRuleConfigMap(ctx, t, env, "webhook")
	ns0, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	ns0.Labels[toleration.NamespaceLabel] = toleration.NamespaceLabelValue
	_, err = c.CoreV1().Namespaces().Update(ctx, ns0, metav1.UpdateOptions{})
	require.NoError(t, err)
	return &legacyCluster{ctx: ctx, env: env, c: c, ns: ns, oldPod: oldPod, wh: wh}
}

// audit: the pod that predates fastover needs fixing; the opted-out, the user's and the DaemonSet's are kept.
func (r *legacyCluster) audit(t *testing.T) {
	ctx, env, ns, oldPod := r.ctx, r.env, r.ns, r.oldPod
	a, code := audit(ctx, t, env)
	assert.Equal(t, 1, code, "audit exits 1 when pods need fixing")
	m := byName(a)
	old := m[ns+"/"+oldPod.Name]
	assert.Equal(t, retrofit.StatusNeedsFix, old.Status)
	assert.Equal(t, "created before fastover was installed", old.Reason)
	assert.Equal(t, "300s (default)", old.Unreachable.String())
	assert.Equal(t, retrofit.StatusKept, m[ns+"/opt-out"].Status)
	assert.Equal(t, retrofit.StatusKept, m[ns+"/user-600"].Status)
	assert.Equal(t, "600s", m[ns+"/user-600"].Unreachable.String())
	for name, f := range m {
		if strings.HasPrefix(name, ns+"/daemon-") {
			assert.Equal(t, retrofit.StatusKept, f.Status, name)
			assert.Equal(t, "forever", f.Unreachable.String(), name)
		}
		assert.False(t, strings.HasPrefix(name, "control/"), "unlabelled namespaces are not audited without -A")
	}
	assert.Equal(t, 1, a.Summary[string(retrofit.StatusNeedsFix)])
	// The installed rule: fastover's defaults, and it says where from.
	assert.Equal(t, toleration.DefaultRule().Flags(), a.Rule)
	assert.Equal(t, "ConfigMap fastover-system/fastover-rule", a.RuleFrom)

	all, _ := audit(ctx, t, env, "--all-namespaces")
	for _, f := range all.Pods {
		if f.Namespace == "control" {
			assert.Equal(t, retrofit.StatusOutOfScope, f.Status)
		}
	}
	table, code := kubectlFastover(ctx, t, env, "audit")
	assert.Equal(t, 1, code)
	assert.Contains(t, table, "NAMESPACE  POD")
	assert.Contains(t, table, "created before fastover was installed")
	t.Logf("kubectl fastover audit:\n%s", table)

	// Namespaces picked by their labels (the API server's own
	// kubernetes.io/metadata.name), enabled or not, one line each.
	sum, code := kubectlFastover(ctx, t, env, "audit", "--summary", "--namespace-selector", "kubernetes.io/metadata.name in (control,"+ns+")")
	assert.Equal(t, 1, code, sum)
	assert.Regexp(t, `(?m)^NAMESPACE\s+PODS\s+FAST\s+NEED FIXING\s+KEPT\s+OUT OF SCOPE$`, sum)
	assert.Regexp(t, `(?m)^control\s+1\s+0\s+0\s+0\s+1$`, sum)
	assert.Regexp(t, `(?m)^`+ns+`\s+4\s+0\s+1\s+3\s+0$`, sum)
	assert.NotContains(t, sum, "default", "a namespace the selector does not match")
	t.Logf("kubectl fastover audit --summary --namespace-selector ...:\n%s", sum)
}

// fix: --dry-run changes nothing; fix patches exactly the pod that needs it, in place.
func (r *legacyCluster) fix(t *testing.T) {
	ctx, env, c, ns, oldPod := r.ctx, r.env, r.c, r.ns, r.oldPod
	before := podVersions(ctx, t, env, ns)
	out, code := kubectlFastover(ctx, t, env, "fix", "--dry-run")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "would fix (dry run) 1 pods")
	assert.Equal(t, before, podVersions(ctx, t, env, ns), "--dry-run changed a pod")

	out, code = kubectlFastover(ctx, t, env, "fix")
	assert.Equal(t, 0, code, out)
	t.Logf("kubectl fastover fix:\n%s", out)
	after := podVersions(ctx, t, env, ns)
	for name, v := range before {
		if name == oldPod.Name {
			assert.NotEqual(t, v, after[name], "the pod to fix was not patched")
			assert.True(t, strings.HasPrefix(after[name], string(oldPod.UID)+"@"), "the pod was recreated")
			continue
		}
		assert.Equal(t, v, after[name], "%s was touched", name)
	}
	fixed, err := c.CoreV1().Pods(ns).Get(ctx, oldPod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assertEffectiveSeconds(t, fixed, corev1.TaintNodeUnreachable, ptr.To[int64](0))
	assert.Equal(t, "unreachable=0s", fixed.Annotations[toleration.AnnotationInjected])
	_, code = audit(ctx, t, env)
	assert.Equal(t, 0, code, "audit still finds pods to fix")
}

// ruleOfTheInstalledWebhook: the plugin judges with the rule in the ConfigMap, its flags override it, and a missing ConfigMap is a clear error.
func (r *legacyCluster) ruleOfTheInstalledWebhook(t *testing.T) {
	ctx, env, c := r.ctx, r.env, r.c
	// The tuned overlay's rule, in the ConfigMap the webhook reads:
	// audit applies it unless told otherwise.
	applyRuleConfigMap(ctx, t, env, "overlays/tuned")
	defer applyRuleConfigMap(ctx, t, env, "webhook")

	a, _ := audit(ctx, t, env)
	assert.Equal(t, []string{"--toleration-seconds=5", "--not-ready-toleration-seconds=30", "--default-toleration-seconds=300"}, a.Rule)
	assert.Equal(t, "ConfigMap fastover-system/fastover-rule", a.RuleFrom)
	a, _ = audit(ctx, t, env, "--toleration-seconds=0")
	assert.Equal(t, []string{"--toleration-seconds=0", "--not-ready-toleration-seconds=30", "--default-toleration-seconds=300"}, a.Rule)
	a, _ = audit(ctx, t, env, "--rule-config=")
	assert.Equal(t, toleration.DefaultRule().Flags(), a.Rule)
	assert.Equal(t, "the command line", a.RuleFrom)

	// No rule installed: a clear error, saying what to do.
	require.NoError(t, c.CoreV1().ConfigMaps(systemNS).Delete(ctx, toleration.RuleConfigMapName, metav1.DeleteOptions{}))
	cmd := exec.CommandContext(ctx, binary(t, "kubectl-fastover"), "audit", "--kubeconfig="+env.Kubeconfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Run(), &exit)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Contains(t, stderr.String(), "no ConfigMap fastover-system/fastover-rule")
	assert.Contains(t, stderr.String(), `--rule-config=""`)
}

// reconciler: pods created while the webhook was down, and in a namespace labelled later, are fixed in place by fastover-webhook --reconcile.
func (r *legacyCluster) reconciler(t *testing.T) {
	ctx, env, c, ns, wh := r.ctx, r.env, r.c, r.ns, r.wh
	// Install the reconciler's ServiceAccount, RBAC and admission
	// policy from the manifests and run it as that ServiceAccount.
	kubeconfig := installReconcilerAccess(ctx, t, env)

	// The webhook goes down; pods created meanwhile miss injection.
	wh.proc.Stop(syscall.SIGTERM, 10*time.Second)
	const replicas = 20
	missed := deployment("missed", nil)
	missed.Spec.Replicas = ptr.To[int32](replicas)
	_, err := c.AppsV1().Deployments(ns).Create(ctx, missed, metav1.CreateOptions{})
	require.NoError(t, err)
	// And a namespace is labelled after its pods were created.
	require.NoError(t, env.CreateNamespace(ctx, "late", nil))
	late := deployment("late", nil)
	late.Spec.Replicas = ptr.To[int32](5)
	_, err = c.AppsV1().Deployments("late").Create(ctx, late, metav1.CreateOptions{})
	require.NoError(t, err)
	uids := map[string]string{}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		a, _ := cluster.PodsOf(ctx, c, ns, "missed")
		b, _ := cluster.PodsOf(ctx, c, "late", "late")
		for _, p := range append(a, b...) {
			uids[p.Namespace+"/"+p.Name] = string(p.UID)
		}
		return len(a) == replicas && len(b) == 5, nil
	}))
	pods, err := cluster.PodsOf(ctx, c, ns, "missed")
	require.NoError(t, err)
	for i := range pods {
		assert.Empty(t, pods[i].Annotations[toleration.AnnotationInjected], "injected while the webhook was down?")
	}
	lateNS, err := c.CoreV1().Namespaces().Get(ctx, "late", metav1.GetOptions{})
	require.NoError(t, err)
	lateNS.Labels[toleration.NamespaceLabel] = toleration.NamespaceLabelValue
	_, err = c.CoreV1().Namespaces().Update(ctx, lateNS, metav1.UpdateOptions{})
	require.NoError(t, err)
	pending, code := audit(ctx, t, env)
	require.Equal(t, 1, code)
	toFix := pending.Summary[string(retrofit.StatusNeedsFix)]
	require.GreaterOrEqual(t, toFix, len(uids), "every pod created meanwhile needs fixing")

	// The webhook comes back with --reconcile.
	started := time.Now()
	wh.runAt(t, env, wh.ports, "--reconcile", "--kubeconfig="+kubeconfig,
		"--leader-election-namespace="+systemNS, "--leader-election-identity=webhook-0",
		"--leader-lease-duration=4s", "--leader-renew-deadline=3s", "--leader-retry-period=1s")
	var fixedIn time.Duration
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, code := audit(ctx, t, env); code != 0 {
			return false, nil
		}
		fixedIn = time.Since(started)
		return true, nil
	}), "the reconciler did not fix the pods within 30s")

	for key, uid := range uids {
		nsName, name, _ := strings.Cut(key, "/")
		p, err := c.CoreV1().Pods(nsName).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err, "%s was deleted", key)
		assert.Equal(t, uid, string(p.UID), "%s was recreated", key)
		assertEffectiveSeconds(t, p, corev1.TaintNodeUnreachable, ptr.To[int64](0))
	}
	fixed := wh.scrape(t, "fastover_retrofit_pods_fixed_total")
	assert.Equal(t, float64(toFix), fixed, "pods fixed: exactly those the audit listed")
	patches := wh.scrapeSum(t, "rest_client_requests_total", `method="PATCH"`)
	calls := wh.scrapeSum(t, "rest_client_requests_total")
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + retrofit.EventReason})
		return err == nil && len(events.Items) >= replicas, nil
	}), "no Event on the fixed pods")
	// Leaving alone: the kept pods are as they were.
	m := byName(mustAudit(ctx, t, env))
	assert.Equal(t, retrofit.StatusKept, m[ns+"/opt-out"].Status)
	assert.Equal(t, retrofit.StatusKept, m[ns+"/user-600"].Status)
	t.Logf("reconciler: %d pods (%d missed while the webhook was down, 5 in a namespace labelled later) fixed in place %.1fs after it started (election included, audit polled every 0.2s); %v PATCH requests, %v API requests in all (lists, watches and the Lease included)",
		toFix, replicas, fixedIn.Seconds(), patches, calls)
}

// nodeLoss: the pod fixed in place leaves a lost node like an injected one; the control group's stays.
func (r *legacyCluster) nodeLoss(t *testing.T) {
	ctx, env, c, ns, oldPod := r.ctx, r.env, r.c, r.ns, r.oldPod
	// The pod fixed by `kubectl fastover fix` leaves a lost node like
	// an injected one; the control group's stays.
	env.AddNodes(t, "node-b")
	require.NoError(t, c.AppsV1().Deployments(ns).Delete(ctx, "missed", metav1.DeleteOptions{}))
	p, err := c.CoreV1().Pods(ns).Get(ctx, oldPod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, oldPod.UID, p.UID)
	nodeLoss(ctx, t, env, "node-a", retrofitGrace, app{ns, "old"}, app{"control", "app"})
}

func mustAudit(ctx context.Context, t *testing.T, env *cluster.Env) auditJSON {
	t.Helper()
	a, _ := audit(ctx, t, env)
	return a
}

// daemonSet is a DaemonSet whose pods kwok runs on every node.
func daemonSet(name string) *appsv1.DaemonSet {
	d := deployment(name, nil)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       appsv1.DaemonSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template},
	}
}

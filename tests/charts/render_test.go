package charts_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/charts"
	"github.com/fastover/fastover/toleration"
)

func render(t *testing.T, chart, ns string, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	ch, err := charts.Load(chart)
	require.NoError(t, err)
	vals, err := charts.Values(sets...)
	require.NoError(t, err)
	objs, err := charts.Render(ch, charts.Release{Name: chart, Namespace: ns}, vals)
	require.NoError(t, err, "render %s with %v", chart, sets)
	return objs
}

// TestLint is `helm lint --strict` of both charts, with their defaults and
// with every values combination the README documents.
func TestLint(t *testing.T) {
	for _, in := range readmeInstalls(t) {
		t.Run(in.String(), func(t *testing.T) {
			dir, err := charts.Dir(in.chart)
			require.NoError(t, err)
			vals, err := charts.Values(in.sets...)
			require.NoError(t, err)
			l := lint.RunAll(dir, vals, in.namespace)
			for _, m := range l.Messages {
				// INFO is helm's advice (an icon, for one); anything
				// above fails, as with --strict.
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %v", m)
				} else {
					t.Logf("helm lint: %v", m)
				}
			}
		})
	}
}

// helmInstall is one `helm install` or `helm upgrade` command of the README.
type helmInstall struct {
	line      string
	chart     string
	namespace string
	sets      []string
}

func (i helmInstall) String() string {
	out := []string{i.chart}
	for _, s := range i.sets {
		if len(s) > 40 {
			s = s[:37] + "..."
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

var (
	helmCmd = regexp.MustCompile(`^helm (?:upgrade --install|install|upgrade) \S+ (?:\./)?charts/(fastover(?:-example)?)\b(.*)$`)
	setFlag = regexp.MustCompile(`--set(?:-string|-file)?[ =](\S+)`)
	nsFlag  = regexp.MustCompile(`(?:-n|--namespace)[ =](\S+)`)
)

// testCAPEM stands for the files the README passes with --set-file.
const testCAPEM = "-----BEGIN CERTIFICATE-----\nMIIBfTCCASOgAwIBAgIBATAKBggqhkjOPQQDAjAAMB4XDTI2MDEwMTAwMDAwMFoXDTM2MDEwMTAwMDAwMFowADBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABA==\n-----END CERTIFICATE-----\n"

// readmeInstalls returns the helm commands of the README and docs/
// (docs/install.md): every values combination they document. Continued lines
// (ending in a backslash) are joined.
func readmeInstalls(t *testing.T) []helmInstall {
	t.Helper()
	root, err := cluster.ModuleRoot()
	require.NoError(t, err)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	var all []byte
	for _, f := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		all = append(append(all, data...), '\n')
	}
	text := strings.ReplaceAll(string(all), "\\\n", " ")
	var out []helmInstall
	for _, line := range strings.Split(text, "\n") {
		line = strings.Join(strings.Fields(line), " ")
		m := helmCmd.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		in := helmInstall{line: line, chart: m[1], namespace: "default"}
		for _, s := range setFlag.FindAllStringSubmatch(m[2], -1) {
			set := strings.Trim(s[1], `'"`)
			if strings.HasPrefix(s[0], "--set-file") {
				// The file's content: a CA certificate for the test.
				k, _, _ := strings.Cut(set, "=")
				set = k + "=" + testCAPEM
			}
			in.sets = append(in.sets, set)
		}
		if n := nsFlag.FindStringSubmatch(m[2]); n != nil {
			in.namespace = n[1]
		}
		out = append(out, in)
	}
	charts := map[string]bool{}
	for _, in := range out {
		charts[in.chart] = true
	}
	require.True(t, charts["fastover"] && charts["fastover-example"], "README.md and docs/ document no helm install of both charts: %v", out)
	return out
}

// TestSchemaRejects: wrong values fail the install (helm validates against
// values.schema.json before rendering) with a message that names the value.
func TestSchemaRejects(t *testing.T) {
	for _, tc := range []struct {
		chart string
		sets  []string
		want  string
	}{
		{charts.Webhook, []string{"replicas=0"}, "/replicas"},
		{charts.Webhook, []string{"replicas=two"}, "/replicas"},
		{charts.Webhook, []string{"rule.tolerationSeconds=-1"}, "/rule/tolerationSeconds"},
		{charts.Webhook, []string{"rule.notReadyTolerationSeconds=soon"}, "/rule/notReadyTolerationSeconds"},
		{charts.Webhook, []string{"rule.tolerationSecond=5"}, "tolerationSecond"},
		{charts.Webhook, []string{"webhook.failurePolicy=Never"}, "/webhook/failurePolicy"},
		{charts.Webhook, []string{"webhook.timeoutSeconds=31"}, "/webhook/timeoutSeconds"},
		{charts.Webhook, []string{"webhook.excludedNamespaces={Bad_NS}"}, "/webhook/excludedNamespaces/0"},
		{charts.Webhook, []string{"image.digest=sha256:abc"}, "/image/digest"},
		{charts.Webhook, []string{"image.repository=ghcr.io/fastover/fastover-webhook:v1"}, "/image/repository"},
		{charts.Webhook, []string{"reconciler.qps=0"}, "/reconciler/qps"},
		{charts.Webhook, []string{"certificates.source=vault"}, "/certificates/source"},
		{charts.Webhook, []string{"mode=both"}, "/mode"},
		{charts.Webhook, []string{"certificates.source=secret"}, "caBundle"},
		{charts.Webhook, []string{"monitoring.podMonitor.enable=true"}, "enable"},
		{charts.Webhook, []string{"monitoring.podMonitor.interval=30"}, "/monitoring/podMonitor/interval"},
		{charts.Webhook, []string{"monitoring.prometheusRule.leaders.noLeaderFor=soon"}, "/monitoring/prometheusRule/leaders/noLeaderFor"},
		{charts.Webhook, []string{"monitoring.prometheusRule.leaders.groupBy={job,bad-label}"}, "/monitoring/prometheusRule/leaders/groupBy/1"},
		{charts.Webhook, []string{`monitoring.prometheusRule.leaders.selector=job="x"}`}, "/monitoring/prometheusRule/leaders/selector"},
		{charts.Webhook, []string{"monitoring.prometheusRule.certificateExpiryDays=0"}, "/monitoring/prometheusRule/certificateExpiryDays"},
		{charts.Example, []string{"podMonitor.interval=30"}, "/podMonitor/interval"},
		{charts.Example, []string{"ha=yes"}, "/ha"},
		{charts.Example, []string{"election.leaseDuration=15"}, "/election/leaseDuration"},
		{charts.Example, []string{"replicas=3"}, "replicas"},
	} {
		t.Run(strings.Join(append([]string{tc.chart}, tc.sets...), " "), func(t *testing.T) {
			ch, err := charts.Load(tc.chart)
			require.NoError(t, err)
			vals, err := charts.Values(tc.sets...)
			require.NoError(t, err)
			_, err = charts.Render(ch, charts.Release{Name: "x", Namespace: "x"}, vals)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "values don't meet the specifications of the schema")
			t.Log(err)
		})
	}
}

// Every README combination renders objects that decode into their typed
// API structs strictly (no unknown or misspelt field).
func TestReadmeCombinationsRender(t *testing.T) {
	for _, in := range readmeInstalls(t) {
		t.Run(in.String(), func(t *testing.T) {
			objs := render(t, in.chart, in.namespace, in.sets...)
			require.NotEmpty(t, objs)
			seen := map[string]bool{}
			for _, o := range objs {
				id := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
				assert.False(t, seen[id], "%s twice", id)
				seen[id] = true
				assert.Equal(t, "fastover", o.GetLabels()["app.kubernetes.io/part-of"], id)
				checkTyped(t, o)
			}
		})
	}
}

func checkTyped(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	typed, err := scheme.New(o.GroupVersionKind())
	if err != nil {
		return // cert-manager's kinds
	}
	assert.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, typed, true),
		"%s %s", o.GetKind(), o.GetName())
}

// TestWebhookValues: the values reach the objects.
func TestWebhookValues(t *testing.T) {
	dep := func(objs []*unstructured.Unstructured) *appsv1.Deployment {
		t.Helper()
		o := charts.Find(objs, "Deployment", "fastover-webhook")
		require.NotNil(t, o)
		d := &appsv1.Deployment{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
		return d
	}
	objs := render(t, charts.Webhook, "fastover-system")
	d := dep(objs)
	assert.Equal(t, "ghcr.io/fastover/fastover-webhook:v0.1.0", d.Spec.Template.Spec.Containers[0].Image, "the tag defaults to appVersion")
	assert.Nil(t, charts.Find(objs, "Namespace", "fastover-system"), "helm owns the release namespace by default")
	assert.Nil(t, charts.Find(objs, "Deployment", "fastover-reconciler"))

	digest := "sha256:" + strings.Repeat("ab", 32)
	objs = render(t, charts.Webhook, "ops", "image.digest="+digest, "image.tag=v9", "replicas=1",
		"rule.tolerationSeconds=7", "rule.notReadyTolerationSeconds=20", "rule.defaultTolerationSeconds=120",
		"webhook.excludedNamespaces={ops,batch}", "reconciler.enabled=true", "reconciler.qps=7")
	d = dep(objs)
	c := d.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "ghcr.io/fastover/fastover-webhook@"+digest, c.Image)
	assert.Equal(t, int32(1), *d.Spec.Replicas)
	assert.Nil(t, charts.Find(objs, "PodDisruptionBudget", "fastover-webhook"), "no PodDisruptionBudget for one replica: it would block every drain")
	// The rule is the ConfigMap's, which both Deployments mount.
	cm := charts.Find(objs, "ConfigMap", toleration.RuleConfigMapName)
	require.NotNil(t, cm)
	ruleData, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	rule, err := toleration.ParseRuleData(ruleData)
	require.NoError(t, err, ruleData)
	notReady := int64(20)
	assert.Equal(t, toleration.Rule{TolerationSeconds: 7, NotReadyTolerationSeconds: &notReady, DefaultTolerationSeconds: 120}, rule)
	assert.Contains(t, c.Args, "--rule-file="+toleration.RuleFile)
	assertMountsRule(t, &d.Spec.Template.Spec)
	rec := charts.Find(objs, "Deployment", "fastover-reconciler")
	require.NotNil(t, rec)
	recDep := &appsv1.Deployment{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(rec.Object, recDep))
	recArgs := recDep.Spec.Template.Spec.Containers[0].Args
	assert.Contains(t, recArgs, "--reconcile-qps=7")
	assert.Contains(t, recArgs, "--rule-file="+toleration.RuleFile)
	assertMountsRule(t, &recDep.Spec.Template.Spec)
	for _, a := range append(c.Args, recArgs...) {
		assert.NotContains(t, a, "toleration-seconds", "a rule flag would override the ConfigMap")
	}
	defaults := render(t, charts.Webhook, "fastover-system")
	ruleData, _, _ = unstructured.NestedStringMap(charts.Find(defaults, "ConfigMap", toleration.RuleConfigMapName).Object, "data")
	rule, err = toleration.ParseRuleData(ruleData)
	require.NoError(t, err, ruleData)
	assert.Equal(t, toleration.DefaultRule(), rule)
	vap := charts.Find(objs, "ValidatingAdmissionPolicy", "fastover-reconciler")
	require.NotNil(t, vap)
	assert.Contains(t, fmt.Sprint(vap.Object["spec"]), "system:serviceaccount:ops:fastover-reconciler")
	mwc := charts.Find(objs, "MutatingWebhookConfiguration", "fastover")
	require.NotNil(t, mwc)
	assert.Contains(t, fmt.Sprint(mwc.Object["webhooks"]), "[kube-system ops batch]")
	assert.Equal(t, "ops/fastover-webhook", mwc.GetAnnotations()["cert-manager.io/inject-ca-from"])

	// An existing Secret: no cert-manager object, the caBundle given
	// (PEM is encoded; base64 is taken as is).
	pem := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	for _, ca := range []string{pem, "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="} {
		objs = render(t, charts.Webhook, "fastover-system", "certificates.source=secret", "certificates.secretName=mine", "certificates.caBundle="+ca)
		for _, o := range objs {
			assert.NotEqual(t, "cert-manager.io/v1", o.GetAPIVersion(), o.GetKind())
		}
		mwc = charts.Find(objs, "MutatingWebhookConfiguration", "fastover")
		hooks, _, _ := unstructured.NestedSlice(mwc.Object, "webhooks")
		got, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle")
		assert.Equal(t, "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=", got)
		assert.Empty(t, mwc.GetAnnotations())
		d = dep(objs)
		assert.Equal(t, "mine", d.Spec.Template.Spec.Volumes[0].Secret.SecretName)
	}
}

// assertMountsRule: the pod mounts the ConfigMap fastover-rule where
// --rule-file reads it, as a directory (no subPath: updates reach it).
func assertMountsRule(t *testing.T, spec *corev1.PodSpec) {
	t.Helper()
	var found bool
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == toleration.RuleConfigMapName {
			found = true
			assert.Contains(t, spec.Containers[0].VolumeMounts,
				corev1.VolumeMount{Name: v.Name, MountPath: toleration.RuleFile, ReadOnly: true})
		}
	}
	assert.True(t, found, "no volume of the ConfigMap %s", toleration.RuleConfigMapName)
}

// TestExampleHASwitch: `ha` changes the Deployment's replicas and the
// PodDisruptionBudget, and nothing else.
func TestExampleHASwitch(t *testing.T) {
	on := render(t, charts.Example, "fastover-example", "ha=true")
	off := render(t, charts.Example, "fastover-example", "ha=false")
	replicas := func(objs []*unstructured.Unstructured) int64 {
		n, _, _ := unstructured.NestedInt64(charts.Find(objs, "Deployment", "fastover-example").Object, "spec", "replicas")
		return n
	}
	assert.Equal(t, int64(3), replicas(on))
	assert.Equal(t, int64(1), replicas(off))
	assert.NotNil(t, charts.Find(on, "PodDisruptionBudget", "fastover-example"))
	assert.Nil(t, charts.Find(off, "PodDisruptionBudget", "fastover-example"))
	svc := charts.Find(on, "Service", "fastover-example")
	_, has, _ := unstructured.NestedFieldNoCopy(svc.Object, "spec", "selector")
	assert.False(t, has, "the Service has no selector")

	on = charts.Without(on, "PodDisruptionBudget")
	for _, o := range on {
		if o.GetKind() == "Deployment" {
			unstructured.RemoveNestedField(o.Object, "spec", "replicas")
		}
	}
	for _, o := range off {
		if o.GetKind() == "Deployment" {
			unstructured.RemoveNestedField(o.Object, "spec", "replicas")
		}
	}
	assert.Equal(t, on, off, "ha changed more than the replicas and the PodDisruptionBudget")
}

// TestNoDrift: the charts' default renders are the kustomizations' objects,
// and each overlay of manifests/ is a values combination of the chart:
// the same kinds, names, namespaces and specs, once the labels helm adds
// are left out. A change to one without the other fails here.
func TestNoDrift(t *testing.T) {
	for _, tc := range []struct {
		kustomization string
		chart         string
		ns            string
		sets          []string
		// chartOnly are kinds the chart adds on purpose.
		chartOnly []string
	}{
		// The kustomizations own their namespace; a helm release's
		// namespace is helm's unless namespace.create.
		{".", charts.Webhook, "fastover-system", []string{"namespace.create=true"}, nil},
		{"overlays/fail-closed", charts.Webhook, "fastover-system", []string{"namespace.create=true", "webhook.failurePolicy=Fail"}, nil},
		{"overlays/tuned", charts.Webhook, "fastover-system", []string{"namespace.create=true", "replicas=3", "rule.tolerationSeconds=5", "rule.notReadyTolerationSeconds=30", "webhook.timeoutSeconds=5"}, nil},
		{"overlays/reconcile", charts.Webhook, "fastover-system", []string{"namespace.create=true", "reconciler.enabled=true"}, nil},
		{"overlays/policy", charts.Webhook, "fastover-system", []string{"namespace.create=true", "mode=policy"}, nil},
		{"overlays/monitoring", charts.Webhook, "fastover-system", []string{"namespace.create=true", "monitoring.podMonitor.enabled=true", "monitoring.prometheusRule.enabled=true", "monitoring.dashboard.enabled=true"}, nil},
		// ha: true adds a PodDisruptionBudget the kustomization lacks.
		{"example", charts.Example, "fastover-example", []string{"namespace.create=true"}, []string{"PodDisruptionBudget"}},
		{"../tests/charts/testdata/example-monitoring", charts.Example, "fastover-example", []string{"namespace.create=true", "podMonitor.enabled=true"}, []string{"PodDisruptionBudget"}},
	} {
		t.Run(tc.kustomization, func(t *testing.T) {
			dir, err := install.Dir()
			require.NoError(t, err)
			want, err := install.Render(filepath.Join(dir, tc.kustomization))
			require.NoError(t, err)
			got := charts.Without(render(t, tc.chart, tc.ns, tc.sets...), tc.chartOnly...)
			assertSameObjects(t, want, got)
		})
	}
}

func assertSameObjects(t *testing.T, want, got []*unstructured.Unstructured) {
	t.Helper()
	index := func(objs []*unstructured.Unstructured) (map[string]*unstructured.Unstructured, []string) {
		m := map[string]*unstructured.Unstructured{}
		var ids []string
		for _, o := range objs {
			o = normalise(o)
			id := fmt.Sprintf("%s %s %s/%s", o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
			m[id] = o
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return m, ids
	}
	w, wIDs := index(want)
	g, gIDs := index(got)
	require.Equal(t, wIDs, gIDs, "the kustomization and the chart install different objects")
	for _, id := range wIDs {
		assert.Equal(t, w[id].Object, g[id].Object, "%s differs (want: kustomize, got: helm)", id)
	}
}

// normalise drops the labels helm adds and empty annotation maps, sorts
// the containers' arguments (flags: their order means nothing) and
// collapses the whitespace of multi-line strings (CEL expressions, which
// kustomize and helm fold differently).
func normalise(o *unstructured.Unstructured) *unstructured.Unstructured {
	o = o.DeepCopy()
	o.Object = normaliseValue(o.Object).(map[string]any)
	labels := o.GetLabels()
	for _, l := range charts.HelmLabels {
		delete(labels, l)
	}
	o.SetLabels(labels)
	if len(o.GetAnnotations()) == 0 {
		unstructured.RemoveNestedField(o.Object, "metadata", "annotations")
	}
	return o
}

func normaliseValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normaliseValue(e)
		}
		if args, ok := v["args"].([]any); ok {
			slices.SortStableFunc(args, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = normaliseValue(e)
		}
		return v
	case string:
		if strings.Contains(v, "\n") {
			return strings.Join(strings.Fields(v), " ")
		}
		return v
	default:
		return v
	}
}

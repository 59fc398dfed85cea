package install_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

func render(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	dir, err := install.Dir()
	require.NoError(t, err)
	objs, err := install.Render(filepath.Join(dir, rel))
	require.NoError(t, err)
	return objs
}

func decode[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	o := install.Find(objs, kind, name)
	require.NotNil(t, o, "no %s %s", kind, name)
	out := new(T)
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true))
	return out
}

func TestEveryKustomizationRenders(t *testing.T) {
	dir, err := install.Dir()
	require.NoError(t, err)
	dirs, err := install.Kustomizations(dir)
	require.NoError(t, err)
	for _, want := range []string{".", "webhook", "cert-manager", "example", "overlays/local", "overlays/fail-closed", "overlays/tuned", "overlays/reconcile"} {
		assert.Contains(t, dirs, want)
	}
	for _, d := range dirs {
		t.Run(d, func(t *testing.T) {
			objs := render(t, d)
			require.NotEmpty(t, objs)
			seen := map[string]bool{}
			for _, o := range objs {
				id := o.GetAPIVersion() + " " + o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
				assert.False(t, seen[id], "%s twice", id)
				seen[id] = true
				assert.Equal(t, "fastover", o.GetLabels()["app.kubernetes.io/part-of"], id)
			}
		})
	}
}

// The pieces of the default install must name each other consistently.
func TestWebhookInstallFitsTogether(t *testing.T) {
	objs := render(t, ".")
	dep := decode[appsv1.Deployment](t, objs, "Deployment", "fastover-webhook")
	svc := decode[corev1.Service](t, objs, "Service", "fastover-webhook")
	mwc := decode[admissionv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "fastover")
	cert := install.Find(objs, "Certificate", "fastover-webhook")
	require.NotNil(t, cert)

	assert.Equal(t, int32(2), *dep.Spec.Replicas)
	pod := dep.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	assert.Equal(t, toleration.DefaultRule(), ruleOf(t, objs), "the installed rule is fastover's default")
	assertRuleMounted(t, &pod)
	require.Len(t, c.VolumeMounts, 2)
	mount := c.VolumeMounts[0]
	assert.Equal(t, "tls", mount.Name)
	assert.Empty(t, mount.SubPath, "a subPath mount never sees renewed certificates")
	assert.Contains(t, c.Args, "--cert-dir="+mount.MountPath)
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	require.Len(t, pod.Volumes, 2)
	assert.Equal(t, secretName, pod.Volumes[0].Secret.SecretName)

	require.Len(t, mwc.Webhooks, 1)
	wh := mwc.Webhooks[0]
	assert.Equal(t, cert.GetNamespace()+"/"+cert.GetName(), mwc.Annotations["cert-manager.io/inject-ca-from"])
	require.NotNil(t, wh.ClientConfig.Service)
	assert.Equal(t, svc.Name, wh.ClientConfig.Service.Name)
	assert.Equal(t, svc.Namespace, wh.ClientConfig.Service.Namespace)
	assert.Equal(t, webhook.Path, *wh.ClientConfig.Service.Path)
	assert.Equal(t, admissionv1.Ignore, *wh.FailurePolicy)
	assert.Equal(t, admissionv1.SideEffectClassNone, *wh.SideEffects)
	assert.Equal(t, admissionv1.IfNeededReinvocationPolicy, *wh.ReinvocationPolicy)
	assert.Equal(t, []admissionv1.OperationType{admissionv1.Create}, wh.Rules[0].Operations)
	assert.Equal(t, []string{"pods"}, wh.Rules[0].Resources)
	assert.Len(t, wh.MatchConditions, 2)
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	assert.Contains(t, dnsNames, svc.Name+"."+svc.Namespace+".svc")
	assert.Equal(t, toleration.NamespaceLabel, wh.NamespaceSelector.MatchExpressions[0].Key)
}

func TestOverlays(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		objs := render(t, "overlays/local")
		assert.Nil(t, install.Find(objs, "Deployment", "fastover-webhook"))
		mwc := decode[admissionv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "fastover")
		assert.Nil(t, mwc.Webhooks[0].ClientConfig.Service)
		assert.Equal(t, "https://127.0.0.1:9443"+webhook.Path, *mwc.Webhooks[0].ClientConfig.URL)
		ips, _, _ := unstructured.NestedStringSlice(install.Find(objs, "Certificate", "fastover-webhook").Object, "spec", "ipAddresses")
		assert.Equal(t, []string{"127.0.0.1"}, ips)
	})
	t.Run("fail-closed", func(t *testing.T) {
		objs := render(t, "overlays/fail-closed")
		mwc := decode[admissionv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "fastover")
		assert.Equal(t, admissionv1.Fail, *mwc.Webhooks[0].FailurePolicy)
	})
	t.Run("reconcile", func(t *testing.T) {
		objs := render(t, "overlays/reconcile")
		// The reconciler runs as a Deployment of its own, with the
		// webhook's image and rule; the webhook keeps no token.
		dep := decode[appsv1.Deployment](t, objs, "Deployment", "fastover-reconciler")
		spec := dep.Spec.Template.Spec
		assert.True(t, *spec.AutomountServiceAccountToken, "the reconciler calls the API")
		assert.Contains(t, spec.Containers[0].Args, "--reconcile-only")
		crb := decode[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "fastover-reconciler")
		assert.Equal(t, spec.ServiceAccountName, crb.Subjects[0].Name)
		assert.Equal(t, dep.Namespace, crb.Subjects[0].Namespace)
		wh := decode[appsv1.Deployment](t, objs, "Deployment", "fastover-webhook")
		assert.False(t, *wh.Spec.Template.Spec.AutomountServiceAccountToken, "the webhook calls no API")
		assert.NotEqual(t, wh.Spec.Template.Spec.ServiceAccountName, spec.ServiceAccountName)
		assert.Equal(t, wh.Spec.Template.Spec.Containers[0].Image, spec.Containers[0].Image)
		// The reconciler applies the webhook's rule: both read the
		// ConfigMap's file, and no rule flag overrides it.
		assertRuleMounted(t, &wh.Spec.Template.Spec)
		assertRuleMounted(t, &spec)
	})
	t.Run("tuned", func(t *testing.T) {
		objs := render(t, "overlays/tuned")
		dep := decode[appsv1.Deployment](t, objs, "Deployment", "fastover-webhook")
		assert.Equal(t, int32(3), *dep.Spec.Replicas)
		// The tuned rule is the ConfigMap's, not flags that would
		// override it.
		assertRuleMounted(t, &dep.Spec.Template.Spec)
		assert.Equal(t, toleration.Rule{TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 300}, ruleOf(t, objs))
	})
}

// ruleOf is the rule of the ConfigMap fastover-rule in objs. It parses,
// and is written as MarshalRuleData writes it.
func ruleOf(t *testing.T, objs []*unstructured.Unstructured) toleration.Rule {
	t.Helper()
	cm := decode[corev1.ConfigMap](t, objs, "ConfigMap", toleration.RuleConfigMapName)
	assert.Equal(t, toleration.RuleConfigMapNamespace, cm.Namespace)
	r, err := toleration.ParseRuleData(cm.Data)
	require.NoError(t, err, cm.Data)
	canonical, err := toleration.MarshalRuleData(r)
	require.NoError(t, err)
	assert.Equal(t, canonical, cm.Data, "the rule as the chart writes it, so that the two compare")
	return r
}

// assertRuleMounted: the pod's one container reads the rule from the
// ConfigMap fastover-rule, mounted as a directory (no subPath, so that
// changes reach it), and no rule flag overrides it.
func assertRuleMounted(t *testing.T, pod *corev1.PodSpec) {
	t.Helper()
	c := pod.Containers[0]
	assert.Contains(t, c.Args, "--rule-file="+toleration.RuleFile)
	assert.Zero(t, countPrefix(c.Args, "--toleration-seconds")+countPrefix(c.Args, "--not-ready-toleration-seconds")+
		countPrefix(c.Args, "--default-toleration-seconds"), "a rule flag overrides the ConfigMap: %v", c.Args)
	var volume string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == toleration.RuleConfigMapName {
			volume = v.Name
		}
	}
	require.NotEmpty(t, volume, "no volume of the ConfigMap %s", toleration.RuleConfigMapName)
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: toleration.RuleFile, ReadOnly: true})
}

func TestExampleMatchesTheLeaderLibrary(t *testing.T) {
	objs := render(t, "example")
	ns := decode[corev1.Namespace](t, objs, "Namespace", "fastover-example")
	assert.Equal(t, "enabled", ns.Labels[toleration.NamespaceLabel])
	svc := decode[corev1.Service](t, objs, "Service", "fastover-example")
	assert.Empty(t, svc.Spec.Selector, "the leader publishes the endpoint: no selector")
	dep := decode[appsv1.Deployment](t, objs, "Deployment", "fastover-example")
	assert.Equal(t, int32(3), *dep.Spec.Replicas)
	c := dep.Spec.Template.Spec.Containers[0]
	assert.Contains(t, c.Args, "--service="+svc.Name)
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name)
	}
	assert.Subset(t, env, []string{"POD_NAME", "POD_NAMESPACE", "POD_IP"})
}

func countPrefix(list []string, prefix string) int {
	return len(slices.DeleteFunc(slices.Clone(list), func(s string) bool { return !strings.HasPrefix(s, prefix) }))
}

func TestDecode(t *testing.T) {
	objs, err := install.Decode(strings.NewReader("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\n---\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"b\"}}\n"))
	require.NoError(t, err)
	require.Len(t, objs, 2, "the empty document is left out")
	assert.Equal(t, "Service", objs[0].GetKind())
	assert.Equal(t, "b", objs[1].GetName())

	_, err = install.Decode(strings.NewReader("kind: [\n"))
	assert.Error(t, err)
}

package charts_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fastover/fastover/tests/charts"
	"github.com/fastover/fastover/toleration"
)

// TestPolicyMode: mode=policy renders the policies in place of the
// webhook, reads the rule from the release namespace's ConfigMap, excludes
// the namespaces the webhook would, and keeps the reconciler if asked.
func TestPolicyMode(t *testing.T) {
	objs := render(t, charts.Webhook, "ops", "mode=policy", "reconciler.enabled=true",
		"webhook.excludedNamespaces={batch}", "rule.tolerationSeconds=4")
	for _, kind := range []string{"MutatingWebhookConfiguration", "Service", "PodDisruptionBudget", "Certificate", "Issuer"} {
		for _, o := range objs {
			assert.NotEqual(t, kind, o.GetKind(), "mode=policy renders no %s", kind)
		}
	}
	assert.Nil(t, charts.Find(objs, "Deployment", "fastover-webhook"))
	assert.NotNil(t, charts.Find(objs, "Deployment", "fastover-reconciler"), "the reconciler works in either mode")
	assert.Equal(t, int64(4), renderedRule(t, objs).TolerationSeconds)

	b := &admissionv1.MutatingAdmissionPolicyBinding{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(findObj(t, objs, "MutatingAdmissionPolicyBinding", "fastover").Object, b))
	assert.Equal(t, "ops", b.Spec.ParamRef.Namespace)
	assert.Equal(t, toleration.RuleConfigMapName, b.Spec.ParamRef.Name)
	assert.Equal(t, []string{"kube-system", "ops", "batch"}, b.Spec.MatchResources.NamespaceSelector.MatchExpressions[1].Values)
	v := &admissionv1.ValidatingAdmissionPolicyBinding{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(findObj(t, objs, "ValidatingAdmissionPolicyBinding", "fastover").Object, v))
	assert.Equal(t, b.Spec.MatchResources.NamespaceSelector, v.Spec.MatchResources.NamespaceSelector)

	// The default is the webhook, with no policy.
	def := render(t, charts.Webhook, "ops")
	assert.Nil(t, charts.Find(def, "MutatingAdmissionPolicy", "fastover"))
	assert.NotNil(t, charts.Find(def, "MutatingWebhookConfiguration", "fastover"))
}

package install_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/toleration"
)

// TestPolicyFitsTogether: the policy objects name each other, select the
// namespaces the webhook selects, read the ConfigMap the webhook reads,
// with the keys and the value pattern of toleration.ParseRuleData.
func TestPolicyFitsTogether(t *testing.T) {
	objs := render(t, install.PolicyOverlay)
	kinds := []string{}
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	assert.ElementsMatch(t, []string{"Namespace", "ConfigMap", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, kinds, "overlays/policy installs no webhook")
	assert.Equal(t, toleration.DefaultRule(), ruleOf(t, objs))

	mutating := decode[admissionv1.MutatingAdmissionPolicy](t, objs, "MutatingAdmissionPolicy", install.PolicyName)
	binding := decode[admissionv1.MutatingAdmissionPolicyBinding](t, objs, "MutatingAdmissionPolicyBinding", install.PolicyName)
	validating := decode[admissionv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy", install.PolicyName)
	vBinding := decode[admissionv1.ValidatingAdmissionPolicyBinding](t, objs, "ValidatingAdmissionPolicyBinding", install.PolicyName)
	assert.Equal(t, retrofit.PolicyName, install.PolicyName)

	assert.Equal(t, mutating.Name, binding.Spec.PolicyName)
	assert.Equal(t, validating.Name, vBinding.Spec.PolicyName)
	assert.Equal(t, &admissionv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}, mutating.Spec.ParamKind)
	require.NotNil(t, binding.Spec.ParamRef)
	assert.Equal(t, toleration.RuleConfigMapName, binding.Spec.ParamRef.Name)
	assert.Equal(t, toleration.RuleConfigMapNamespace, binding.Spec.ParamRef.Namespace)
	assert.Equal(t, admissionv1.Ignore, *mutating.Spec.FailurePolicy)
	assert.Equal(t, admissionv1.IfNeededReinvocationPolicy, mutating.Spec.ReinvocationPolicy)
	assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Deny}, vBinding.Spec.ValidationActions)

	// The webhook's namespace selection, exclusions included.
	webhookObjs := render(t, "webhook")
	mwc := decode[admissionv1.MutatingWebhookConfiguration](t, webhookObjs, "MutatingWebhookConfiguration", retrofit.WebhookConfiguration)
	for _, sel := range []*metav1.LabelSelector{binding.Spec.MatchResources.NamespaceSelector, vBinding.Spec.MatchResources.NamespaceSelector} {
		require.NotNil(t, sel)
		assert.Equal(t, mwc.Webhooks[0].NamespaceSelector, sel)
		var excluded []string
		for _, e := range sel.MatchExpressions {
			if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn {
				excluded = append(excluded, e.Values...)
			}
		}
		want := retrofit.ExcludedNamespaces()
		slices.Sort(want)
		slices.Sort(excluded)
		assert.Equal(t, want, excluded)
	}

	// The rule's keys, each read with ParseRuleData's pattern.
	var cel strings.Builder
	for _, v := range mutating.Spec.Variables {
		cel.WriteString(v.Expression + "\n")
	}
	for _, k := range toleration.RuleKeys() {
		assert.Contains(t, cel.String(), "'"+k+"'", "the policy reads the key %s", k)
	}
	assert.Contains(t, cel.String(), `matches('^[0-9]{1,15}$')`)
	assert.Contains(t, validating.Spec.Validations[0].Expression, `matches('^[0-9]{1,15}$')`)
}

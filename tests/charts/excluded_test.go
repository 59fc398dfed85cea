package charts_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/tests/charts"
)

// TestExcludedNamespaces: installed in fastover-system with its defaults,
// the chart's webhook configuration excludes exactly the namespaces the
// audit and the reconciler go by (retrofit.ExcludedNamespaces).
func TestExcludedNamespaces(t *testing.T) {
	objs := render(t, charts.Webhook, "fastover-system")
	u := findObj(t, objs, "MutatingWebhookConfiguration", retrofit.WebhookConfiguration)
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &mwc))
	want := retrofit.ExcludedNamespaces()
	slices.Sort(want)
	require.NotEmpty(t, mwc.Webhooks)
	for _, wh := range mwc.Webhooks {
		require.NotNil(t, wh.NamespaceSelector)
		var got []string
		for _, e := range wh.NamespaceSelector.MatchExpressions {
			if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn {
				got = append(got, e.Values...)
			}
		}
		slices.Sort(got)
		assert.Equal(t, want, got, "webhook %s", wh.Name)
	}
}

package retrofit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/internal/install"
)

// excludedBySelector returns the namespaces a webhook's namespaceSelector
// excludes by name (kubernetes.io/metadata.name NotIn), sorted.
func excludedBySelector(t *testing.T, wh admissionregistrationv1.MutatingWebhook) []string {
	t.Helper()
	require.NotNil(t, wh.NamespaceSelector, "webhook %s has no namespaceSelector", wh.Name)
	var out []string
	for _, e := range wh.NamespaceSelector.MatchExpressions {
		if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn {
			out = append(out, e.Values...)
		}
	}
	slices.Sort(out)
	return out
}

func sortedExcluded() []string {
	want := ExcludedNamespaces()
	slices.Sort(want)
	return want
}

// TestExcludedNamespacesMatchManifests: the webhook configuration's
// namespaceSelector, as written in manifests/webhook and as every
// kustomization of manifests/ renders it, excludes exactly
// ExcludedNamespaces, the list the audit and the reconciler go by. (The
// chart renders the same objects: tests/charts' TestNoDrift.)
func TestExcludedNamespacesMatchManifests(t *testing.T) {
	dir, err := install.Dir()
	require.NoError(t, err)

	raw, err := os.ReadFile(filepath.Join(dir, "webhook", "mutatingwebhookconfiguration.yaml"))
	require.NoError(t, err)
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	require.NoError(t, yaml.UnmarshalStrict(raw, &mwc))
	require.Equal(t, WebhookConfiguration, mwc.Name)
	require.NotEmpty(t, mwc.Webhooks)
	for _, wh := range mwc.Webhooks {
		assert.Equal(t, sortedExcluded(), excludedBySelector(t, wh), "webhook %s of manifests/webhook", wh.Name)
	}

	kustomizations, err := install.Kustomizations(dir)
	require.NoError(t, err)
	checked := 0
	for _, k := range kustomizations {
		objs, err := install.Render(filepath.Join(dir, k))
		require.NoError(t, err)
		u := install.Find(objs, "MutatingWebhookConfiguration", WebhookConfiguration)
		if u == nil {
			continue
		}
		var rendered admissionregistrationv1.MutatingWebhookConfiguration
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rendered), k)
		for _, wh := range rendered.Webhooks {
			assert.Equal(t, sortedExcluded(), excludedBySelector(t, wh), "webhook %s of %s", wh.Name, k)
		}
		checked++
	}
	assert.GreaterOrEqual(t, checked, 2, "the base and its overlays render the webhook configuration")
}

package podgen

import (
	"encoding/base64"
	"errors"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/toleration"
)

// A lane is a namespace of the local control plane that one admission
// path serves: none, the webhook, or the policy. Both fastover
// configurations select namespaces by the same label, so each is narrowed
// here to its own lane's namespace, keeping the rest of its selection.

// WebhookConfiguration returns manifests/webhook's
// MutatingWebhookConfiguration (its rules, matchConditions and selector)
// pointed at url, trusting the CA caPEM, with the failure policy given,
// for the namespace ns only.
func WebhookConfiguration(url string, caPEM []byte, ns, failurePolicy string) (*unstructured.Unstructured, error) {
	dir, err := install.Dir()
	if err != nil {
		return nil, err
	}
	objs, err := install.Render(filepath.Join(dir, "webhook"))
	if err != nil {
		return nil, err
	}
	mwc := install.Find(objs, "MutatingWebhookConfiguration", "fastover")
	if mwc == nil {
		return nil, errors.New("manifests/webhook has no MutatingWebhookConfiguration fastover")
	}
	mwc = mwc.DeepCopy()
	mwc.SetAnnotations(nil) // no cainjector: the CA is given
	if err := install.SetWebhookURL(mwc, url); err != nil {
		return nil, err
	}
	hooks, _, err := unstructured.NestedSlice(mwc.Object, "webhooks")
	if err != nil {
		return nil, err
	}
	hook, ok := hooks[0].(map[string]any)
	if !ok {
		return nil, errors.New("MutatingWebhookConfiguration fastover: malformed webhook")
	}
	// The webhook runs beside the control plane, at url, not behind a
	// Service.
	unstructured.RemoveNestedField(hook, "clientConfig", "service")
	if err := unstructured.SetNestedField(hook, failurePolicy, "failurePolicy"); err != nil {
		return nil, err
	}
	if err := unstructured.SetNestedField(hook, base64.StdEncoding.EncodeToString(caPEM), "clientConfig", "caBundle"); err != nil {
		return nil, err
	}
	if err := OnlyNamespace(hook, ns, "namespaceSelector"); err != nil {
		return nil, err
	}
	return mwc, unstructured.SetNestedSlice(mwc.Object, hooks, "webhooks")
}

// LaneSelector selects the namespace ns if fastover's label selects it:
// for install.PolicyOptions.NamespaceSelector.
func LaneSelector(ns string) *metav1.LabelSelector {
	return &metav1.LabelSelector{
		MatchLabels: map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{ns}},
		},
	}
}

// OnlyNamespace narrows the label selector at path in obj (created if
// missing) to the namespace ns, keeping what it selects besides.
func OnlyNamespace(obj map[string]any, ns string, path ...string) error {
	p := append(append([]string(nil), path...), "matchExpressions")
	exprs, _, err := unstructured.NestedSlice(obj, p...)
	if err != nil {
		return err
	}
	exprs = append(exprs, map[string]any{"key": corev1.LabelMetadataName, "operator": "In", "values": []any{ns}})
	return unstructured.SetNestedSlice(obj, exprs, p...)
}

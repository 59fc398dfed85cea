package install

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/toleration"
)

// The objects of policy mode (manifests/policy): a MutatingAdmissionPolicy
// and a ValidatingAdmissionPolicy, each with a binding of the same name.
const (
	PolicyName = "fastover"
	// PolicyKustomization and PolicyOverlay are relative to Dir(): the
	// policy objects alone, and the whole install without the webhook.
	PolicyKustomization = "policy"
	PolicyOverlay       = "overlays/policy"
)

// PolicyOptions change what PolicyMode installs.
type PolicyOptions struct {
	// Rule, if set, is written into the ConfigMap fastover-rule (the
	// policy's parameter); nil keeps the manifests' rule.
	Rule *toleration.Rule
	// PolicyOnly installs manifests/policy alone, next to an install
	// that already has the namespace and the ConfigMap fastover-rule (the
	// webhook's, for instance); else overlays/policy, which has both.
	PolicyOnly bool
	// NamespaceSelector, if set, replaces the bindings' namespaceSelector
	// (fastover.io/inject=enabled, not kube-system or fastover-system): a
	// test can then have the webhook and the policy serve namespaces of
	// their own.
	NamespaceSelector *metav1.LabelSelector
	// WaitNamespace, if set, is a namespace the policy serves: Install
	// returns once the API server applies both policies to its pods (it
	// picks each new policy up asynchronously, one apart from the other),
	// probing with dry-run pods: one is injected, one with a bad override
	// denied.
	WaitNamespace string
	// Timeout bounds that wait; zero means 30s.
	Timeout time.Duration
}

// RenderPolicy renders the policy mode's objects: manifests/policy, or
// with overlay manifests/overlays/policy (the namespace and the ConfigMap
// fastover-rule too).
func RenderPolicy(overlay bool) ([]*unstructured.Unstructured, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	rel := PolicyKustomization
	if overlay {
		rel = PolicyOverlay
	}
	return Render(filepath.Join(dir, rel))
}

// PolicyMode installs fastover's policy mode on the cluster of cfg, as
// `kubectl apply --server-side -k manifests/overlays/policy` (or
// manifests/policy, PolicyOptions.PolicyOnly), with the options' rule and
// namespace selection, and waits for it to apply if asked to. Tests and
// benchmarks that compare the policy with the webhook call it.
func PolicyMode(ctx context.Context, cfg *rest.Config, opts PolicyOptions) (Result, error) {
	objs, err := RenderPolicy(!opts.PolicyOnly)
	if err != nil {
		return Result{}, err
	}
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && o.GetName() == toleration.RuleConfigMapName && opts.Rule != nil:
			data, err := toleration.MarshalRuleData(*opts.Rule)
			if err != nil {
				return Result{}, fmt.Errorf("the rule: %w", err)
			}
			m := map[string]any{}
			for k, v := range data {
				m[k] = v
			}
			if err := unstructured.SetNestedField(o.Object, m, "data"); err != nil {
				return Result{}, err
			}
		case (o.GetKind() == "MutatingAdmissionPolicyBinding" || o.GetKind() == "ValidatingAdmissionPolicyBinding") && opts.NamespaceSelector != nil:
			sel, err := runtime.DefaultUnstructuredConverter.ToUnstructured(opts.NamespaceSelector)
			if err != nil {
				return Result{}, err
			}
			if err := unstructured.SetNestedMap(o.Object, sel, "spec", "matchResources", "namespaceSelector"); err != nil {
				return Result{}, err
			}
		}
	}
	if opts.PolicyOnly && opts.Rule != nil {
		return Result{}, fmt.Errorf("PolicyOptions.Rule needs the ConfigMap of overlays/policy: not with PolicyOnly (write the ConfigMap %s/%s yourself)",
			toleration.RuleConfigMapNamespace, toleration.RuleConfigMapName)
	}
	a, err := NewApplier(cfg)
	if err != nil {
		return Result{}, err
	}
	res, err := a.Apply(ctx, objs, ApplyOptions{})
	if err != nil || opts.WaitNamespace == "" {
		return res, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if err := WaitInjecting(ctx, client, opts.WaitNamespace, timeout); err != nil {
		return res, fmt.Errorf("policy mode: %w", err)
	}
	if err := WaitDenying(ctx, client, opts.WaitNamespace, timeout); err != nil {
		return res, fmt.Errorf("policy mode: %w", err)
	}
	return res, nil
}

// WaitDenying waits, up to timeout, until the API server denies a pod of
// ns whose fastover.io/toleration-seconds is not a number, as policy
// mode's ValidatingAdmissionPolicy does (probing with a dry-run pod).
func WaitDenying(ctx context.Context, client kubernetes.Interface, ns string, timeout time.Duration) error {
	probe := probePod(map[string]string{toleration.AnnotationTolerationSeconds: "soon"})
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, last = client.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), toleration.AnnotationTolerationSeconds), nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("the API server does not deny a bad %s for pods of %s", toleration.AnnotationTolerationSeconds, ns),
			lastAnswer(last), err)
	}
	return nil
}

// lastAnswer says what the API server answered a probe last: an error, or
// the probe admitted.
func lastAnswer(err error) error {
	if err == nil {
		return errors.New("its last answer: the probe admitted")
	}
	return fmt.Errorf("its last answer: %w", err)
}

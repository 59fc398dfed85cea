package retrofit

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PolicyName is the name of fastover's MutatingAdmissionPolicy in policy
// mode (manifests/policy), and of its binding; the
// ValidatingAdmissionPolicy that denies an invalid override, and its
// binding, have the same name.
const PolicyName = "fastover"

// Mode is how fastover's rule is applied to new pods.
type Mode string

// The modes DetectMode finds.
const (
	// ModeWebhook: the MutatingWebhookConfiguration fastover.
	ModeWebhook Mode = "webhook"
	// ModePolicy: the MutatingAdmissionPolicy fastover and its binding.
	ModePolicy Mode = "policy"
	// ModeBoth: both; each applies the same rule, so a pod gets it once
	// (the second finds nothing to change), but one of them is redundant.
	ModeBoth Mode = "both"
	// ModeNone: neither; new pods are not injected.
	ModeNone Mode = "none"
)

// Installation is what DetectMode found.
type Installation struct {
	Mode Mode `json:"mode"`
	// WebhookSince and PolicySince are the creation times of the webhook
	// configuration and of the policy's binding (the policy applies once
	// both the policy and its binding exist); zero when absent.
	WebhookSince time.Time `json:"webhookSince,omitzero"`
	PolicySince  time.Time `json:"policySince,omitzero"`
	// Notes say what is amiss: a policy without its binding, a binding
	// without its policy, a policy mode the API server does not serve.
	Notes []string `json:"notes,omitempty"`
}

// InstalledAt is when fastover began to apply the rule to new pods: the
// earlier of WebhookSince and PolicySince that is set, or zero (see
// Auditor.InstalledAt).
func (i Installation) InstalledAt() time.Time {
	switch {
	case i.WebhookSince.IsZero():
		return i.PolicySince
	case i.PolicySince.IsZero() || i.WebhookSince.Before(i.PolicySince):
		return i.WebhookSince
	default:
		return i.PolicySince
	}
}

// String is e.g. "policy" or "none (MutatingAdmissionPolicy fastover has
// no binding: it applies to no pod)".
func (i Installation) String() string {
	s := string(i.Mode)
	for n, note := range i.Notes {
		if n == 0 {
			s += " ("
		} else {
			s += "; "
		}
		s += note
	}
	if len(i.Notes) > 0 {
		s += ")"
	}
	return s
}

// DetectMode finds how fastover is installed: its MutatingWebhookConfiguration
// (webhook mode), its MutatingAdmissionPolicy with its binding (policy
// mode), both or none. Objects that do not exist are not errors, and
// neither is an API server that does not serve MutatingAdmissionPolicy
// (before Kubernetes 1.36: a note says so). Any other failure to read them
// (not allowed, the API server unreachable) is an error: it does not mean
// "not installed". The Installation found so far is returned with it.
func DetectMode(ctx context.Context, client kubernetes.Interface) (Installation, error) {
	var inst Installation
	var errs []error
	var webhook bool
	adm := client.AdmissionregistrationV1()

	mwc, err := adm.MutatingWebhookConfigurations().Get(ctx, WebhookConfiguration, metav1.GetOptions{})
	switch {
	case err == nil:
		webhook, inst.WebhookSince = true, mwc.CreationTimestamp.Time
	case !apierrors.IsNotFound(err):
		errs = append(errs, fmt.Errorf("read MutatingWebhookConfiguration %s: %w", WebhookConfiguration, err))
	}

	var policy, binding bool
	var bindingSince time.Time
	_, err = adm.MutatingAdmissionPolicies().Get(ctx, PolicyName, metav1.GetOptions{})
	switch {
	case err == nil:
		policy = true
	case apierrors.IsNotFound(err):
		if !servesPolicies(client) {
			inst.Notes = append(inst.Notes, "the API server does not serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.36+)")
		}
	default:
		errs = append(errs, fmt.Errorf("read MutatingAdmissionPolicy %s: %w", PolicyName, err))
	}
	if policy {
		b, err := adm.MutatingAdmissionPolicyBindings().Get(ctx, PolicyName, metav1.GetOptions{})
		switch {
		case err == nil:
			binding, bindingSince = true, b.CreationTimestamp.Time
			if b.Spec.PolicyName != PolicyName {
				binding = false
				inst.Notes = append(inst.Notes, fmt.Sprintf("MutatingAdmissionPolicyBinding %s binds %q, not the policy %s", PolicyName, b.Spec.PolicyName, PolicyName))
			}
		case apierrors.IsNotFound(err):
			inst.Notes = append(inst.Notes, fmt.Sprintf("MutatingAdmissionPolicy %s has no binding %s: it applies to no pod", PolicyName, PolicyName))
		default:
			errs = append(errs, fmt.Errorf("read MutatingAdmissionPolicyBinding %s: %w", PolicyName, err))
		}
	}
	policy = policy && binding
	if policy {
		inst.PolicySince = bindingSince
	}

	switch {
	case webhook && policy:
		inst.Mode = ModeBoth
	case webhook:
		inst.Mode = ModeWebhook
	case policy:
		inst.Mode = ModePolicy
	default:
		inst.Mode = ModeNone
	}
	return inst, errors.Join(errs...)
}

// servesPolicies reports whether the API server serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicies (Kubernetes
// 1.36+). If discovery fails, it says yes: no note rather than a wrong one.
func servesPolicies(client kubernetes.Interface) bool {
	list, err := client.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		return !apierrors.IsNotFound(err)
	}
	for _, r := range list.APIResources {
		if r.Name == "mutatingadmissionpolicies" {
			return true
		}
	}
	return false
}

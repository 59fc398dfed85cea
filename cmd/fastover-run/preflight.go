package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fastover/fastover/leader"
)

// preflight checks, before the replica campaigns, what would otherwise
// show only on the leader, as a log line and an Event: that the Service
// is there without a selector, and that the Role grants what the leader
// library needs (leader.PolicyRules). The permissions come from one
// SelfSubjectRulesReview, which every authenticated user may create.
// Pods and Events are optional: without them crash takeover and Events
// are off, and a warning says so.
func preflight(ctx context.Context, client kubernetes.Interface, ns string, ep *leader.EndpointConfig) error {
	var problems []string
	if ep != nil {
		svc, err := client.CoreV1().Services(ns).Get(ctx, ep.Service, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			problems = append(problems, fmt.Sprintf("Service %s/%s not found: create it without a selector (the leader becomes its only endpoint)", ns, ep.Service))
		case apierrors.IsForbidden(err):
			// The Role's check below says what is missing.
		case err != nil:
			return fmt.Errorf("reading Service %s/%s: %w", ns, ep.Service, err)
		case len(svc.Spec.Selector) > 0:
			problems = append(problems, fmt.Sprintf("Service %s/%s has a selector: remove it (fastover-run makes the leader its only endpoint; with a selector, every ready replica would get traffic)", ns, ep.Service))
		}
	}
	review, err := client.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns},
	}, metav1.CreateOptions{})
	if err != nil {
		klog.InfoS("could not review this replica's permissions; starting without checking them", "err", err)
	} else {
		required, optional := missingRules(review.Status.ResourceRules, leader.PolicyRules(ep))
		if review.Status.Incomplete {
			// Another authorizer (a webhook) may grant what RBAC does not
			// list: only a warning.
			if len(required)+len(optional) > 0 {
				klog.InfoS("the permissions review is incomplete and lacks some of what fastover-run needs; starting anyway", "missing", append(required, optional...))
			}
		} else {
			if len(optional) > 0 {
				klog.InfoS("warning: the Role lacks optional permissions (pods: crash takeover is off; events: no Events)", "missing", optional)
			}
			if len(required) > 0 {
				problems = append(problems, fmt.Sprintf("the Role of this pod's ServiceAccount in namespace %s lacks: %s (docs/run.md has the Role)", ns, strings.Join(required, ", ")))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// missingRules returns the verbs of want that rules do not grant, as
// "verb group/resource", the required ones and the optional ones (pods,
// events) apart.
func missingRules(rules []authorizationv1.ResourceRule, want []rbacv1.PolicyRule) (required, optional []string) {
	for _, w := range want {
		for _, group := range w.APIGroups {
			for _, res := range w.Resources {
				for _, verb := range w.Verbs {
					if granted(rules, group, res, verb) {
						continue
					}
					name := verb + " " + res
					if group != "" {
						name += "." + group
					}
					if group == "" && (res == "pods" || res == "events") {
						optional = append(optional, name)
					} else {
						required = append(required, name)
					}
				}
			}
		}
	}
	return required, optional
}

// granted says whether a rule grants verb on group/resource.
func granted(rules []authorizationv1.ResourceRule, group, resource, verb string) bool {
	match := func(list []string, v string) bool {
		return slices.Contains(list, v) || slices.Contains(list, "*")
	}
	for _, r := range rules {
		// A rule limited to some names does not grant the list or
		// watch the library makes.
		if len(r.ResourceNames) == 0 && match(r.APIGroups, group) && match(r.Resources, resource) && match(r.Verbs, verb) {
			return true
		}
	}
	return false
}

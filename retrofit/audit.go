package retrofit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/toleration"
)

// excludedNamespaces are never injected, labelled or not. The webhook's
// configuration (manifests/webhook, and the chart's) names the same ones in
// its namespaceSelector; a unit test holds them to this list.
var excludedNamespaces = []string{"kube-system", "fastover-system"}

// ExcludedNamespaces returns the namespaces that are never injected,
// labelled or not: the webhook's configuration excludes them. It is a new
// slice at each call.
func ExcludedNamespaces() []string { return slices.Clone(excludedNamespaces) }

// WebhookConfiguration is the name of fastover's
// MutatingWebhookConfiguration; its creation time tells pods created
// before the install from pods the webhook missed.
const WebhookConfiguration = "fastover"

// Status is where a pod stands.
type Status string

// Statuses of a pod.
const (
	// StatusFast: its effective tolerations are what the rule wants.
	StatusFast Status = "fast"
	// StatusNeedsFix: the rule would change its tolerations; Fix does.
	StatusNeedsFix Status = "needs-fix"
	// StatusKept: the rule leaves it alone (opted out, the user's own
	// toleration, a DaemonSet or mirror pod, an invalid override).
	StatusKept Status = "kept"
	// StatusOutOfScope: its namespace is not enabled, or it has finished
	// or is being deleted.
	StatusOutOfScope Status = "out-of-scope"
)

// Finding is the audit of one pod.
type Finding struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Node      string `json:"node,omitempty"`
	// Unreachable and NotReady are the pod's effective tolerations now,
	// as the taint-eviction controller picks them.
	Unreachable toleration.Effective `json:"unreachable"`
	NotReady    toleration.Effective `json:"notReady"`
	Status      Status               `json:"status"`
	// Reason says why, in a few words.
	Reason string `json:"reason"`
	// Mark is the fastover.io/injected annotation Fix would write (for
	// StatusNeedsFix) or the pod carries.
	Mark string `json:"mark,omitempty"`

	pod      *corev1.Pod
	decision toleration.Decision
}

// Auditor classifies pods with a rule.
type Auditor struct {
	// Rule is the webhook's rule; it must be the one the webhook runs with.
	Rule toleration.Rule
	// InstalledAt, if not zero, is when fastover was installed (the
	// webhook configuration's creation): a pod created before it "predates
	// fastover", one created after it was "missed by the webhook".
	InstalledAt time.Time
}

// Enabled reports whether the webhook injects pods of the namespace.
func Enabled(ns *corev1.Namespace) bool {
	return ns.Labels[toleration.NamespaceLabel] == toleration.NamespaceLabelValue &&
		!slices.Contains(excludedNamespaces, ns.Name)
}

// Classify audits one pod; enabled says whether its namespace is enabled.
func (a Auditor) Classify(pod *corev1.Pod, enabled bool) Finding {
	f := Finding{
		Namespace:   pod.Namespace,
		Name:        pod.Name,
		UID:         string(pod.UID),
		Node:        pod.Spec.NodeName,
		Unreachable: a.Rule.Effective(pod.Spec.Tolerations, corev1.TaintNodeUnreachable),
		NotReady:    a.Rule.Effective(pod.Spec.Tolerations, corev1.TaintNodeNotReady),
		Mark:        pod.Annotations[toleration.AnnotationInjected],
		pod:         pod,
	}
	switch {
	case !enabled:
		f.Status, f.Reason = StatusOutOfScope, "namespace not enabled"
		return f
	case settled(pod) != "":
		f.Status, f.Reason = StatusOutOfScope, settled(pod)
		return f
	}
	d := a.Rule.Decide(toleration.DocumentOf(pod).Pod)
	f.decision = d
	switch {
	case d.Skip == toleration.SkipOptOut:
		f.Status, f.Reason = StatusKept, "opted out ("+toleration.AnnotationInject+": \"false\")"
	case d.Skip == toleration.SkipDaemonSet:
		f.Status, f.Reason = StatusKept, "DaemonSet pod"
	case d.Skip == toleration.SkipMirror:
		f.Status, f.Reason = StatusKept, "mirror pod"
	case d.Deny != "":
		f.Status, f.Reason = StatusKept, "invalid "+toleration.AnnotationTolerationSeconds+" annotation"
	case d.Changed():
		f.Status, f.Mark = StatusNeedsFix, d.Mark()
		switch {
		case setUnderAnotherRule(d, pod):
			f.Reason = "set by fastover under another rule (" + pod.Annotations[toleration.AnnotationInjected] + ")"
		case pod.Annotations[toleration.AnnotationInjected] != "":
			f.Reason = "tolerations changed since injection"
		case !a.InstalledAt.IsZero() && !pod.CreationTimestamp.After(a.InstalledAt.Truncate(time.Second)):
			// Creation times have a precision of a second: a pod of the
			// install's second counts as created before it.
			f.Reason = "created before fastover was installed"
		case !a.InstalledAt.IsZero():
			f.Reason = "missed by the webhook (down, or namespace labelled later)"
		default:
			f.Reason = "not injected"
		}
	default:
		var user []string
		for _, t := range d.Taints {
			if t.Action == toleration.ActionKeepUser {
				user = append(user, t.Name)
			}
		}
		if len(user) > 0 {
			f.Status, f.Reason = StatusKept, "user's own "+strings.Join(user, ", ")+" toleration"
		} else {
			f.Status, f.Reason = StatusFast, "injected"
			if pod.Annotations[toleration.AnnotationInjected] == "" {
				f.Reason = "already as wanted"
			}
		}
	}
	return f
}

// setUnderAnotherRule reports whether the decision rewrites a toleration
// that fastover set (its mark says so) under a rule that wanted other
// seconds.
func setUnderAnotherRule(d toleration.Decision, pod *corev1.Pod) bool {
	mark := pod.Annotations[toleration.AnnotationInjected]
	for _, t := range d.Taints {
		if t.Action == toleration.ActionRewrite && toleration.IsMarked(pod.Spec.Tolerations[t.Index], mark, t.Name, t.Key) {
			return true
		}
	}
	return false
}

// settled says why a pod has no node left to lose ("terminating",
// "finished"), or "" if it may still run.
func settled(pod *corev1.Pod) string {
	switch {
	case pod.DeletionTimestamp != nil:
		return "terminating"
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return "finished"
	}
	return ""
}

// Scope says which pods an audit reads.
type Scope struct {
	// Namespace, if not empty, is the one namespace audited, enabled or
	// not (its pods are out of scope if it is not).
	Namespace string
	// AllNamespaces lists every namespace's pods; the pods of namespaces
	// that are not enabled are reported out of scope. Without it (and
	// without Namespace), only enabled namespaces are read.
	AllNamespaces bool
	// NamespaceSelector, if set, reads the namespaces whose labels it
	// matches, enabled or not (as AllNamespaces does, narrowed); it
	// cannot be combined with Namespace.
	NamespaceSelector labels.Selector
}

// Audit lists the pods of the scope and classifies each. The result is
// sorted by namespace and name.
func (a Auditor) Audit(ctx context.Context, client kubernetes.Interface, scope Scope) ([]Finding, error) {
	nsList, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	if scope.Namespace != "" && scope.NamespaceSelector != nil {
		return nil, fmt.Errorf("a namespace (%q) and a namespace selector (%q): give one", scope.Namespace, scope.NamespaceSelector)
	}
	enabled := map[string]bool{}
	var read []string
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		enabled[ns.Name] = Enabled(ns)
		switch {
		case scope.Namespace != "":
		case scope.NamespaceSelector != nil:
			if scope.NamespaceSelector.Matches(labels.Set(ns.Labels)) {
				read = append(read, ns.Name)
			}
		case scope.AllNamespaces, enabled[ns.Name]:
			read = append(read, ns.Name)
		}
	}
	if scope.Namespace != "" {
		if _, ok := enabled[scope.Namespace]; !ok {
			return nil, fmt.Errorf("namespace %q not found", scope.Namespace)
		}
		read = []string{scope.Namespace}
	}
	var out []Finding
	for _, ns := range read {
		pods, err := listPods(ctx, client, ns)
		if err != nil {
			return nil, err
		}
		for i := range pods {
			out = append(out, a.Classify(&pods[i], enabled[ns]))
		}
	}
	slices.SortFunc(out, func(x, y Finding) int {
		if c := strings.Compare(x.Namespace, y.Namespace); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out, nil
}

// listPods lists a namespace's pods in pages.
func listPods(ctx context.Context, client kubernetes.Interface, ns string) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := client.CoreV1().Pods(ns).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list pods in %s: %w", ns, err)
		}
		pods = append(pods, list.Items...)
		if list.Continue == "" {
			return pods, nil
		}
		opts.Continue = list.Continue
	}
}

// InstalledAt returns the creation time of fastover's webhook
// configuration: when fastover was installed. If the configuration does
// not exist (fastover is not installed) it returns the zero time and no
// error; the audit then says "not injected" without guessing why. Any
// other failure to read it (not allowed, the API server unreachable) is an
// error: it does not mean "not installed".
func InstalledAt(ctx context.Context, client kubernetes.Interface) (time.Time, error) {
	mwc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, WebhookConfiguration, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read MutatingWebhookConfiguration %s (when fastover was installed): %w", WebhookConfiguration, err)
	}
	return mwc.CreationTimestamp.Time, nil
}

// NeedsFix counts the findings with StatusNeedsFix.
func NeedsFix(findings []Finding) int {
	n := 0
	for _, f := range findings {
		if f.Status == StatusNeedsFix {
			n++
		}
	}
	return n
}

// NamespaceSummary counts a namespace's findings by status.
type NamespaceSummary struct {
	Namespace  string `json:"namespace"`
	Pods       int    `json:"pods"`
	Fast       int    `json:"fast"`
	NeedsFix   int    `json:"needsFix"`
	Kept       int    `json:"kept"`
	OutOfScope int    `json:"outOfScope"`
}

// Summarize counts findings by namespace and status, in namespace order;
// a namespace without pods is not listed.
func Summarize(findings []Finding) []NamespaceSummary {
	var out []NamespaceSummary
	index := map[string]int{}
	for _, f := range findings {
		i, ok := index[f.Namespace]
		if !ok {
			i = len(out)
			index[f.Namespace] = i
			out = append(out, NamespaceSummary{Namespace: f.Namespace})
		}
		s := &out[i]
		s.Pods++
		switch f.Status {
		case StatusFast:
			s.Fast++
		case StatusNeedsFix:
			s.NeedsFix++
		case StatusKept:
			s.Kept++
		case StatusOutOfScope:
			s.OutOfScope++
		}
	}
	slices.SortFunc(out, func(x, y NamespaceSummary) int { return strings.Compare(x.Namespace, y.Namespace) })
	return out
}

// Pod returns the pod the finding was made from.
func (f Finding) Pod() *corev1.Pod { return f.pod }

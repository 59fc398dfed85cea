package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fastover/fastover/toleration"
)

// Path is where the webhook is served.
const Path = "/mutate-v1-pod"

// Handler is the admission handler for pods. It implements
// controller-runtime's admission.Handler.
type Handler struct {
	// Rule decides what each pod's tolerations should be, unless Rules is
	// set.
	Rule toleration.Rule
	// Rules, if not nil, is the rule in force, read for each request
	// without a lock (an atomic pointer) and replaced as its file changes;
	// Rule is then unused. NewServer sets it.
	Rules *RuleSource
	// Metrics, if not nil, counts the decisions.
	Metrics *Metrics
}

var _ admission.Handler = (*Handler)(nil)

// Handle answers one admission request. The webhook fails open, in its
// answers too: the only denial is a pod with an invalid
// fastover.io/toleration-seconds annotation. Sub-resources and operations
// other than CREATE are allowed unchanged (checked first, so that a rule
// widened to pods/* or to UPDATE lets bindings, evictions and updates
// through); a request that is not a core/v1 Pod, has no object, does not
// decode or is too large to read safely (see MaxPodListEntries) is allowed
// unchanged with a warning and counted in
// fastover_webhook_requests_invalid_total. A review without a request (no
// UID) is not from an API server and gets an error. Dry-run requests are
// answered the same way: the handler has no side effects. A StatefulSet
// pod it patches gets a warning (see withWarnings).
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := logf.FromContext(ctx)
	if req.UID == "" {
		h.Metrics.countInvalid(ReasonNoRequest)
		log.Info("rejected an admission review without a request")
		return admission.Errored(http.StatusBadRequest, errors.New("admission review has no request"))
	}
	if req.SubResource != "" {
		h.Metrics.countIgnored(IgnoredSubResource)
		return admission.Allowed("fastover mutates pods on CREATE only, not the sub-resource " + req.SubResource)
	}
	if req.Operation != admissionv1.Create {
		h.Metrics.countIgnored(IgnoredOperation)
		return admission.Allowed("fastover mutates pods on CREATE only")
	}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" {
		return h.unhandled(log, ReasonNotAPod, fmt.Sprintf("fastover-webhook admits core/v1 Pods only, got %q", req.Kind.String()))
	}
	if len(req.Object.Raw) == 0 {
		return h.unhandled(log, ReasonNoObject, "admission request has no object")
	}
	if err := checkPodEntries(req.Object.Raw); err != nil {
		reason := ReasonTooLarge
		if !errors.Is(err, errTooManyEntries) {
			reason = ReasonUndecodable
		}
		return h.unhandled(log, reason, err.Error())
	}
	doc, err := toleration.DecodePod(req.Object.Raw)
	if err != nil {
		return h.unhandled(log, ReasonUndecodable, err.Error())
	}

	rule := &h.Rule
	if h.Rules != nil {
		rule = h.Rules.current.Load()
	}
	d := rule.Decide(doc.Pod)
	h.Metrics.count(d)
	switch {
	case d.Skip != toleration.SkipNone:
		return admission.Allowed("fastover skipped the pod: " + string(d.Skip))
	case d.Deny != "":
		log.Info("denied a pod", "reason", d.Deny)
		return admission.Denied(d.Deny)
	}
	ops := d.Patch(doc)
	if len(ops) == 0 {
		return admission.Allowed("")
	}
	log.V(1).Info("patched a pod", "mark", d.Mark(), "dryRun", req.DryRun != nil && *req.DryRun)
	return withWarnings(admission.Patched("", ops...), doc.Pod, d)
}

// unhandled allows a request the webhook did not understand, unchanged,
// with a warning the client sees, and counts it.
func (h *Handler) unhandled(log logr.Logger, reason, msg string) admission.Response {
	h.Metrics.countInvalid(reason)
	log.Info("allowed a request unchanged: not understood", "reason", reason, "message", msg)
	return admission.Allowed(msg).WithWarnings("fastover-webhook admitted this unchanged: " + msg)
}

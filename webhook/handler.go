package webhook

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Path is where the webhook is served.
const Path = "/mutate-v1-pod"

// Handler is the admission handler for pods. It implements
// controller-runtime's admission.Handler.
type Handler struct {
	// Rule decides what each pod's tolerations should be.
	Rule Rule
	// Metrics, if not nil, counts the decisions.
	Metrics *Metrics
}

var _ admission.Handler = (*Handler)(nil)

// Handle answers one admission request. Pods other than CREATEs are allowed
// unchanged; requests that do not carry a pod get an error response, never
// a panic. Dry-run requests are answered the same way: the handler has no
// side effects.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := logf.FromContext(ctx)
	if req.UID == "" {
		h.Metrics.countInvalid()
		log.Info("rejected an admission review without a request")
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("admission review has no request"))
	}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" {
		h.Metrics.countInvalid()
		log.Info("rejected a request for an object that is not a pod", "kind", req.Kind)
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("fastover-webhook admits core/v1 Pods only, got %q", req.Kind.String()))
	}
	if req.Operation != admissionv1.Create || req.SubResource != "" {
		return admission.Allowed("fastover mutates pods on CREATE only")
	}
	if len(req.Object.Raw) == 0 {
		h.Metrics.countInvalid()
		log.Info("rejected a request without a pod")
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("admission request has no object"))
	}
	doc, err := DecodePod(req.Object.Raw)
	if err != nil {
		h.Metrics.countInvalid()
		log.Info("rejected a pod that could not be decoded", "error", err.Error())
		return admission.Errored(http.StatusBadRequest, err)
	}

	d := h.Rule.Decide(doc.Pod)
	h.Metrics.count(d)
	switch {
	case d.Skip != SkipNone:
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
	return admission.Patched("", ops...)
}

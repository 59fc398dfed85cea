package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fastover/fastover/toleration"
)

// idiomHandler is the way a controller-runtime webhook is usually written,
// the baseline of BenchmarkHandleControllerRuntimeIdiom: decode the whole
// pod into its Go type, modify it, marshal it, and let
// admission.PatchResponseFromRaw diff the two documents into a patch. It
// applies the same rule as Handler.
type idiomHandler struct {
	rule    toleration.Rule
	decoder admission.Decoder
}

func newIdiomHandler() *idiomHandler {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return &idiomHandler{rule: toleration.DefaultRule(), decoder: admission.NewDecoder(scheme)}
}

func (h *idiomHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := h.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	d := h.rule.Decide(toleration.Pod{Annotations: pod.Annotations, OwnerReferences: pod.OwnerReferences, Tolerations: pod.Spec.Tolerations})
	switch {
	case d.Skip != toleration.SkipNone:
		return admission.Allowed(string(d.Skip))
	case d.Deny != "":
		return admission.Denied(d.Deny)
	}
	for _, t := range d.Taints {
		switch t.Action {
		case toleration.ActionRewrite:
			pod.Spec.Tolerations[t.Index].TolerationSeconds = ptr.To(*t.Seconds)
		case toleration.ActionAdd:
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
				Key: t.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(*t.Seconds),
			})
		}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[toleration.AnnotationInjected] = d.Mark()
	marshaled, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, marshaled)
}

// TestIdiomAgrees checks that the baseline does the same work: both
// handlers turn the benchmark's pod into the same pod.
func TestIdiomAgrees(t *testing.T) {
	raw := realisticPod(t)
	req := request(raw)
	ours := decodePod(t, applyResponse(t, req, (&Handler{Rule: toleration.DefaultRule()}).Handle(context.Background(), req), raw))
	idiom := decodePod(t, applyResponse(t, req, newIdiomHandler().Handle(context.Background(), req), raw))
	assert.Equal(t, idiom, ours)
	require.Equal(t, "unreachable=0s", ours.Annotations[toleration.AnnotationInjected])
}

func benchmarkHandler(b *testing.B, h admission.Handler) {
	raw := realisticPod(b)
	req := request(raw)
	ctx := context.Background()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		resp := h.Handle(ctx, req)
		// What the webhook server does next: marshal the patch.
		if err := resp.Complete(req); err != nil || len(resp.Patch) == 0 {
			b.Fatalf("no patch: %v", err)
		}
	}
}

// BenchmarkHandle is this package's handler on a realistic pod (3
// containers, an init container, env, volumes, the two default
// tolerations; 7 KB of JSON).
func BenchmarkHandle(b *testing.B) {
	benchmarkHandler(b, &Handler{Rule: toleration.DefaultRule()})
}

// BenchmarkHandleControllerRuntimeIdiom is the usual controller-runtime way
// on the same pod: typed decode, modify, admission.PatchResponseFromRaw.
func BenchmarkHandleControllerRuntimeIdiom(b *testing.B) {
	benchmarkHandler(b, newIdiomHandler())
}

package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fastover/fastover/toleration"
)

func newHandler(t testing.TB) (*Handler, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	return &Handler{Rule: toleration.DefaultRule(), Metrics: m}, reg
}

func TestHandleRealisticPod(t *testing.T) {
	h, _ := newHandler(t)
	raw := realisticPod(t)
	req := request(raw)
	resp := h.Handle(context.Background(), req)
	require.True(t, resp.Allowed)
	assert.Len(t, resp.Patches, 2, "one replace and the mark: %v", resp.Patches)

	out := applyResponse(t, req, resp, raw)
	pod := decodePod(t, out)
	i := toleration.EffectiveToleration(pod.Spec.Tolerations, corev1.TaintNodeUnreachable)
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, int64(0), *pod.Spec.Tolerations[i].TolerationSeconds)
	j := toleration.EffectiveToleration(pod.Spec.Tolerations, corev1.TaintNodeNotReady)
	assert.Equal(t, int64(300), *pod.Spec.Tolerations[j].TolerationSeconds, "not-ready is left alone")
	assert.Equal(t, "unreachable=0s", pod.Annotations[toleration.AnnotationInjected])
	assert.Len(t, pod.Spec.Containers, 3, "the rest of the pod is intact")

	// A second pass (reinvocationPolicy: IfNeeded) changes nothing.
	again := h.Handle(context.Background(), request(out))
	require.True(t, again.Allowed)
	assert.Empty(t, again.Patches)
}

// TestPatchShapes applies the patch to pods whose objects on the patch
// paths are missing, null or empty: the patch must apply to each.
func TestPatchShapes(t *testing.T) {
	rule := toleration.DefaultRule()
	rule.NotReadyTolerationSeconds = ptr.To[int64](3)
	h := &Handler{Rule: rule}
	docs := []string{
		`{}`,
		`{"metadata":null,"spec":null}`,
		`{"metadata":{},"spec":{}}`,
		`{"metadata":{"annotations":null},"spec":{"tolerations":null}}`,
		`{"metadata":{"annotations":{}},"spec":{"tolerations":[]}}`,
		`{"metadata":{"annotations":{"a":"b","fastover.io/injected":"stale"}},"spec":{"tolerations":[{"key":"x","operator":"Exists"}]}}`,
		`{"metadata":{"name":"p"},"spec":{"tolerations":[{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]}}`,
	}
	for _, doc := range docs {
		t.Run(doc, func(t *testing.T) {
			req := request([]byte(doc))
			resp := h.Handle(context.Background(), req)
			require.True(t, resp.Allowed, "%+v", resp.Result)
			out := applyResponse(t, req, resp, []byte(doc))
			pod := decodePod(t, out)
			for key, want := range map[string]int64{corev1.TaintNodeUnreachable: 0, corev1.TaintNodeNotReady: 3} {
				i := toleration.EffectiveToleration(pod.Spec.Tolerations, key)
				require.GreaterOrEqual(t, i, 0, "%s: %s", key, out)
				assert.Equal(t, want, *pod.Spec.Tolerations[i].TolerationSeconds, key)
			}
			assert.Equal(t, "unreachable=0s,not-ready=3s", pod.Annotations[toleration.AnnotationInjected])
			if strings.Contains(doc, `"a":"b"`) {
				assert.Equal(t, "b", pod.Annotations["a"], "other annotations stay")
			}
			again := h.Handle(context.Background(), request(out))
			assert.Empty(t, again.Patches, "second pass over %s", out)
		})
	}
}

func TestHandleOutcomes(t *testing.T) {
	pod := func(mutate func(*corev1.Pod)) []byte {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{}},
			Spec:       corev1.PodSpec{Tolerations: []corev1.Toleration{defaultNotReady, defaultUnreachable}},
		}
		mutate(p)
		return podJSONOf(t, p)
	}
	tests := []struct {
		name    string
		req     func() admission.Request
		allowed bool
		code    int32  // of the result, if any
		message string // in the result
		patched bool
		warning bool // the client is warned: allowed unchanged, not understood
		metric  string
	}{
		{
			name:    "mutated",
			req:     func() admission.Request { return request(pod(func(*corev1.Pod) {})) },
			allowed: true, patched: true, metric: "fastover_webhook_pods_mutated_total",
		},
		{
			name: "dry run behaves the same",
			req: func() admission.Request {
				r := request(pod(func(*corev1.Pod) {}))
				r.DryRun = ptr.To(true)
				return r
			},
			allowed: true, patched: true, metric: "fastover_webhook_pods_mutated_total",
		},
		{
			name: "opt-out skipped",
			req: func() admission.Request {
				return request(pod(func(p *corev1.Pod) { p.Annotations[toleration.AnnotationInject] = "false" }))
			},
			allowed: true, message: "opt-out", metric: `fastover_webhook_pods_skipped_total{reason="opt-out"}`,
		},
		{
			name: "invalid override denied",
			req: func() admission.Request {
				return request(pod(func(p *corev1.Pod) { p.Annotations[toleration.AnnotationTolerationSeconds] = "soon" }))
			},
			allowed: false, code: http.StatusForbidden, message: toleration.AnnotationTolerationSeconds, metric: "fastover_webhook_pods_denied_total",
		},
		{
			name: "user toleration kept: only the mark",
			req: func() admission.Request {
				return request(pod(func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{unreachable(nil)} }))
			},
			allowed: true, patched: true, metric: "fastover_webhook_pods_unchanged_total",
		},
		{
			name: "update allowed unchanged",
			req: func() admission.Request {
				r := request(pod(func(*corev1.Pod) {}))
				r.Operation = admissionv1.Update
				return r
			},
			allowed: true, message: "CREATE only",
		},
		{
			name: "not a pod",
			req: func() admission.Request {
				r := request([]byte(`{"kind":"ConfigMap"}`))
				r.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
				return r
			},
			allowed: true, code: http.StatusOK, message: "Pods only", warning: true, metric: `fastover_webhook_requests_invalid_total{reason="not-a-pod"}`,
		},
		{
			name: "a pod of another group",
			req: func() admission.Request {
				r := request(pod(func(*corev1.Pod) {}))
				r.Kind = metav1.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Pod"}
				return r
			},
			allowed: true, code: http.StatusOK, message: "Pods only", warning: true,
		},
		{
			name:    "no request",
			req:     func() admission.Request { return admission.Request{} },
			allowed: false, code: http.StatusBadRequest, message: "no request", metric: `fastover_webhook_requests_invalid_total{reason="no-request"}`,
		},
		{
			name:    "no object",
			req:     func() admission.Request { return request(nil) },
			allowed: true, code: http.StatusOK, message: "no object", warning: true, metric: `fastover_webhook_requests_invalid_total{reason="no-object"}`,
		},
		{
			name:    "object is not JSON",
			req:     func() admission.Request { return request([]byte("\x00not json")) },
			allowed: true, code: http.StatusOK, message: "decode pod", warning: true, metric: `fastover_webhook_requests_invalid_total{reason="undecodable"}`,
		},
		{
			name:    "tolerations of the wrong type",
			req:     func() admission.Request { return request([]byte(`{"spec":{"tolerations":{"key":1}}}`)) },
			allowed: true, code: http.StatusOK, message: "decode pod", warning: true, metric: `fastover_webhook_requests_invalid_total{reason="undecodable"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, reg := newHandler(t)
			req := tt.req()
			resp := h.Handle(context.Background(), req)
			assert.Equal(t, tt.allowed, resp.Allowed)
			assert.Equal(t, tt.patched, len(resp.Patches) > 0, "patches %v", resp.Patches)
			if tt.code != 0 {
				require.NotNil(t, resp.Result)
				assert.Equal(t, tt.code, resp.Result.Code)
			}
			if tt.message != "" {
				require.NotNil(t, resp.Result)
				assert.Contains(t, resp.Result.Message, tt.message)
			}
			if tt.metric != "" {
				assert.Equal(t, 1.0, counterValue(t, reg, tt.metric))
			}
			if tt.warning {
				require.Len(t, resp.Warnings, 1)
				assert.Contains(t, resp.Warnings[0], "fastover-webhook admitted this unchanged")
			} else {
				assert.Empty(t, resp.Warnings)
			}
		})
	}
}

// counterValue reads one counter, named as in the exposition format.
func counterValue(t *testing.T, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	name, labels, _ := strings.Cut(series, "{")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if strings.Join(got, ",")+"}" == labels || (labels == "" && len(got) == 0) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}

// serve posts body to the webhook as the API server would and returns the
// HTTP status and the decoded review.
func serve(t testing.TB, h *Handler, body []byte, contentType string) (int, admissionv1.AdmissionReview) {
	t.Helper()
	wh := &admission.Webhook{Handler: h}
	r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	w := httptest.NewRecorder()
	wh.ServeHTTP(w, r)
	var review admissionv1.AdmissionReview
	if w.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &review), "response %s", w.Body.String())
	}
	return w.Code, review
}

func TestServeHTTPBadInput(t *testing.T) {
	h, _ := newHandler(t)
	valid := func() []byte {
		req := request(realisticPod(t))
		review := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request:  &req.AdmissionRequest,
		}
		b, err := json.Marshal(review)
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name        string
		body        []byte
		contentType string
		wantCode    int32 // result code in the review
		wantAllowed bool
	}{
		{name: "valid", body: valid(), contentType: "application/json", wantAllowed: true},
		{name: "malformed JSON", body: []byte(`{"request":`), contentType: "application/json", wantCode: http.StatusBadRequest},
		{name: "review without request", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), contentType: "application/json", wantCode: http.StatusBadRequest},
		{name: "not JSON content", body: valid(), contentType: "text/plain", wantCode: http.StatusBadRequest},
		{name: "empty body", body: nil, contentType: "application/json", wantCode: http.StatusBadRequest},
		{name: "oversized body", body: bytes.Repeat([]byte(" "), 8<<20), contentType: "application/json", wantCode: http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, review := serve(t, h, tt.body, tt.contentType)
			require.Equal(t, http.StatusOK, status, "a well-formed review answers every request")
			require.NotNil(t, review.Response)
			assert.Equal(t, tt.wantAllowed, review.Response.Allowed)
			if tt.wantCode != 0 {
				require.NotNil(t, review.Response.Result)
				assert.Equal(t, tt.wantCode, review.Response.Result.Code)
				assert.NotEmpty(t, review.Response.Result.Message)
			}
		})
	}
}

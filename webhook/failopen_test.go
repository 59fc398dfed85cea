package webhook

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TestHandleFailsOpen: whatever the webhook does not act on or does not
// understand is allowed unchanged, never denied, as a rule widened beyond
// pod CREATEs (pods/*, UPDATE, DELETE, CONNECT) would send it. Only an
// invalid override annotation is denied (TestHandleOutcomes).
func TestHandleFailsOpen(t *testing.T) {
	pod := func(tols int) []byte {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		for range tols {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists})
		}
		return podJSONOf(t, p)
	}
	sub := func(op admissionv1.Operation, kind metav1.GroupVersionKind, subresource string, raw []byte) func() admission.Request {
		return func() admission.Request {
			r := request(raw)
			r.Operation, r.Kind, r.SubResource = op, kind, subresource
			return r
		}
	}
	binding := []byte(`{"kind":"Binding","apiVersion":"v1","metadata":{"name":"p"},"target":{"kind":"Node","name":"node-a"}}`)
	eviction := []byte(`{"kind":"Eviction","apiVersion":"policy/v1","metadata":{"name":"p"}}`)
	tests := []struct {
		name    string
		req     func() admission.Request
		warning bool
		metric  string
	}{
		{name: "binding (pods/binding CREATE)", req: sub(admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}, "binding", binding),
			metric: `fastover_webhook_requests_ignored_total{reason="subresource"}`},
		{name: "eviction (pods/eviction CREATE)", req: sub(admissionv1.Create, metav1.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, "eviction", eviction),
			metric: `fastover_webhook_requests_ignored_total{reason="subresource"}`},
		{name: "ephemeral containers (pods/ephemeralcontainers UPDATE)", req: sub(admissionv1.Update, podGVK, "ephemeralcontainers", pod(0)),
			metric: `fastover_webhook_requests_ignored_total{reason="subresource"}`},
		{name: "status (pods/status UPDATE)", req: sub(admissionv1.Update, podGVK, "status", pod(0)),
			metric: `fastover_webhook_requests_ignored_total{reason="subresource"}`},
		{name: "exec (pods/exec CONNECT)", req: sub(admissionv1.Connect, metav1.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"}, "exec", []byte(`{"kind":"PodExecOptions"}`)),
			metric: `fastover_webhook_requests_ignored_total{reason="subresource"}`},
		{name: "a pod with a sub-resource but no object", req: sub(admissionv1.Create, podGVK, "binding", nil),
			metric: `fastover_webhook_requests_ignored_total{reason="subresource"}`},
		{name: "pod UPDATE", req: sub(admissionv1.Update, podGVK, "", pod(0)),
			metric: `fastover_webhook_requests_ignored_total{reason="operation"}`},
		{name: "pod DELETE (no object)", req: sub(admissionv1.Delete, podGVK, "", nil),
			metric: `fastover_webhook_requests_ignored_total{reason="operation"}`},
		{name: "CREATE of something else", req: sub(admissionv1.Create, metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "", []byte(`{"data":{}}`)),
			warning: true, metric: `fastover_webhook_requests_invalid_total{reason="not-a-pod"}`},
		{name: "pod without object", req: sub(admissionv1.Create, podGVK, "", nil),
			warning: true, metric: `fastover_webhook_requests_invalid_total{reason="no-object"}`},
		{name: "pod that is null", req: sub(admissionv1.Create, podGVK, "", []byte(`null`)),
			warning: true, metric: `fastover_webhook_requests_invalid_total{reason="undecodable"}`},
		{name: "pod with a duplicate field", req: sub(admissionv1.Create, podGVK, "", []byte(`{"spec":{},"spec":{}}`)),
			warning: true, metric: `fastover_webhook_requests_invalid_total{reason="undecodable"}`},
		{name: "pod with too many tolerations to decode safely", req: sub(admissionv1.Create, podGVK, "", pod(MaxEntries+1)),
			warning: true, metric: `fastover_webhook_requests_invalid_total{reason="too-large"}`},
		{name: "pod with too many annotations to decode safely", req: sub(admissionv1.Create, podGVK, "", manyAnnotations(MaxEntries+1)),
			warning: true, metric: `fastover_webhook_requests_invalid_total{reason="too-large"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, reg := newHandler(t)
			req := tt.req()
			resp := h.Handle(context.Background(), req)
			assert.True(t, resp.Allowed, "%+v", resp.Result)
			require.NotNil(t, resp.Result)
			assert.Equal(t, int32(http.StatusOK), resp.Result.Code)
			assert.Empty(t, resp.Patches, "allowed unchanged")
			if tt.warning {
				require.Len(t, resp.Warnings, 1)
				assert.Contains(t, resp.Warnings[0], "fastover-webhook admitted this unchanged")
			} else {
				assert.Empty(t, resp.Warnings)
			}
			assert.Equal(t, 1.0, counterValue(t, reg, tt.metric))
			require.NoError(t, resp.Complete(req))
		})
	}

	t.Run("a pod just under the limits is handled", func(t *testing.T) {
		h, reg := newHandler(t)
		resp := h.Handle(context.Background(), request(pod(MaxEntries-2)))
		assert.True(t, resp.Allowed)
		assert.NotEmpty(t, resp.Patches)
		assert.Equal(t, 1.0, counterValue(t, reg, "fastover_webhook_pods_mutated_total"))
	})
}

func manyAnnotations(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"metadata":{"annotations":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"a` + strings.Repeat("x", i%7) + `-` + strconv.Itoa(i) + `":""`)
	}
	b.WriteString(`}}}`)
	return []byte(b.String())
}

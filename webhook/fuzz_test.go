package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fastover/fastover/toleration"
)

func fuzzRule() toleration.Rule {
	rule := toleration.DefaultRule()
	rule.NotReadyTolerationSeconds = ptr.To[int64](2)
	return rule
}

// FuzzServeHTTP posts arbitrary bodies to the webhook, as the API server
// (or anything else that reaches the port) would. Whatever the body, the
// webhook answers with a well-formed AdmissionReview and never panics, and
// a patch it returns is sound (see checkPatch). The seed corpus is in
// testdata/fuzz/FuzzServeHTTP; `go test` runs it.
func FuzzServeHTTP(f *testing.F) {
	rule := fuzzRule()
	wh := &admission.Webhook{Handler: &Handler{Rule: rule}}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		wh.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(w.Body.Bytes(), &review); err != nil || review.Response == nil {
			t.Fatalf("malformed response %q: %v", w.Body.Bytes(), err)
		}
		if len(review.Response.Patch) == 0 {
			return
		}
		// The request the webhook answered.
		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			t.Fatalf("patched a request that does not decode: %v", err)
		}
		checkPatch(t, rule, in.Request.Object.Raw, review.Response.Allowed, review.Response.Patch)
	})
}

// FuzzHandlePod gives the handler arbitrary pods in well-formed requests.
// The seed corpus is in testdata/fuzz/FuzzHandlePod.
func FuzzHandlePod(f *testing.F) {
	rule := fuzzRule()
	h := &Handler{Rule: rule}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req := request(raw)
		resp := h.Handle(context.Background(), req)
		if err := resp.Complete(req); err != nil {
			t.Fatalf("complete: %v", err)
		}
		if len(resp.Patch) > 0 {
			checkPatch(t, rule, raw, resp.Allowed, resp.Patch)
		}
	})
}

// checkPatch: the patch comes with an allowed response, applies to the
// pod, leaves every managed taint's effective toleration as wanted or the
// user's, sets the mark, and a second pass over the patched pod yields no
// patch.
func checkPatch(t *testing.T, rule toleration.Rule, pod []byte, allowed bool, rawPatch []byte) {
	t.Helper()
	if !allowed {
		t.Fatalf("a patch in a denial: %s", rawPatch)
	}
	patch, err := jsonpatch.DecodePatch(rawPatch)
	if err != nil {
		t.Fatalf("bad patch %s: %v", rawPatch, err)
	}
	out, err := patch.Apply(pod)
	if err != nil {
		t.Fatalf("patch %s does not apply to %s: %v", rawPatch, pod, err)
	}
	doc, err := toleration.DecodePod(out)
	if err != nil {
		t.Fatalf("patched pod does not decode: %v\n%s", err, out)
	}
	d := rule.Decide(doc.Pod)
	for _, td := range d.Taints {
		if td.Action != toleration.ActionNone && td.Action != toleration.ActionKeepUser {
			t.Fatalf("after the patch, %s still needs %s: %s", td.Name, td.Action, out)
		}
	}
	if doc.Annotations[toleration.AnnotationInjected] != d.Mark() {
		t.Fatalf("mark %q, want %q", doc.Annotations[toleration.AnnotationInjected], d.Mark())
	}
	if ops := d.Patch(doc); len(ops) != 0 {
		t.Fatalf("second pass patches again: %v\n%s", ops, out)
	}
}

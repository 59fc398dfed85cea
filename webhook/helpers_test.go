package webhook

import (
	"encoding/json"
	"os"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

var podGVK = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}

// request wraps a pod's JSON in a CREATE admission request.
func request(raw []byte) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       types.UID("2f4c8b6e-0000-4000-8000-000000000001"),
		Kind:      podGVK,
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: "shop",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

func realisticPod(t testing.TB) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/pod.json")
	require.NoError(t, err)
	return raw
}

func podJSONOf(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	return raw
}

// applyResponse applies the response's patch to raw; a response without
// patch leaves raw as it is. It completes the response as the webhook
// server would (patches marshaled into the JSON Patch field).
func applyResponse(t testing.TB, req admission.Request, resp admission.Response, raw []byte) []byte {
	t.Helper()
	require.NoError(t, resp.Complete(req))
	if len(resp.Patch) == 0 {
		return raw
	}
	require.NotNil(t, resp.PatchType)
	require.Equal(t, admissionv1.PatchTypeJSONPatch, *resp.PatchType)
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err, "patch %s", resp.Patch)
	out, err := patch.Apply(raw)
	require.NoError(t, err, "patch %s", resp.Patch)
	return out
}

func decodePod(t testing.TB, raw []byte) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	require.NoError(t, json.Unmarshal(raw, &pod), "%s", raw)
	return &pod
}

// Tolerations as they appear in pods: what the API server's
// DefaultTolerationSeconds plugin adds, and the unreachable one with other
// seconds.
var (
	defaultNotReady    = unreachableOrNotReady(corev1.TaintNodeNotReady, ptr.To[int64](300))
	defaultUnreachable = unreachable(ptr.To[int64](300))
)

func unreachable(seconds *int64) corev1.Toleration {
	return unreachableOrNotReady(corev1.TaintNodeUnreachable, seconds)
}

func unreachableOrNotReady(key string, seconds *int64) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
}

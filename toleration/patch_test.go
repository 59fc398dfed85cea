package toleration

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// applyPatch applies the rule's patch of the pod's JSON to it, and checks
// that a second pass over the result patches nothing.
func applyPatch(t *testing.T, rule Rule, raw []byte) []byte {
	t.Helper()
	doc, err := DecodePod(raw)
	require.NoError(t, err)
	ops := rule.Decide(doc.Pod).Patch(doc)
	if len(ops) == 0 {
		return raw
	}
	data, err := json.Marshal(ops)
	require.NoError(t, err)
	patch, err := jsonpatch.DecodePatch(data)
	require.NoError(t, err)
	out, err := patch.Apply(raw)
	require.NoError(t, err, "patch %s of %s", data, raw)
	again, err := DecodePod(out)
	require.NoError(t, err)
	assert.Empty(t, rule.Decide(again.Pod).Patch(again), "second pass over %s", out)
	return out
}

// TestPatchShapes: the patch applies to pods whose objects on the patch
// paths are missing, null or empty, adding each parent it needs.
func TestPatchShapes(t *testing.T) {
	rule := DefaultRule()
	rule.NotReadyTolerationSeconds = ptr.To[int64](3)
	for _, tc := range []struct {
		doc string
		ops []string // each operation's op and path
	}{
		{`{}`, []string{"add /spec", "add /metadata"}},
		{`{"metadata":null,"spec":null}`, []string{"add /spec", "add /metadata"}},
		{`{"metadata":{},"spec":{}}`, []string{"add /spec/tolerations", "add /metadata/annotations"}},
		{`{"metadata":{"annotations":null},"spec":{"tolerations":null}}`, []string{"add /spec/tolerations", "add /metadata/annotations"}},
		{`{"metadata":{"annotations":{}},"spec":{"tolerations":[]}}`,
			[]string{"add /spec/tolerations/-", "add /spec/tolerations/-", "add /metadata/annotations/fastover.io~1injected"}},
		{`{"metadata":{"annotations":{"a":"b","fastover.io/injected":"stale"}},"spec":{"tolerations":[{"key":"x","operator":"Exists"}]}}`,
			[]string{"add /spec/tolerations/-", "add /spec/tolerations/-", "add /metadata/annotations/fastover.io~1injected"}},
		{`{"metadata":{"name":"p"},"spec":{"tolerations":[{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]}}`,
			[]string{"replace /spec/tolerations/0/tolerationSeconds", "add /spec/tolerations/-", "add /metadata/annotations"}},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			doc, err := DecodePod([]byte(tc.doc))
			require.NoError(t, err)
			var ops []string
			for _, op := range rule.Decide(doc.Pod).Patch(doc) {
				ops = append(ops, op.Operation+" "+op.Path)
			}
			assert.Equal(t, tc.ops, ops)

			pod := decodePod(t, applyPatch(t, rule, []byte(tc.doc)))
			for key, want := range map[string]int64{corev1.TaintNodeUnreachable: 0, corev1.TaintNodeNotReady: 3} {
				i := EffectiveToleration(pod.Spec.Tolerations, key)
				require.GreaterOrEqual(t, i, 0, key)
				assert.Equal(t, want, *pod.Spec.Tolerations[i].TolerationSeconds, key)
			}
			assert.Equal(t, "unreachable=0s,not-ready=3s", pod.Annotations[AnnotationInjected])
			if doc.Annotations["a"] != "" {
				assert.Equal(t, "b", pod.Annotations["a"], "other annotations stay")
			}
		})
	}
}

func TestPatchNothing(t *testing.T) {
	doc := DocumentOf(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationInjected: "unreachable=0s"}},
		Spec:       corev1.PodSpec{Tolerations: []corev1.Toleration{unreachable(ptr.To[int64](0))}},
	})
	assert.Empty(t, DefaultRule().Decide(doc.Pod).Patch(doc), "as wanted and marked")

	// Skipped and denied pods get no patch, not even a mark.
	for _, ann := range []map[string]string{
		{AnnotationInject: "false"},
		{AnnotationTolerationSeconds: "soon"},
	} {
		doc := DocumentOf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann}})
		d := DefaultRule().Decide(doc.Pod)
		assert.Empty(t, d.Mark())
		assert.Empty(t, d.Patch(doc), "%v", ann)
	}

	// The user's own toleration: only the mark is added.
	doc = DocumentOf(&corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{unreachable(nil)}}})
	d := DefaultRule().Decide(doc.Pod)
	assert.False(t, d.Changed())
	ops := d.Patch(doc)
	require.Len(t, ops, 1)
	assert.Equal(t, "/metadata/annotations", ops[0].Path)
	assert.Equal(t, map[string]string{AnnotationInjected: "unreachable=user:forever"}, ops[0].Value)
}

func TestDocumentOf(t *testing.T) {
	bare := DocumentOf(&corev1.Pod{})
	assert.True(t, bare.HasMetadata)
	assert.True(t, bare.HasSpec)
	assert.False(t, bare.HasAnnotations, "an empty map is left out of the API's JSON")
	assert.False(t, bare.HasTolerations, "an empty list is left out of the API's JSON")

	full := DocumentOf(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Annotations:     map[string]string{"a": "b"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs"}},
		},
		Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{dedicated}},
	})
	assert.True(t, full.HasAnnotations)
	assert.True(t, full.HasTolerations)
	assert.Equal(t, "b", full.Annotations["a"])
	assert.Equal(t, "rs", full.OwnerReferences[0].Name)
	assert.Equal(t, []corev1.Toleration{dedicated}, full.Tolerations)
}

func TestDecodePod(t *testing.T) {
	doc, err := DecodePod([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"a":"b"},
		"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"d","uid":"u"}]},
		"spec":{"containers":[{"name":"c","image":"i"}],"tolerations":[{"key":"k","operator":"Exists"}]},"status":{"phase":"Running"}}`))
	require.NoError(t, err)
	assert.True(t, doc.HasMetadata && doc.HasAnnotations && doc.HasSpec && doc.HasTolerations)
	assert.Equal(t, map[string]string{"a": "b"}, doc.Annotations)
	assert.Equal(t, "DaemonSet", doc.OwnerReferences[0].Kind)
	assert.Equal(t, []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}, doc.Tolerations)

	for _, bad := range []struct{ raw, want string }{
		{`null`, "the object is null, not a pod"},
		{``, "decode pod"},
		{`[]`, "decode pod"},
		{`{"spec":{"tolerations":[{"tolerationSeconds":"soon"}]}}`, "decode pod"},
		{`{"metadata":{},"metadata":{}}`, "decode pod"},
		{`{"metadata":{"annotations":{"a":1}}}`, "decode pod"},
		{`{"spec":{}} trailing`, "decode pod"},
	} {
		_, err := DecodePod([]byte(bad.raw))
		require.Error(t, err, bad.raw)
		assert.Contains(t, err.Error(), bad.want, bad.raw)
	}

	// Field names are case-sensitive, as the API server reads them: a
	// "Spec" is not the spec.
	doc, err = DecodePod([]byte(`{"Spec":{"tolerations":[{"key":"k"}]}}`))
	require.NoError(t, err)
	assert.False(t, doc.HasSpec)
}

// FuzzDecidePatch: whatever the pod's JSON, decoding it never panics, and
// a patch the rule returns applies, leaves every managed taint's effective
// toleration as wanted or the user's, sets the mark, and is not needed a
// second time.
func FuzzDecidePatch(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"metadata":null,"spec":{"tolerations":null}}`,
		`{"metadata":{"annotations":{"fastover.io/injected":"unreachable=0s"}},"spec":{"tolerations":[{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":0}]}}`,
		`{"metadata":{"annotations":{"fastover.io/toleration-seconds":"7"}},"spec":{"tolerations":[{"operator":"Exists"}]}}`,
		`{"spec":{"tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]}}`,
		`{"metadata":{"ownerReferences":[{"kind":"DaemonSet"}]}}`,
	} {
		f.Add([]byte(seed))
	}
	rule := DefaultRule()
	rule.NotReadyTolerationSeconds = ptr.To[int64](2)
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc, err := DecodePod(raw)
		if err != nil {
			return
		}
		d := rule.Decide(doc.Pod)
		ops := d.Patch(doc)
		if len(ops) == 0 {
			return
		}
		if d.Skip != SkipNone || d.Deny != "" {
			t.Fatalf("a patch for a skipped or denied pod: %v", ops)
		}
		data, err := json.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := jsonpatch.DecodePatch(data)
		if err != nil {
			t.Fatalf("bad patch %s: %v", data, err)
		}
		out, err := patch.Apply(raw)
		if err != nil {
			t.Fatalf("patch %s does not apply to %s: %v", data, raw, err)
		}
		after, err := DecodePod(out)
		if err != nil {
			t.Fatalf("patched pod does not decode: %v\n%s", err, out)
		}
		again := rule.Decide(after.Pod)
		for _, td := range again.Taints {
			if td.Action != ActionNone && td.Action != ActionKeepUser {
				t.Fatalf("after the patch, %s still needs %s: %s", td.Name, td.Action, out)
			}
		}
		if after.Annotations[AnnotationInjected] != again.Mark() {
			t.Fatalf("mark %q, want %q", after.Annotations[AnnotationInjected], again.Mark())
		}
		if ops := again.Patch(after); len(ops) != 0 {
			t.Fatalf("second pass patches again: %v\n%s", ops, out)
		}
	})
}

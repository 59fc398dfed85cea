package retrofit

import (
	"encoding/json"
	"strconv"
	"sync/atomic"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// patchLikeAPIServer makes the fake client's JSON patches of pods behave
// as the API server's do where the reconciler relies on it: each stored
// patch moves the pod's resourceVersion on (the fake's tracker keeps it),
// so that a patch guarded by an old one fails its test operation, with an
// Invalid error. Without it, a patch made from a stale cached pod would
// apply again.
func patchLikeAPIServer(client *fake.Clientset) {
	var version atomic.Int64
	version.Store(100)
	client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a := action.(k8stesting.PatchActionImpl)
		if a.GetPatchType() != types.JSONPatchType {
			return false, nil, nil
		}
		obj, err := client.Tracker().Get(podsGVR, a.GetNamespace(), a.GetName())
		if err != nil {
			return true, nil, err
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			return true, nil, err
		}
		patch, err := jsonpatch.DecodePatch(a.GetPatch())
		if err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		out, err := patch.Apply(raw)
		if err != nil {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, a.GetName(),
				field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), nil, err.Error())})
		}
		var pod corev1.Pod
		if err := json.Unmarshal(out, &pod); err != nil {
			return true, nil, err
		}
		if len(a.PatchOptions.DryRun) > 0 {
			return true, &pod, nil
		}
		pod.ResourceVersion = strconv.FormatInt(version.Add(1), 10)
		if err := client.Tracker().Update(podsGVR, &pod, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, &pod, nil
	})
}

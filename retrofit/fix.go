package retrofit

import (
	"context"
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/toleration"
)

// Fixer patches pods in place with the webhook's rule.
type Fixer struct {
	Client kubernetes.Interface
	// Rule must be the webhook's.
	Rule toleration.Rule
	// DryRun asks the API server to validate and admit the patch without
	// storing it (server-side dry run).
	DryRun bool
	// FieldManager names the writer in the pod's managed fields.
	FieldManager string
}

// maxAttempts bounds the retries when a pod changes under a patch.
const maxAttempts = 3

// Result is what Fix did to one pod.
type Result struct {
	// Pod is the pod after the patch (or as read last).
	Pod *corev1.Pod
	// Patched is true if the tolerations were changed (or, with DryRun,
	// would have been).
	Patched bool
	// Gone is true if the pod was deleted meanwhile.
	Gone bool
	// Mark is the fastover.io/injected value written.
	Mark string
}

// Fix applies the rule to the pod, as the webhook would have at its
// creation: the effective unreachable (and, if managed, not-ready)
// toleration gets the wanted seconds, and the mark annotation says so.
// Pods the rule leaves alone, finished pods and pods being deleted are not
// touched. The patch is guarded by the pod's resourceVersion; if the pod
// changed meanwhile it is read again and decided again.
func (f Fixer) Fix(ctx context.Context, pod *corev1.Pod) (Result, error) {
	pods := f.Client.CoreV1().Pods(pod.Namespace)
	for attempt := 1; ; attempt++ {
		if settled(pod) != "" {
			return Result{Pod: pod}, nil
		}
		doc := toleration.DocumentOf(pod)
		d := f.Rule.Decide(doc.Pod)
		if !d.Changed() {
			return Result{Pod: pod}, nil
		}
		ops := append([]jsonpatch.Operation{
			jsonpatch.NewOperation("test", "/metadata/resourceVersion", pod.ResourceVersion),
		}, d.Patch(doc)...)
		data, err := json.Marshal(ops)
		if err != nil {
			return Result{Pod: pod}, err
		}
		opts := metav1.PatchOptions{FieldManager: f.FieldManager}
		if f.DryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		patched, err := pods.Patch(ctx, pod.Name, types.JSONPatchType, data, opts)
		if err == nil {
			return Result{Pod: patched, Patched: true, Mark: d.Mark()}, nil
		}
		if apierrors.IsNotFound(err) {
			return Result{Pod: pod, Gone: true}, nil
		}
		// A failed test operation (the pod changed) is an Invalid or a
		// Conflict error, depending on where the API server saw it.
		if (!apierrors.IsConflict(err) && !apierrors.IsInvalid(err)) || attempt == maxAttempts {
			return Result{Pod: pod}, fmt.Errorf("patch pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		fresh, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return Result{Pod: pod, Gone: true}, nil
		}
		if err != nil {
			return Result{Pod: pod}, fmt.Errorf("read pod %s/%s again: %w", pod.Namespace, pod.Name, err)
		}
		if fresh.UID != pod.UID {
			return Result{Pod: pod, Gone: true}, nil
		}
		pod = fresh
	}
}

package webhook

import (
	"fmt"
	"strconv"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fastover/fastover/toleration"
)

// statefulSetWarning is the admission warning for a StatefulSet pod whose
// unreachable toleration the webhook sets; %s is its seconds. The API
// server passes warnings of up to 256 characters on unchanged.
const statefulSetWarning = "fastover set this StatefulSet pod's unreachable toleration to %s: " +
	"on a lost node it is evicted but stays Terminating, and is not replaced " +
	"until the node gets the node.kubernetes.io/out-of-service taint or the pod is force-deleted"

// ownedByStatefulSet reports whether a pod belongs to a StatefulSet: apps/v1's,
// or another group's drop-in (such as OpenKruise's), which keeps a pod's
// identity the same way. Such a pod is replaced only once the old one is
// gone from the API server, which never happens by itself on a lost node.
func ownedByStatefulSet(pod toleration.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "StatefulSet" {
			return true
		}
	}
	return false
}

// withWarnings adds to the response of a pod the webhook patched the
// warnings its client should see: for a StatefulSet pod, that the
// toleration does not bring it back on a lost node by itself.
func withWarnings(resp admission.Response, pod toleration.Pod, d toleration.Decision) admission.Response {
	if !ownedByStatefulSet(pod) || len(d.Taints) == 0 {
		return resp
	}
	seconds := "forever"
	if s := d.Taints[0].Seconds; s != nil {
		seconds = strconv.FormatInt(*s, 10) + "s"
	}
	return resp.WithWarnings(fmt.Sprintf(statefulSetWarning, seconds))
}

package retrofit_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/toleration"
)

// A pod created before fastover was installed carries the API server's
// default 300 s tolerations: the audit says it needs fixing, and Fix gives
// it the webhook's toleration in place.
func ExampleFixer_Fix() {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "api-0", Namespace: "shop", ResourceVersion: "1"},
		Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{
			Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300),
		}}},
	}
	client := fake.NewClientset(pod)
	rule := toleration.DefaultRule()

	f := retrofit.Auditor{Rule: rule}.Classify(pod, true)
	fmt.Println(f.Status, "-", f.Reason, "- unreachable", f.Unreachable)

	res, err := retrofit.Fixer{Client: client, Rule: rule, FieldManager: "example"}.Fix(context.Background(), pod)
	if err != nil {
		fmt.Println(err)
		return
	}
	after := retrofit.Auditor{Rule: rule}.Classify(res.Pod, true)
	fmt.Println(after.Status, "- unreachable", after.Unreachable, "- mark", res.Pod.Annotations[toleration.AnnotationInjected])
	// Output:
	// needs-fix - not injected - unreachable 300s (default)
	// fast - unreachable 0s - mark unreachable=0s
}

package fleet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// PodFinalizer holds the Pods of AddPodReplicas, and gates their
// scheduling.
const PodFinalizer = "fastover.io/test-hold"

// podContainer is the container of those Pods.
const podContainer = "ctl"

// AddPodReplicas adds n replicas to f (not started), each "in" a Pod of
// its own in f's namespace: the Pod object on the real API server, with
// labels, held unscheduled (a scheduling gate) and by a finalizer, and the
// downward API's variables in the process's environment, so that crash
// takeover names it. No kubelet acts on the Pods: SetPodStatus writes what
// one would. release removes the finalizers (call it when the test ends,
// also after an error).
func (f *Fleet) AddPodReplicas(ctx context.Context, n int, labels map[string]string) (release func(), err error) {
	pods := f.Env.Client.CoreV1().Pods(f.Namespace)
	var names []string
	release = func() {
		for _, name := range names {
			_, _ = pods.Patch(context.Background(), name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		}
	}
	for range n {
		r := NewReplica(f.Name, len(f.Replicas)+1)
		p, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: r.ID, Labels: labels, Finalizers: []string{PodFinalizer}},
			Spec: corev1.PodSpec{
				SchedulingGates: []corev1.PodSchedulingGate{{Name: PodFinalizer}},
				Containers:      []corev1.Container{{Name: podContainer, Image: "fastover.test/none"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return release, err
		}
		names = append(names, p.Name)
		r.Environ = []string{"POD_NAME=" + p.Name, "POD_NAMESPACE=" + f.Namespace, "POD_UID=" + string(p.UID), "CONTAINER_NAME=" + podContainer}
		f.Replicas = append(f.Replicas, r)
	}
	return release, nil
}

// SetPodStatus writes the status a kubelet would write for a Pod of
// AddPodReplicas: Ready or not, and, if ended is set, its container
// terminated (the evidence crash takeover reads).
func SetPodStatus(ctx context.Context, client kubernetes.Interface, ns, name string, ready bool, ended *corev1.ContainerStateTerminated) error {
	pods := client.CoreV1().Pods(ns)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if ended != nil {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: podContainer, Image: "fastover.test/none", State: corev1.ContainerState{Terminated: ended}}}
	}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

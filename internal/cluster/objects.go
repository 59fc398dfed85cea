package cluster

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Reading what the control plane did to pods and nodes, for the tests and
// the demo.

// PodsOf lists the pods labelled app=<app> in the namespace (the pods of
// the tests' and the demo's Deployments).
func PodsOf(ctx context.Context, c kubernetes.Interface, ns, app string) ([]corev1.Pod, error) {
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{"app": app}).String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// RunningPod returns a pod that is Running and Ready, not being deleted,
// and on a node other than avoid (if avoid is not empty), or nil.
func RunningPod(pods []corev1.Pod, avoid string) *corev1.Pod {
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || p.Spec.NodeName == avoid {
			continue
		}
		if p.Status.Phase == corev1.PodRunning && PodReady(p) {
			return p
		}
	}
	return nil
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeReady returns the status of the node's Ready condition ("" if it
// has none yet).
func NodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// HasTaint reports whether the node carries a taint with the key and
// effect.
func HasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

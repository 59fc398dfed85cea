package leaders

import (
	"context"
	"fmt"
	"sort"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// standbys fills in the holder's Pod and its siblings: the Pods of the
// same controller (a ReplicaSet's), or, for a Pod without one, the Pods
// with the same labels. Nothing is filled in if the term records no Pod.
func standbys(ctx context.Context, client kubernetes.Interface, lease *coordinationv1.Lease, l *Leader) error {
	if l.HolderPod == nil {
		return nil
	}
	ns, name, _ := strings.Cut(l.HolderPod.Pod, "/")
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l.HolderPod.Missing = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("lease %s/%s: get its holder's Pod %s: %w", lease.Namespace, lease.Name, l.HolderPod.Pod, err)
	}
	*l.HolderPod = replica(pod)
	owner := metav1.GetControllerOf(pod)
	if owner == nil && len(pod.Labels) == 0 {
		return nil // nothing tells its siblings
	}
	opts := metav1.ListOptions{}
	if owner == nil {
		opts.LabelSelector = labels.SelectorFromSet(pod.Labels).String()
	}
	list, err := client.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		return fmt.Errorf("lease %s/%s: list its standbys' Pods: %w", lease.Namespace, lease.Name, err)
	}
	l.Standbys = []Replica{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.UID == pod.UID {
			continue
		}
		if owner != nil {
			if o := metav1.GetControllerOf(p); o == nil || o.UID != owner.UID {
				continue
			}
		}
		l.Standbys = append(l.Standbys, replica(p))
	}
	sort.Slice(l.Standbys, func(i, j int) bool { return l.Standbys[i].Pod < l.Standbys[j].Pod })
	return nil
}

func replica(p *corev1.Pod) Replica {
	r := Replica{Pod: p.Namespace + "/" + p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), Terminating: p.DeletionTimestamp != nil}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			r.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return r
}

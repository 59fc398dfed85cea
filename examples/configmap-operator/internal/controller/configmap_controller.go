// Package controller holds the operator's one reconciler, as kubebuilder
// lays it out.
package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	// LabelStamp marks the ConfigMaps the operator reconciles ("true").
	LabelStamp = "example.fastover.io/stamp"
	// AnnotationStampedBy names the replica that reconciled the ConfigMap
	// last.
	AnnotationStampedBy = "example.fastover.io/stamped-by"
	// AnnotationStampedAt is when (RFC 3339, nanoseconds).
	AnnotationStampedAt = "example.fastover.io/stamped-at"
)

// Selector selects the ConfigMaps the operator reconciles; the manager's
// cache holds those only.
func Selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelStamp: "true"})
}

// ConfigMapReconciler stamps each labelled ConfigMap with the identity of
// the replica that reconciles it: after a handover, the new leader's first
// reconciles restamp them all, which shows who leads and since when.
type ConfigMapReconciler struct {
	client.Client
	// Identity is this replica's.
	Identity string
	// Now tells the time; default time.Now.
	Now func() time.Time
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;patch

// Reconcile stamps the ConfigMap, unless this replica's stamp is on it
// already.
func (r *ConfigMapReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	at := now()
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Annotations[AnnotationStampedBy] == r.Identity {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[AnnotationStampedBy] = r.Identity
	cm.Annotations[AnnotationStampedAt] = at.UTC().Format(time.RFC3339Nano)
	if err := r.Patch(ctx, &cm, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log.Info("stamped", "configmap", types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}, "by", r.Identity)
	return ctrl.Result{}, nil
}

// SetupWithManager sets up the controller with the Manager.
func (r *ConfigMapReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		Named("configmap").
		Complete(r)
}

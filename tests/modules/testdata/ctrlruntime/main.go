// Command configmapoperator is a kubebuilder-style operator on
// controller-runtime v0.22, the consumer that tests/modules moves onto
// fastover's election with leader/ctrlmanager (elect.go, added after
// `go get`): a reconciler that labels the ConfigMaps of its namespace.
package main

import (
	"context"
	"flag"
	"os"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

type reconciler struct{ client.Client }

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Labels["reconciled"] == "true" {
		return ctrl.Result{}, nil
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["reconciled"] = "true"
	return ctrl.Result{}, r.Update(ctx, &cm)
}

func main() {
	namespace := flag.String("namespace", "default", "the namespace to reconcile, and of the Lease")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("setup")

	mgr, err := newManager(ctrl.GetConfigOrDie(), ctrl.Options{}, *namespace)
	if err != nil {
		log.Error(err, "manager")
		os.Exit(1)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(&reconciler{mgr.GetClient()}); err != nil {
		log.Error(err, "controller")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

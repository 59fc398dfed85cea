package main

import (
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/leader/ctrlmanager"
)

// newManager is ctrl.NewManager under fastover's election: controllers run
// on the leader only.
func newManager(cfg *rest.Config, opts ctrl.Options, namespace string) (ctrl.Manager, error) {
	return ctrlmanager.New(cfg, opts, leader.Config{
		Namespace: namespace,
		LeaseName: "configmapoperator",
	})
}

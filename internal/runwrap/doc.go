// Package runwrap makes a workload active/standby under fastover-run
// without a new image: it rewrites a pod template annotated
// fastover.io/run-lease so that an init container copies fastover-run
// into an emptyDir, the annotated container runs
// `fastover-run --lease=… -- <its command>`, the probes are
// fastover-run's, and the downward API gives fastover-run the pod's name,
// namespace and address.
//
// PodSpec rewrites one pod template; Manifests rewrites a stream of
// manifests (a Helm post-renderer's input, kustomize's output, a KRM
// function's ResourceList): every Deployment so annotated, the Service it
// names (its selector removed) and a Role with its RoleBinding for the
// pod's ServiceAccount. Both are idempotent: a template that is already
// wrapped is left as it is.
package runwrap

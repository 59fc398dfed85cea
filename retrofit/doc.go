// Package retrofit finds the pods that are not on fastover's fast path and
// fixes them in place, without a restart.
//
// The webhook fails open, so a pod created while it was down misses
// injection, and pods created before fastover was installed (or before
// their namespace was labelled) never went through it. Kubernetes allows
// changing tolerationSeconds of a running pod's toleration and adding
// tolerations, so such a pod can be given the fast toleration where it
// runs, keeping its UID.
//
// Audit classifies every pod of the enabled namespaces with exactly the
// webhook's rule (toleration.Rule.Decide; whether a toleration is the API
// server's default is toleration.Rule.IsAPIServerDefault's answer, as for
// the webhook): Fix applies the same JSON Patch the webhook would have
// returned (toleration.Decision.Patch), guarded by the pod's
// resourceVersion, and never touches a pod the rule leaves alone.
// Reconciler does it continuously from informers, rate-limited, with an
// Event on each pod it fixes; fastover-webhook runs it with --reconcile,
// on one replica elected with fastover's leader library.
//
// ExcludedNamespaces are never injected, labelled or not; the webhook's
// configuration in manifests/ and the chart exclude the same ones (a unit
// test holds them to it). InstalledAt tells when fastover was installed,
// for the audit's reasons.
//
// kubectl-fastover (cmd/kubectl-fastover) is the command-line front end:
// `kubectl fastover audit` and `kubectl fastover fix`.
package retrofit

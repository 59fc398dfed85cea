// Package install renders fastover's kustomizations (manifests/) with the
// kustomize API and applies them server-side, the way `kubectl apply
// --server-side -k` does, collecting the API server's warnings. The
// end-to-end tests and the demo install fastover with it.
package install

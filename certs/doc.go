// Package certs makes the certificates fastover's webhook serves with, for
// clusters without cert-manager and for local runs: a CA, serving
// certificates signed by it, and files the webhook's certificate watcher
// picks up without a restart. With cert-manager, see manifests/ instead.
package certs

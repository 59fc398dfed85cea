// Package certmanager runs a real cert-manager beside a local control plane
// (package internal/cluster), for the end-to-end tests and the demo.
//
// The cert-manager is bin/cert-manager-local (built by
// `tests/tools/build.sh certmanager` from the pinned module in
// tests/tools/certmanager): cert-manager's own controllers for Issuers,
// ClusterIssuers, Certificates, the CertificateRequest approver, the
// SelfSigned and CA issuers, and its cainjector, in one process. Start
// installs cert-manager's CRDs (bin/cert-manager-crds), creates the
// cluster resource namespace, runs the process and waits until it is
// ready:
//
//	env := cluster.Start(t, cluster.Options{})
//	certmanager.Start(t, env)
//	// create Issuers and Certificates, then:
//	err := certmanager.WaitReady(ctx, env, "ns", "my-cert")
//
// There is no cert-manager webhook: the CRDs' schemas validate, and no
// defaulting beyond theirs happens. The package imports no cert-manager
// code; it handles cert-manager's objects as unstructured ones.
package certmanager

// Package harness is the home of the libraries only the test suites use:
// faultproxy (a TLS proxy that delays, drops and partitions one replica's
// traffic to the API server) and images (fastover's images built and
// loaded into podman). The harness the demo runs too (the control plane,
// the fleet of replicas, cert-manager, the installer) is product code in
// internal/.
package harness

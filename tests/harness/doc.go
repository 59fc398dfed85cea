// Package harness is the home of the libraries only the test suites and
// benchmarks use: faultproxy (a TLS proxy that delays, drops and
// partitions one replica's traffic to the API server), images (fastover's
// images built and loaded into podman), commands (fastover's commands
// built once per suite), webhookreplica (webhook processes behind a
// Service on a control plane without nodes) and benchrun (how every
// benchmark command starts). The harness the demo runs too (the control
// plane, the fleet of replicas, cert-manager, the installer) is product
// code in internal/.
package harness

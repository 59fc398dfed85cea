// Package e2e holds fastover's end-to-end tests. They run on a real local
// control plane (package internal/cluster) with kwok nodes; `make e2e` builds
// the binaries they need and runs them.
package e2e

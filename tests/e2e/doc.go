// Package e2e holds fastover's end-to-end tests. They run on a real local
// control plane (package internal/cluster) with kwok nodes; `make e2e` builds
// the binaries they need and runs them.
//
// A test that times nothing two busy cores could skew, and shares nothing
// machine-wide (no t.Setenv, no fixed port, no measure of this process's
// heap), calls t.Parallel first: go test runs those together, at most
// -parallel at a time (make e2e's E2E_PARALLEL), after the serial tests,
// which run alone as their timed checks need. Each test starts a control
// plane of its own, so the parallel ones share only the two cores. make
// test runs them as separate go test runs (tests/tools/suites.sh, which
// tells them apart by that first statement): the parallel tests beside the
// packages that build, then the serial ones in two halves, each beside the
// other and tests/charts' real nodes, none of which saturates the cores.
package e2e

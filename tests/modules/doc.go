// Package modules tests fastover's Go modules as their consumers get
// them.
//
// The leader library (github.com/fastover/fastover/leader) and its
// controller-runtime adapter (leader/ctrlmanager) are modules of their own so
// that a controller can take them without the root module's dependencies.
// The tests here:
//   - build a module proxy in a directory (tests/harness/modproxy) with both
//     modules at a test version, their go.mod files pinned by
//     internal/release as a release pins them, named first in GOPROXY;
//   - in fresh consumer modules (testdata/clientgo, a client-go v0.35
//     controller; testdata/ctrlruntime, a controller-runtime v0.22 operator)
//     run the `go get` lines of README.md and docs/leader.md, compile the
//     README's snippet, and compare the go.mod and the build list before and
//     after: what was added, what was upgraded, nothing outside an allowed
//     set;
//   - run each module's unit tests against its minimum dependencies and
//     against the newest (a scratch copy with `go get ...@latest`);
//   - run the client-go v0.35 consumer, built against the library's
//     minimum client-go, as two replicas on the v1.37 control plane.
package modules

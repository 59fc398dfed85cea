// Package release knows fastover's Go modules and how a release versions
// them.
//
// fastover is three modules: the leader library
// (github.com/fastover/fastover/leader, client-go only), its
// controller-runtime adapter (github.com/fastover/fastover/leader/ctrlmanager,
// which requires the library) and the root module (the webhook, retrofit,
// the binaries, the tests), which requires both. In the tree, each go.mod
// requires its fastover modules at DevVersion and replaces that version with
// the module's directory, and go.work makes them one workspace; neither is
// seen by a consumer.
//
// A release tags the modules in dependency order (Tags). The library is
// tagged as it is; then Pin rewrites the other go.mod files to require the
// fastover modules at the release's version, and that commit gets the
// adapter's and the root module's tags, so that each tag names a go.mod a
// consumer can resolve.
package release

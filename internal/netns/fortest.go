//go:build linux

package netns

import (
	"os"
	"testing"
)

// RequireEnv names the environment variable that makes a namespace
// mandatory: where it is set (CI's .ci/run sets it; it runs as root),
// ForTest fails the test instead of skipping it.
const RequireEnv = "FASTOVER_REQUIRE_NETNS"

// ForTest makes a namespace for the test and closes it when the test ends.
// Where one cannot be made (not root), it skips the test with the reason,
// or fails it when $FASTOVER_REQUIRE_NETNS is set.
func ForTest(t testing.TB, opts Options) *NS {
	t.Helper()
	n, err := New(opts)
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%v (and $%s is set, so this test must run)", err, RequireEnv)
		}
		t.Skipf("%v (set $%s to make this a failure)", err, RequireEnv)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

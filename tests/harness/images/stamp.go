package images

import (
	"time"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/imagebuild"
)

// What the tests stamp into the images they build: fixed, so that a test
// does not depend on the state of the work tree, and so that the tests
// here and in tests/e2e build the same binaries (Go's build cache serves
// the second).
const (
	TestVersion = "v0.0.0-test"
	TestCommit  = "0123456789abcdef0123456789abcdef01234567"
	TestSource  = "https://github.com/fastover/fastover"
)

// TestCommitTime is the commit time the tests stamp.
var TestCommitTime = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// Options are the options the tests build with: every image, both
// platforms, OCI layouts under out.
func Options(out string) (imagebuild.Options, error) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		return imagebuild.Options{}, err
	}
	return imagebuild.Options{
		ModuleRoot: root, OutDir: out,
		Version: TestVersion, Commit: TestCommit, CommitTime: TestCommitTime,
		Source: TestSource,
	}, nil
}

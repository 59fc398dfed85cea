package commands

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fastover/fastover/internal/cluster"
)

// DirEnv names a directory that holds the commands already built, for
// every test binary of a run: make test builds them once there (go build
// -o DIR/ ./cmd/... ./examples/...) instead of once per go test process. A
// Set finds its commands there, and builds none; Remove leaves the
// directory alone.
const DirEnv = "FASTOVER_TEST_COMMANDS"

// Set is a set of fastover's commands, built on first use.
type Set struct {
	// Packages are the packages built, as `go build` takes them from the
	// repository's root (./cmd/..., ./examples/fastover-example).
	Packages []string

	once   sync.Once
	dir    string
	shared bool // dir is DirEnv's, not this Set's to remove
	err    error
}

// Path builds the set if it is not built yet and returns the path of the
// command name in it; a failed build fails t. With DirEnv set, the path is
// the command's in that directory, which must hold it.
func (s *Set) Path(t testing.TB, name string) string {
	t.Helper()
	s.once.Do(s.build)
	if s.err != nil {
		t.Fatal(s.err)
	}
	p := filepath.Join(s.dir, name)
	if s.shared {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s has no %s (%v): build it there with go build -o %s/ ./cmd/... ./examples/..., or unset %s",
				DirEnv, s.dir, name, err, s.dir, DirEnv)
		}
	}
	return p
}

func (s *Set) build() {
	if dir := os.Getenv(DirEnv); dir != "" {
		s.dir, s.shared = dir, true
		return
	}
	root, err := cluster.ModuleRoot()
	if err != nil {
		s.err = err
		return
	}
	if s.dir, s.err = os.MkdirTemp("", "fastover-test-bin-"); s.err != nil {
		return
	}
	cmd := exec.Command("go", append([]string{"build", "-o", s.dir + "/"}, s.Packages...)...)
	cmd.Dir = root
	// The repository's go.work, as make builds them, even for a module
	// whose tests run with GOWORK=off: its go.sum holds what its own
	// packages need, not every command's.
	cmd.Env = append(os.Environ(), "GOWORK=")
	if out, err := cmd.CombinedOutput(); err != nil {
		s.err = fmt.Errorf("go build %v: %w\n%s", s.Packages, err, out)
	}
}

// Remove deletes what the set built; a DirEnv directory is left as it is.
func (s *Set) Remove() {
	if s.dir != "" && !s.shared {
		_ = os.RemoveAll(s.dir)
	}
}

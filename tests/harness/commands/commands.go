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

// Set is a set of fastover's commands, built on first use.
type Set struct {
	// Packages are the packages built, as `go build` takes them from the
	// repository's root (./cmd/..., ./examples/fastover-example).
	Packages []string

	once sync.Once
	dir  string
	err  error
}

// Path builds the set if it is not built yet and returns the path of the
// command name in it; a failed build fails t.
func (s *Set) Path(t testing.TB, name string) string {
	t.Helper()
	s.once.Do(s.build)
	if s.err != nil {
		t.Fatal(s.err)
	}
	return filepath.Join(s.dir, name)
}

func (s *Set) build() {
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

// Remove deletes what the set built.
func (s *Set) Remove() {
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

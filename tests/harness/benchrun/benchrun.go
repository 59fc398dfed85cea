package benchrun

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fastover/fastover/internal/cluster"
)

// Main runs a bench command's body; an error is printed after the
// command's name and exits with status 1.
func Main(name string, run func() error) {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// BinFlag defines the -bin flag every bench command takes: the directory
// with the control-plane binaries and with uses, what the command runs.
func BinFlag(uses string) *string {
	return flag.String("bin", "bin", "directory with the control-plane binaries and "+uses)
}

// Parse parses the command line; a bench takes flags only.
func Parse() error {
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	return nil
}

// Bin is a bench's binaries directory, absolute.
type Bin string

// Binaries makes dir absolute and checks that each of names is in it; a
// missing one is an error that says `make bench` builds it.
func Binaries(dir string, names ...string) (Bin, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(abs, name)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (make bench builds it)", name, err))
		}
	}
	return Bin(abs), errors.Join(errs...)
}

// Path is the path of the binary name in b.
func (b Bin) Path(name string) string { return filepath.Join(string(b), name) }

// Start brings up a local control plane from b's binaries; the caller
// stops it.
func (b Bin) Start() (*cluster.Env, error) {
	return cluster.New(cluster.Options{BinDir: string(b)})
}

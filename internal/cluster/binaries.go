package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Binaries the control plane runs; all of them are built by `make tools`.
const (
	binEtcd       = "etcd"
	binAPIServer  = "kube-apiserver"
	binController = "kube-controller-manager"
	binScheduler  = "kube-scheduler"
	binKwok       = "kwok"
	// stagesDir holds kwok's stage files, copied from the kwok module.
	stagesDir = "kwok-stages"
)

// BinDir returns the directory that holds the control-plane binaries:
// $FASTOVER_BIN if set, else bin/ at the root of the fastover module
// enclosing the working directory.
func BinDir() (string, error) {
	if dir := os.Getenv("FASTOVER_BIN"); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", fmt.Errorf("%w: set FASTOVER_BIN to the directory that `make tools` builds into", err)
	}
	return filepath.Join(root, "bin"), nil
}

// ModuleRoot returns the root of the fastover module enclosing the working
// directory (where manifests/ and bin/ are).
func ModuleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isModuleRoot(dir) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no fastover module root above %s", wd)
		}
	}
}

func isModuleRoot(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	const want = "module github.com/fastover/fastover\n"
	return len(data) >= len(want) && string(data[:len(want)]) == want
}

// checkBinaries reports every binary or stage directory missing from dir,
// in one error that says how to build them.
func checkBinaries(dir string) error {
	var missing []string
	for _, name := range []string{binEtcd, binAPIServer, binController, binScheduler, binKwok, stagesDir} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("control-plane binaries missing from %s (%s): run `make tools` at the repository root to build them",
		dir, strings.Join(missing, ", "))
}

package release

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// DevVersion is the version at which the modules of the tree require each
// other between releases; each go.mod replaces it with the directory.
const DevVersion = "v0.0.0-00010101000000-000000000000"

// Module is one of fastover's Go modules.
type Module struct {
	// Path is the module path.
	Path string
	// Dir is the module's directory, relative to the repository's root
	// ("." for the root module).
	Dir string
	// Requires are the paths of the fastover modules it requires.
	Requires []string
}

// TagPrefix is the prefix of the module's tags: its directory and a slash
// ("leader/"), nothing for the root module.
func (m Module) TagPrefix() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir + "/"
}

// Modules are fastover's modules in dependency order: each requires only
// modules before it.
var Modules = []Module{
	{Path: "github.com/fastover/fastover/leader", Dir: "leader"},
	{Path: "github.com/fastover/fastover/leader/ctrlmanager", Dir: "leader/ctrlmanager",
		Requires: []string{"github.com/fastover/fastover/leader"}},
	{Path: "github.com/fastover/fastover", Dir: ".",
		Requires: []string{"github.com/fastover/fastover/leader", "github.com/fastover/fastover/leader/ctrlmanager"}},
}

// Tags are the tags of a release at version, in the order to push them:
// each module's after those it requires.
func Tags(version string) ([]string, error) {
	if err := CheckVersion(version); err != nil {
		return nil, err
	}
	tags := make([]string, 0, len(Modules))
	for _, m := range Modules {
		tags = append(tags, m.TagPrefix()+version)
	}
	return tags, nil
}

// CheckVersion reports whether version can be a release of every module:
// canonical semantic version, major version 0 or 1 (the module paths
// carry no /vN suffix).
func CheckVersion(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("release: %q is not a canonical semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE])", version)
	}
	if m := semver.Major(version); m != "v0" && m != "v1" {
		return fmt.Errorf("release: %s: a major version past v1 needs a /%s suffix on every module path", version, m)
	}
	return nil
}

// Pin rewrites the go.mod files of the modules under root that require
// other fastover modules so that they require them at version, and moves
// their directory replacements to that version (the tree keeps building
// the modules beside it). It checks that each go.mod requires exactly the
// fastover modules Modules says, at one version.
func Pin(root, version string) error {
	if err := CheckVersion(version); err != nil {
		return err
	}
	// Every file is rewritten in memory first: nothing is written unless
	// all of them can be.
	out := map[string][]byte{}
	var errs []error
	for _, m := range Modules {
		file := filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod")
		b, err := pin(file, m, version)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path.Join(m.Dir, "go.mod"), err))
		}
		out[file] = b
	}
	work := filepath.Join(root, "go.work")
	b, err := pinWork(work, version)
	if err != nil {
		errs = append(errs, fmt.Errorf("go.work: %w", err))
	}
	if b != nil {
		out[work] = b
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, file := range slices.Sorted(maps.Keys(out)) {
		if err := os.WriteFile(file, out[file], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// pinWork moves go.work's replacements of fastover's modules, which settle
// which go.mod's replacement wins, to version.
func pinWork(file, version string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	w, err := modfile.ParseWork(file, data, nil)
	if err != nil {
		return nil, err
	}
	type rep struct{ path, old, dir string }
	var moves []rep
	for _, r := range w.Replace {
		if !isFastover(r.Old.Path) || r.Old.Version == "" || r.New.Version != "" {
			continue
		}
		moves = append(moves, rep{r.Old.Path, r.Old.Version, r.New.Path})
	}
	for _, m := range moves {
		if err := w.DropReplace(m.path, m.old); err != nil {
			return nil, err
		}
		if err := w.AddReplace(m.path, version, m.dir, ""); err != nil {
			return nil, err
		}
	}
	w.Cleanup()
	return modfile.Format(w.Syntax), nil
}

func pin(file string, m Module, version string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil || f.Module.Mod.Path != m.Path {
		return nil, fmt.Errorf("want module %s", m.Path)
	}
	if err := checkRequires(f, m); err != nil {
		return nil, err
	}
	olds := map[string]string{} // fastover module → the version it was required at
	for _, r := range f.Require {
		if isFastover(r.Mod.Path) {
			olds[r.Mod.Path] = r.Mod.Version
		}
	}
	dirs, err := moveReplaces(f.Replace, olds)
	if err != nil {
		return nil, err
	}
	for _, p := range slices.Sorted(maps.Keys(olds)) {
		old := olds[p]
		if err := f.AddRequire(p, version); err != nil {
			return nil, err
		}
		if dir, ok := dirs[p]; ok {
			if err := f.DropReplace(p, old); err != nil {
				return nil, err
			}
			if err := f.AddReplace(p, version, dir, ""); err != nil {
				return nil, err
			}
		}
	}
	f.Cleanup()
	return f.Format()
}

// moveReplaces returns the directory each module of olds is replaced with
// at its old version, and fails on a replacement by another module.
func moveReplaces(reps []*modfile.Replace, olds map[string]string) (map[string]string, error) {
	dirs := map[string]string{}
	for _, rep := range reps {
		old, ok := olds[rep.Old.Path]
		if !ok || (rep.Old.Version != "" && rep.Old.Version != old) {
			continue
		}
		if rep.Old.Version == "" {
			return nil, fmt.Errorf("%s is replaced at every version: replace it at %s only", rep.Old.Path, old)
		}
		if rep.New.Version != "" {
			return nil, fmt.Errorf("%s %s is replaced by a module (%s), not a directory", rep.Old.Path, old, rep.New.Path)
		}
		dirs[rep.Old.Path] = rep.New.Path
	}
	return dirs, nil
}

// checkRequires: f requires exactly m.Requires of fastover's modules, all
// at one version.
func checkRequires(f *modfile.File, m Module) error {
	want := map[string]bool{}
	for _, p := range m.Requires {
		want[p] = true
	}
	versions := map[string]bool{}
	for _, r := range f.Require {
		if !isFastover(r.Mod.Path) {
			continue
		}
		if !want[r.Mod.Path] {
			return fmt.Errorf("requires %s, which is not one of %v", r.Mod.Path, m.Requires)
		}
		delete(want, r.Mod.Path)
		versions[r.Mod.Version] = true
	}
	if len(want) > 0 {
		var missing []string
		for p := range want {
			missing = append(missing, p)
		}
		return fmt.Errorf("does not require %s", strings.Join(missing, ", "))
	}
	if len(versions) > 1 {
		return fmt.Errorf("requires fastover's modules at %d versions", len(versions))
	}
	return nil
}

func isFastover(p string) bool {
	return p == "github.com/fastover/fastover" || strings.HasPrefix(p, "github.com/fastover/fastover/")
}

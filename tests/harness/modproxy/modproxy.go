package modproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Module is a module to serve: its path, and the directory that holds its
// go.mod.
type Module struct {
	Path string
	Dir  string
}

// Write adds each module at version to the proxy in dir: the version's
// .info, .mod (the directory's go.mod) and .zip, and its line in the
// module's version list. A nested module (a subdirectory with a go.mod of
// its own) is left out of the zip, as the go command does.
func Write(dir, version string, mods ...Module) error {
	for _, m := range mods {
		if err := write(dir, version, m); err != nil {
			return fmt.Errorf("modproxy: %s@%s: %w", m.Path, version, err)
		}
	}
	return nil
}

func write(dir, version string, m Module) error {
	mv := module.Version{Path: m.Path, Version: version}
	if err := module.Check(mv.Path, mv.Version); err != nil {
		return err
	}
	goMod, err := os.ReadFile(filepath.Join(m.Dir, "go.mod"))
	if err != nil {
		return err
	}
	if got := modfile.ModulePath(goMod); got != m.Path {
		return fmt.Errorf("%s/go.mod is module %q", m.Dir, got)
	}
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	at := filepath.Join(dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	z, err := os.Create(filepath.Join(at, escVersion+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(z, mv, m.Dir); err != nil {
		_ = z.Close()
		return err
	}
	if err := z.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(at, escVersion+".mod"), goMod, 0o644); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(at, escVersion+".info"), info, 0o644); err != nil {
		return err
	}
	return addToList(filepath.Join(at, "list"), version)
}

func addToList(file, version string) error {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, v := range strings.Fields(string(data)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(file, append(data, []byte(version+"\n")...), 0o644)
}

// URL is dir as a file:// URL, for GOPROXY.
func URL(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String(), nil
}

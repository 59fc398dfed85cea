package modules

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/sumdb/dirhash"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/release"
	"github.com/fastover/fastover/tests/harness/modproxy"
)

const (
	leaderPath      = "github.com/fastover/fastover/leader"
	ctrlmanagerPath = "github.com/fastover/fastover/leader/ctrlmanager"
)

// proxy is the module proxy of the package's tests, made once.
var proxy struct {
	once    sync.Once
	dir     string // the proxy's directory
	url     string // file:// URL of dir
	version string // the version of fastover's modules in it
	err     error
}

// scratch holds what outlives one test: the consumer that several tests
// use.
var scratch string

// TestMain makes scratch, and removes it and the proxy's directory after
// the tests.
func TestMain(m *testing.M) {
	var err error
	if scratch, err = os.MkdirTemp("", "fastover-modules-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(scratch)
	if proxy.dir != "" {
		_ = os.RemoveAll(proxy.dir)
	}
	os.Exit(code)
}

// repoRoot is the repository's root.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// startProxy builds the module proxy: the leader tree and the root go.mod
// and go.work copied, pinned by release.Pin at a version derived from the
// sources (a re-run of the same sources reuses what the module cache holds
// of them), and the two modules zipped into it.
func startProxy(t *testing.T) (url, version string) {
	t.Helper()
	root := repoRoot(t)
	proxy.once.Do(func() {
		proxy.err = func() error {
			src, err := os.MkdirTemp("", "fastover-modules-src-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(src) }()
			if err := os.CopyFS(filepath.Join(src, "leader"), os.DirFS(filepath.Join(root, "leader"))); err != nil {
				return err
			}
			for _, f := range []string{"go.mod", "go.work"} {
				if err := copyFile(filepath.Join(root, f), filepath.Join(src, f)); err != nil {
					return err
				}
			}
			sum, err := dirhash.HashDir(filepath.Join(src, "leader"), leaderPath, dirhash.Hash1)
			if err != nil {
				return err
			}
			digest := sha256.Sum256([]byte(sum)) // h1:<base64>: hex for a version
			proxy.version = "v0.0.1-test.h" + hex.EncodeToString(digest[:6])
			if err := release.Pin(src, proxy.version); err != nil {
				return err
			}
			if proxy.dir, err = os.MkdirTemp("", "fastover-modules-proxy-"); err != nil {
				return err
			}
			if err := modproxy.Write(proxy.dir, proxy.version,
				modproxy.Module{Path: leaderPath, Dir: filepath.Join(src, "leader")},
				modproxy.Module{Path: ctrlmanagerPath, Dir: filepath.Join(src, "leader", "ctrlmanager")},
			); err != nil {
				return err
			}
			proxy.url, err = modproxy.URL(proxy.dir)
			return err
		}()
	})
	if proxy.err != nil {
		t.Fatal(proxy.err)
	}
	return proxy.url, proxy.version
}

// goEnv is the environment of a consumer's go command: the test proxy
// first, then the GOPROXY in force; no checksum database for fastover's
// modules (they are not published); no workspace; this toolchain.
func goEnv(t *testing.T) []string {
	t.Helper()
	url, _ := startProxy(t)
	upstream := strings.TrimSpace(goOutput(t, "", nil, "env", "GOPROXY"))
	return envWith("GOPROXY="+url+","+upstream, "GONOSUMDB=github.com/fastover/*", "GONOPROXY=", "GOPRIVATE=",
		"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod")
}

// envWith is this process's environment with the variables of set
// ("KEY=value") in place of its own.
func envWith(set ...string) []string {
	drop := map[string]bool{}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// goOutput runs the go command in dir and returns its combined output; it
// fails the test if the command fails.
func goOutput(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := goCmd(dir, env, args...)
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

func goCmd(dir string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// buildList is `go list -m all` in dir: module path → version.
func buildList(t *testing.T, dir string, env []string) map[string]string {
	t.Helper()
	out := goOutput(t, dir, env, "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			m[f[0]] = f[1]
		} else if len(f) == 1 {
			m[f[0]] = "" // the main module
		}
	}
	return m
}

// requires is what dir's go.mod requires: module path → version.
func requires(t *testing.T, dir string) map[string]string {
	t.Helper()
	file := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, r := range f.Require {
		m[r.Mod.Path] = r.Mod.Version
	}
	return m
}

// change is how a module list moved between two states.
type change struct {
	added, upgraded, downgraded, removed []string // "path version" / "path old => new"
}

func diff(before, after map[string]string) change {
	var c change
	for p, v := range after {
		old, ok := before[p]
		switch {
		case !ok:
			c.added = append(c.added, p+" "+v)
		case old != v && semverLess(old, v):
			c.upgraded = append(c.upgraded, p+" "+old+" => "+v)
		case old != v:
			c.downgraded = append(c.downgraded, p+" "+old+" => "+v)
		}
	}
	for p, v := range before {
		if _, ok := after[p]; !ok {
			c.removed = append(c.removed, p+" "+v)
		}
	}
	for _, s := range [][]string{c.added, c.upgraded, c.downgraded, c.removed} {
		sort.Strings(s)
	}
	return c
}

func (c change) String() string {
	var b strings.Builder
	for _, part := range []struct {
		name string
		list []string
	}{{"added", c.added}, {"upgraded", c.upgraded}, {"downgraded", c.downgraded}, {"removed", c.removed}} {
		fmt.Fprintf(&b, "  %s (%d)\n", part.name, len(part.list))
		for _, l := range part.list {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

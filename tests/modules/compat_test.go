package modules

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// plainEnv is the environment of a go command on one module by itself:
// no workspace, this toolchain, and GOFLAGS as given.
func plainEnv(goflags string) []string {
	return envWith("GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS="+goflags)
}

// versions are the versions of mods in dir's build list, for the log.
func versions(t *testing.T, dir string, env []string, mods ...string) string {
	t.Helper()
	list := buildList(t, dir, env)
	var parts []string
	for _, m := range mods {
		parts = append(parts, m+" "+list[m])
	}
	return strings.Join(parts, ", ")
}

// The compatibility matrix: each leader module's unit tests (fake clients)
// against its minimum dependencies, as its go.mod names them (in the tree,
// without the workspace: go.sum must be complete), and against the newest
// (a scratch copy with `go get ...@latest`).
func TestCompatibility(t *testing.T) {
	root := repoRoot(t)
	for _, c := range []struct {
		name   string
		dir    string            // the module, relative to the leader tree
		min    map[string]string // module → the minimum the go.mod must name
		newest []string          // modules to take @latest
	}{
		{
			name: "leader",
			dir:  ".",
			min: map[string]string{
				"k8s.io/client-go": "v0.35.0", "k8s.io/api": "v0.35.0", "k8s.io/apimachinery": "v0.35.0",
				"github.com/prometheus/client_golang": "v1.22.0",
			},
			newest: []string{"k8s.io/client-go", "k8s.io/api", "k8s.io/apimachinery", "github.com/prometheus/client_golang"},
		},
		{
			name: "leader/ctrlmanager",
			dir:  "ctrlmanager",
			min: map[string]string{
				"sigs.k8s.io/controller-runtime": "v0.22.0", "k8s.io/client-go": "v0.35.0",
			},
			newest: []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "k8s.io/api", "k8s.io/apimachinery"},
		},
	} {
		t.Run(c.name+"/minimum", func(t *testing.T) {
			dir := filepath.Join(root, "leader", c.dir)
			env := plainEnv("-mod=readonly")
			list := buildList(t, dir, env)
			for m, v := range c.min {
				assert.Equal(t, v, list[m], "%s: the version the module is tested and released at", m)
			}
			out := goOutput(t, dir, env, "test", "-count=1", "./...")
			t.Logf("%s at its minimum (%s):\n%s", c.name, versions(t, dir, env, slices.Sorted(maps.Keys(c.min))...), indent(out))
		})
		t.Run(c.name+"/newest", func(t *testing.T) {
			tree := t.TempDir()
			if err := os.CopyFS(tree, os.DirFS(filepath.Join(root, "leader"))); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(tree, c.dir)
			env := plainEnv("-mod=mod")
			var get []string
			for _, m := range c.newest {
				get = append(get, m+"@latest")
			}
			goOutput(t, dir, env, append([]string{"get"}, get...)...)
			goOutput(t, dir, env, "mod", "tidy")
			list := buildList(t, dir, env)
			for m, v := range c.min {
				assert.True(t, semverLess(v, list[m]) || v == list[m], "%s %s is older than the minimum %s", m, list[m], v)
			}
			out := goOutput(t, dir, env, "test", "-count=1", "./...")
			t.Logf("%s at the newest (%s):\n%s", c.name, versions(t, dir, env, c.newest...), indent(out))
		})
	}
}

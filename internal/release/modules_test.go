package release

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
)

// tree writes go.mod files (dir → content) and an optional go.work under
// a temporary root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return root
}

const (
	leaderMod = "module github.com/fastover/fastover/leader\n\ngo 1.25.0\n\nrequire k8s.io/client-go v0.35.0\n"
	cmMod     = "module github.com/fastover/fastover/leader/ctrlmanager\n\ngo 1.25.0\n\nrequire (\n\tgithub.com/fastover/fastover/leader " + DevVersion + "\n\tsigs.k8s.io/controller-runtime v0.22.0\n)\n\nreplace github.com/fastover/fastover/leader " + DevVersion + " => ../\n"
	rootMod   = "module github.com/fastover/fastover\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/fastover/fastover/leader " + DevVersion + "\n\tgithub.com/fastover/fastover/leader/ctrlmanager " + DevVersion + "\n\tk8s.io/client-go v0.37.2\n)\n\nreplace github.com/fastover/fastover/leader " + DevVersion + " => ./leader\n\nreplace github.com/fastover/fastover/leader/ctrlmanager " + DevVersion + " => ./leader/ctrlmanager\n"
	workFile  = "go 1.26.0\n\nuse (\n\t.\n\t./leader\n\t./leader/ctrlmanager\n)\n\nreplace github.com/fastover/fastover/leader " + DevVersion + " => ./leader\n"
)

func devTree(t *testing.T) string {
	return tree(t, map[string]string{
		"leader/go.mod":             leaderMod,
		"leader/ctrlmanager/go.mod": cmMod,
		"go.mod":                    rootMod,
		"go.work":                   workFile,
	})
}

func parse(t *testing.T, root, dir string) *modfile.File {
	t.Helper()
	file := filepath.Join(root, dir, "go.mod")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	f, err := modfile.Parse(file, data, nil)
	require.NoError(t, err)
	return f
}

func requires(f *modfile.File) map[string]string {
	out := map[string]string{}
	for _, r := range f.Require {
		out[r.Mod.Path] = r.Mod.Version
	}
	return out
}

func replaces(f *modfile.File) map[string]string {
	out := map[string]string{}
	for _, r := range f.Replace {
		out[r.Old.Path+"@"+r.Old.Version] = r.New.Path
	}
	return out
}

func TestTags(t *testing.T) {
	tags, err := Tags("v0.3.0-rc.1")
	require.NoError(t, err)
	assert.Equal(t, []string{"leader/v0.3.0-rc.1", "leader/ctrlmanager/v0.3.0-rc.1", "v0.3.0-rc.1"}, tags,
		"each module after the ones it requires")
	for _, bad := range []string{"0.3.0", "v0.3", "v2.0.0", "latest", ""} {
		_, err := Tags(bad)
		assert.Error(t, err, bad)
	}
}

func TestModulesInDependencyOrder(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Modules {
		for _, r := range m.Requires {
			assert.True(t, seen[r], "%s requires %s, listed after it", m.Path, r)
		}
		seen[m.Path] = true
	}
}

func TestPin(t *testing.T) {
	root := devTree(t)
	require.NoError(t, Pin(root, "v0.3.0"))

	l := parse(t, root, "leader")
	assert.Equal(t, map[string]string{"k8s.io/client-go": "v0.35.0"}, requires(l), "the library requires no fastover module")

	cm := parse(t, root, "leader/ctrlmanager")
	assert.Equal(t, map[string]string{
		"github.com/fastover/fastover/leader": "v0.3.0",
		"sigs.k8s.io/controller-runtime":      "v0.22.0",
	}, requires(cm))
	assert.Equal(t, map[string]string{"github.com/fastover/fastover/leader@v0.3.0": "../"}, replaces(cm),
		"the tree keeps building the library beside it")

	r := parse(t, root, ".")
	assert.Equal(t, map[string]string{
		"github.com/fastover/fastover/leader":             "v0.3.0",
		"github.com/fastover/fastover/leader/ctrlmanager": "v0.3.0",
		"k8s.io/client-go":                                "v0.37.2",
	}, requires(r))
	assert.Equal(t, map[string]string{
		"github.com/fastover/fastover/leader@v0.3.0":             "./leader",
		"github.com/fastover/fastover/leader/ctrlmanager@v0.3.0": "./leader/ctrlmanager",
	}, replaces(r))

	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	require.NoError(t, err)
	w, err := modfile.ParseWork("go.work", data, nil)
	require.NoError(t, err)
	require.Len(t, w.Replace, 1)
	assert.Equal(t, "v0.3.0", w.Replace[0].Old.Version)
	assert.Len(t, w.Use, 3)

	// Pinning again, to the next release, moves everything once more.
	require.NoError(t, Pin(root, "v0.4.0"))
	assert.Equal(t, "v0.4.0", requires(parse(t, root, "."))["github.com/fastover/fastover/leader"])
	assert.Equal(t, map[string]string{"github.com/fastover/fastover/leader@v0.4.0": "../"}, replaces(parse(t, root, "leader/ctrlmanager")))
}

func TestPinRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		files map[string]string
		want  string
	}{
		"the library requires a fastover module": {
			files: map[string]string{"leader/go.mod": leaderMod + "require github.com/fastover/fastover " + DevVersion + "\n", "leader/ctrlmanager/go.mod": cmMod, "go.mod": rootMod},
			want:  "leader/go.mod: requires github.com/fastover/fastover, which is not one of []",
		},
		"the root module does not require the adapter": {
			files: map[string]string{"leader/go.mod": leaderMod, "leader/ctrlmanager/go.mod": cmMod,
				"go.mod": "module github.com/fastover/fastover\n\ngo 1.26.0\n\nrequire github.com/fastover/fastover/leader " + DevVersion + "\n"},
			want: "go.mod: does not require github.com/fastover/fastover/leader/ctrlmanager",
		},
		"a replacement at every version": {
			files: map[string]string{"leader/go.mod": leaderMod, "go.mod": rootMod,
				"leader/ctrlmanager/go.mod": "module github.com/fastover/fastover/leader/ctrlmanager\n\nrequire github.com/fastover/fastover/leader " + DevVersion + "\n\nreplace github.com/fastover/fastover/leader => ../\n"},
			want: "replaced at every version",
		},
		"a go.mod of another module": {
			files: map[string]string{"leader/go.mod": "module example.com/leader\n", "leader/ctrlmanager/go.mod": cmMod, "go.mod": rootMod},
			want:  "leader/go.mod: want module github.com/fastover/fastover/leader",
		},
		"a missing go.mod": {
			files: map[string]string{"leader/go.mod": leaderMod, "go.mod": rootMod},
			want:  "leader/ctrlmanager/go.mod",
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := tree(t, c.files)
			err := Pin(root, "v0.3.0")
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	assert.ErrorContains(t, Pin(devTree(t), "v0.3"), "not a canonical semantic version")
}

func TestPinWritesNothingOnError(t *testing.T) {
	root := tree(t, map[string]string{"leader/go.mod": leaderMod, "leader/ctrlmanager/go.mod": cmMod, "go.mod": "module github.com/fastover/fastover\n"})
	require.Error(t, Pin(root, "v0.3.0"))
	data, err := os.ReadFile(filepath.Join(root, "leader/ctrlmanager/go.mod"))
	require.NoError(t, err)
	assert.Equal(t, cmMod, string(data), "a go.mod that could be pinned is left as it was when another cannot be")
}

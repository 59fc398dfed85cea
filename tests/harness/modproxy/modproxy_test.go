package modproxy

import (
	"archive/zip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// TestWriteServesTheGoCommand: the go command downloads the modules from
// the proxy as from any other, and the zip leaves the nested module out.
func TestWriteServesTheGoCommand(t *testing.T) {
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"lib/go.mod":         "module example.com/lib\n\ngo 1.25.0\n",
		"lib/lib.go":         "package lib\n\nconst A = 1\n",
		"lib/sub/go.mod":     "module example.com/lib/sub\n\ngo 1.25.0\n\nrequire example.com/lib v0.1.0\n",
		"lib/sub/sub.go":     "package sub\n\nimport \"example.com/lib\"\n\nconst B = lib.A\n",
		"lib/inner/inner.go": "package inner\n",
	})
	proxy := t.TempDir()
	require.NoError(t, Write(proxy, "v0.1.0",
		Module{Path: "example.com/lib", Dir: filepath.Join(src, "lib")},
		Module{Path: "example.com/lib/sub", Dir: filepath.Join(src, "lib/sub")}))
	// Again at another version: both are listed.
	require.NoError(t, Write(proxy, "v0.2.0-rc.1", Module{Path: "example.com/lib", Dir: filepath.Join(src, "lib")}))
	list, err := os.ReadFile(filepath.Join(proxy, "example.com/lib/@v/list"))
	require.NoError(t, err)
	assert.Equal(t, "v0.1.0\nv0.2.0-rc.1\n", string(list))

	zr, err := zip.OpenReader(filepath.Join(proxy, "example.com/lib/@v/v0.1.0.zip"))
	require.NoError(t, err)
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	require.NoError(t, zr.Close())
	sort.Strings(names)
	assert.Equal(t, []string{"example.com/lib@v0.1.0/go.mod", "example.com/lib@v0.1.0/inner/inner.go", "example.com/lib@v0.1.0/lib.go"}, names)

	url, err := URL(proxy)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(url, "file:///"), url)
	cmd := exec.Command("go", "mod", "download", "-json", "example.com/lib/sub@v0.1.0")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOPROXY="+url, "GONOSUMDB=example.com/*", "GOFLAGS=-modcacherw",
		"GOMODCACHE="+t.TempDir(), "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var got struct{ Version, Dir, Error string }
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Empty(t, got.Error)
	assert.Equal(t, "v0.1.0", got.Version)
	b, err := os.ReadFile(filepath.Join(got.Dir, "sub.go"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "lib.A")
}

func TestWriteRefuses(t *testing.T) {
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"go.mod": "module example.com/other\n"})
	err := Write(t.TempDir(), "v0.1.0", Module{Path: "example.com/lib", Dir: src})
	assert.ErrorContains(t, err, `go.mod is module "example.com/other"`)
	err = Write(t.TempDir(), "1.0", Module{Path: "example.com/other", Dir: src})
	assert.Error(t, err, "not a version")
	err = Write(t.TempDir(), "v0.1.0", Module{Path: "example.com/lib", Dir: filepath.Join(src, "missing")})
	assert.Error(t, err)
}

package imagebuild

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hello is a module with one small command, to build images of quickly.
func hello(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/hello\n\ngo 1.22\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println(\"hello\") }\n"), 0o644))
	return dir
}

func helloOptions(t *testing.T, root, out string) Options {
	return Options{
		ModuleRoot: root, OutDir: out,
		Binaries:  []Binary{{Name: "hello", Package: "."}},
		Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}},
		Version:   "v1.0.0", Commit: "abc", CommitTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Source: "https://example.com/hello",
	}
}

func TestBuildSmall(t *testing.T) {
	ctx := context.Background()
	root := hello(t)
	a, err := Build(ctx, helloOptions(t, root, filepath.Join(t.TempDir(), "a")))
	require.NoError(t, err)
	b, err := Build(ctx, helloOptions(t, root, filepath.Join(t.TempDir(), "b")))
	require.NoError(t, err)
	require.Len(t, a, 1)
	assert.Equal(t, a[0].Digest, b[0].Digest, "two builds differ")

	idx, err := layout.ImageIndexFromPath(a[0].Layout)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	assert.Equal(t, "v1.0.0", im.Manifests[0].Annotations[AnnotationRefName])
	inner, err := idx.ImageIndex(im.Manifests[0].Digest)
	require.NoError(t, err)
	inm, err := inner.IndexManifest()
	require.NoError(t, err)
	assert.Equal(t, "2026-01-02T03:04:05Z", inm.Annotations[AnnotationCreated])
	assert.Equal(t, License, inm.Annotations[AnnotationLicenses])
	require.Len(t, inm.Manifests, 1)
	img, err := inner.Image(inm.Manifests[0].Digest)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, User, cf.Config.User)
	assert.Equal(t, []string{"/usr/local/bin/hello"}, cf.Config.Entrypoint)
	assert.Equal(t, "amd64", cf.Architecture)
	assert.Len(t, cf.RootFS.DiffIDs, 2)
	digests, err := os.ReadFile(filepath.Join(filepath.Dir(a[0].Layout), "digests.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hello@"+a[0].Digest.String()+"\n", string(digests))
}

func TestBuildErrors(t *testing.T) {
	ctx := context.Background()
	root := hello(t)
	o := helloOptions(t, root, "")
	o.Commit = ""
	_, err := Build(ctx, o)
	assert.ErrorContains(t, err, "version, commit and commit time are required")

	o = helloOptions(t, root, "")
	o.Platforms = []v1.Platform{{OS: "windows", Architecture: "amd64"}}
	_, err = Build(ctx, o)
	assert.ErrorContains(t, err, "only linux/<arch>")

	o = helloOptions(t, root, "")
	o.Binaries = []Binary{{Name: "nope", Package: "./nope"}}
	_, err = Build(ctx, o)
	assert.ErrorContains(t, err, "go build")
}

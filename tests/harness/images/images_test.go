package images

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/imagebuild"
)

func options(t *testing.T, out string) imagebuild.Options {
	t.Helper()
	o, err := Options(out)
	require.NoError(t, err)
	return o
}

// TestImages builds the images twice, into two directories, as `make
// images` does: the digests are the same (the build is reproducible).
// The images are then pushed by digest to a registry and pulled back by
// digest: both platforms, the user, the entrypoint and the annotations.
func TestImages(t *testing.T) {
	// Two builds with Go's build cache empty took 15 min 20 s beside
	// tests/modules' builds (2026-12-06, 2 cores); warm, under 2 minutes.
	// The push and pull get a deadline of their own.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")

	began := time.Now()
	first, err := imagebuild.Build(ctx, options(t, dirA))
	require.NoError(t, err)
	took := time.Since(began)
	began = time.Now()
	second, err := imagebuild.Build(ctx, options(t, dirB))
	require.NoError(t, err)
	t.Logf("built %d indexes in %v, again (Go's build cache warm) in %v", len(first), took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

	require.Len(t, first, len(imagebuild.Binaries))
	require.Len(t, second, len(first))
	for i := range first {
		a, b := first[i], second[i]
		assert.Equal(t, a.Name, b.Name)
		assert.Equal(t, a.Digest, b.Digest, "%s: two builds of the same commit differ", a.Name)
		// The layouts on disk say the same.
		for _, img := range []imagebuild.Image{a, b} {
			idx, err := layout.ImageIndexFromPath(img.Layout)
			require.NoError(t, err)
			im, err := idx.IndexManifest()
			require.NoError(t, err)
			require.Len(t, im.Manifests, 1, "%s: index.json names one index", img.Layout)
			assert.Equal(t, a.Digest, im.Manifests[0].Digest, img.Layout)
			assert.Equal(t, TestVersion, im.Manifests[0].Annotations[imagebuild.AnnotationRefName])
		}
		t.Logf("%s@%s: %v", a.Name, a.Digest, a.Sizes)
	}
	digests, err := os.ReadFile(filepath.Join(dirA, "digests.txt"))
	require.NoError(t, err)
	for _, img := range first {
		assert.Contains(t, string(digests), img.Name+"@"+img.Digest.String()+"\n")
	}

	t.Run("push and pull by digest", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pushPull(ctx, t, first)
	})
}

func pushPull(ctx context.Context, t *testing.T, images []imagebuild.Image) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	refs, err := imagebuild.Push(ctx, images, imagebuild.PushOptions{Registry: host + "/fastover", Insecure: true})
	require.NoError(t, err)
	require.Len(t, refs, len(images))

	for i, img := range images {
		ref := refs[i]
		assert.Equal(t, host+"/fastover/"+img.Name+"@"+img.Digest.String(), ref.String())
		// Pulled back by digest, as a cluster would.
		pulled, err := name.NewDigest(ref.String(), name.Insecure)
		require.NoError(t, err)
		idx, err := remote.Index(pulled, remote.WithContext(ctx))
		require.NoError(t, err)
		digest, err := idx.Digest()
		require.NoError(t, err)
		assert.Equal(t, img.Digest, digest)
		mt, err := idx.MediaType()
		require.NoError(t, err)
		assert.Equal(t, types.OCIImageIndex, mt)
		im, err := idx.IndexManifest()
		require.NoError(t, err)
		checkAnnotations(t, img.Name+" index", im.Annotations, img.Name)

		var platforms []string
		for _, d := range im.Manifests {
			require.NotNil(t, d.Platform, "%s: a manifest without platform", img.Name)
			platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
			what := img.Name + " " + d.Platform.Architecture
			// Each platform's image, pulled by its own digest.
			image, err := remote.Image(pulled.Context().Digest(d.Digest.String()), remote.WithContext(ctx), remote.WithPlatform(*d.Platform))
			require.NoError(t, err)
			m, err := image.Manifest()
			require.NoError(t, err)
			assert.Equal(t, types.OCIManifestSchema1, m.MediaType, what)
			checkAnnotations(t, what+" manifest", m.Annotations, img.Name)
			cf, err := image.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, d.Platform.OS, cf.OS, what)
			assert.Equal(t, d.Platform.Architecture, cf.Architecture, what)
			assert.Equal(t, "65532:65532", cf.Config.User, what)
			assert.Equal(t, []string{"/usr/local/bin/" + img.Name}, cf.Config.Entrypoint, what)
			assert.Empty(t, cf.Config.Cmd, what)
			assert.Equal(t, TestCommitTime, cf.Created.UTC(), what)
			checkFiles(t, what, image, img.Name)
		}
		assert.ElementsMatch(t, []string{"linux/amd64", "linux/arm64"}, platforms, img.Name)
	}
}

func checkAnnotations(t *testing.T, what string, got map[string]string, title string) {
	t.Helper()
	assert.Equal(t, map[string]string{
		"org.opencontainers.image.source":   "https://github.com/fastover/fastover",
		"org.opencontainers.image.revision": TestCommit,
		"org.opencontainers.image.version":  TestVersion,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.created":  "2026-11-30T09:00:00Z",
		"org.opencontainers.image.title":    title,
	}, got, what)
}

// checkFiles reads the image's layers: the binary and the base's files,
// nothing else (no shell), owned by root, stamped with the commit's time.
func checkFiles(t *testing.T, what string, image v1.Image, binary string) {
	t.Helper()
	files, err := listFiles(image)
	require.NoError(t, err)
	var paths []string
	for _, f := range files {
		paths = append(paths, f.name)
		assert.Equal(t, 0, f.uid, "%s: %s", what, f.name)
		assert.Equal(t, 0, f.gid, "%s: %s", what, f.name)
		assert.Equal(t, TestCommitTime, f.mtime.UTC(), "%s: %s", what, f.name)
	}
	assert.Equal(t, []string{
		"etc/", "etc/group", "etc/passwd", "tmp/",
		"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/" + binary,
	}, paths, what)
	for _, f := range files {
		if f.name == "usr/local/bin/"+binary {
			assert.Greater(t, f.size, int64(1<<20), "%s: the binary", what)
			assert.Equal(t, int64(0o755), f.mode, what)
		}
	}
}

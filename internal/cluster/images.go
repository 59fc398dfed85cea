package cluster

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/fastover/fastover/internal/imagebuild"
)

// The images the real nodes run, built here (go-containerregistry, no
// container engine) for this machine's architecture and served by the
// test's Registry under the names a cluster would pull.

const (
	// PauseImage is the real nodes' sandbox image, built from
	// internal/cluster/pause.
	PauseImage = "registry.k8s.io/pause:3.10"
	// TestHostImage is the tests' own tool in a pod, built from
	// internal/cluster/testhost: `testhost connect HOST:PORT` and
	// `testhost get URL`.
	TestHostImage = "ghcr.io/fastover/testhost:test"
	// ImageRepository is where fastover's images are named, as the
	// manifests and the charts name them.
	ImageRepository = "ghcr.io/fastover"
)

// testImages are built for every Env with real nodes.
var testImages = []struct {
	ref    string
	binary imagebuild.Binary
}{
	{PauseImage, imagebuild.Binary{Name: "pause", Package: "./internal/cluster/pause"}},
	{TestHostImage, imagebuild.Binary{Name: "testhost", Package: "./internal/cluster/testhost"}},
}

// built caches what buildImages built in this process, by binary name:
// the tests of a package share one build.
var (
	builtMu sync.Mutex
	built   = map[string]imagebuild.Image{}
)

// buildImages builds the binaries' images for linux/runtime.GOARCH (once
// per process), stamped with the work tree's version, commit and commit
// time as `make images` stamps them.
func buildImages(ctx context.Context, binaries []imagebuild.Binary) (map[string]imagebuild.Image, error) {
	builtMu.Lock()
	defer builtMu.Unlock()
	var missing []imagebuild.Binary
	for _, b := range binaries {
		if _, ok := built[b.Name]; !ok {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		root, err := ModuleRoot()
		if err != nil {
			return nil, err
		}
		version, commit, at, err := imagebuild.Describe(ctx, root)
		if err != nil {
			// Outside a git work tree (a source archive): still buildable.
			version, commit, at = "v0.0.0-test", "test", time.Unix(0, 0).UTC()
		}
		imgs, err := imagebuild.Build(ctx, imagebuild.Options{
			ModuleRoot: root,
			Binaries:   missing,
			Platforms:  []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
			Version:    version, Commit: commit, CommitTime: at,
			Source: "https://github.com/fastover/fastover",
		})
		if err != nil {
			return nil, fmt.Errorf("cluster: build images: %w", err)
		}
		for _, img := range imgs {
			built[img.Name] = img
		}
	}
	out := map[string]imagebuild.Image{}
	for _, b := range binaries {
		out[b.Name] = built[b.Name]
	}
	return out, nil
}

// pushTestImages builds the pause and testhost images and pushes them to
// the Env's registry.
func (e *Env) pushTestImages(ctx context.Context) error {
	var bins []imagebuild.Binary
	for _, ti := range testImages {
		bins = append(bins, ti.binary)
	}
	imgs, err := buildImages(ctx, bins)
	if err != nil {
		return err
	}
	for _, ti := range testImages {
		if err := e.registry.Push(ctx, ti.ref, imgs[ti.binary.Name].Index, e.DialContext); err != nil {
			return err
		}
	}
	return nil
}

// PushImages builds fastover's images (imagebuild.Binaries: the webhook,
// the example, the certificate tool) for this machine's architecture, as
// `make images` does, and pushes them to the registry of the real nodes as
// ImageRepository/<name>:tag, the references the manifests and the charts
// name (the charts' appVersion is the tag they pull). It returns each
// image's digest (its index's), by name. It needs a real node added first
// (AddRealNode starts the registry).
func (e *Env) PushImages(ctx context.Context, tag string) (map[string]v1.Hash, error) {
	e.mu.Lock()
	reg := e.registry
	e.mu.Unlock()
	if reg == nil {
		return nil, fmt.Errorf("cluster: no registry to push fastover's images to: add a real node first (AddRealNode)")
	}
	imgs, err := buildImages(ctx, imagebuild.Binaries)
	if err != nil {
		return nil, err
	}
	digests := map[string]v1.Hash{}
	for _, b := range imagebuild.Binaries {
		if err := reg.Push(ctx, ImageRepository+"/"+b.Name+":"+tag, imgs[b.Name].Index, e.DialContext); err != nil {
			return nil, err
		}
		digests[b.Name] = imgs[b.Name].Digest
	}
	return digests, nil
}

// PushBinaryImage builds the image of one program of this module (once
// per process), as fastover's own are built, and pushes it to the registry
// of the real nodes as ref: a test's own program in a pod, such as the
// client-go baseline of a measurement.
func (e *Env) PushBinaryImage(ctx context.Context, ref string, b imagebuild.Binary) error {
	e.mu.Lock()
	reg := e.registry
	e.mu.Unlock()
	if reg == nil {
		return fmt.Errorf("cluster: no registry to push %s to: add a real node first (AddRealNode)", ref)
	}
	imgs, err := buildImages(ctx, []imagebuild.Binary{b})
	if err != nil {
		return err
	}
	return reg.Push(ctx, ref, imgs[b.Name].Index, e.DialContext)
}

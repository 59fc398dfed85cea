// Package imagebuild builds fastover's container images without a
// container engine: static Go binaries on an empty base, one OCI image
// index per binary with an image for each platform, written as OCI layouts
// and pushed by digest to any registry. `make images` runs it (through
// ./internal/imagebuild/cmd/images).
//
// The images are reproducible: the same commit gives the same digests.
// Binaries are built with -trimpath and an empty build ID, layers list
// their entries in order with fixed owners and the commit's time, and
// every time in the configs and annotations is the commit's.
package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user and group the images run as: not root, and no user of the
// host's (the number distroless images use).
const (
	UID  = 65532
	User = "65532:65532"
)

// BinDir is where a binary is in its image; the entrypoint is
// BinDir/<name>.
const BinDir = "/usr/local/bin"

// The OCI annotations (and config labels) every index and image carries.
const (
	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationRevision = "org.opencontainers.image.revision"
	AnnotationVersion  = "org.opencontainers.image.version"
	AnnotationLicenses = "org.opencontainers.image.licenses"
	AnnotationCreated  = "org.opencontainers.image.created"
	AnnotationTitle    = "org.opencontainers.image.title"
	// AnnotationRefName names the index in its OCI layout's index.json
	// (podman run oci:DIR:<version>).
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// License is the project's license, as an SPDX expression.
const License = "Apache-2.0"

// VersionPackage is the package whose variables the build stamps.
const VersionPackage = "github.com/fastover/fastover/internal/version"

// Binary is a command to put in an image of its own.
type Binary struct {
	Name    string // the image's and the binary's name, e.g. fastover-webhook
	Package string // the Go package, e.g. ./cmd/fastover-webhook
}

// Binaries are the commands fastover ships as images.
var Binaries = []Binary{
	{Name: "fastover-webhook", Package: "./cmd/fastover-webhook"},
	{Name: "fastover-example", Package: "./examples/fastover-example"},
	{Name: "fastover-certs", Package: "./cmd/fastover-certs"},
	{Name: "fastover-run", Package: "./cmd/fastover-run"},
}

// Platforms are the platforms of every index, in this order.
var Platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// Options say what to build and where.
type Options struct {
	// ModuleRoot is the directory go build runs in (the module's root).
	ModuleRoot string
	// OutDir gets one OCI layout per binary, OutDir/<name>, replaced
	// whole, and digests.txt. Empty: nothing is written.
	OutDir    string
	Binaries  []Binary      // default Binaries
	Platforms []v1.Platform // default Platforms
	// Version, Commit and CommitTime are stamped into the binaries and
	// the images; see Describe.
	Version    string
	Commit     string
	CommitTime time.Time
	// Source is the repository's URL (org.opencontainers.image.source).
	Source string
	// Log gets a line per step; nil: io.Discard.
	Log io.Writer
}

// Image is one built index.
type Image struct {
	Name   string
	Index  v1.ImageIndex
	Digest v1.Hash
	// Layout is the OCI layout directory, if written.
	Layout string
	// Sizes are the bytes a pull of each platform's image transfers
	// (manifest, config and compressed layers), by "os/arch".
	Sizes map[string]int64
}

// Build builds the binaries for every platform and assembles an index per
// binary; with OutDir set it writes them as OCI layouts.
func Build(ctx context.Context, o Options) ([]Image, error) {
	if err := o.complete(); err != nil {
		return nil, err
	}
	binDir, err := os.MkdirTemp("", "fastover-images-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(binDir) }()

	base, err := newLayer(baseEntries(), o.CommitTime)
	if err != nil {
		return nil, err
	}
	perBinary := map[string][]mutate.IndexAddendum{}
	for _, p := range o.Platforms {
		dir := filepath.Join(binDir, p.OS+"-"+p.Architecture)
		began := time.Now()
		if err := o.goBuild(ctx, p, dir); err != nil {
			return nil, err
		}
		o.logf("built %d binaries for %s in %v", len(o.Binaries), platformString(p), time.Since(began).Round(time.Millisecond))
		for _, b := range o.Binaries {
			img, err := o.image(b, p, base, filepath.Join(dir, b.Name))
			if err != nil {
				return nil, fmt.Errorf("image of %s for %s: %w", b.Name, platformString(p), err)
			}
			perBinary[b.Name] = append(perBinary[b.Name], mutate.IndexAddendum{
				Add:        img,
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}},
			})
		}
	}

	var images []Image
	for _, b := range o.Binaries {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		idx = mutate.AppendManifests(idx, perBinary[b.Name]...)
		idx, ok := mutate.Annotations(idx, o.annotations(b)).(v1.ImageIndex)
		if !ok {
			return nil, errors.New("annotated index is no index")
		}
		digest, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		sizes, err := pullSizes(idx)
		if err != nil {
			return nil, err
		}
		images = append(images, Image{Name: b.Name, Index: idx, Digest: digest, Sizes: sizes})
	}
	if o.OutDir != "" {
		if err := o.write(images); err != nil {
			return nil, err
		}
	}
	return images, nil
}

func (o *Options) complete() error {
	if o.ModuleRoot == "" {
		return errors.New("no module root to build in")
	}
	if len(o.Binaries) == 0 {
		o.Binaries = Binaries
	}
	if len(o.Platforms) == 0 {
		o.Platforms = Platforms
	}
	if o.Version == "" || o.Commit == "" || o.CommitTime.IsZero() {
		return errors.New("version, commit and commit time are required (see Describe)")
	}
	if o.Source == "" {
		return errors.New("the source repository's URL is required")
	}
	for _, p := range o.Platforms {
		if p.OS != "linux" || p.Architecture == "" {
			return fmt.Errorf("platform %s: only linux/<arch> images are built", platformString(p))
		}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	o.CommitTime = o.CommitTime.UTC().Truncate(time.Second)
	return nil
}

func (o *Options) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(o.Log, format+"\n", args...)
}

// goBuild builds every binary for the platform into dir: static, with no
// path or build ID of this machine in it, stamped with the version.
func (o *Options) goBuild(ctx context.Context, p v1.Platform, dir string) error {
	ldflags := strings.Join([]string{
		"-s", "-w", "-buildid=",
		"-X", VersionPackage + ".Version=" + o.Version,
		"-X", VersionPackage + ".Commit=" + o.Commit,
		"-X", VersionPackage + ".CommitTime=" + o.CommitTime.Format(time.RFC3339),
	}, " ")
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + ldflags, "-o", dir + "/"}
	for _, b := range o.Binaries {
		args = append(args, b.Package)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.ModuleRoot
	// The toolchain's defaults for the architecture, whatever this
	// machine's environment says: the same input gives the same binary.
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT=", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s (GOOS=%s GOARCH=%s): %w\n%s", strings.Join(args, " "), p.OS, p.Architecture, err, out)
	}
	return nil
}

// image is the image of one binary for one platform: the base layer, the
// binary's layer, and a config that runs the binary as 65532:65532.
func (o *Options) image(b Binary, p v1.Platform, base v1.Layer, binPath string) (v1.Image, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	entrypoint := BinDir + "/" + b.Name
	app, err := newLayer([]entry{{path: entrypoint, mode: 0o755, data: bin}}, o.CommitTime)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.CommitTime}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "fastover: /etc/passwd, /etc/group, /tmp", Comment: "base"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "fastover: " + entrypoint, Comment: b.Package}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = created
	cf.Author = ""
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{entrypoint},
		Env:        []string{"PATH=" + BinDir},
		WorkingDir: "/",
		Labels:     o.annotations(b),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	annotated, ok := mutate.Annotations(img, o.annotations(b)).(v1.Image)
	if !ok {
		return nil, errors.New("annotated image is no image")
	}
	return annotated, nil
}

// annotations are the OCI annotations of b's index and images.
func (o *Options) annotations(b Binary) map[string]string {
	return map[string]string{
		AnnotationSource:   o.Source,
		AnnotationRevision: o.Commit,
		AnnotationVersion:  o.Version,
		AnnotationLicenses: License,
		AnnotationCreated:  o.CommitTime.Format(time.RFC3339),
		AnnotationTitle:    b.Name,
	}
}

// write replaces OutDir/<name> by an OCI layout of each image, and writes
// OutDir/digests.txt: one "<name>@<digest>" line per image.
func (o *Options) write(images []Image) error {
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	var lines []string
	for i := range images {
		img := &images[i]
		final := filepath.Join(o.OutDir, img.Name)
		tmp, err := os.MkdirTemp(o.OutDir, "."+img.Name+".tmp-")
		if err != nil {
			return err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return err
		}
		p, err := layout.Write(tmp, empty.Index)
		if err == nil {
			err = p.AppendIndex(img.Index, layout.WithAnnotations(map[string]string{AnnotationRefName: o.Version}))
		}
		if err == nil {
			err = os.RemoveAll(final)
		}
		if err == nil {
			err = os.Rename(tmp, final)
		}
		if err != nil {
			_ = os.RemoveAll(tmp)
			return fmt.Errorf("write the OCI layout of %s: %w", img.Name, err)
		}
		img.Layout = final
		lines = append(lines, img.Name+"@"+img.Digest.String())
	}
	sort.Strings(lines)
	return os.WriteFile(filepath.Join(o.OutDir, "digests.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// pullSizes are the bytes each platform's image transfers.
func pullSizes(idx v1.ImageIndex) (map[string]int64, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		n := d.Size + m.Config.Size
		for _, l := range m.Layers {
			n += l.Size
		}
		sizes[platformString(*d.Platform)] = n
	}
	return sizes, nil
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

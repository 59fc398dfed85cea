package imagebuild

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushOptions say where to push.
type PushOptions struct {
	// Registry is the repository prefix, e.g. ghcr.io/fastover: an image
	// named fastover-webhook goes to <Registry>/fastover-webhook.
	Registry string
	// Tag, if set, also tags each index (e.g. the release's version).
	Tag string
	// Insecure allows plain HTTP (a registry on localhost or a private
	// address is reached over HTTP anyway).
	Insecure bool
	// Remote are further options, such as a transport; credentials come
	// from the default keychain (docker/podman login) unless given here.
	Remote []remote.Option
}

// Push pushes each index with every image and blob it holds, by digest,
// and returns the references pushed: <Registry>/<name>@sha256:...
func Push(ctx context.Context, images []Image, o PushOptions) ([]name.Digest, error) {
	reg := strings.TrimSuffix(o.Registry, "/")
	if reg == "" {
		return nil, fmt.Errorf("no registry to push to")
	}
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ropts := append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, o.Remote...)
	var pushed []name.Digest
	for _, img := range images {
		ref, err := name.NewDigest(reg+"/"+img.Name+"@"+img.Digest.String(), nameOpts...)
		if err != nil {
			return pushed, fmt.Errorf("registry %q: %w", o.Registry, err)
		}
		if err := remote.WriteIndex(ref, img.Index, ropts...); err != nil {
			return pushed, fmt.Errorf("push %s: %w", ref, err)
		}
		pushed = append(pushed, ref)
		if o.Tag != "" {
			tag := ref.Context().Tag(o.Tag)
			if err := remote.Tag(tag, img.Index, ropts...); err != nil {
				return pushed, fmt.Errorf("tag %s: %w", tag, err)
			}
		}
	}
	return pushed, nil
}

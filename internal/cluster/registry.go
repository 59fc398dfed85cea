package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an OCI registry the test runs in the control plane's
// namespace (go-containerregistry's, in memory), on the hub's address. The
// real nodes' containerd resolves the hosts Mirrored through it: an image
// the manifests name, ghcr.io/fastover/fastover-webhook:v1, is pulled from
// <Registry>/fastover/fastover-webhook:v1, so what a node runs is byte for
// byte what was pushed.
type Registry struct {
	// Addr is where it listens.
	Addr netip.AddrPort
	srv  *http.Server
	ln   net.Listener
}

// Mirrored are the registry hosts the nodes' containerd resolves through
// the test's Registry.
var Mirrored = []string{"ghcr.io", "registry.k8s.io", "docker.io"}

// startRegistry starts the registry on addr (port 0: any) in the
// namespace of the control plane.
func (e *Env) startRegistry(addr netip.Addr) (*Registry, error) {
	if e.opts.Netns == nil {
		return nil, errors.New("cluster: the registry runs in the control plane's network namespace (Options.Netns)")
	}
	ln, err := e.opts.Netns.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return nil, fmt.Errorf("cluster: the registry's listener: %w", err)
	}
	r := &Registry{
		Addr: netip.MustParseAddrPort(ln.Addr().String()),
		ln:   ln,
		srv: &http.Server{
			Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
			ReadHeaderTimeout: 10 * time.Second,
		},
	}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Push pushes the index idx as ref, an image reference of a Mirrored
// host ("registry.k8s.io/pause:3.10"), where the nodes find it.
func (r *Registry) Push(ctx context.Context, ref string, idx v1.ImageIndex, dial func(ctx context.Context, network, address string) (net.Conn, error)) error {
	local, err := r.localRef(ref)
	if err != nil {
		return err
	}
	tr := &http.Transport{DialContext: dial}
	defer tr.CloseIdleConnections()
	if err := remote.WriteIndex(local, idx, remote.WithContext(ctx), remote.WithTransport(tr)); err != nil {
		return fmt.Errorf("cluster: push %s to the test's registry: %w", ref, err)
	}
	return nil
}

// localRef is ref in the test's registry: the same repository path and
// tag or digest, on r's address.
func (r *Registry) localRef(ref string) (name.Reference, error) {
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("cluster: image reference %q: %w", ref, err)
	}
	host := parsed.Context().RegistryStr()
	mirrored := false
	for _, m := range Mirrored {
		if host == m || (m == "docker.io" && host == name.DefaultRegistry) {
			mirrored = true
		}
	}
	if !mirrored {
		return nil, fmt.Errorf("cluster: image reference %q: its registry %s is not one the nodes mirror (%s)", ref, host, strings.Join(Mirrored, ", "))
	}
	repo := parsed.Context().RepositoryStr()
	switch p := parsed.(type) {
	case name.Tag:
		return name.NewTag(r.Addr.String()+"/"+repo+":"+p.TagStr(), name.Insecure)
	case name.Digest:
		return name.NewDigest(r.Addr.String()+"/"+repo+"@"+p.DigestStr(), name.Insecure)
	}
	return nil, fmt.Errorf("cluster: image reference %q: neither a tag nor a digest", ref)
}

// hostsTOML is containerd's hosts.toml for a mirrored host: pull and
// resolve through the test's registry, over plain HTTP.
func (r *Registry) hostsTOML(host string) string {
	server := "https://" + host
	if host == "docker.io" {
		server = "https://registry-1.docker.io"
	}
	return fmt.Sprintf("server = %q\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", server, r.Addr)
}

// stop stops the registry.
func (r *Registry) stop() {
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

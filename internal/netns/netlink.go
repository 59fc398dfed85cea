//go:build linux

package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The namespace's links, addresses and routes, over rtnetlink with the
// ecosystem's library (github.com/vishvananda/netlink, as the CNI plugins
// use it): each call opens a handle in the namespace and closes it.

// loopback is the loopback link's name.
const loopback = "lo"

// withHandle runs fn with a netlink handle in the namespace.
func (n *NS) withHandle(fn func(h *netlink.Handle) error) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return ErrClosed
	}
	h, err := netlink.NewHandleAt(vnetns.NsHandle(n.fd))
	if err != nil {
		return fmt.Errorf("netns: netlink in the namespace: %w", err)
	}
	defer h.Close()
	return fn(h)
}

// linkUp sets the link named name up.
func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	return h.LinkSetUp(l)
}

// addAddress adds p to the link named name; an address that is there
// already is no error.
func addAddress(h *netlink.Handle, name string, p netip.Prefix) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	err = h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(p)})
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// addRoute routes p through the link named name, via gw if it is valid
// (else on the link, scope link); a route that is there already is no
// error.
func addRoute(h *netlink.Handle, name string, p netip.Prefix, gw netip.Addr) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(p.Masked()), Scope: netlink.SCOPE_LINK}
	if gw.IsValid() {
		r.Gw, r.Scope = gw.AsSlice(), netlink.SCOPE_UNIVERSE
	}
	err = h.RouteAdd(r)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// lockedBuffer collects a command's output from its two streams.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}

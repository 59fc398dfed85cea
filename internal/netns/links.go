//go:build linux

package netns

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Links between namespaces, for a network of several (the control plane's
// hub and a namespace per node): a bridge in the hub, a veth pair from it to
// each node.

// maxLinkName is the longest name the kernel takes for a link (IFNAMSIZ
// less the NUL).
const maxLinkName = 15

// AddBridge makes a bridge named name in the namespace, up, with the
// address addr (none if addr is the zero Prefix). A bridge that is there
// already is no error.
//
// The bridge is made with a hardware address of its own, set as a user
// would set it. Without one, Linux gives a bridge the lowest address of its
// ports and changes it when a port with a lower one joins: a namespace that
// had resolved the old address keeps sending there, and the bridge drops
// those frames (they come in on one port addressed to another's) until the
// namespace's ARP entry expires, 30 s and more of a dead connection.
func (n *NS) AddBridge(name string, addr netip.Prefix) error {
	if err := checkLinkName(name); err != nil {
		return err
	}
	mac, err := localMAC()
	if err != nil {
		return fmt.Errorf("netns: bridge %s: %w", name, err)
	}
	err = n.withHandle(func(h *netlink.Handle) error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}}
		if err := h.LinkAdd(br); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		if addr.IsValid() {
			if err := addAddress(h, name, addr); err != nil {
				return err
			}
		}
		return linkUp(h, name)
	})
	if err != nil {
		return fmt.Errorf("netns: bridge %s: %w", name, err)
	}
	return nil
}

// localMAC returns a random unicast hardware address from the locally
// administered range, as the kernel draws one for a link made without.
func localMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, err
	}
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac, nil
}

// Veth is a veth pair from a namespace to a peer namespace.
type Veth struct {
	// Name is the end in the namespace, attached to the bridge Bridge
	// if it is not empty.
	Name, Bridge string
	// PeerName is the end in the peer namespace ("eth0"), with the
	// address PeerAddress and, if Gateway is valid, a default route
	// through it.
	PeerName    string
	PeerAddress netip.Prefix
	Gateway     netip.Addr
}

// AddVeth makes the veth pair v from n to peer, both ends up.
func (n *NS) AddVeth(peer *NS, v Veth) error {
	for _, name := range []string{v.Name, v.PeerName} {
		if err := checkLinkName(name); err != nil {
			return err
		}
	}
	if !v.PeerAddress.IsValid() {
		return fmt.Errorf("netns: veth %s: the peer end %s needs an address", v.Name, v.PeerName)
	}
	peer.mu.RLock()
	peerFD, peerClosed := peer.fd, peer.closed
	peer.mu.RUnlock()
	if peerClosed {
		return ErrClosed
	}
	err := n.withHandle(func(h *netlink.Handle) error {
		attrs := netlink.LinkAttrs{Name: v.Name}
		if v.Bridge != "" {
			br, err := h.LinkByName(v.Bridge)
			if err != nil {
				return fmt.Errorf("bridge %s: %w", v.Bridge, err)
			}
			attrs.MasterIndex = br.Attrs().Index
		}
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: v.PeerName, PeerNamespace: netlink.NsFd(peerFD)}); err != nil {
			return err
		}
		return linkUp(h, v.Name)
	})
	if err != nil {
		return fmt.Errorf("netns: veth %s: %w", v.Name, err)
	}
	err = peer.withHandle(func(h *netlink.Handle) error {
		if err := addAddress(h, v.PeerName, v.PeerAddress); err != nil {
			return err
		}
		if err := linkUp(h, v.PeerName); err != nil {
			return err
		}
		if v.Gateway.IsValid() {
			def := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			return addRoute(h, v.PeerName, def, v.Gateway)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("netns: veth %s, its end %s: %w", v.Name, v.PeerName, err)
	}
	return nil
}

// AddRouteVia routes p through gw, on the link named dev.
func (n *NS) AddRouteVia(p netip.Prefix, gw netip.Addr, dev string) error {
	if !p.IsValid() || !gw.IsValid() {
		return fmt.Errorf("netns: route %v via %v: invalid", p, gw)
	}
	if err := n.withHandle(func(h *netlink.Handle) error { return addRoute(h, dev, p, gw) }); err != nil {
		return fmt.Errorf("netns: route %v via %v dev %s: %w", p, gw, dev, err)
	}
	return nil
}

// SetLinkUp sets the link named name up or down: down, nothing passes
// it, as a cable pulled out.
func (n *NS) SetLinkUp(name string, up bool) error {
	err := n.withHandle(func(h *netlink.Handle) error {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		if up {
			return h.LinkSetUp(l)
		}
		return h.LinkSetDown(l)
	})
	if err != nil {
		return fmt.Errorf("netns: set %s up=%t: %w", name, up, err)
	}
	return nil
}

func checkLinkName(name string) error {
	if name == "" || len(name) > maxLinkName {
		return fmt.Errorf("netns: link name %q: want 1 to %d bytes", name, maxLinkName)
	}
	return nil
}

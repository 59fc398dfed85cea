//go:build linux

package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// TestVethJoinsANodeToTheHub builds the real nodes' network: a hub with a
// bridge, a node namespace joined to it by a veth pair with a default
// route through the hub. The node reaches the hub's bridge address and an
// address on the hub's loopback; with the hub's end down it reaches
// nothing (a partition); up again, it does.
func TestVethJoinsANodeToTheHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hub := ForTest(t, Options{Addresses: []netip.Prefix{addr1}})
	node := ForTest(t, Options{})
	hubAddr := netip.MustParsePrefix("198.19.0.254/16")
	require.NoError(t, hub.AddBridge("fo-hub", hubAddr))
	require.NoError(t, hub.AddBridge("fo-hub", hubAddr), "a bridge that is there already")
	require.NoError(t, hub.AddVeth(node, Veth{
		Name: "fo-n1", Bridge: "fo-hub",
		PeerName: "eth0", PeerAddress: netip.MustParsePrefix("198.19.1.1/16"), Gateway: hubAddr.Addr(),
	}))

	onBridge, err := hub.Listen("tcp", hubAddr.Addr().String()+":0")
	require.NoError(t, err)
	serve(t, onBridge, "bridge")
	onLoopback, err := hub.Listen("tcp", addr1.Addr().String()+":0")
	require.NoError(t, err)
	serve(t, onLoopback, "loopback")

	got, err := read(ctx, node, onBridge.Addr().String())
	require.NoError(t, err)
	assert.Equal(t, "bridge", got)
	got, err = read(ctx, node, onLoopback.Addr().String())
	require.NoError(t, err)
	assert.Equal(t, "loopback", got, "through the default route")

	require.NoError(t, hub.SetLinkUp("fo-n1", false))
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = read(short, node, onBridge.Addr().String())
	cancelShort()
	require.Error(t, err, "the link is down")
	require.NoError(t, hub.SetLinkUp("fo-n1", true))
	require.Eventually(t, func() bool {
		got, err := read(ctx, node, onBridge.Addr().String())
		return err == nil && got == "bridge"
	}, 10*time.Second, 100*time.Millisecond)

	assert.Error(t, hub.AddBridge("a-name-too-long-for-linux", netip.Prefix{}))
	assert.Error(t, hub.AddVeth(node, Veth{Name: "fo-x", PeerName: "eth1"}), "no address for the peer end")
}

// TestKeptConnectionSurvivesALaterJoin holds a connection from a node to
// the hub while another node joins. A bridge whose address is not set
// takes the lowest address of its ports, so a join could change it: a
// node that resolved the old one kept sending there, its frames came in
// on its own port addressed to another port's address, and the hub
// dropped them until the node's ARP entry expired, 30 s and more. That
// was the real nodes' stalled kubelet (issue 38): with three nodes it
// happened when the third hub end's address was the lowest and the second
// node had resolved the first's. The hub ends' addresses are set here to
// that order.
func TestKeptConnectionSurvivesALaterJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hub := ForTest(t, Options{})
	hubAddr := netip.MustParsePrefix("198.19.0.254/16")
	require.NoError(t, hub.AddBridge("fo-hub", hubAddr))
	bridgeMAC := func() net.HardwareAddr {
		var mac net.HardwareAddr
		require.NoError(t, hub.withHandle(func(h *netlink.Handle) error {
			l, err := h.LinkByName("fo-hub")
			if err == nil {
				mac = l.Attrs().HardwareAddr
			}
			return err
		}))
		return mac
	}
	before := bridgeMAC()
	join := func(i int, mac string) *NS {
		node := ForTest(t, Options{})
		name := "fo-n" + strconv.Itoa(i)
		require.NoError(t, hub.AddVeth(node, Veth{
			Name: name, Bridge: "fo-hub", PeerName: "eth0",
			PeerAddress: netip.MustParsePrefix("198.19." + strconv.Itoa(i) + ".1/16"), Gateway: hubAddr.Addr(),
		}))
		hw, err := net.ParseMAC(mac)
		require.NoError(t, err)
		require.NoError(t, hub.withHandle(func(h *netlink.Handle) error {
			l, err := h.LinkByName(name)
			if err != nil {
				return err
			}
			return h.LinkSetHardwareAddr(l, hw)
		}))
		return node
	}
	join(1, "02:00:00:00:00:10")
	second := join(2, "02:00:00:00:00:20")

	l, err := hub.Listen("tcp", hubAddr.Addr().String()+":0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		_, _ = io.Copy(c, c)
	}()
	c, err := second.DialContext(ctx, "tcp", l.Addr().String())
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	echo := func(msg string) error {
		if err := c.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
			return err
		}
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		if string(b) != msg {
			return fmt.Errorf("echoed %q, sent %q", b, msg)
		}
		return nil
	}
	require.NoError(t, echo("before"))

	join(3, "02:00:00:00:00:05")
	assert.Equal(t, before.String(), bridgeMAC().String(), "the hub's bridge keeps its address as ports join")
	assert.NoError(t, echo("after"), "the second node's kept connection, after the third joined")
}

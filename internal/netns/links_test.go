//go:build linux

package netns

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

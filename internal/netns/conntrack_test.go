//go:build linux

package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestAResetFlowKeepsItsBackend shows, and guards, what TCPFlows is for: a
// "Service" 198.51.100.10:80 DNATed to a server on 192.0.2.1 is moved to
// one on 192.0.2.2. A client that connects again from the source port of a
// connection the old server reset goes to the old server while its flow is
// in CLOSE; one that ended with a FIN (TIME_WAIT) is NATed anew; and
// TCPFlows reports each flow with its client, backend and state.
func TestAResetFlowKeepsItsBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := ForTest(t, Options{Addresses: []netip.Prefix{addr1, addr2, clientAddr}, Routes: []netip.Prefix{ServiceNet}})
	vip := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.10"), 80)

	// A resets every connection after its answer, B closes cleanly.
	la, err := ns.Listen("tcp", addr1.Addr().String()+":0")
	require.NoError(t, err)
	lb, err := ns.Listen("tcp", addr2.Addr().String()+":0")
	require.NoError(t, err)
	serveClosing(t, la, "a", true)
	serveClosing(t, lb, "b", false)
	route := func(l net.Listener) {
		t.Helper()
		require.NoError(t, ns.nft(ctx, fmt.Sprintf("add table ip flowtest; "+
			"add chain ip flowtest out { type nat hook output priority -100; }; "+
			"flush chain ip flowtest out; "+
			"add rule ip flowtest out ip daddr %s tcp dport %d dnat to %s", vip.Addr(), vip.Port(), l.Addr())))
	}

	route(la)
	const resetPort, cleanPort = 40100, 40102
	got, err := readFrom(ctx, ns, resetPort, vip)
	require.NoError(t, err)
	require.Equal(t, "a", got)

	flows, err := ns.TCPFlows(vip)
	require.NoError(t, err)
	require.Len(t, flows, 1, "%+v", flows)
	assert.Equal(t, uint16(resetPort), flows[0].Client.Port())
	assert.Equal(t, la.Addr().String(), flows[0].Backend.String())
	assert.Equal(t, vip, flows[0].Dialed)
	assert.Equal(t, "CLOSE", flows[0].State)
	assert.Positive(t, flows[0].Timeout)

	// The Service moves to B; B resets nothing.
	route(lb)
	got, err = readFrom(ctx, ns, resetPort, vip)
	require.NoError(t, err)
	assert.Equal(t, "a", got, "a new connection from the reset connection's port follows its flow to the old backend")
	got, err = readFrom(ctx, ns, cleanPort, vip)
	require.NoError(t, err)
	assert.Equal(t, "b", got, "a new port goes where the rule says")
	got, err = readFrom(ctx, ns, cleanPort, vip)
	require.NoError(t, err)
	assert.Equal(t, "b", got)

	flows, err = ns.TCPFlows(vip)
	require.NoError(t, err)
	states := map[uint16]string{}
	for _, f := range flows {
		states[f.Client.Port()] = f.State + " " + f.Backend.Addr().String()
	}
	assert.Equal(t, map[uint16]string{resetPort: "CLOSE 192.0.2.1", cleanPort: "TIME_WAIT 192.0.2.2"}, states)

	_, err = ns.TCPFlows(netip.AddrPortFrom(vip.Addr(), 81))
	require.NoError(t, err)
}

// clientAddr is the clients' address: a connection from loopback's own
// 127.0.0.1 is not NATed to another address.
var clientAddr = netip.MustParsePrefix("192.0.2.254/32")

// serveClosing answers every connection's first byte with name, then
// resets it (SO_LINGER 0) or closes it cleanly.
func serveClosing(t *testing.T, l net.Listener, name string, reset bool) {
	t.Helper()
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// After the client's request: a reset before it would end
			// the connection before the client saw it open.
			_, _ = c.Read(make([]byte, 1))
			_, _ = io.WriteString(c, name)
			if reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
			_ = c.Close()
		}
	}()
}

// readFrom connects to to from the source port given, sends a byte and
// returns what the server said (a reset after it is no error).
func readFrom(ctx context.Context, ns *NS, port int, to netip.AddrPort) (string, error) {
	var c net.Conn
	var dialErr error
	d := &net.Dialer{
		LocalAddr: &net.TCPAddr{IP: clientAddr.Addr().AsSlice(), Port: port},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) }); err != nil {
				return err
			}
			return serr
		},
	}
	if err := ns.inside(func() { c, dialErr = d.DialContext(ctx, "tcp", to.String()) }); err != nil {
		return "", err
	}
	if dialErr != nil {
		return "", dialErr
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{'?'}); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if len(b) > 0 {
		err = nil // a reset after the answer
	}
	return string(b), err
}

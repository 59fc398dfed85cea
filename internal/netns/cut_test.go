//go:build linux

package netns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCutDropsAndHeals: a cut address neither answers nor refuses (a
// connection times out), another address is untouched, and healing brings
// it back.
func TestCutDropsAndHeals(t *testing.T) {
	ns := ForTest(t, Options{Addresses: []netip.Prefix{addr1, addr2}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, a := range []netip.Prefix{addr1, addr2} {
		l, err := ns.Listen("tcp", a.Addr().String()+":8080")
		require.NoError(t, err)
		serve(t, l, a.Addr().String())
	}
	heal, err := ns.Cut(ctx, addr1.Addr())
	require.NoError(t, err)

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = read(short, ns, "192.0.2.1:8080")
	cancelShort()
	require.Error(t, err, "the cut address answered")
	// The dialer reports the context's deadline as context.DeadlineExceeded
	// or as its own i/o timeout, whichever it sees first: both time out.
	var ne net.Error
	assert.True(t, errors.As(err, &ne) && ne.Timeout(), "a cut drops packets: the connect hangs, it is not refused: %v", err)
	got, err := read(ctx, ns, "192.0.2.2:8080")
	require.NoError(t, err, "another address is not cut")
	assert.Equal(t, "192.0.2.2", got)

	// A second cut of another address is independent of the first.
	heal2, err := ns.Cut(ctx, addr2.Addr())
	require.NoError(t, err)
	require.NoError(t, heal(ctx))
	got, err = read(ctx, ns, "192.0.2.1:8080")
	require.NoError(t, err, "healed")
	assert.Equal(t, "192.0.2.1", got)
	require.NoError(t, heal2(ctx))
	got, err = read(ctx, ns, "192.0.2.2:8080")
	require.NoError(t, err, "healed")
	assert.Equal(t, "192.0.2.2", got)

	require.Error(t, heal(ctx), "healing twice says so")
	_, err = ns.Cut(ctx, netip.MustParseAddr("2001:db8::1"))
	assert.ErrorContains(t, err, "IPv4")
}

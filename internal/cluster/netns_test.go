package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/netns"
)

func TestAPIServerAddressOptions(t *testing.T) {
	addr, err := apiServerAddress(Options{})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", addr, "on the host, the default")

	_, err = apiServerAddress(Options{APIServerAddress: "192.0.2.9"})
	assert.ErrorContains(t, err, "needs Netns")
	_, err = New(Options{BinDir: t.TempDir(), APIServerAddress: "192.0.2.9"})
	assert.ErrorContains(t, err, "needs Netns", "New refuses it before it starts anything")

	// With a namespace (not used by the check itself).
	ns := &netns.NS{}
	addr, err = apiServerAddress(Options{Netns: ns})
	require.NoError(t, err)
	assert.Equal(t, DefaultNetnsAPIServerAddress, addr)
	addr, err = apiServerAddress(Options{Netns: ns, APIServerAddress: "192.0.2.200"})
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.200", addr)
	for _, bad := range []string{"apiserver", "0.0.0.0", "2001:db8::1", "192.0.2.300"} {
		_, err = apiServerAddress(Options{Netns: ns, APIServerAddress: bad})
		assert.ErrorContains(t, err, "want an IPv4 address", bad)
	}
}

package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/cluster"
)

func TestAddressesWithoutNetns(t *testing.T) {
	f := &Fleet{Env: &cluster.Env{}}
	r := &Replica{ID: "replica-3", N: 3}

	listen, err := f.listenAddress(r)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.3", listen, "by default a replica listens on 127.0.0.N")
	call, err := f.callAddress("192.0.2.3")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.3", call, "and is called there")
	_, err = f.callAddress("10.0.0.3")
	assert.ErrorContains(t, err, "not a replica's")

	f.BindPublished = true
	_, err = f.listenAddress(r)
	require.ErrorIs(t, err, errNoNetns, "the published address needs the namespace")
	assert.ErrorContains(t, err, "cluster.Options.Netns")
	_, err = f.callAddress("192.0.2.3")
	require.ErrorIs(t, err, errNoNetns)
}

package kubeproxy

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/cluster"
)

func TestStartRefusesBadOptions(t *testing.T) {
	_, err := Start(nil, Options{Node: "node-a"})
	assert.True(t, errors.Is(err, ErrNoNetns), "%v", err)
	_, err = Start(&cluster.Env{}, Options{Node: "node-a"})
	assert.True(t, errors.Is(err, ErrNoNetns), "a control plane on the host: %v", err)
}

func TestFlags(t *testing.T) {
	f := Flags("/k", "node-a", NFTables, 0)
	assert.Contains(t, f, "--iptables-min-sync-period=1s")
	assert.Contains(t, f, "--proxy-mode=nftables")
	assert.Contains(t, f, "--cluster-cidr=192.0.2.0/24")
	assert.Contains(t, Flags("/k", "node-a", NFTables, NoMinSync), "--iptables-min-sync-period=0s")
	f = Flags("/k", "node-a", IPTables, 250*time.Millisecond, "--v=4", "--extra")
	assert.Contains(t, f, "--iptables-min-sync-period=250ms")
	assert.Contains(t, f, "--v=4")
	assert.NotContains(t, f, "--v=2")
	assert.Equal(t, "--extra", f[len(f)-1])
}

func TestProgrammed(t *testing.T) {
	nft := `table ip kube-proxy {
	map no-endpoint-services {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 198.51.100.7 . tcp . 80 : goto reject-chain }
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 198.51.100.1 . tcp . 443 : goto service-2QRHZV4L-default/kubernetes/tcp/https,
			     198.51.100.219 . tcp . 80 : goto service-ABC-ha/ctl/tcp/http }
	}
}`
	assert.True(t, programmed(NFTables, nft, "198.51.100.219", 80))
	assert.True(t, programmed(NFTables, nft, "198.51.100.1", 443))
	assert.False(t, programmed(NFTables, nft, "198.51.100.219", 81))
	assert.False(t, programmed(NFTables, nft, "198.51.100.7", 80), "no endpoints: rejected")
	ipt := "-A KUBE-SERVICES -d 198.51.100.219/32 -p tcp -m comment --comment \"ha/ctl:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-XYZ\n"
	assert.True(t, programmed(IPTables, ipt, "198.51.100.219", 80))
	assert.False(t, programmed(IPTables, ipt, "198.51.100.21", 80))
}

func TestParseSyncs(t *testing.T) {
	log := `### 2026-11-30T15:53:28Z: kube-proxy --v=2
I1130 15:53:31.115471    6843 proxier.go:1206] "Syncing nftables rules" ipFamily="IPv4" fullSync=false
I1130 15:53:31.120880    6843 proxier.go:1863] "Reloading service nftables data" ipFamily="IPv4" numServices=2 numEndpoints=1
I1130 15:53:31.159318    6843 proxier.go:1200] "SyncProxyRules complete" ipFamily="IPv4" elapsed="43.847534ms"
I1130 15:53:31.178298    6843 proxier.go:1206] "Syncing nftables rules" ipFamily="IPv6" fullSync=true
I1130 15:53:31.240306    6843 proxier.go:1200] "SyncProxyRules complete" ipFamily="IPv6" elapsed="62.184155ms"
I1130 15:53:32.936444    6843 proxier.go:1206] "Syncing nftables rules" ipFamily="IPv4" fullSync=false
`
	now := time.Date(2026, 11, 30, 16, 0, 0, 0, time.Local)
	s, err := parseSyncs([]byte(log), now)
	require.NoError(t, err)
	require.Len(t, s, 2, "the unfinished sync is left out")
	assert.Equal(t, "IPv4", s[0].Family)
	assert.Equal(t, 1, s[0].Endpoints)
	assert.Equal(t, time.Date(2026, 11, 30, 15, 53, 31, 159318000, time.Local), s[0].Done)
	assert.Equal(t, "IPv6", s[1].Family)
	assert.Equal(t, -1, s[1].Endpoints)
}

package e2e

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/internal/netns"
)

// TestKubeProxyHandover puts kube-proxy (nftables mode) between a client
// and the example's selector-less Service, in a network namespace of the
// test's own (issue 16 §3). The client calls the Service's ClusterIP every
// 10 ms while the leader is stopped (SIGTERM, three times), killed
// (SIGKILL), frozen (SIGSTOP, then SIGCONT once a new leader answers) and
// cut off (its address drops every packet and its way to the API server
// stalls, then heals), with kube-proxy's default --iptables-min-sync-period
// (1s) and with 0s. Every answer names the leader of the moment: the old
// one until the new one has taken the Lease (its acquire time), the new
// one after it, never a standby, and never the old one again once it wakes
// up or gets its network back. The gap from the fault to the first answer
// from the new leader is logged, with its parts: until the new leader's
// EndpointSlice is published, from there until kube-proxy begins the sync
// that sends the ClusterIP to it (its wait for --iptables-min-sync-period),
// and until the answer.
func TestKubeProxyHandover(t *testing.T) {
	ns := netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	env := cluster.Start(t, cluster.Options{Netns: ns, Nodes: []string{"node-a"}})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	d := shortDurations
	f := newFleet(t, env, "ha", "ctl", d)
	f.BindPublished = true
	rig := &handoverRig{f: f, d: d}
	rig.useFaultProxies(t)
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(3))
	leader := waitServing(ctx, t, f, "", 30*time.Second)
	rig.pubs = mustWatch(ctx, t, f)

	client := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			return env.DialContext(ctx, network, address)
		},
	}}

	faults := []leaderFault{faultTerm, faultTerm, faultTerm, faultKill, faultFreeze, faultCut}
	var rows []handoverRow
	for _, sync := range []struct {
		name string
		min  time.Duration
	}{{"1s", 0}, {"0s", kubeproxy.NoMinSync}} {
		kp, err := kubeproxy.Start(env, kubeproxy.Options{Node: "node-a", MinSyncPeriod: sync.min, Name: "kube-proxy-" + sync.name})
		require.NoError(t, err)
		rig.kp = kp
		kpStart := time.Now()
		vip, err := kp.WaitService(ctx, "ha", "ctl", 30*time.Second)
		require.NoError(t, err)
		t.Logf("min-sync %s: kube-proxy programmed %s:80 %v after it started", sync.name, vip, time.Since(kpStart).Round(time.Millisecond))
		c := &vipClient{client: client, url: "http://" + vip + ":80/"}
		rig.c = c
		leader = waitVIPLeader(ctx, t, f, c, leader)

		for i, flt := range faults {
			row := rig.handover(ctx, t, leader, flt)
			row.setting = sync.name
			rows = append(rows, row)
			t.Logf("min-sync %s, run %d: %s", sync.name, i+1, row)
			assert.Less(t, row.gap, gapBound(flt, d), "%s with min-sync %s: the gap through the ClusterIP", flt, sync.name)
			leader = row.next
		}
		require.NoError(t, kp.Stop(ctx))
	}
	t.Logf("through kube-proxy's ClusterIP (nftables), lease %v, client every 10 ms; setting: --iptables-min-sync-period\n%s(the test took %v)",
		d, handoverTable(rows, []string{"1s", "0s"}, []leaderFault{faultTerm, faultKill, faultFreeze, faultCut}), time.Since(start).Round(time.Second))
}

// vipClient calls the ClusterIP.
type vipClient struct {
	client *http.Client
	url    string
}

func (c *vipClient) call() (string, error) {
	b, err := httpGet(c.client, c.url)
	return strings.TrimSpace(string(b)), err
}

// waitVIPLeader waits until the ClusterIP answers from the Lease's holder
// and returns it. The holder is read again on every try: with a 4 s lease
// on a loaded machine the leader of the fleet's start may have lost the
// Lease while kube-proxy was starting, and the test goes on from whoever
// leads now (logged), rather than waiting for an answer that cannot come.
func waitVIPLeader(ctx context.Context, t *testing.T, f *fleet.Fleet, c *vipClient, was string) string {
	t.Helper()
	var holder, id string
	var callErr, leaseErr error
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		holder, _, leaseErr = f.Holder(ctx)
		id, callErr = c.call()
		return leaseErr == nil && callErr == nil && id == holder, nil
	})
	require.NoError(t, err, "the ClusterIP answers from the Lease's holder: last answer %q (error %v), holder %q (error %v)", id, callErr, holder, leaseErr)
	if holder != was {
		t.Logf("the Lease moved from %s to %s before the faults began", was, holder)
	}
	return holder
}

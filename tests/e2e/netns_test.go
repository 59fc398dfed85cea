package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/netns"
)

// TestNetnsControlPlane runs the control plane and two replicas of
// fastover-example in a network namespace of the test's own (issue 16 §1):
// kube-apiserver listens on 192.0.2.254, each replica binds the 192.0.2.N it
// publishes, and the test calls the leader at the address its EndpointSlice
// names, with no address mapping. Skipped where the namespace cannot be made
// (not root), unless $FASTOVER_REQUIRE_NETNS is set (CI).
func TestNetnsControlPlane(t *testing.T) {
	t.Parallel()
	ns := netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})
	nsLink, err := os.Readlink(ns.Path())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	start := time.Now()
	env := cluster.Start(t, cluster.Options{Netns: ns})
	assert.True(t, strings.HasPrefix(env.Config.Host, "https://"+cluster.DefaultNetnsAPIServerAddress+":"), "kube-apiserver at %s", env.Config.Host)

	// kube-apiserver publishes its namespace address for the kubernetes
	// Service, whose ClusterIP is in the namespace's Service range.
	kube, err := env.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, netns.ServiceNet.Contains(netip.MustParseAddr(kube.Spec.ClusterIP)), "ClusterIP %s", kube.Spec.ClusterIP)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sl, err := env.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=kubernetes",
		})
		if err != nil {
			return false, nil //nolint:nilerr // polled again
		}
		addrs := fleet.PublishedAddresses(sl.Items)
		return len(addrs) == 1 && addrs[0] == cluster.DefaultNetnsAPIServerAddress, nil
	}), "the kubernetes Service's endpoint is kube-apiserver's namespace address")
	t.Logf("control plane up in the namespace after %v", time.Since(start).Round(time.Millisecond))

	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	f := newFleet(t, env, "ha", "ctl", shortDurations)
	f.BindPublished = true
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(2))
	for _, r := range f.Replicas {
		link, err := os.Readlink("/proc/" + strconv.Itoa(r.Proc.Pid()) + "/ns/net")
		require.NoError(t, err)
		assert.Equal(t, nsLink, link, "%s runs in the namespace", r.ID)
	}

	// A plain HTTP client whose sockets are in the namespace: what it
	// dials is the address the slice publishes, as it is.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: ns.DialContext, DisableKeepAlives: true}}
	get := func(addr string) (string, error) {
		resp, err := client.Get("http://" + addr + ":" + strconv.Itoa(f.Port) + "/")
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b)), err
	}
	// callLeader reads the slice and calls the one address it publishes.
	callLeader := func(ctx context.Context) (addr, id string, err error) {
		sl, err := f.Slices(ctx)
		if err != nil {
			return "", "", err
		}
		addrs := fleet.PublishedAddresses(sl)
		if len(addrs) != 1 {
			return "", "", fmt.Errorf("%d published addresses: %v", len(addrs), addrs)
		}
		id, err = get(addrs[0])
		return addrs[0], id, err
	}

	var leaderAddr, leader string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		leaderAddr, leader, err = callLeader(ctx)
		return err == nil, nil
	}), "the leader answers at its published address: %v", err)
	t.Logf("leader %s answers at %s after %v", leader, leaderAddr, time.Since(start).Round(time.Millisecond))
	lr := f.ByID(leader)
	require.NotNil(t, lr, "the answer %q names a replica", leader)
	assert.Equal(t, lr.Address(), leaderAddr, "the leader publishes its own address")
	for _, r := range f.Replicas {
		// A standby may start listening after the leader answered: the
		// replicas start at once, but on busy cores not in step.
		var id string
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			id, err = get(r.Address())
			return err == nil, nil
		}), "every replica serves on the address it binds: %s: %v", r.ID, err)
		// A standby refuses with its identity first (leader.Only).
		assert.Equal(t, r.ID, strings.Fields(id + " ")[0], id)
	}

	// A planned handover: the address the slice names moves to the other
	// replica, which answers there.
	term := time.Now()
	require.NoError(t, lr.Proc.Signal(syscall.SIGTERM))
	var newAddr, next string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		newAddr, next, err = callLeader(ctx)
		return err == nil && next != leader, nil
	}), "the new leader answers at its published address: %v", err)
	assert.Equal(t, f.ByID(next).Address(), newAddr)
	assert.NotEqual(t, leaderAddr, newAddr)
	t.Logf("leader %s at %s, then %s at %s %v after SIGTERM, each called at the address its slice published",
		leader, leaderAddr, next, newAddr, time.Since(term).Round(time.Millisecond))
}

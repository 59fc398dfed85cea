// Package netns gives a test a network of its own: a new Linux network
// namespace with only loopback up, the documentation addresses the test
// publishes configured on loopback, and the processes of the test (the
// control plane, the replicas, kube-proxy) started inside it. No packet
// leaves the namespace, and an address the test publishes is one a process
// really binds.
//
// The ranges are the documentation ones, never private ones: pod addresses
// from 192.0.2.0/24 (TEST-NET-1, PodNet) and the Service range
// 198.51.100.0/24 (TEST-NET-2, ServiceNet), which is routed to loopback so
// that a connection to a ClusterIP leaves the socket and meets the
// namespace's nftables or iptables rules.
//
// # How it works
//
// A network namespace belongs to a thread, not to a process. New starts a
// goroutine locked to its OS thread, moves that thread into a new namespace
// (unshare(CLONE_NEWNET)) and keeps it there until Close: Start forks child
// processes from that thread, so they are born in the namespace, and their
// Pdeathsig (the parent-death signal is tied to the thread that forked) fires
// only when the namespace's thread ends at Close, or when the test binary
// dies. DialContext and Listen create their socket on a short-lived thread
// that joins the namespace with setns and is discarded afterwards; a socket
// stays in the namespace it was made in, whichever thread uses it later. The
// namespace has no name and no bind mount: it goes away with the last of
// its processes and the file descriptor New holds, so nothing is left behind
// even when the test binary is killed.
//
// Addresses and routes are configured with rtnetlink messages from Go
// (golang.org/x/sys/unix); no iproute2 is needed. Tools such as nft and
// iptables run inside with Command. TCPFlows reads the namespace's
// connection tracking over netlink (github.com/vishvananda/netlink): where
// each connection to a ClusterIP went, and whether a new connection from
// its port would follow it there (Flow).
//
// # Privileges
//
// Making a namespace needs CAP_SYS_ADMIN, configuring it CAP_NET_ADMIN: in
// practice, root. Where they are missing, New returns an error wrapping
// ErrNotPermitted that says so. ForTest turns that into a skip with the
// same message, unless $FASTOVER_REQUIRE_NETNS is set (CI's .ci/run sets
// it), where it fails the test.
//
//	ns := netns.ForTest(t) // skipped, with the reason, where not root
//	require.NoError(t, ns.AddAddress(netip.MustParsePrefix("192.0.2.1/32")))
//	cmd := exec.Command("my-server", "--listen=192.0.2.1:8080")
//	require.NoError(t, ns.Start(cmd))
//	client := &http.Client{Transport: &http.Transport{DialContext: ns.DialContext}}
package netns

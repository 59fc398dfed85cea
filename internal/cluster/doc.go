// Package cluster runs a real, local Kubernetes control plane for tests:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler as local
// processes, and kwok for nodes, one kwok process per node, so that killing
// that process is exactly "the node vanished".
//
// The binaries come from `make tools` (the pinned modules under tests/tools),
// which builds them into the repository's bin/ directory; FASTOVER_BIN
// points elsewhere. Every process runs in its own process group and is
// killed when the test binary exits, even when it is killed itself (a
// `go test -timeout` expiry or Ctrl-C), so no process outlives a run.
//
// A test starts a control plane with Start, which stops it on cleanup and,
// when the test failed, logs the tail of each component's log:
//
//	env := cluster.Start(t, cluster.Options{NodeMonitorGracePeriod: 10 * time.Second})
//	env.AddNodes(t, "node-a", "node-b")
//	env.StopNode(t, "node-a") // the node vanishes
//
// Many nodes (a zone of a hundred) are a node group instead: one kwok
// process plays all of them, selecting them by NodeGroupLabel, and killing
// it loses the group at once:
//
//	env.AddNodeGroup(ctx, "zone-a", map[string]string{corev1.LabelTopologyZone: "a"}, names...)
//	env.StopNodeGroup("zone-a")
//
// A package that shares one control plane among its tests calls New in its
// TestMain and Stop when the tests are done.
//
// Options.Netns runs the whole control plane in a network namespace of the
// test's own (package internal/netns): kube-apiserver binds 192.0.2.254,
// Services get ClusterIPs from 198.51.100.0/24, and Env.Config and
// Env.DialContext reach the processes through the namespace:
//
//	ns := netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})
//	env := cluster.Start(t, cluster.Options{Netns: ns})
package cluster

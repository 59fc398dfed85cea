// Package demo is `make demo`: it shows, with real Kubernetes components
// on this machine, what fastover changes.
//
// Run starts a local control plane (package internal/cluster: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok nodes)
// with a short node-monitor grace period, runs the real cert-manager
// (package tests/certmanager), installs fastover from manifests/overlays/local
// as a user would (the webhook runs on this machine, serving the
// certificate cert-manager issued), and creates a namespace labelled
// fastover.io/inject=enabled beside an unlabelled one, the control group,
// each with a Deployment on the kwok nodes. It runs three replicas of
// examples/fastover-example, on the leader library, behind a selector-less
// Service (package internal/fleet). Then it plays the scenarios and measures
// them, each against what Kubernetes does without fastover:
//
//   - a node is lost: the injected pod runs on another node right after
//     the node is tainted; the control group's pod stays bound to the dead
//     node, for 300 s more (not waited for);
//   - the leader is killed: a standby takes the Lease when it expires and
//     publishes itself as the Service's only endpoint;
//   - the leader gets SIGTERM (a rolling update): it hands over at once;
//   - the leader freezes (SIGSTOP): a standby takes the Lease when it
//     expires, but a client that holds a connection to the frozen leader
//     waits for its own health check to give up on it;
//   - a Service migrated from selector mode: the leader removes the
//     selector and every stale endpoint, where a Service whose selector is
//     removed by hand keeps them.
//
// As root, the control plane and every process the demo starts run in a
// network namespace of the demo's own (package internal/netns), where the
// replicas bind the addresses they publish and kube-proxy (nftables mode,
// package internal/kubeproxy) programs the Services' ClusterIPs. The
// handovers (the leader killed, stopped, frozen) are then also watched by
// real clients: two call every 10 ms from before the fault until the new
// leader answers them, one the example Service's ClusterIP through
// kube-proxy (Options.KubeProxyMinSync is its --iptables-min-sync-period,
// 1s by default as in a cluster), one the example's aggregated API through
// kube-apiserver, which routes to the endpoint the leader publishes; and
// two client-go informers of that API watch the ClusterIP for the whole
// demo, as an agent watches its controller, one as client-go makes it
// (HTTP/2 and its health check), one with its rest.Config from
// leader/follow. Each is a line of the summary table (the gap from the
// fault to the first answer or event from the new leader; whether any came
// from a standby, which fails the scenario) and a lane of the timeline
// (answers from the old leader, failed calls and watch errors, answers
// from the new leader, a watch that gets nothing). Without root the demo
// runs on the host's loopback without those lanes, and says so
// (Summary.ClientsSkipped).
//
// That is the run on kwok nodes (Options.Nodes NodesKwok, and what runs
// without root). On real nodes (NodesReal, and NodesAuto as root with the
// real nodes' binaries; realnodes.go, realleader.go) the control plane
// runs beside four real nodes (kubelet, containerd, runc; Env.AddRealNode),
// fastover's images are pushed to the nodes' registry, and the charts are
// installed with the helm CLI: charts/fastover before scenario 1, which
// cuts a node off; charts/fastover-example after it, onto the nodes left.
// The leader scenarios then act on the leader's pod (its container's
// process killed or frozen from its node, the pod deleted), measured by a
// client in a pod that calls the example's ClusterIP on kept connections
// (testhost); the migration runs as on kwok nodes. Summary.Platform says
// which ran; Options.Keep leaves the cluster running to look around.
//
// While a scenario waits, a one-line status shows what the cluster looks
// like (rewritten in place on a terminal, printed every few seconds
// otherwise). At the end Run prints a summary table and writes the same
// timeline as an SVG picture. Every process it started is stopped when Run
// returns, also when its context is cancelled (Ctrl-C in
// cmd/fastover-demo).
//
//	sum, err := demo.Run(ctx, demo.Options{Grace: 20 * time.Second, SVGPath: "demo-timeline.svg"})
//	if err == nil && !sum.Passed() { ... }
//
// Quick mode (Options.Quick) uses short durations and observation windows,
// for the tests that keep the demo working (tests/e2e TestDemoQuick on kwok
// nodes, TestDemoRealNodes on real ones).
package demo

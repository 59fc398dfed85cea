// Package nodeloss models kube-controller-manager's node lifecycle
// controller and its taint-eviction controller: given a cluster's nodes,
// the ones it loses and when, their pods and the controllers' flags, it
// predicts when each lost node is marked Unknown, when it gets the
// node.kubernetes.io/unreachable:NoExecute taint (or that it never does),
// and when each of its pods is evicted.
//
// A short unreachable toleration (what fastover's webhook injects) counts
// from the taint, and the taint is rate-limited per zone: when many nodes
// are lost at once, the last one is tainted minutes or hours after the
// loss, and a zone that loses most of its nodes is tainted slowly or not at
// all. Simulate answers "when is this pod replaced?" for such a loss
// without waiting for one; `kubectl fastover audit` uses it for the nodes
// not Ready now and for a loss that has not happened (--lose).
//
// The rules, as pkg/controller/nodelifecycle of Kubernetes v1.37 has them:
//
//   - Every --node-monitor-period (5 s) after the previous pass ends, a
//     pass checks each node (8 workers). With the
//     NodeControllerLeaseCircuitBreaker feature gate (beta, on from v1.37;
//     Flags.LeaseCircuitBreaker), each node whose Lease was last seen
//     renewed more than --node-monitor-grace-period (50 s) before has its
//     Lease read from the API server, every pass, Unknown ones included.
//     Such a node not yet Unknown is marked Unknown (one status update),
//     queued for the taint in the same pass, handed to the node update
//     workers for its NoSchedule taint, and its ready pods are marked not
//     ready, one status update each. An event goes with the node and with
//     each pod. All of it goes through the controller's client, at
//     --kube-api-qps (20) with --kube-api-burst (30), each worker waiting
//     its turn, the event broadcaster one request at a time (up to 1,000
//     queued): with many lost nodes or pods the pass stalls, and the next
//     pass waits for it.
//   - One taint queue per zone (region and zone labels; nodes without
//     them are one zone), drained every 100 ms through a token bucket of
//     burst 1 at --node-eviction-rate (0.1/s). Each pass moves the queued
//     nodes not yet tainted to its back. A taint is two requests through
//     the same client (the node from the API server's cache, then the
//     patch), as is a NoSchedule taint.
//   - At the end of each pass, each zone's state: FullDisruption when none
//     of its nodes is Ready, PartialDisruption when more than 2 are not
//     Ready and at least --unhealthy-zone-threshold (0.55) of them, Normal
//     otherwise (nodes labelled node.kubernetes.io/exclude-disruption do
//     not count). A zone that changes state gets a new bucket: Normal and
//     FullDisruption the normal rate, PartialDisruption
//     --secondary-node-eviction-rate (0.01/s) if the zone has more than
//     --large-cluster-size-threshold (50) nodes, else none. A new bucket
//     starts empty when the old one had no token. When every zone is in
//     FullDisruption, the controller removes every taint and stops. A
//     bucket of rate 0 reports a rate of 1, and no new bucket is made for
//     the rate a bucket reports (kubernetes#104639): with a rate of exactly
//     1/s, a zone that once had rate 0 never gets a taint again.
//   - The taint-eviction controller deletes a pod tolerationSeconds after
//     the taint (a pod without a matching toleration at once; one that
//     tolerates it for ever never), with an event and three requests (the
//     pod, its DisruptionTarget condition, the delete) through its own
//     client at the same QPS.
//
// What the model leaves out: nodes that come back, the time requests take
// (only the client's rate limit), the informers' delay, the retries of a
// taint's patch on a conflict. Which of the queued nodes is tainted next
// follows the controller's node list, whose order is its cache's: the
// model takes nodes in name order, so the i-th taint time of a zone is a
// prediction, the node that gets it is not.
package nodeloss

// Package agents runs many agents of a controller in one process, as the
// controller's clients are in a cluster: an agent on every node, each
// with a connection of its own (a transport of its own: no HTTP/2
// connection is shared, as none is between nodes) and client-go informers
// (list, then watch) of the controller's aggregated API, straight to its
// Service's ClusterIP. Each agent watches two resources of
// fastover-example's API: replicas, whose watch streams the replica that
// serves it every second, and policies, the payload it lists again from
// every new leader. Some agents dial through leader/follow.
//
// An agent is served by a replica once it has had an event of replicas
// from it and holds all the policies as listed from it. Load records, per
// agent, when it was first served by each replica and when its requests
// failed, so that a benchmark can time a failover from the fault to 50 %,
// 90 %, 99 % and 100 % of the agents served by the new leader.
package agents

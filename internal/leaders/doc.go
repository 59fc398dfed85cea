// Package leaders reads, from the API server alone, what an operator asks
// of the fastover leaders of a cluster: for each Lease a fastover leader
// holds or held, its holder, term and age, the Service its leader
// publishes and whether the published endpoint is the holder's, the Pod
// the term records (crash takeover) and its sibling standbys with their
// readiness, and the last handovers from the Lease's Events. It backs
// `kubectl fastover leaders`.
//
// A Lease is recognised as fastover's by what the leader library writes:
// the leader.fastover.io/holder-pod annotation on it, an EndpointSlice
// managed by leader.fastover.io that names its holder, or Events the
// library recorded on it (source component fastover-leader).
package leaders

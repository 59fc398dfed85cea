// Package leader runs a controller as active/standby replicas behind one
// Service, and fails over in about a lease duration.
//
// Replicas elect a leader through a coordination.k8s.io/v1 Lease (client-go's
// Lease lock). The leader runs the controller's work and publishes itself as
// the only endpoint of the controller's Service, a Service without selector:
// it writes one EndpointSlice (managed by "leader.fastover.io") with its own
// address, and deletes every other EndpointSlice of the Service, such as the
// leftovers of the endpointslice and mirroring controllers after a migration
// from a selector Service. Standbys only watch the Lease, so they are Ready,
// and the Deployment is Available, while traffic reaches the leader alone.
//
// The state machine (elector.go) is the one of client-go's leaderelection,
// with two differences that make failover faster and safer:
//
//   - Standbys watch the Lease instead of only polling it: a released Lease
//     is taken at once (planned handover in milliseconds), and an expired one
//     exactly when it expires, not up to a retry period later.
//   - A record is dated when the replica had it in hand (after the read or
//     the watch event), never before the request that fetched it, and
//     observations are ordered by resourceVersion: a slow read cannot
//     shorten a standby's view of the Lease, and a lagging watch cannot
//     depose a healthy leader (which confirms a foreign holder with a read
//     before it steps down).
//   - The leader's work context is cancelled as soon as a renewal can no
//     longer succeed before the renew deadline, measured from the start of
//     the last successful renewal, so the work stops before any other
//     replica can acquire the Lease; every endpoint write checks that
//     deadline first and uses optimistic concurrency, so a frozen ex-leader
//     that wakes up cannot write its endpoint back.
//
// The identity must be unique to the process: the default is $POD_NAME (or
// the host name) with a random suffix, and a record naming this identity
// that this process did not write is waited out like another holder's.
// Each term counts a Lease transition; Elector.Term returns it.
//
// What happens next: Run returns ErrLeadershipLost and the process should
// exit (as the example does), so that the kubelet restarts it as a fresh
// standby. This is the safe choice: whatever the work left behind, in
// goroutines that ignored the cancellation or in memory, goes away with the
// process. On a planned stop (the context given to Run is cancelled, e.g. on
// SIGTERM), the leader stops its work, removes its endpoint and releases the
// Lease; a standby takes over at once.
//
// The library depends on client-go, apimachinery and the Prometheus client
// only. The Role it needs in its namespace (patch on services only with
// RemoveSelector):
//
//	rules:
//	- apiGroups: ["coordination.k8s.io"]
//	  resources: ["leases"]
//	  verbs: ["get", "list", "watch", "create", "update"]
//	- apiGroups: ["discovery.k8s.io"]
//	  resources: ["endpointslices"]
//	  verbs: ["get", "list", "watch", "create", "update", "delete"]
//	- apiGroups: [""]
//	  resources: ["services"]
//	  verbs: ["get", "list", "watch", "patch"]
//	- apiGroups: [""]
//	  resources: ["endpoints"]
//	  verbs: ["delete"]
//	- apiGroups: [""]
//	  resources: ["events"]
//	  verbs: ["create", "patch", "update"]
package leader

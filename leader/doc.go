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
// Endpoints for every Service and every reader:
//
//   - Dual-stack: for a Service of two families (spec.ipFamilies), the
//     leader publishes its address of each (EndpointConfig.Addresses,
//     $POD_IPS), one EndpointSlice per family: "<service>-fastover" for the
//     family of EndpointConfig.Address, "<service>-fastover-ipv4" or
//     "-ipv6" for the other. A Service of one family gets the leader's
//     address of that family; a leader with none is refused (Warning Event
//     AddressFamilyMismatch).
//   - Ports: EndpointConfig.Ports, else the Service's ports, a named
//     targetPort resolved from the container ports of the leader's own Pod
//     (EndpointConfig.PodName, read once; the Role needs get on pods), as
//     the endpointslice controller resolves it. A name it cannot resolve
//     is reported (error ErrNamedTargetPort, Warning Event NamedTargetPort)
//     and nothing is published.
//   - Readers of the Endpoints API (Prometheus' endpoints role, older
//     ingress controllers): the leader maintains an Endpoints object named
//     as the Service, with its address (of the Service's first family) and
//     ports, labelled endpointslice.kubernetes.io/skip-mirror=true so that
//     the mirroring controller leaves it alone, as kube-apiserver's own
//     endpoint reconciler does for the kubernetes Service; a stale one from
//     selector days is taken over in place. EndpointConfig.SkipEndpoints
//     turns it off (a stale one is then deleted).
//   - On a planned stop the leader releases the Lease and leaves its slices
//     and its Endpoints object to the standby that takes over, which
//     replaces its address in one write each: the Service changes once,
//     from one leader to the next, never through no endpoint at all (which
//     kube-proxy, syncing at most once per --iptables-min-sync-period, would
//     make last about a second). If no successor has done so within
//     RetryPeriod, it withdraws them (only those that still name it, at the
//     version it saw).
//
// The election is the one of client-go's leaderelection, with these
// differences that make failover faster and safer:
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
// Crash takeover: a leader that crashes on a healthy node (a panic, an OOM
// kill, a failed liveness probe) is replaced as soon as its kubelet reports
// its container ended, not when its Lease expires. Each term records on the
// Lease (AnnotationHolderPod) the leader's Pod, UID and container
// (Config.Pod, by default PodFromEnv) and when the term began, on the
// leader's clock, the clock its node's kubelet dates containers with;
// standbys watch that Pod and take the Lease, at the resourceVersion the
// evidence belongs to, once the recorded container ended at or after the
// term began. It is safe because a process that has ended cannot act, and
// because only such an end is tied to the process that holds the Lease: a
// previous restart's end, another container's, another Pod's under the
// same name, a terminating Pod's running container or a lost node's silence
// change nothing, and the Lease decides as before (crash.go states the
// argument). Config.DisableCrashTakeover turns it off. With it, a standby
// also watches its own Pod: once the Pod is Terminating (its process may
// have missed the SIGTERM), the standby stops competing (leaving.go).
//
// The identity must be unique to the process: the default is $POD_NAME (or
// the host name) with a random suffix, and a record naming this identity
// that this process did not write is waited out like another holder's.
// Each term counts a Lease transition; Elector.Term returns it.
//
// Fencing: the term is the Lease's transition count (spec.leaseTransitions)
// when this replica acquired it, and it grows with every new leader. The
// leader's EndpointSlice carries it next to the leader's identity
// (annotations leader.fastover.io/term and fastover.io/leader-identity),
// and the work can read it with Elector.Term. A leader that acts on a
// downstream system sends its term with every write (a header, a field, a
// fencing token); the downstream system keeps the highest term it has seen
// and refuses a write with a lower one, so an ex-leader that was frozen
// and wakes up is refused even before it notices its loss. A client that
// reads the slice can do the same with the annotation: never follow a
// slice whose term is lower than one it has already seen; leader/follow
// does that, and dials the leader directly, for the Service's clients.
//
// Warm standbys: a controller with large caches (informers over every pod,
// namespace or policy of a cluster) takes seconds to sync them. Started
// when leading, the usual client-go pattern, they delay the new leader's
// first work by that long after every handover. Config.Prepare is the
// place for standby-time work, and the condition a replica meets before it
// competes for the Lease: set up the informers and their event handlers
// before Run, start them and wait for their caches in Prepare, and start
// the workers in the work function.
//
//	factory := informers.NewSharedInformerFactory(client, 0)
//	ctrl := newController(factory) // informers and event handlers
//	elector, err := leader.New(leader.Config{
//		...,
//		Prepare: func(ctx context.Context) error { // lives as long as Run
//			factory.Start(ctx.Done())
//			for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
//				if !ok {
//					return fmt.Errorf("cache of %v did not sync", typ)
//				}
//			}
//			return nil
//		},
//	})
//	...
//	err = elector.Run(ctx, ctrl.runWorkers) // the caches are synced
//
// A replica that is still preparing does not compete, so a cold replica
// (just restarted, still listing) never takes the Lease while a warm one
// stands by; if none is warm, the first to be ready leads. Ready fails
// until Prepare has returned, so a rolling update (maxUnavailable 0) waits
// for each new replica to be warm before it stops an old one. The event
// handlers fill the work queue while the replica stands by (one key per
// object at most); the leader's workers drain it. Prepare's context ends
// when Run returns, not when leadership does, so the caches serve the
// whole term. examples/informer-controller is the pattern as a program,
// and tests/bench/warmstandby measures it against informers started when
// leading. leader/ctrlmanager does the same for controller-runtime: its
// caches and warmed-up sources start on every replica.
//
// What happens next: Run returns ErrLeadershipLost and the process exits
// (as the example and fastover-webhook --reconcile do), so that its restart
// policy brings it back as a fresh standby; it does not build a new Elector
// instead. This is the safe choice: whatever the work left behind, in
// goroutines that ignored the cancellation or in memory, goes away with the
// process. On a planned stop (the context given to Run is cancelled, e.g. on
// SIGTERM), the leader stops its work, removes its endpoint and releases the
// Lease; a standby takes over at once.
//
// Configuration: Config, with Endpoint nil for an election only;
// EndpointFromEnv fills an EndpointConfig from the downward API. Validate
// reports every problem at once.
//
// The Role the library needs in its namespace is PolicyRules' (the
// example's is manifests/example/rbac.yaml). The library is a module of
// its own, github.com/fastover/fastover/leader, on client-go, api and
// apimachinery v0.35.0 or newer and the Prometheus client v1.22.0 or newer
// only: a consumer gets none of the rest of fastover's dependencies.
//
// Files: elector.go holds New and Run, watch.go the informers that feed
// them, standby.go a standby's wait and attempts, term.go the leader's
// term (renewals, stepping down); lease.go the Lease state (observations),
// acquire.go and renew.go its writes, outcome.go which failed writes the
// API server may have applied all the same; instance.go what a term records of its Pod,
// crash.go when a Pod's status shows that instance ended, podwatch.go the
// watches of the leader's Pod and of the replica's own, takeover.go the
// standby's side of crash takeover, leaving.go a standby whose own Pod is
// being deleted; publisher.go the endpoint's loop, with slice.go,
// endpoints.go, writer.go, settle.go, families.go, ports.go, migration.go
// and handoff.go; serve.go the ServerStopper, which ends an http.Server's
// requests, streams included, when the term ends; only.go, config.go,
// rbac.go, health.go and metrics.go what their names say.
package leader

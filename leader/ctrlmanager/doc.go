// Package ctrlmanager runs a controller-runtime Manager under fastover's
// leader election (package leader) and endpoint takeover, in place of
// controller-runtime's own leader election.
//
// Every replica starts what controller-runtime starts on every replica:
// HTTP servers (metrics, probes), webhooks, caches, and the runnables
// whose NeedLeaderElection is false. Controllers, and every runnable that
// controller-runtime would start only on its elected leader, start only
// while this replica holds fastover's Lease: they are warmed up (their
// sources started and synced, when the controller's warmup is on, the
// default here) while the replica stands by, and their workers start the
// moment it leads. The leader publishes itself as the only endpoint of
// the Service of leader.Config.Endpoint, if set.
//
//	mgr, err := ctrlmanager.New(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme},
//		leader.Config{Namespace: ns, LeaseName: "my-operator", Endpoint: leader.EndpointFromEnv("my-operator")})
//	...
//	err = (&MyReconciler{...}).SetupWithManager(mgr) // as with any manager
//	...
//	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil { // leader.ErrLeadershipLost too
//		os.Exit(1)
//	}
//
// On SIGTERM (Start's context cancelled) the manager stops as
// controller-runtime's does; the leader stops its controllers, withdraws
// its endpoint and releases the Lease, and a standby, already warm, takes
// over at once. When the Lease is lost, the controllers are stopped before
// another replica may acquire it, and Start returns an error wrapping
// leader.ErrLeadershipLost: the program must exit, as with
// controller-runtime's election, and its restart policy brings it back as
// a fresh standby. A replica that crashes on a healthy node is replaced as
// soon as its kubelet reports the container ended (the leader package's
// crash takeover, with leader.Config.Pod's default from the downward API);
// the Role then needs get, list and watch on pods (leader.PolicyRules).
//
// # How it plugs into the manager
//
// controller-runtime's manager starts its runnables in groups: HTTP
// servers, webhooks, caches (waiting for them to sync), other runnables,
// warmup runnables, and last the leader-election group, which it starts
// when its election says so, or at once when LeaderElection is false.
// Two places take another election without forking it:
//
//  1. LeaderElection true with LeaderElectionResourceLockInterface set to
//     a lock that mirrors fastover's Elector in memory. The manager's
//     election is client-go's LeaderElector: it polls the lock every
//     RetryPeriod, so it adds up to a retry period to every handover,
//     unless the in-memory retry period is made tiny (a busy loop); it has
//     its own clock and its own renew deadline, which must then be kept
//     consistent with the Elector's; and the Elector still needs a place
//     to run. Two elections chained, one of them pretending.
//  2. LeaderElection false, and the leader-election runnables held back
//     until fastover elects this replica. This is the one taken.
//
// New builds the manager with LeaderElection false (it refuses true) and
// returns a Manager that wraps it. Manager.Add sorts a runnable as
// controller-runtime does: one that controller-runtime would put in its
// leader-election group is held by the Manager; any other goes to the
// wrapped manager. The controller builder (ctrl.NewControllerManagedBy)
// adds controllers through Manager.Add, so nothing changes for
// reconcilers. The wrapped manager's leader-election group then holds one
// runnable only, the gate, which the manager starts when it would have
// started its leaders: after the caches synced and the other runnables
// started. The gate warms the held runnables up (controller-runtime's
// WarmupRunnable), then runs leader.Elector.Run; its work starts the held
// runnables, closes Elected(), and stops them when the term ends. The
// manager's shutdown order is kept (other runnables, then leaders, then
// caches, webhooks and servers), and the Elector is the only one to talk
// to the API server about the Lease: no extra requests, no polling, and
// the handover is the library's (milliseconds on a planned stop).
//
// Keep controller-runtime's LeaderElection options unset: the durations
// are leader.Config's.
//
// The package is a module of its own,
// github.com/fastover/fastover/leader/ctrlmanager, so that the library's
// consumers without controller-runtime never get it. It works with
// controller-runtime v0.22.0 (the first with Controller.EnableWarmup) and
// newer, and requires v0.22.0: an operator keeps the controller-runtime it
// has.
package ctrlmanager

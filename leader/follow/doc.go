// Package follow is the client side of endpoint takeover: for a program
// that calls a Service whose leader fastover publishes, it dials the
// current leader itself instead of leaving the choice to kube-proxy, and
// drops the connections to a leader that lost its term.
//
// A client that keeps its connections (a client-go informer's watch, Go's
// keep-alive transport, HTTP/2) stays on the replica it connected to,
// whatever the EndpointSlice says later: kube-proxy translates each
// connection once, when it opens. When that replica stops cleanly it ends
// its connections (leader.ServerStopper) and the client reconnects to the
// new leader; when it freezes, or its node or network is cut off, nothing
// ends them, and the client waits for its own timeouts (client-go's HTTP/2
// health check: 45 s; Go's default transport: for as long as the
// connection lives).
//
// A Follower watches the Service and its EndpointSlices. The leader's slice
// names it (annotation fastover.io/leader-identity) and its term
// (leader.fastover.io/term), which grows with every new leader. The
// Follower's dial function, given to client-go (RESTConfig), net/http
// (Transport.DialContext) or gRPC (grpc.WithContextDialer), turns a dial of
// the Service, by its ClusterIP or its DNS name
// (<service>.<namespace>[.svc[.<cluster domain>]]) and any of its ports,
// into a dial of the leader's address and the port the Service's port
// targets; every other address is dialed as it is. TLS is unchanged: the
// HTTP client still verifies the Service's name.
//
// Fencing: the Follower never follows a term lower than one it has seen,
// so a frozen ex-leader that wakes up and writes its slice back cannot win
// it back, and the moment a newer term is published it closes every
// connection it dialed to an older term's leader, so that the client's
// pending requests and watches fail at once and it connects again, to the
// new leader. While no leader is published (between a planned stop and the
// next leader's publish), a dial waits for one, up to Config.LeaderWait.
//
// A Follower reads the Service and its EndpointSlices: PolicyRules are the
// rules of the Role it needs in the Service's namespace. Start fails with
// an error that says so when they are missing; it never falls back to the
// ClusterIP silently.
package follow

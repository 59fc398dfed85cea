package leader

import (
	"fmt"
	"net/http"
)

// Only serves h while e leads, and after a planned stop (Run's context
// ended) while the leader hands over: the Service keeps its endpoint until
// the successor's replaces it, and its calls are answered meanwhile. A
// replica that never led, or whose Lease was lost (it froze, or was cut
// off, and another took the Lease), answers 503 Service Unavailable, with
// "Connection: close" and a body whose first word is its identity, and
// closes the connection.
//
// Endpoint takeover publishes only the leader, yet a standby is reached in
// two ways: a client keeps a connection it opened to the Service while the
// replica behind it led, and, after a crash, the kubelet restarts the
// leader's container in the same Pod, at the same address, which stays
// the Service's endpoint until a standby takes the Lease; the restarted
// process is a standby. Without Only that standby answers as if it
// led; with it, the client's next call dials the Service again, and
// reaches the leader once it is published.
func Only(e *Elector, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.IsLeader() || e.handingOver.Load() {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
		holder := e.Leader()
		if holder == "" {
			holder = "none yet"
		}
		http.Error(w, fmt.Sprintf("%s does not lead (the leader: %s)", e.Identity(), holder), http.StatusServiceUnavailable)
	})
}

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fastover/fastover/internal/cluster"
)

// apiServerHealthCheck is kube-apiserver's HTTP/2 health check in
// TestAPIServerHealthCheckBoundsAHeldBackend: a ping after 2 s without a
// frame, the connection closed if it is not answered within 2 s.
var apiServerHealthCheck = []string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS=2", "HTTP2_PING_TIMEOUT_SECONDS=2"}

// TestAPIServerHealthCheckBoundsAHeldBackend: kube-apiserver reaches an
// aggregated API server with client-go's transport, so a frozen or cut-off
// backend holds the watches and the requests in flight on it until that
// transport's HTTP/2 health check closes the connection: 30 s without a
// frame and 15 s for the ping by default, which TestHeldConnections
// measures (45 s). The backend cannot shorten it: frozen or cut off, it
// sends nothing. kube-apiserver's environment can: with the health check
// at 2 s + 2 s, a watch through kube-apiserver (kubectl get -w) and
// kept-alive LISTs follow the new leader within the lease and the check.
func TestAPIServerHealthCheckBoundsAHeldBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*heldCap+3*time.Minute)
	defer cancel()
	start := time.Now()
	env, rig, leader := startHeldFleet(ctx, t, cluster.Options{APIServerEnv: apiServerHealthCheck}, true)
	cctx, stopClients := context.WithCancel(ctx)
	defer stopClients()
	watch, list := startAPIServerClients(cctx, t, env)
	clients := []*heldClient{watch, list}
	awaitHeldClients(ctx, t, clients, leader, start)

	var rows []heldRow
	for _, flt := range []leaderFault{faultFreeze, faultCut} {
		row := heldHandover(ctx, t, rig, clients, leader, flt)
		rows = append(rows, row)
		t.Logf("%s", row)
		for _, c := range clients {
			// The lease, then the check (2 s + 2 s), generously.
			bound := rig.d.Lease + 4*time.Second + 5*time.Second
			assert.NotZero(t, row.gap[c.kind], "%s: after %s, no data from the new leader within %v", c.kind, flt, heldCap)
			assert.Less(t, row.gap[c.kind], bound, "%s: after %s, with kube-apiserver's health check at 2 s + 2 s", c.kind, flt)
		}
		leader = row.next
	}
	t.Logf("through kube-apiserver with %v, lease %v; first data from the new leader after the fault\n%s(the test took %v)",
		apiServerHealthCheck, rig.d, heldTable(rows, clients), time.Since(start).Round(time.Second))
}

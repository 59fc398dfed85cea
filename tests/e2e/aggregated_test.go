package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/netns"
)

// TestAggregatedAPIHandover puts kube-apiserver between a client and the
// leader (issue 16 §2): the example's replicas serve an aggregated API
// (example.fastover.io/v1alpha1, whose resource replicas names the
// replica that answered), registered with an APIService that points at the
// example's selector-less Service, as antrea-controller's API is; with
// --enable-aggregator-routing, kube-apiserver picks the endpoint itself from
// the EndpointSlice the leader publishes. A client lists replicas through
// kube-apiserver every 10 ms while the leader is stopped (SIGTERM, five
// times), killed, frozen and cut off, as in TestKubeProxyHandover: every
// answer names the leader of the moment, never a standby; once the new
// leader answers, the old one answers only to say it no longer leads (a
// frozen leader, woken up, finishes the requests it had accepted: the
// Replica it returns says leading: false). After an unplanned fault,
// kube-apiserver may still answer 503 for a moment after the new leader
// has answered (an availability check of the APIService begun against the
// old address concludes late: handoverRig.staleCheck); such calls are
// counted apart. The gaps are logged.
func TestAggregatedAPIHandover(t *testing.T) {
	ns := netns.ForTest(t, netns.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	env := cluster.Start(t, cluster.Options{Netns: ns, Nodes: []string{"node-a"}})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	d := shortDurations
	f := newFleet(t, env, "ha", "ctl", d)
	f.BindPublished = true
	require.NoError(t, f.EnableAPI())
	// kube-aggregator's availability check times out after 5 s; a second
	// more for a loaded machine.
	rig := &handoverRig{f: f, d: d, staleCheck: 6 * time.Second}
	rig.useFaultProxies(t)
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(3))
	leader := waitServing(ctx, t, f, "", 30*time.Second)
	rig.pubs = mustWatch(ctx, t, f)
	registered := time.Now()
	require.NoError(t, f.RegisterAPIService(ctx))
	t.Logf("APIService available %v after it was created", time.Since(registered).Round(time.Millisecond))

	c := newAggregatedClient(t, env.Config)
	rig.c = c
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		id, err := c.call()
		return err == nil && id == leader, nil
	}), "kube-apiserver answers from the leader %s", leader)

	var rows []handoverRow
	for i, flt := range []leaderFault{faultTerm, faultTerm, faultTerm, faultTerm, faultTerm, faultKill, faultFreeze, faultCut} {
		row := rig.handover(ctx, t, leader, flt)
		row.setting = "apiserver"
		rows = append(rows, row)
		t.Logf("run %d: %s", i+1, row)
		assert.Less(t, row.gap, gapBound(flt, d), "%s: the gap through kube-apiserver", flt)
		leader = row.next
	}
	t.Logf("through kube-apiserver (aggregated API, --enable-aggregator-routing), lease %v, client every 10 ms:\n%s(the test took %v)",
		d, handoverTable(rows, []string{"apiserver"}, []leaderFault{faultTerm, faultKill, faultFreeze, faultCut}), time.Since(start).Round(time.Second))
}

// aggregatedClient lists example.fastover.io/v1alpha1 replicas through
// kube-apiserver, as the admin.
type aggregatedClient struct {
	client *http.Client
	url    string
}

func newAggregatedClient(t *testing.T, cfg *rest.Config) *aggregatedClient {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	hc.Timeout = 500 * time.Millisecond
	return &aggregatedClient{client: hc, url: cfg.Host + fleet.ReplicasPath}
}

func (c *aggregatedClient) call() (string, error) {
	id, _, err := c.callLeading()
	return id, err
}

func (c *aggregatedClient) callLeading() (string, bool, error) {
	b, err := httpGet(c.client, c.url)
	if err != nil {
		return "", false, err
	}
	a, err := fleet.ParseReplicas(b)
	return a.ID, a.Leading, err
}

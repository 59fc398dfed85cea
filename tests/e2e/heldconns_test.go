package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/internal/netns"
	"github.com/fastover/fastover/leader/follow"
)

// heldCap is how long TestHeldConnections waits, after a fault, for every
// client to get data from the new leader: past it, a client "never"
// follows (it is healed then: the old leader wakes up or gets its network
// back, finds its Lease gone and exits). Past client-go's HTTP/2 health
// check (30 s idle + 15 s ping), with room for the reflector's back-off.
const heldCap = 65 * time.Second

// TestHeldConnections measures the handover as clients that keep their
// connections see it (issue 23 §1): three replicas of the example over
// HTTPS, kube-proxy (nftables, default min-sync) in front of their
// selector-less Service, and, all at once, in the tests' network namespace:
//   - informer: a client-go informer (dynamic) over the ClusterIP, with
//     client-go's transport (HTTP/2 and its health check), listing and
//     watching the aggregated API's replicas, which stream an event a
//     second from the replica that serves them;
//   - keep-alive: Go's default transport (keep-alive, HTTP/2), a GET / on
//     the ClusterIP every 50 ms, 30 s timeout;
//   - apiserver-watch: a watch of replicas through kube-apiserver (what
//     kubectl get -w opens), opened again whenever it ends;
//   - apiserver-list: kept-alive LISTs through kube-apiserver, client-go's
//     transport, every 50 ms;
//   - fresh: the tests' usual client, a new connection per call, 300 ms
//     timeout, every 50 ms: the control.
//
// The leader is stopped, killed, frozen and cut off (HELD_RUNS times each,
// 1 by default; make bench runs 3); for each client the time from the
// fault to its first data from the new leader is logged as a table, with
// the data it still got from the old leader after the new one took the
// Lease. A frozen or cut-off leader is healed once every client follows,
// or after heldCap. The test fails if a client gets no data before the
// faults, if the control does not follow within the lease, or if, after a
// stop or a kill (the old leader's connections close), any client has not
// followed within heldCap; it records, and does not judge, how long the
// held connections wait on a frozen or cut-off leader: that is the state
// of things the issue sets out to change.
func TestHeldConnections(t *testing.T) {
	runs := 1
	if s := os.Getenv("HELD_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "HELD_RUNS")
		runs = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(4*runs)*2*heldCap+3*time.Minute)
	defer cancel()
	start := time.Now()
	env, rig, leader := startHeldFleet(ctx, t, cluster.Options{}, true)
	f, d := rig.f, rig.d
	kp, err := kubeproxy.Start(env, kubeproxy.Options{Node: "node-a", Name: "kube-proxy"})
	require.NoError(t, err)
	defer func() { _ = kp.Stop(context.Background()) }()
	vip, err := kp.WaitService(ctx, "ha", "ctl", 30*time.Second)
	require.NoError(t, err)

	cctx, stopClients := context.WithCancel(ctx)
	defer stopClients()
	clients := startHeldClients(cctx, t, env, f, "https://"+net.JoinHostPort(vip, "80"))
	awaitHeldClients(ctx, t, clients, leader, start)

	// The agents' watches have run for a while before a fault, as in a
	// cluster: client-go counts a watch that ends within a second of its
	// start without an event as failed, and backs off before the next.
	time.Sleep(2 * time.Second)

	var rows []heldRow
	for run := 0; run < runs; run++ {
		for _, flt := range []leaderFault{faultTerm, faultKill, faultFreeze, faultCut} {
			row := heldHandover(ctx, t, rig, clients, leader, flt)
			rows = append(rows, row)
			t.Logf("run %d: %s", run+1, row)
			leader = row.next
		}
	}
	t.Logf("clients that keep their connections, lease %v, kube-proxy nftables (min-sync 1s); first data from the new leader after the fault, p50 (min-max), runs %d (never: not within %v); old: data from the old leader after the new one took the Lease\n%s(the test took %v)",
		d, runs, heldCap, heldTable(rows, clients), time.Since(start).Round(time.Second))
}

// startHeldFleet starts a control plane (opts, in a network namespace of
// the test's, with one node) and three replicas of the example over HTTPS
// at shortDurations (with the example's extra flags), each behind a fault
// proxy if proxies (a cut needs them), their API registered; it returns
// the handover rig and the leader.
func startHeldFleet(ctx context.Context, t *testing.T, opts cluster.Options, proxies bool, extra ...string) (*cluster.Env, *handoverRig, string) {
	t.Helper()
	return startHeldFleetOf(ctx, t, 3, opts, proxies, extra...)
}

// startHeldFleetOf is startHeldFleet with n replicas.
func startHeldFleetOf(ctx context.Context, t *testing.T, n int, opts cluster.Options, proxies bool, extra ...string) (*cluster.Env, *handoverRig, string) {
	t.Helper()
	opts.Netns = netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})
	opts.Nodes = []string{"node-a"}
	env := cluster.Start(t, opts)
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	f := newFleet(t, env, "ha", "ctl", shortDurations, extra...)
	f.BindPublished = true
	require.NoError(t, f.EnableAPI())
	rig := &handoverRig{f: f, d: shortDurations}
	if proxies {
		rig.useFaultProxies(t)
	}
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(n))
	leader := waitServing(ctx, t, f, "", 30*time.Second)
	require.NoError(t, f.RegisterAPIService(ctx))
	return env, rig, leader
}

// awaitHeldClients waits until every client has data from the leader.
func awaitHeldClients(ctx context.Context, t *testing.T, clients []*heldClient, leader string, since time.Time) {
	t.Helper()
	for _, c := range clients {
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return c.hasFrom(leader, since), nil
		}), "%s: no data from the leader %s before the faults (errors: %s)", c.kind, leader, c.lastErr())
	}
}

// heldClient is one kind of client: every piece of data it got, when, and
// from which replica.
type heldClient struct {
	kind string
	mu   sync.Mutex
	obs  []heldObs
	err  error // the last error
	errs int
}

type heldObs struct {
	at time.Time
	id string
}

func (c *heldClient) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.obs = append(c.obs, heldObs{at: time.Now(), id: id})
}

func (c *heldClient) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	c.errs++
}

func (c *heldClient) lastErr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d, last %v", c.errs, c.err)
}

func (c *heldClient) hasFrom(id string, after time.Time) bool {
	_, ok := c.first(func(o heldObs) bool { return o.id == id && o.at.After(after) })
	return ok
}

// first is the time of the first observation that match accepts.
func (c *heldClient) first(match func(heldObs) bool) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.obs {
		if match(o) {
			return o.at, true
		}
	}
	return time.Time{}, false
}

func (c *heldClient) count(match func(heldObs) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, o := range c.obs {
		if match(o) {
			n++
		}
	}
	return n
}

// startHeldClients starts every kind of client; they run until ctx ends.
func startHeldClients(ctx context.Context, t *testing.T, env *cluster.Env, f *fleet.Fleet, vipURL string) []*heldClient {
	t.Helper()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(f.APICA()))

	// informer: client-go, straight to the ClusterIP, as the aggregation
	// layer's client (the API takes no other).
	direct := f.AgentConfig(vipURL, "agent")
	informer := startInformer(ctx, t, "informer", direct)

	// keep-alive: Go's default transport, with the Service's CA.
	keepAlive := startKeepAlive(ctx, "keep-alive", roots, f.APIServerName(), env.DialContext, vipURL)

	// The same two through leader/follow: they dial the leader the
	// Service's EndpointSlice names, and drop it when a newer term is
	// published.
	fl, err := follow.New(follow.Config{Client: env.Client, Namespace: f.Namespace, Service: f.Service})
	require.NoError(t, err)
	require.NoError(t, fl.Start(ctx))
	followInformer := startInformer(ctx, t, "informer+follow", fl.RESTConfig(direct))
	followKeepAlive := startKeepAlive(ctx, "keep-alive+follow", roots, f.APIServerName(), fl.Dialer(env.DialContext), vipURL)

	apiWatch, apiList := startAPIServerClients(ctx, t, env)

	// fresh: the control.
	fresh := &heldClient{kind: "fresh"}
	go pollHeld(ctx, fresh, f.HTTPClient(300*time.Millisecond, 200*time.Millisecond), vipURL+"/", identityBody)
	return []*heldClient{informer, followInformer, keepAlive, followKeepAlive, apiWatch, apiList, fresh}
}

// startAPIServerClients starts apiserver-watch and apiserver-list: through
// kube-apiserver, as the admin, client-go's transport.
func startAPIServerClients(ctx context.Context, t *testing.T, env *cluster.Env) (watch, list *heldClient) {
	t.Helper()
	watch = &heldClient{kind: "apiserver-watch"}
	adc, err := dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	go watchHeld(ctx, watch, adc)
	list = &heldClient{kind: "apiserver-list"}
	hc, err := rest.HTTPClientFor(env.Config)
	require.NoError(t, err)
	go pollHeld(ctx, list, hc, env.Config.Host+fleet.ReplicasPath, replicaListBody)
	return watch, list
}

// startInformer runs a client-go informer (dynamic) of the aggregated
// API's replicas made from cfg, until ctx ends.
func startInformer(ctx context.Context, t *testing.T, kind string, cfg *rest.Config) *heldClient {
	t.Helper()
	c := &heldClient{kind: kind}
	require.NoError(t, fleet.StartInformer(ctx, cfg, c.add, c.fail))
	return c
}

// startKeepAlive GETs / every 50 ms with Go's default transport (keep-alive,
// HTTP/2) dialing with dial, until ctx ends.
func startKeepAlive(ctx context.Context, kind string, roots *x509.CertPool, serverName string, dial follow.DialFunc, url string) *heldClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	tr.DialContext = dial
	c := &heldClient{kind: kind}
	go pollHeld(ctx, c, &http.Client{Timeout: 30 * time.Second, Transport: tr}, url+"/", identityBody)
	return c
}

func identityBody(b []byte) (string, error) { return strings.TrimSpace(string(b)), nil }

func replicaListBody(b []byte) (string, error) {
	a, err := fleet.ParseReplicas(b)
	return a.ID, err
}

// pollHeld GETs url every 50 ms, one call at a time, until ctx ends.
func pollHeld(ctx context.Context, c *heldClient, hc *http.Client, url string, parse func([]byte) (string, error)) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			c.fail(err)
			return
		}
		b, err := httpDo(hc, req)
		if err == nil {
			var id string
			if id, err = parse(b); err == nil {
				c.add(id)
			}
		}
		if err != nil && ctx.Err() == nil {
			c.fail(err)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// watchHeld watches replicas through kube-apiserver, opening the watch
// again whenever it ends, until ctx ends.
func watchHeld(ctx context.Context, c *heldClient, dc dynamic.Interface) {
	for ctx.Err() == nil {
		w, err := dc.Resource(fleet.ReplicasGVR).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			c.fail(err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && u.GetName() != "" {
				c.add(u.GetName())
			}
		}
		w.Stop()
	}
}

// heldRow is one fault as every client saw it.
type heldRow struct {
	fault     leaderFault
	old, next string
	acquired  time.Duration
	// gap and late by client kind: the first data from the new leader
	// (0: none within heldCap), and how much data came from the old
	// leader after the new one took the Lease.
	gap  map[string]time.Duration
	late map[string]int
}

func (r heldRow) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.gap)) {
		g := "never"
		if r.gap[k] > 0 {
			g = r.gap[k].Round(time.Millisecond).String()
		}
		parts = append(parts, fmt.Sprintf("%s %s (old: %d)", k, g, r.late[k]))
	}
	return fmt.Sprintf("%s %s to %s, Lease acquired %v: %s", r.fault, r.old, r.next, r.acquired.Round(time.Millisecond), strings.Join(parts, ", "))
}

// heldHandover plays flt on the leader old and waits until every client
// has data from another replica, or heldCap; then heals the old leader and
// brings it back as a standby.
func heldHandover(ctx context.Context, t *testing.T, h *handoverRig, clients []*heldClient, old string, flt leaderFault) heldRow {
	t.Helper()
	r := h.f.ByID(old)
	require.NotNil(t, r)
	time.Sleep(500 * time.Millisecond)
	signalled := time.Now()
	heal := h.inject(ctx, t, r, flt)
	followed := func(c *heldClient) bool {
		_, ok := c.first(func(o heldObs) bool { return o.id != old && o.at.After(signalled) })
		return ok
	}
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, heldCap, true, func(context.Context) (bool, error) {
		for _, c := range clients {
			if !followed(c) {
				return false, nil
			}
		}
		return true, nil
	})
	if heal != nil {
		require.NoError(t, heal(ctx))
	}
	next, acquired := h.successor(ctx, t, old, signalled)
	row := heldRow{fault: flt, old: old, next: next, acquired: acquired.Sub(signalled),
		gap: map[string]time.Duration{}, late: map[string]int{}}
	for _, c := range clients {
		if at, ok := c.first(func(o heldObs) bool { return o.id == row.next && o.at.After(signalled) }); ok {
			row.gap[c.kind] = at.Sub(signalled)
		} else {
			row.gap[c.kind] = 0
		}
		row.late[c.kind] = c.count(func(o heldObs) bool { return o.id == old && o.at.After(acquired) })
		if flt == faultTerm || flt == faultKill {
			assert.NotZero(t, row.gap[c.kind], "%s: after %s of the leader (its connections close), no data from the new leader within %v", c.kind, flt, heldCap)
		}
		if flt == faultTerm {
			// A stopping leader ends its streams once it has released the
			// Lease (leader.ServerStopper): a watch's client gets nothing
			// from it a second after the new leader took the Lease (its
			// shutdown used to hold watches for 5 s, an event a second).
			held := c.count(func(o heldObs) bool { return o.id == old && o.at.After(acquired.Add(time.Second)) })
			assert.Zero(t, held, "%s: data from the old leader %s more than 1 s after %s took the Lease on a planned stop", c.kind, old, row.next)
		}
		if strings.HasSuffix(c.kind, "+follow") {
			// Issue 23's goals, with generous bounds: the leader's first
			// data within the lease after a kill, a freeze or a cut, and
			// at once after a stop; never the old leader's data once the
			// new one published its term.
			bound := gapBound(flt, h.d)
			if flt == faultTerm {
				bound = 500 * time.Millisecond
			}
			assert.NotZero(t, row.gap[c.kind], "%s: after %s, no data from the new leader within %v", c.kind, flt, heldCap)
			assert.Less(t, row.gap[c.kind], bound, "%s: after %s, the first data from the new leader", c.kind, flt)
			late := c.count(func(o heldObs) bool { return o.id == old && o.at.After(acquired.Add(time.Second)) })
			assert.Zero(t, late, "%s: data from the old leader %s more than 1 s after %s took the Lease", c.kind, old, row.next)
		}
		if c.kind == "fresh" {
			assert.NotZero(t, row.gap[c.kind], "the control follows")
			assert.Less(t, row.gap[c.kind], gapBound(flt, h.d), "%s: the control's gap", flt)
		}
	}
	h.restart(ctx, t, r, flt)
	return row
}

// heldTable is, by client kind and fault, the gaps' p50 (min-max) and the
// old leader's data after the acquire time.
func heldTable(rows []heldRow, clients []*heldClient) string {
	faults := []leaderFault{faultTerm, faultKill, faultFreeze, faultCut}
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s", "client")
	for _, flt := range faults {
		fmt.Fprintf(&b, " %-28s", flt)
	}
	b.WriteString("\n")
	for _, c := range clients {
		fmt.Fprintf(&b, "%-16s", c.kind)
		for _, flt := range faults {
			var gaps []time.Duration
			never, late := 0, 0
			for _, r := range rows {
				if r.fault != flt {
					continue
				}
				if g := r.gap[c.kind]; g > 0 {
					gaps = append(gaps, g)
				} else {
					never++
				}
				late += r.late[c.kind]
			}
			cell := spread(gaps)
			if never > 0 {
				cell = fmt.Sprintf("never %d/%d; %s", never, never+len(gaps), cell)
			}
			fmt.Fprintf(&b, " %-28s", fmt.Sprintf("%s old:%d", cell, late))
		}
		b.WriteString("\n")
	}
	return b.String()
}

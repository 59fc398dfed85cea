package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fastover/fastover/internal/acting"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/tests/harness/faultproxy"
)

// chaosDurations are short, so that many failovers fit in a run; API
// latency and watch lag go up to twice LeaseDuration − RenewDeadline.
var chaosDurations = fleet.Durations{Lease: 3 * time.Second, Renew: 2 * time.Second, Retry: 500 * time.Millisecond}

// chaosEventCount is CHAOS_EVENTS, default 40 (make chaos runs 240).
func chaosEventCount(t *testing.T) int {
	n := 40
	if s := os.Getenv("CHAOS_EVENTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("CHAOS_EVENTS=%q: want a positive number", s)
		}
	}
	return n
}

// fault is a time during which a replica could not have taken over
// promptly: dead, frozen, cut off, or slowed down.
type fault struct {
	id         string
	kind       string
	start, end time.Time // end zero: still on
}

// chaos is the state of a run: the fleet, one fault proxy per replica,
// what was done and when.
type chaos struct {
	t       *testing.T
	env     *cluster.Env
	f       *fleet.Fleet
	rng     *rand.Rand
	proxies map[string]*faultproxy.Proxy
	events  []chaosEvent
	faults  []*fault
	pending []pendingAction
}

type chaosEvent struct {
	at         time.Time
	kind       string
	target     string
	wasLeading bool
}

type pendingAction struct {
	at time.Time
	do func()
}

// TestLeaderChaos puts a fault-injecting proxy between each of three
// replicas and kube-apiserver and plays random events: kills, freezes
// (SIGSTOP), planned stops (SIGTERM), partitions of the leader, dropped
// connections, watch lag and API latency up to twice LeaseDuration −
// RenewDeadline. Every replica logs each moment it acts as the leader;
// from outside, on the shared wall clock: no two replicas' acting
// intervals overlap, two identities are never published together, no
// leader steps down for another holder that the Lease never named, and
// wherever a healthy standby was there the longest time without any
// leader acting is at most LeaseDuration + 1 s.
func TestLeaderChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos takes minutes")
	}
	total := chaosEventCount(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(total)*4*time.Second+3*time.Minute)
	defer cancel()

	c, actingLog := startChaos(ctx, t)
	published := mustWatch(ctx, t, c.f)
	leases := watchLease(ctx, t, c.env, c.f.Namespace, c.f.Lease)
	c.play(ctx, total)
	c.settle(ctx)
	end := time.Now()

	terms := readActingLog(t, actingLog)
	t.Run("no two replicas act at once", func(t *testing.T) { checkNoOverlap(t, terms) })
	t.Run("one identity published at a time", func(t *testing.T) { checkPublished(t, published.Snapshot()) })
	t.Run("no leader deposed by a stale record", func(t *testing.T) { checkDepositions(t, terms, leases.snapshot()) })
	t.Run("a healthy standby takes over within LeaseDuration + 1s", func(t *testing.T) { c.checkGaps(t, terms, end, leases.snapshot()) })
}

// startChaos starts a control plane and three replicas, each talking to
// kube-apiserver through a fault proxy of its own with the documented
// Role, each logging its actions to one acting log, whose path it
// returns.
func startChaos(ctx context.Context, t *testing.T) (*chaos, string) {
	d := chaosDurations
	env := cluster.Start(t, cluster.Options{})
	const ns = "chaos"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	f := newFleet(t, env, ns, "ctl", d)
	kubeconfig, err := env.KubeconfigFor(ctx, ns, "ctl", fleet.LeaderRole)
	require.NoError(t, err)
	token := kubeconfigToken(t, kubeconfig)
	c := &chaos{t: t, env: env, f: f, proxies: map[string]*faultproxy.Proxy{}}
	f.KubeconfigOf = func(r *fleet.Replica) (string, error) {
		p := c.proxies[r.ID]
		if p == nil {
			if p, err = faultproxy.Start(env.Config); err != nil {
				return "", err
			}
			c.proxies[r.ID] = p
			t.Cleanup(p.Close)
		}
		path := filepath.Join(env.Dir, "kubeconfig-proxy-"+r.ID)
		return path, p.WriteKubeconfig(path, "ctl", token, ns)
	}
	actingLog := filepath.Join(env.Dir, "acting.log")
	f.Args = append(f.Args, "--acting-log="+actingLog)
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(3))
	waitServing(ctx, t, f, "", 30*time.Second)
	return c, actingLog
}

// play plays total random events, 0.8 to 3 s apart, from a seed it logs
// (CHAOS_SEED replays one).
func (c *chaos) play(ctx context.Context, total int) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(c.t, err, "CHAOS_SEED")
	}
	c.t.Logf("chaos: %d events, seed %d (CHAOS_SEED to replay), durations %v", total, seed, chaosDurations)
	c.rng = rand.New(rand.NewPCG(seed, 0))
	for len(c.events) < total {
		c.step(ctx)
		c.sleep(time.Duration(800+c.rng.IntN(2200)) * time.Millisecond)
	}
}

// step plays one random event.
func (c *chaos) step(ctx context.Context) {
	holder, _, _ := c.f.Holder(ctx)
	var alive, dead []*fleet.Replica
	for _, r := range c.f.Replicas {
		if r.Proc.Running() {
			alive = append(alive, r)
			continue
		}
		dead = append(dead, r)
		// A leader that lost its Lease (cut off, frozen) exits by
		// itself: dead since the last event at the latest.
		if !c.hasFault(r.ID, "dead") {
			since := time.Now()
			if n := len(c.events); n > 0 {
				since = c.events[n-1].at
			}
			c.faults = append(c.faults, &fault{id: r.ID, kind: "dead", start: since})
		}
	}
	kinds := []string{"kill", "term", "stop", "partition", "drop", "latency", "watchlag"}
	kind := kinds[c.rng.IntN(len(kinds))]
	if len(dead) > 0 && (len(alive) < 2 || c.rng.IntN(3) == 0) {
		kind = "restart"
	}
	// The leader most of the time: that is where failover is.
	var target *fleet.Replica
	if len(alive) > 0 {
		target = alive[c.rng.IntN(len(alive))]
		if l := c.f.ByID(holder); l != nil && l.Proc.Running() && c.rng.IntN(10) < 7 {
			target = l
		}
	}
	ev := chaosEvent{at: time.Now(), kind: kind}
	if target != nil && kind != "restart" {
		ev.target, ev.wasLeading = target.ID, target.ID == holder
	}
	// Faults on the API's side last a moment, then heal: the replica
	// does not need to restart for them.
	heal := func(kind string, lasting time.Duration, undo func()) {
		ft := &fault{id: target.ID, kind: kind, start: ev.at}
		c.faults = append(c.faults, ft)
		c.pending = append(c.pending, pendingAction{at: ev.at.Add(lasting), do: func() { undo(); ft.end = time.Now() }})
	}
	skew := 2 * (chaosDurations.Lease - chaosDurations.Renew)
	switch kind {
	case "restart":
		for _, r := range dead {
			require.NoError(c.t, c.f.Start(r))
			c.endFaults(r.ID, "dead")
		}
		ev.target = fmt.Sprint(len(dead), " replica(s)")
	case "kill", "term":
		sig := map[string]syscall.Signal{"kill": syscall.SIGKILL, "term": syscall.SIGTERM}[kind]
		_ = target.Proc.Signal(sig)
		c.faults = append(c.faults, &fault{id: target.ID, kind: "dead", start: ev.at})
	case "stop":
		_ = target.Proc.Signal(syscall.SIGSTOP)
		heal("stop", time.Duration(1000+c.rng.IntN(3000))*time.Millisecond, func() { _ = target.Proc.Signal(syscall.SIGCONT) })
	case "partition":
		p := c.proxies[target.ID]
		p.Partition(true)
		heal("partition", time.Duration(1000+c.rng.IntN(5000))*time.Millisecond, func() { p.Partition(false) })
	case "drop":
		c.proxies[target.ID].DropConnections()
	case "latency":
		p := c.proxies[target.ID]
		p.SetLatency(time.Duration(100+c.rng.IntN(int(skew/time.Millisecond)-100)) * time.Millisecond)
		heal("latency", time.Duration(3000+c.rng.IntN(5000))*time.Millisecond, func() { p.SetLatency(0) })
	case "watchlag":
		p := c.proxies[target.ID]
		p.SetWatchDelay(time.Duration(100+c.rng.IntN(int(skew/time.Millisecond)-100)) * time.Millisecond)
		heal("watchlag", time.Duration(3000+c.rng.IntN(5000))*time.Millisecond, func() { p.SetWatchDelay(0) })
	}
	c.events = append(c.events, ev)
}

func (c *chaos) hasFault(id, kind string) bool {
	for _, ft := range c.faults {
		if ft.id == id && ft.kind == kind && ft.end.IsZero() {
			return true
		}
	}
	return false
}

// endFaults ends the faults of a kind on a replica: a restarted replica
// is counted healthy once it has had a second to start.
func (c *chaos) endFaults(id, kind string) {
	for _, ft := range c.faults {
		if ft.id == id && ft.kind == kind && ft.end.IsZero() {
			ft.end = time.Now().Add(time.Second)
		}
	}
}

// sleep waits, doing the pending heals when they are due.
func (c *chaos) sleep(d time.Duration) {
	until := time.Now().Add(d)
	for time.Now().Before(until) {
		c.runPending(time.Now())
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *chaos) runPending(now time.Time) {
	keep := c.pending[:0]
	for _, a := range c.pending {
		if now.Before(a.at) {
			keep = append(keep, a)
			continue
		}
		a.do()
	}
	c.pending = keep
}

// settle heals everything, restarts the dead and waits for a leader.
func (c *chaos) settle(ctx context.Context) {
	c.runPending(time.Now().Add(time.Hour))
	// Exits from a partition or a freeze come a moment after the heal.
	time.Sleep(chaosDurations.Lease)
	for _, r := range c.f.Replicas {
		if !r.Proc.Running() {
			require.NoError(c.t, c.f.Start(r))
			c.endFaults(r.ID, "dead")
		}
	}
	waitServing(ctx, c.t, c.f, "", 30*time.Second)
}

// term is one replica's term as the leader, as its acting log says.
type term = acting.Term

func readActingLog(t *testing.T, path string) []*term {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	terms, err := acting.Parse(f)
	require.NoError(t, err)
	return terms
}

// checkNoOverlap: no two terms' actions interleave.
func checkNoOverlap(t *testing.T, terms []*term) {
	for _, o := range acting.Overlaps(terms) {
		t.Error(o)
	}
}

// checkPublished: the Service never named two replicas at once.
func checkPublished(t *testing.T, changes []fleet.Publication) {
	for _, p := range changes {
		if distinct(p.Addrs) > 1 {
			t.Errorf("two identities published at once at %v: %v", p.At.Format(time.StampMilli), p.Addrs)
		}
	}
}

// checkDepositions: a leader that stepped down because another holder
// has the Lease must be right: the Lease named another holder or term
// between its term's start and a moment after its stop.
func checkDepositions(t *testing.T, terms []*term, history []leaseVersion) {
	for _, tm := range terms {
		if !strings.Contains(tm.Stop, "held by") && !strings.Contains(tm.Stop, "taken by") {
			continue
		}
		named := false
		for _, v := range history {
			if v.at.After(tm.Start) && v.at.Before(tm.StopAt.Add(time.Second)) && (v.holder != tm.ID || v.term != int32(tm.N)) {
				named = true
				break
			}
		}
		if !named {
			t.Errorf("%s (term %d) stepped down at %s (%s) while the Lease still named it",
				tm.ID, tm.N, tm.StopAt.Format(time.StampMilli), tm.Stop)
		}
	}
}

// checkGaps bounds the longest time without a leader acting while a
// healthy standby was there, counted from the last write of the Lease
// before the new term (the previous holder's, or a release) if it came
// after the old leader's last action: a standby times a Lease from when it
// sees it change, never from the holder's clock, so a renewal the latency
// fault held back on its way to the API server rightly delays the
// takeover by as much. It logs the run's counts.
func (c *chaos) checkGaps(t *testing.T, terms []*term, end time.Time, history []leaseVersion) {
	sorted := slices.Clone(terms)
	slices.SortFunc(sorted, func(a, b *term) int { return a.Start.Compare(b.Start) })
	var longest, longestAny time.Duration
	var longestAt, longestTo time.Time
	for i := 1; i < len(sorted); i++ {
		prevEnd := sorted[i-1].Last
		for _, p := range sorted[:i] {
			if p.Last.After(prevEnd) {
				prevEnd = p.Last
			}
		}
		gap := sorted[i].Start.Sub(prevEnd)
		if gap <= 0 {
			continue
		}
		longestAny = max(longestAny, gap)
		from := prevEnd
		for _, v := range history {
			if v.at.After(from) && v.at.Before(sorted[i].Start) && (v.holder != sorted[i].ID || v.term != int32(sorted[i].N)) {
				from = v.at
			}
		}
		if wait := sorted[i].Start.Sub(from); c.healthyStandby(prevEnd, sorted[i].Start, sorted[i-1].ID) && wait > longest {
			longest, longestAt, longestTo = wait, from, sorted[i].Start
		}
	}
	if bound := chaosDurations.Lease + time.Second; longest > bound {
		t.Errorf("no leader acted for %v after the last Lease write before the takeover (seen %s) although a healthy standby was there (bound %v); around it:\n%s",
			longest.Round(time.Millisecond), longestAt.Format(time.StampMilli), bound, c.around(longestAt.Add(-2*time.Second), longestTo, history))
	}
	count := map[string]int{}
	onLeader := map[string]int{}
	for _, e := range c.events {
		count[e.kind]++
		if e.wasLeading {
			onLeader[e.kind]++
		}
	}
	var b strings.Builder
	for _, k := range []string{"kill", "term", "stop", "partition", "drop", "latency", "watchlag", "restart"} {
		fmt.Fprintf(&b, " %s %d (%d on the leader);", k, count[k], onLeader[k])
	}
	acts := 0
	for _, tm := range terms {
		acts += tm.Acts
	}
	t.Logf("chaos: %d events:%s %d terms, %d actions logged; longest time without a leader acting: %v with a healthy standby there, after the last Lease write it could see (bound %v), %v in all (the run ended %v after its last term began)",
		len(c.events), b.String(), len(terms), acts, longest.Round(time.Millisecond), chaosDurations.Lease+time.Second,
		longestAny.Round(time.Millisecond), end.Sub(sorted[len(sorted)-1].Start).Round(time.Millisecond))
}

// healthyStandby reports whether some replica other than prev, the one
// that acted last, was free of faults from a second before from until to.
// around says what happened from from to to: the events played and the
// Lease's versions as the test's watch saw them, so that a gap over the
// bound says where its time went.
func (c *chaos) around(from, to time.Time, history []leaseVersion) string {
	var lines []string
	for _, e := range c.events {
		if !e.at.Before(from) && !e.at.After(to) {
			lines = append(lines, fmt.Sprintf("  %s event %s on %s (leading: %v)", e.at.Format(time.StampMilli), e.kind, e.target, e.wasLeading))
		}
	}
	for _, v := range history {
		if !v.at.Before(from) && !v.at.After(to) {
			lines = append(lines, fmt.Sprintf("  %s Lease seen: holder %q, term %d, renewed %s", v.at.Format(time.StampMilli), v.holder, v.term, v.renewed.Format(time.StampMilli)))
		}
	}
	slices.Sort(lines) // by time: every line starts with it
	return strings.Join(lines, "\n")
}

func (c *chaos) healthyStandby(from, to time.Time, prev string) bool {
	for _, r := range c.f.Replicas {
		healthy := r.ID != prev
		for _, ft := range c.faults {
			if ft.id != r.ID {
				continue
			}
			end := ft.end
			if end.IsZero() {
				end = to.Add(time.Hour)
			}
			if ft.start.Before(to) && end.After(from.Add(-time.Second)) {
				healthy = false
				break
			}
		}
		if healthy {
			return true
		}
	}
	return false
}

func kubeconfigToken(t *testing.T, path string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	require.NoError(t, err)
	for _, a := range cfg.AuthInfos {
		if a.Token != "" {
			return a.Token
		}
	}
	t.Fatalf("no token in %s", path)
	return ""
}

func distinct(addrs []string) int {
	seen := map[string]bool{}
	for _, a := range addrs {
		seen[a] = true
	}
	return len(seen)
}

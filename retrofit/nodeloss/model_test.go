package nodeloss

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// firstLast is the first and last taint of the lost nodes, and how many
// are never tainted.
func firstLast(r Result) (first, last time.Duration, never int) {
	first = Never
	for _, n := range r.Nodes {
		first = min(first, n.Tainted)
	}
	last, never = r.LastTaint()
	return first, last, never
}

func simulate(t *testing.T, s Scenario) Result {
	t.Helper()
	if s.Flags == (Flags{}) {
		s.Flags = DefaultFlags()
	}
	r, err := Simulate(s)
	require.NoError(t, err)
	return r
}

// The figures of kube-controller-manager's defaults, k nodes lost at once
// with 10 ready pods each. Issue 44 estimated them by hand as about 1 min
// (k = 1), 2.7 min (10), 10 min (50) and 19 min (100), and a partial
// disruption of a large zone at 100 s per node. The model is within 10 %
// below those, for two reasons read in the controller: a node is queued
// for the taint in the same pass that marks it Unknown (not a pass
// later), and the zone's bucket gives a token exactly every 1/rate.
func TestDefaults(t *testing.T) {
	large := map[string]int{"a": 333, "b": 333, "c": 334}
	for _, tc := range []struct {
		name        string
		zones       map[string]int
		k           int // nodes of zone a lost; -1 all
		first, last time.Duration
		never       int
		estimate    time.Duration // the issue's, for the last taint
		states      []ZoneState   // zone a's
		normal      int           // taints at the normal rate, before a swap
	}{
		// Lost at 0, seen at the pass at 0; Unknown at the first pass
		// more than 50 s later (55 s); tainted at the next 100 ms tick.
		{"k=1", large, 1, 55100 * time.Millisecond, 55100 * time.Millisecond, 0, time.Minute, []ZoneState{Normal}, 0},
		// The first taint's two requests wait for the client behind the
		// pass's Lease reads, status and pod updates, the NoSchedule
		// taints and the events (1.4 s); then one every 10 s.
		{"k=10", large, 10, 56500 * time.Millisecond, 145150 * time.Millisecond, 0, 162 * time.Second, []ZoneState{Normal}, 0},
		{"k=50", large, 50, 56500 * time.Millisecond, 545300 * time.Millisecond, 0, 10 * time.Minute, []ZoneState{Normal}, 0},
		// Two of the tokens go to nodes tainted during a pass that had
		// listed them untainted, so queued again (markForTainting).
		{"k=100", large, 100, 56500 * time.Millisecond, 1065850 * time.Millisecond, 0, 19 * time.Minute, []ZoneState{Normal}, 0},
		// 200 of 333 (60 %): PartialDisruption once the pass that found
		// them ends, 155 s later (200 Lease reads and status updates,
		// 2,000 pod updates, the NoSchedule taints and the events at
		// 20/s): 16 taints at the normal rate meanwhile, then 0.01/s: 100 s
		// per node, or 200 s when the token went to a node tainted during
		// the pass before (each pass reads 200 Leases, 10 s).
		{"partial 200/333", large, 200, 56500 * time.Millisecond, 6*time.Hour + 3*time.Minute + 31200*time.Millisecond, 0, 0, []ZoneState{Normal, PartialDisruption}, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := simulate(t, Scenario{Nodes: lose(cluster(tc.zones, 10), "a", tc.k, 0)})
			first, last, never := firstLast(r)
			t.Logf("first taint %v, last %v, never %d; zone a %v", first, last, never, r.Zones[0].States)
			assert.Equal(t, tc.first, first)
			assert.Equal(t, tc.last, last)
			assert.Equal(t, tc.never, never)
			if tc.estimate > 0 {
				assert.InEpsilon(t, tc.estimate.Seconds(), last.Seconds(), 0.11, "the issue's estimate")
			}
			var states []ZoneState
			for _, s := range r.Zones[0].States {
				states = append(states, s.State)
			}
			assert.Equal(t, tc.states, states)
			if len(states) > 1 {
				swap := r.Zones[0].States[1].At
				var after []time.Duration
				for _, n := range r.Nodes {
					if n.Tainted > swap {
						after = append(after, n.Tainted)
					}
				}
				slices.Sort(after)
				assert.Len(t, after, tc.k-tc.normal)
				// A token every 100 s, some spent on a node tainted
				// already; each taint's two requests wait behind the
				// passes' 200 Lease reads for up to a second.
				wasted := 0
				for i := 1; i < len(after); i++ {
					gap := (after[i] - after[i-1]).Seconds()
					steps := math.Round(gap / 100)
					require.GreaterOrEqual(t, steps, 1.0, "taint %d after the swap", i)
					require.InDelta(t, 100*steps, gap, 1.5, "taint %d after the swap", i)
					wasted += int(steps) - 1
				}
				t.Logf("after the swap: %d taints, %d tokens spent on tainted nodes", len(after), wasted)
				assert.Less(t, wasted, len(after)/2)
			}
		})
	}
}

func zoneStates(z ZoneResult) []ZoneState {
	var states []ZoneState
	for _, s := range z.States {
		states = append(states, s.State)
	}
	return states
}

// A partially disrupted zone of at most --large-cluster-size-threshold
// nodes gets no taint after the pass that found the loss; within that pass
// the first node was tainted at the old rate.
func TestSmallZoneStops(t *testing.T) {
	r := simulate(t, Scenario{Nodes: lose(cluster(map[string]int{"a": 10, "b": 100}, 10), "a", 6, 0)})
	first, _, never := firstLast(r)
	assert.Equal(t, 56*time.Second, first)
	assert.Equal(t, 5, never)
	assert.Equal(t, []ZoneState{Normal, PartialDisruption}, zoneStates(r.Zones[0]))
	assert.Zero(t, r.Zones[0].States[1].Rate)
	for _, n := range r.Nodes {
		for _, p := range n.Pods {
			if n.Tainted == Never {
				assert.Equal(t, Never, p.Evicted, p.Name)
			} else {
				assert.GreaterOrEqual(t, p.Evicted, n.Tainted, p.Name)
			}
		}
	}
}

// A zone with no Ready node, while other zones have some, is tainted at
// the normal rate.
func TestFullZoneNormalRate(t *testing.T) {
	r := simulate(t, Scenario{Nodes: lose(cluster(map[string]int{"a": 5, "b": 5}, 0), "a", -1, 0)})
	first, last, never := firstLast(r)
	assert.Zero(t, never)
	assert.Equal(t, 55100*time.Millisecond, first)
	assert.Equal(t, 95100*time.Millisecond, last, "five nodes, 10 s apart")
	assert.Equal(t, []ZoneState{Normal, FullDisruption}, zoneStates(r.Zones[0]))
	assert.InDelta(t, 0.1, r.Zones[0].States[1].Rate, 1e-9)
}

// When no zone has a Ready node, the controller blames itself: it takes
// every taint off and stops, so nothing is evicted.
func TestAllZonesFull(t *testing.T) {
	// No pods: the pass's ten Lease reads and status updates, with the
	// NoSchedule taints and the events beside them, outrun the client's
	// burst of 30, so the pass ends after the next 100 ms tick: one node
	// is tainted (its patch lands after the controller took the taints
	// off, so it stays).
	nodes := cluster(map[string]int{"a": 5, "b": 5}, 0)
	nodes = lose(lose(nodes, "a", -1, 0), "b", -1, 0)
	r := simulate(t, Scenario{Nodes: nodes})
	_, _, never := firstLast(r)
	assert.Equal(t, 9, never)
	for _, z := range r.Zones {
		assert.Equal(t, []ZoneState{Normal, FullDisruption}, zoneStates(z))
		assert.Zero(t, z.States[1].Rate)
	}
	for _, n := range r.Nodes {
		assert.InDelta(t, 55, n.Unknown.Seconds(), 0.5)
	}

	// Three ready pods each: the pass takes 0.5 s of pod updates, time
	// for one taint per zone (and its pods' evictions) before the
	// controller takes the taints off.
	r = simulate(t, Scenario{Nodes: lose(lose(cluster(map[string]int{"a": 5, "b": 5}, 3), "a", -1, 0), "b", -1, 0)})
	_, _, never = firstLast(r)
	assert.Equal(t, 8, never)
	for _, n := range r.Nodes {
		if n.Tainted != Never {
			assert.Less(t, n.Pods[0].Evicted, n.Untainted, "evicted before the taint came off")
		}
	}

	// Lost a minute apart, zone b after zone a: a's nodes are tainted and
	// their pods evicted, then b's loss takes every taint off.
	nodes = cluster(map[string]int{"a": 2, "b": 2}, 1)
	nodes = lose(lose(nodes, "a", -1, 0), "b", -1, time.Minute)
	r = simulate(t, Scenario{Nodes: nodes})
	for _, n := range r.Nodes[:2] {
		require.NotEqual(t, Never, n.Tainted, n.Name)
		assert.Equal(t, 115*time.Second, n.Untainted, n.Name)
		assert.Less(t, n.Pods[0].Evicted, n.Untainted, "evicted before the taint came off")
	}
	for _, n := range r.Nodes[2:] {
		assert.Equal(t, Never, n.Tainted, n.Name)
	}
}

// Nodes labelled node.kubernetes.io/exclude-disruption do not count: one
// healthy node excluded turns 5 of 10 not ready (Normal) into 5 of 9
// (PartialDisruption, a small zone: stopped).
func TestExcludedNodesDoNotCount(t *testing.T) {
	for _, excluded := range []bool{false, true} {
		nodes := lose(cluster(map[string]int{"a": 10, "b": 10}, 0), "a", 5, 0)
		nodes[9].Excluded = excluded // a-009, healthy
		r := simulate(t, Scenario{Nodes: nodes})
		_, _, never := firstLast(r)
		if excluded {
			assert.Equal(t, 9, r.Zones[0].Nodes)
			assert.Equal(t, []ZoneState{Normal, PartialDisruption}, zoneStates(r.Zones[0]))
			assert.Equal(t, 5, never, "none tainted: the pass is over before the next tick")
		} else {
			assert.Equal(t, []ZoneState{Normal}, zoneStates(r.Zones[0]))
			assert.Zero(t, never)
		}
	}
}

// Each pod is evicted its toleration after the taint, two requests each
// through the taint-eviction controller's client: a burst of 30, then 20
// a second.
func TestPodEvictions(t *testing.T) {
	nodes := cluster(map[string]int{"a": 3}, 0)
	nodes[0].Lost = true
	nodes[0].Pods = []Pod{
		{Name: "fast", Ready: true},
		{Name: "default", Ready: true, Toleration: 300 * time.Second},
		{Name: "forever", Ready: true, Toleration: Forever},
	}
	for i := range 100 {
		nodes[0].Pods = append(nodes[0].Pods, Pod{Name: "many-" + string(rune('a'+i%26)), Toleration: 20 * time.Second})
	}
	r := simulate(t, Scenario{Nodes: nodes})
	n := r.Nodes[0]
	require.Equal(t, 55100*time.Millisecond, n.Tainted)
	assert.Equal(t, n.Tainted, n.Pods[0].Evicted)
	assert.Equal(t, n.Tainted+300*time.Second, n.Pods[1].Evicted)
	assert.Equal(t, Never, n.Pods[2].Evicted)
	// 100 pods due at once: 300 requests (and the events, whose sender
	// is one of 101 waiting), 30 at once, the rest at 20/s.
	assert.Equal(t, n.Tainted+20*time.Second+13650*time.Millisecond, n.Pods[102].Evicted)
}

// A pass stalls on the lost nodes' pod updates: 1,000 ready pods on one
// lost node, with its Lease read, its status and its taints, are about
// 1,000 requests of the pass's worker and as many events (the broadcaster
// keeps up to 1,000), taking turns at the client's 20/s: the next pass,
// and the next loss's detection, wait for it.
func TestPassStall(t *testing.T) {
	nodes := cluster(map[string]int{"a": 10}, 0)
	for i := range 1000 {
		nodes[0].Pods = append(nodes[0].Pods, Pod{Name: "p" + string(rune(i)), Ready: true})
	}
	nodes[0].Lost = true
	nodes[1].Lost, nodes[1].LostAt = true, 10*time.Second
	r := simulate(t, Scenario{Nodes: nodes})
	assert.Equal(t, 55*time.Second, r.Nodes[0].Unknown)
	// The pass that began at 55 s ends at 153.8 s; the next, at 158.8 s,
	// sees a-001, whose 50 s ran out at 60 s.
	assert.Equal(t, 158800*time.Millisecond, r.Nodes[1].Unknown)

	nodes[0].Pods = nil
	r = simulate(t, Scenario{Nodes: nodes})
	assert.Equal(t, 65*time.Second, r.Nodes[1].Unknown, "without the stall")
}

// A live cluster: nodes lost before Start, one already tainted: the model
// takes the taint as it is and predicts the rest.
func TestAlreadyLost(t *testing.T) {
	nodes := cluster(map[string]int{"a": 10}, 0)
	nodes[0].Lost, nodes[0].LostAt = true, -120*time.Second
	nodes[0].Tainted, nodes[0].TaintedAt = true, -60*time.Second
	nodes[0].Pods = []Pod{{Name: "default", Toleration: 300 * time.Second}, {Name: "gone", Toleration: 0}}
	nodes[1].Lost, nodes[1].LostAt = true, -100*time.Second
	nodes[2].Lost, nodes[2].LostAt = true, -20*time.Second
	r := simulate(t, Scenario{Nodes: nodes})
	assert.Equal(t, -60*time.Second, r.Nodes[0].Tainted)
	assert.Equal(t, 240*time.Second, r.Nodes[0].Pods[0].Evicted)
	assert.Equal(t, time.Duration(0), r.Nodes[0].Pods[1].Evicted, "overdue: evicted at once")
	assert.Equal(t, -50*time.Second, r.Nodes[1].Unknown)
	assert.Equal(t, time.Duration(0), r.Nodes[1].Tainted, "queued, and the bucket had a token")
	assert.Equal(t, 35*time.Second, r.Nodes[2].Unknown)
	assert.Equal(t, 35100*time.Millisecond, r.Nodes[2].Tainted)
}

// What has not happened by the horizon is Never.
func TestHorizon(t *testing.T) {
	r := simulate(t, Scenario{Nodes: lose(cluster(map[string]int{"a": 10}, 0), "a", 5, 0), Horizon: 80 * time.Second})
	_, last, never := firstLast(r)
	assert.Equal(t, 75100*time.Millisecond, last)
	assert.Equal(t, 2, never)
}

func TestValidate(t *testing.T) {
	require.NoError(t, DefaultFlags().Validate())
	for want, change := range map[string]func(*Flags){
		"--node-monitor-period":          func(f *Flags) { f.NodeMonitorPeriod = 0 },
		"--node-monitor-grace-period":    func(f *Flags) { f.NodeMonitorGracePeriod = -time.Second },
		"--node-eviction-rate":           func(f *Flags) { f.NodeEvictionRate = -1 },
		"--secondary-node-eviction-rate": func(f *Flags) { f.SecondaryNodeEvictionRate = math.NaN() },
		"--unhealthy-zone-threshold":     func(f *Flags) { f.UnhealthyZoneThreshold = 1.5 },
		"--large-cluster-size-threshold": func(f *Flags) { f.LargeClusterSizeThreshold = -1 },
		"--kube-api-qps":                 func(f *Flags) { f.KubeAPIQPS = 0 },
		"--kube-api-burst":               func(f *Flags) { f.KubeAPIBurst = 0 },
	} {
		f := DefaultFlags()
		change(&f)
		_, err := Simulate(Scenario{Flags: f})
		assert.ErrorContains(t, err, want)
	}
	_, err := Simulate(Scenario{Flags: DefaultFlags(), Nodes: []Node{{Name: "x"}, {Name: "x"}}})
	assert.ErrorContains(t, err, "node x is named twice")
	_, err = Simulate(Scenario{Flags: DefaultFlags(), Nodes: []Node{{}}})
	assert.ErrorContains(t, err, "without a name")
}

// kubernetes#104639: a zone's taint queue swapped to rate 0 gets client-go's
// "never" limiter, whose QPS method reports 1, and a swap to a rate equal
// to the reported one does nothing. So with --node-eviction-rate=1, a zone
// that once had rate 0 (a small zone's partial disruption here; every
// zone's full disruption too) never taints again. A small zone loses 6 of
// its 10 nodes (rate 0), then the other 4 (FullDisruption: back to the
// normal rate): at 0.5/s the last four are tainted, at 1/s none is.
func TestNeverLimiterAtRateOne(t *testing.T) {
	for _, tc := range []struct {
		rate    float64
		tainted int
	}{{0.5, 4}, {1, 0}} {
		nodes := lose(cluster(map[string]int{"a": 10, "b": 10}, 0), "a", 6, 0)
		for i := 6; i < 10; i++ {
			nodes[i].Lost, nodes[i].LostAt = true, time.Minute
		}
		f := DefaultFlags()
		f.NodeEvictionRate = tc.rate
		r := simulate(t, Scenario{Flags: f, Nodes: nodes})
		tainted := 0
		for _, n := range r.Nodes[6:] {
			if n.Tainted != Never {
				tainted++
			}
		}
		assert.Equal(t, tc.tainted, tainted, "rate %v: the nodes lost after the zone's rate went to 0", tc.rate)
		states := r.Zones[0].States
		require.Equal(t, []ZoneState{Normal, PartialDisruption, FullDisruption}, zoneStates(r.Zones[0]))
		want := tc.rate
		if tc.rate == 1 {
			want = 0 // the swap did nothing
		}
		assert.InDelta(t, want, states[2].Rate, 1e-9, "rate %v", tc.rate)
	}
}

// Every node of every zone lost at once, with Kubernetes' defaults and 10
// ready pods a node: the controller stops evictions only when the pass
// that found the loss ends, 14 minutes of requests later (1,000 Lease
// reads and status updates, 10,000 pod updates, the NoSchedule taints and
// the events at 20/s). Meanwhile each zone taints at the normal rate: 160
// nodes, whose pods are evicted; then the taints come off (docs/hazards.md).
func TestAllZonesFullAtScale(t *testing.T) {
	nodes := cluster(map[string]int{"a": 333, "b": 333, "c": 334}, 10)
	nodes = lose(lose(lose(nodes, "a", -1, 0), "b", -1, 0), "c", -1, 0)
	r := simulate(t, Scenario{Nodes: nodes})
	tainted, evicted := 0, 0
	for _, n := range r.Nodes {
		if n.Tainted == Never {
			continue
		}
		tainted++
		assert.NotEqual(t, Never, n.Untainted, n.Name)
		for _, p := range n.Pods {
			if p.Evicted != Never {
				evicted++
			}
		}
	}
	assert.Equal(t, 160, tainted)
	assert.Equal(t, 1600, evicted)
	for _, z := range r.Zones {
		require.Equal(t, []ZoneState{Normal, FullDisruption}, zoneStates(z))
		assert.InDelta(t, 14*60, z.States[1].At.Seconds(), 30, "zone %s stops when the pass ends", z.Name)
	}
}

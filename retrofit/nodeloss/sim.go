package nodeloss

import (
	"container/heap"
	"slices"
	"strings"
	"time"
)

// The controller's constants (pkg/controller/nodelifecycle).
const (
	nodeWorkers    = 8                      // nodeUpdateWorkerSize
	taintPeriod    = 100 * time.Millisecond // scheduler.NodeEvictionPeriod
	taintBurst     = 1                      // scheduler.EvictionRateLimiterBurst
	statusRequests = 1                      // the node's status update to Unknown
	leaseRequests  = 1                      // the Lease read by the circuit breaker
	taintRequests  = 2                      // the node from the API server's cache, then the patch (either taint)
	evictRequests  = 3                      // the pod, its DisruptionTarget condition, the delete
	// maxQueuedEvents is how many events a sender holds before it drops
	// new ones (client-go's record.maxQueuedEvents).
	maxQueuedEvents = 1000
)

// sender is a controller's event broadcaster: it writes its events one
// at a time, through the controller's client, in the order they were made.
type sender struct {
	client  *bucket
	pending int
	busy    bool
}

type simNode struct {
	Node
	zone     *simZone
	seen     bool          // the controller has seen its last renewal
	probe    time.Duration // when it saw it
	unknown  bool
	taking   bool // taken from its zone's queue, its taint's requests under way
	res      *NodeResult
	evicting []*simPod
}

type simPod struct {
	Pod
	node *simNode
	res  *PodResult
}

type simZone struct {
	name    string
	counted int
	queue   []*simNode
	limiter *bucket
	state   ZoneState
	res     *ZoneResult
}

// An event is something that happens at a time; seq keeps events of the
// same time in the order they were made.
type event struct {
	at  time.Duration
	seq int
	do  func()
}

type events []*event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || (e[i].at == e[j].at && e[i].seq < e[j].seq)
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type sim struct {
	f     Flags
	start time.Duration
	end   time.Duration
	nodes []*simNode
	zones []*simZone
	// client is the node lifecycle controller's, evictClient the
	// taint-eviction controller's.
	client, evictClient *bucket
	// events and evictEvents are the two controllers' event senders.
	events, evictEvents *sender
	// noSchedule is the queue of nodes whose NoSchedule taint the node
	// update workers put on, idle how many of them wait for one.
	noSchedule       []*simNode
	idle             int
	allFull          bool
	now              time.Duration // the time of the event being run
	q                events
	seq              int
	pendingEvictions int
	pendingTaints    int // known taints still to come
	notUnknown       int // lost nodes not yet Unknown
	res              Result
}

func newSim(s Scenario) *sim {
	m := &sim{f: s.Flags, start: s.Start, end: s.Start + s.Horizon}
	m.client = newBucket(s.Flags.KubeAPIQPS, s.Flags.KubeAPIBurst, s.Start)
	m.evictClient = newBucket(s.Flags.KubeAPIQPS, s.Flags.KubeAPIBurst, s.Start)
	m.events, m.evictEvents = &sender{client: m.client}, &sender{client: m.evictClient}
	m.idle = nodeWorkers
	nodes := slices.Clone(s.Nodes)
	slices.SortFunc(nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	byZone := map[string]*simZone{}
	for _, n := range nodes {
		z := byZone[n.Zone]
		if z == nil {
			z = &simZone{name: n.Zone}
			byZone[n.Zone] = z
			m.zones = append(m.zones, z)
		}
		if !n.Excluded {
			z.counted++
		}
		sn := &simNode{Node: n, zone: z}
		if n.Lost && n.LostAt <= s.Start {
			sn.seen, sn.probe = true, n.LostAt
			sn.unknown = n.LostAt+s.Flags.NodeMonitorGracePeriod < s.Start
		}
		m.nodes = append(m.nodes, sn)
	}
	slices.SortFunc(m.zones, func(a, b *simZone) int { return strings.Compare(a.name, b.name) })
	return m
}

func (m *sim) at(t time.Duration, do func()) {
	m.seq++
	heap.Push(&m.q, &event{at: t, seq: m.seq, do: do})
}

func (m *sim) run() Result {
	for _, n := range m.nodes {
		if !n.Lost {
			continue
		}
		r := NodeResult{Name: n.Name, Zone: n.zone.name, LostAt: n.LostAt, Unknown: Never, Tainted: Never, Untainted: Never}
		for _, p := range n.Pods {
			r.Pods = append(r.Pods, PodResult{Namespace: p.Namespace, Name: p.Name, Evicted: Never})
		}
		m.res.Nodes = append(m.res.Nodes, r)
	}
	i := 0
	for _, n := range m.nodes {
		if !n.Lost {
			continue
		}
		n.res = &m.res.Nodes[i]
		i++
		for j := range n.Pods {
			n.evicting = append(n.evicting, &simPod{Pod: n.Pods[j], node: n, res: &n.res.Pods[j]})
		}
		if n.unknown {
			n.res.Unknown = n.LostAt + m.f.NodeMonitorGracePeriod
			if !n.Tainted {
				// Queued, as the last pass did.
				m.markForTainting(n, m.start)
			}
		} else {
			m.notUnknown++
		}
		if n.Tainted {
			m.pendingTaints++
			m.at(max(n.TaintedAt, m.start), func() {
				m.pendingTaints--
				m.taint(n, n.TaintedAt)
			})
		}
	}
	// The zones' states at the start, each with its bucket.
	m.res.Zones = make([]ZoneResult, len(m.zones))
	states := m.zoneStates()
	m.allFull = allFull(states)
	for i, z := range m.zones {
		z.res = &m.res.Zones[i]
		*z.res = ZoneResult{Name: z.name, Nodes: z.counted}
		z.state = states[z]
		rate := m.rate(z, z.state)
		if m.allFull {
			rate = 0
		}
		z.limiter = newBucket(rate, taintBurst, m.start)
		z.res.States = append(z.res.States, StateChange{At: m.start, State: z.state, Rate: rate})
	}
	m.at(m.start, m.pass)
	m.at(m.start, m.tick)
	for m.q.Len() > 0 {
		e := heap.Pop(&m.q).(*event)
		if e.at > m.end {
			break
		}
		m.now = e.at
		e.do()
	}
	return m.res
}

// pass is one monitorNodeHealth: workers take the nodes in order; a node
// that needs no request is done at once.
func (m *sim) pass() {
	t0 := m.now
	next, busy := 0, 0
	var work func(t time.Duration)
	// work takes nodes from the list until one needs requests.
	work = func(t time.Duration) {
		for next < len(m.nodes) {
			n := m.nodes[next]
			next++
			if m.f.LeaseCircuitBreaker && m.expired(n, t) {
				// The node's Lease, read from the API server; then,
				// unless it is Unknown already, the rest.
				m.requests(t, leaseRequests, nil, func(g time.Duration) {
					if m.check(n, t) {
						m.markUnknown(n, g, work)
						return
					}
					if n.unknown {
						m.markForTainting(n, t0)
					}
					work(g)
				})
				return
			}
			if m.check(n, t) {
				m.markUnknown(n, t, work)
				return
			}
			if n.unknown {
				m.markForTainting(n, t0)
			}
		}
		busy--
		if busy == 0 {
			m.endPass(t)
		}
	}
	busy = nodeWorkers
	for range nodeWorkers {
		work(t0)
	}
}

// markUnknown marks n Unknown from t: the status update, queued for the
// taint, the NoSchedule taint handed on, the node's event, then each ready
// pod's status update and event; then the worker goes on.
func (m *sim) markUnknown(n *simNode, t time.Duration, work func(time.Duration)) {
	m.requests(t, statusRequests, nil, func(g time.Duration) {
		n.unknown = true
		n.res.Unknown = g
		m.notUnknown--
		m.markForTainting(n, g)
		m.noScheduleTaint(n, g)
		m.emit(m.events, g)
		ready := 0
		for _, p := range n.Pods {
			if p.Ready {
				ready++
			}
		}
		m.requests(g, ready, func(g time.Duration) { m.emit(m.events, g) }, work)
	})
}

// expired reports whether n's grace period has run out at t: a lost node
// whose last renewal the controller saw more than the grace period before.
func (m *sim) expired(n *simNode, t time.Duration) bool {
	if !n.Lost {
		return false
	}
	if n.unknown {
		return true
	}
	if !n.seen {
		if n.LostAt > t {
			return false // still renewing
		}
		n.seen, n.probe = true, t
	}
	return t > n.probe+m.f.NodeMonitorGracePeriod
}

// requests makes k requests through the controller's client, one after
// the other from t, calling each (if not nil) as each is granted, then
// then with the time the last was.
func (m *sim) requests(t time.Duration, k int, each, then func(time.Duration)) {
	if k == 0 {
		then(t)
		return
	}
	g := m.client.reserve(t)
	m.at(g, func() {
		if each != nil {
			each(g)
		}
		m.requests(g, k-1, each, then)
	})
}

// noScheduleTaint hands a node that has just been marked Unknown to the
// node update workers, which put the NoSchedule taint on it: the node from
// the API server's cache, then the patch, through the controller's client.
func (m *sim) noScheduleTaint(n *simNode, t time.Duration) {
	m.noSchedule = append(m.noSchedule, n)
	if m.idle > 0 {
		m.idle--
		m.noScheduleWorker(t)
	}
}

func (m *sim) noScheduleWorker(t time.Duration) {
	if len(m.noSchedule) == 0 {
		m.idle++
		return
	}
	m.noSchedule = m.noSchedule[1:]
	m.requests(t, taintRequests, nil, m.noScheduleWorker)
}

// emit hands an event to a sender at t.
func (m *sim) emit(s *sender, t time.Duration) {
	if s.pending >= maxQueuedEvents {
		return // dropped
	}
	s.pending++
	if !s.busy {
		s.busy = true
		m.send(s, t)
	}
}

// send writes the sender's next event from t.
func (m *sim) send(s *sender, t time.Duration) {
	g := s.client.reserve(t)
	m.at(g, func() {
		s.pending--
		if s.pending > 0 {
			m.send(s, g)
		} else {
			s.busy = false
		}
	})
}

// check is tryUpdateNodeHealth's test: it reports whether the node is to
// be marked Unknown now: its grace period has run out and it is not
// Unknown yet.
func (m *sim) check(n *simNode, t time.Duration) bool {
	return !n.unknown && m.expired(n, t)
}

// markForTainting queues an Unknown node that had no taint at listed (when
// the pass listed the nodes) at the back: each pass takes such a node off
// its queue and adds it again, from the list it made when it began. So a
// node tainted after that is queued again, and taken again later: its
// taint's time is rewritten, which costs a token and two requests. A node
// whose taint is under way stays where it is (the controller takes a node
// off the queue only once its taint is on).
func (m *sim) markForTainting(n *simNode, listed time.Duration) {
	if n.taking || (n.Tainted && n.TaintedAt <= listed) {
		return
	}
	z := n.zone
	z.queue = slices.DeleteFunc(z.queue, func(x *simNode) bool { return x == n })
	z.queue = append(z.queue, n)
}

func (m *sim) endPass(t time.Duration) {
	m.handleDisruption(t)
	if m.settled() {
		return
	}
	m.at(t+m.f.NodeMonitorPeriod, m.pass)
}

// zoneStates computes each zone's state from its counted nodes.
func (m *sim) zoneStates() map[*simZone]ZoneState {
	notReady := map[*simZone]int{}
	for _, n := range m.nodes {
		if n.unknown && !n.Excluded {
			notReady[n.zone]++
		}
	}
	states := map[*simZone]ZoneState{}
	for _, z := range m.zones {
		if z.counted == 0 {
			continue
		}
		states[z] = ComputeZoneState(z.counted-notReady[z], notReady[z], m.f.UnhealthyZoneThreshold)
	}
	return states
}

// ComputeZoneState is the node lifecycle controller's rule for a zone of
// ready and notReady counted nodes: none ready is a full disruption; more
// than 2 not ready and at least the unhealthy fraction a partial one.
func ComputeZoneState(ready, notReady int, unhealthy float64) ZoneState {
	switch {
	case ready == 0 && notReady > 0:
		return FullDisruption
	case notReady > 2 && float32(notReady)/float32(notReady+ready) >= float32(unhealthy):
		return PartialDisruption
	}
	return Normal
}

func allFull(states map[*simZone]ZoneState) bool {
	if len(states) == 0 {
		return false
	}
	for _, s := range states {
		if s != FullDisruption {
			return false
		}
	}
	return true
}

// rate is the taint rate of a zone in a state.
func (m *sim) rate(z *simZone, s ZoneState) float64 {
	if s == PartialDisruption {
		if z.counted > m.f.LargeClusterSizeThreshold {
			return m.f.SecondaryNodeEvictionRate
		}
		return 0
	}
	return m.f.NodeEvictionRate
}

// handleDisruption is the end of a pass: the zones' new states and
// buckets.
func (m *sim) handleDisruption(t time.Duration) {
	states := m.zoneStates()
	all := allFull(states)
	if all && m.allFull {
		return
	}
	if all {
		// Every node not Ready: the controller blames itself, takes every
		// taint off and stops.
		m.allFull = true
		for _, n := range m.nodes {
			if n.Lost && n.res.Tainted != Never && n.res.Untainted == Never {
				n.res.Untainted = t
				n.Tainted = false
			}
		}
		for _, z := range m.zones {
			z.queue = nil
			m.swap(z, t, FullDisruption, 0)
		}
		return
	}
	wasAll := m.allFull
	m.allFull = false
	for _, z := range m.zones {
		s, ok := states[z]
		if !ok || (s == z.state && !wasAll) {
			continue
		}
		m.swap(z, t, s, m.rate(z, s))
	}
}

// swap is SwapLimiter: a new bucket unless the rate is the same; it starts
// empty if the old one had no token.
func (m *sim) swap(z *simZone, t time.Duration, s ZoneState, rate float64) {
	z.state = s
	if z.limiter.reportedQPS() == rate {
		// No swap: kubernetes#104639, a bucket of rate 0 reports 1, so a
		// zone swapped to rate 0 keeps it when its rate is to be 1.
		z.res.States = append(z.res.States, StateChange{At: t, State: s, Rate: z.limiter.qps})
		return
	}
	z.res.States = append(z.res.States, StateChange{At: t, State: s, Rate: rate})
	nb := newBucket(rate, taintBurst, t)
	if rate > 0 && !z.limiter.tryAccept(t) {
		nb.tryAccept(t)
	}
	z.limiter = nb
}

// tick is one doNoExecuteTaintingPass: each zone's queue, while its
// bucket gives tokens; each taint is a request through the client.
func (m *sim) tick() {
	t := m.now
	var zone func(i int, t time.Duration)
	zone = func(i int, t time.Duration) {
		for ; i < len(m.zones); i++ {
			z := m.zones[i]
			if len(z.queue) == 0 || !z.limiter.tryAccept(t) {
				continue
			}
			n := z.queue[0]
			z.queue = z.queue[1:]
			n.taking = true
			m.requests(t, taintRequests, nil, func(g time.Duration) {
				n.taking = false
				if !n.Tainted {
					m.taint(n, g)
				}
				zone(i, g)
			})
			return
		}
		if !m.settled() {
			m.at(t+taintPeriod, m.tick)
		}
	}
	zone(0, t)
}

// taint puts the taint on a node at t and schedules its pods' evictions.
func (m *sim) taint(n *simNode, t time.Duration) {
	n.Tainted, n.TaintedAt = true, t
	if n.res.Tainted == Never || n.res.Untainted != Never {
		n.res.Tainted, n.res.Untainted = t, Never
	}
	for _, p := range n.evicting {
		if p.Toleration == Forever || p.res.Evicted != Never {
			continue
		}
		due := max(t+p.Toleration, m.start)
		m.pendingEvictions++
		m.at(due, func() {
			if p.node.Tainted {
				m.emit(m.evictEvents, due) // "Marking for deletion", before the requests
			}
			m.evict(p, due, evictRequests)
		})
	}
}

// evict makes the eviction's requests through the taint-eviction
// controller's client; a taint taken off meanwhile cancels it.
func (m *sim) evict(p *simPod, t time.Duration, left int) {
	if !p.node.Tainted {
		m.pendingEvictions--
		return
	}
	if left == 0 {
		p.res.Evicted = t
		m.pendingEvictions--
		return
	}
	g := m.evictClient.reserve(t)
	m.at(g, func() { m.evict(p, g, left-1) })
}

// settled reports whether nothing more can happen: every lost node is
// Unknown, no taint or eviction is pending, and every queue is empty or
// stopped.
func (m *sim) settled() bool {
	if m.pendingEvictions > 0 || m.pendingTaints > 0 || m.notUnknown > 0 {
		return false
	}
	for _, z := range m.zones {
		if len(z.queue) > 0 && z.limiter.qps > 0 {
			return false
		}
	}
	return true
}

package retrofit

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/fastover/fastover/retrofit/nodeloss"
	"github.com/fastover/fastover/toleration"
)

// LossPrediction is what the node lifecycle model (package nodeloss)
// predicts for the nodes not Ready now, or for a loss that has not
// happened: when each lost node is tainted and the audited pods on it
// evicted.
type LossPrediction struct {
	// WhatIf is the loss asked for (--lose); nil: the nodes not Ready now.
	WhatIf *Loss `json:"whatIf,omitempty"`
	// At is when the prediction starts (now; a what-if's loss happens then).
	At time.Time `json:"at"`
	// Nodes are the lost nodes, by the time of their taint.
	Nodes []NodeLoss `json:"nodes"`
	// Zones are the zones whose state changes.
	Zones []ZoneLoss `json:"zones,omitempty"`
	// Late counts the audited pods evicted more than a minute later than a
	// lone node's loss would evict them, or never.
	Late int `json:"late"`
	// LastTaint is when the last of Nodes is tainted (nil: none is);
	// NeverTainted counts those that never are.
	LastTaint    *time.Time `json:"lastTaint"`
	NeverTainted int        `json:"neverTainted"`
}

// NodeLoss is a lost node: when its last Lease renewal was (estimated for
// a node not Ready now: its Ready condition's change less the grace
// period), when it is marked Unknown, tainted, and untainted again; nil:
// never.
type NodeLoss struct {
	Name      string     `json:"name"`
	Zone      string     `json:"zone"`
	Lost      time.Time  `json:"lost"`
	Unknown   *time.Time `json:"unknown"`
	Tainted   *time.Time `json:"tainted"`
	Untainted *time.Time `json:"untainted,omitempty"`
	Pods      []PodLoss  `json:"pods,omitempty"`
}

// PodLoss is an audited pod on a lost node: its toleration of the taint,
// when it is evicted (nil: never), and whether that is late.
type PodLoss struct {
	Namespace  string     `json:"namespace"`
	Name       string     `json:"name"`
	Toleration string     `json:"toleration"`
	Evicted    *time.Time `json:"evicted"`
	Late       bool       `json:"late,omitempty"`
}

// ZoneLoss is a zone's state from each change on, with its taint rate.
type ZoneLoss struct {
	Name   string          `json:"name"`
	Nodes  int             `json:"nodes"`
	States []ZoneStateFrom `json:"states"`
}

// ZoneStateFrom is a zone's state from At on.
type ZoneStateFrom struct {
	At    time.Time `json:"at"`
	State ZoneState `json:"state"`
	// Rate is its taints per second.
	Rate float64 `json:"rate"`
}

// lateAfter is how much later than a lone node's loss an eviction is late.
const lateAfter = time.Minute

// PredictLoss runs the model on the cluster's nodes, with the audit's
// findings as the pods, for the nodes not Ready now and, if whatIf is not
// nil, for that loss now as well. It fails on a loss that names nodes or a
// zone the cluster does not have, or more nodes than are Ready.
func PredictLoss(findings []Finding, nodes []corev1.Node, flags nodeloss.Flags, whatIf *Loss, now time.Time) (LossPrediction, error) {
	if err := flags.Validate(); err != nil {
		return LossPrediction{}, err
	}
	model := make([]nodeloss.Node, 0, len(nodes))
	index := map[string]int{}
	notReady := map[string]bool{} // reported not ready by its kubelet
	for i := range nodes {
		n := &nodes[i]
		_, excluded := n.Labels[labelExcludeDisruption]
		m := nodeloss.Node{Name: n.Name, Zone: zoneKey(n), Excluded: excluded}
		if c := readyCondition(n); c == nil || c.Status != corev1.ConditionTrue {
			m.Lost = true
			m.LostAt = -flags.NodeMonitorGracePeriod
			if c != nil {
				m.LostAt = c.LastTransitionTime.Sub(now) - flags.NodeMonitorGracePeriod
				notReady[n.Name] = c.Status == corev1.ConditionFalse
			}
		}
		for _, t := range n.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoExecute && (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) {
				m.Tainted, m.TaintedAt = true, 0
				if t.TimeAdded != nil {
					m.TaintedAt = t.TimeAdded.Sub(now)
				}
			}
		}
		index[n.Name] = len(model)
		model = append(model, m)
	}
	podsOn := map[string][]Finding{}
	for _, f := range findings {
		if f.Node != "" {
			podsOn[f.Node] = append(podsOn[f.Node], f)
		}
	}
	if whatIf != nil {
		lost, err := pickLoss(*whatIf, model, index, podsOn)
		if err != nil {
			return LossPrediction{}, err
		}
		for _, name := range lost {
			if m := &model[index[name]]; !m.Lost { // one lost already keeps its time
				m.Lost, m.LostAt = true, 0
			}
		}
	}
	for i := range model {
		m := &model[i]
		if !m.Lost {
			continue
		}
		for _, f := range podsOn[m.Name] {
			eff := f.taintToleration(notReady[m.Name])
			m.Pods = append(m.Pods, nodeloss.Pod{Namespace: f.Namespace, Name: f.Name, Ready: podReady(f.Pod()), Toleration: modelToleration(eff)})
		}
	}
	r, err := nodeloss.Simulate(nodeloss.Scenario{Flags: flags, Nodes: model})
	if err != nil {
		return LossPrediction{}, err
	}
	return lossPrediction(r, podsOn, notReady, flags, whatIf, now), nil
}

// pickLoss names the nodes a what-if loses: Ready ones only.
func pickLoss(l Loss, model []nodeloss.Node, index map[string]int, podsOn map[string][]Finding) ([]string, error) {
	if len(l.Nodes) > 0 {
		for _, name := range l.Nodes {
			if _, ok := index[name]; !ok {
				return nil, fmt.Errorf("--lose %s: no node %s in the cluster", l, name)
			}
		}
		return l.Nodes, nil
	}
	zones := map[string]int{}
	for _, m := range model {
		if !m.Excluded {
			zones[m.Zone]++
		}
	}
	zone := l.Zone
	if zone == "" {
		// The largest zone, the first by name of equals.
		for z, n := range zones {
			if zone == "" || n > zones[zone] || (n == zones[zone] && z < zone) {
				zone = z
			}
		}
	} else if _, ok := zones[zone]; !ok {
		names := make([]string, 0, len(zones))
		for z := range zones {
			names = append(names, ZoneLabel(z))
		}
		slices.Sort(names)
		return nil, fmt.Errorf("--lose %s: no zone %s; the zones are %s", l, zone, strings.Join(names, ", "))
	}
	var ready []nodeloss.Node
	for _, m := range model {
		if m.Zone == zone && !m.Lost {
			ready = append(ready, m)
		}
	}
	// The nodes with the most audited pods first: the loss that hurts them
	// most.
	slices.SortStableFunc(ready, func(a, b nodeloss.Node) int {
		return cmp.Or(cmp.Compare(len(podsOn[b.Name]), len(podsOn[a.Name])), strings.Compare(a.Name, b.Name))
	})
	n := l.Count
	if n == 0 {
		n = len(ready)
	}
	if n > len(ready) {
		return nil, fmt.Errorf("--lose %s: zone %s has %d Ready nodes", l, ZoneLabel(zone), len(ready))
	}
	names := make([]string, 0, n)
	for _, m := range ready[:n] {
		names = append(names, m.Name)
	}
	return names, nil
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// taintToleration is the pod's effective toleration of the taint its lost
// node gets: not-ready where the kubelet reports the node not ready,
// unreachable where it reports nothing.
func (f Finding) taintToleration(kubeletNotReady bool) toleration.Effective {
	if kubeletNotReady {
		return f.NotReady
	}
	return f.Unreachable
}

// modelToleration is the model's toleration of an effective one: none
// matching is evicted at once, one without seconds never.
func modelToleration(e toleration.Effective) time.Duration {
	switch {
	case !e.Tolerated:
		return 0
	case e.Seconds == nil:
		return nodeloss.Forever
	case *e.Seconds < 0:
		return 0 // the taint-eviction controller treats it as 0
	}
	return time.Duration(*e.Seconds) * time.Second
}

func lossPrediction(r nodeloss.Result, podsOn map[string][]Finding, notReady map[string]bool, flags nodeloss.Flags, whatIf *Loss, now time.Time) LossPrediction {
	at := func(d time.Duration) *time.Time {
		if d == nodeloss.Never {
			return nil
		}
		t := now.Add(d)
		return &t
	}
	p := LossPrediction{WhatIf: whatIf, At: now, Nodes: []NodeLoss{}}
	// A lone node's loss: Unknown within two passes of its grace period.
	lone := flags.NodeMonitorGracePeriod + 2*flags.NodeMonitorPeriod
	for _, n := range r.Nodes {
		nl := NodeLoss{Name: n.Name, Zone: n.Zone, Lost: now.Add(n.LostAt), Unknown: at(n.Unknown), Tainted: at(n.Tainted), Untainted: at(n.Untainted)}
		for i, pr := range n.Pods {
			eff := podsOn[n.Name][i].taintToleration(notReady[n.Name])
			tol := modelToleration(eff)
			pl := PodLoss{Namespace: pr.Namespace, Name: pr.Name, Toleration: eff.String(), Evicted: at(pr.Evicted)}
			if tol != nodeloss.Forever {
				due := n.LostAt + lone + tol + lateAfter
				pl.Late = pr.Evicted == nodeloss.Never || pr.Evicted > due
			}
			if pl.Late {
				p.Late++
			}
			nl.Pods = append(nl.Pods, pl)
		}
		p.Nodes = append(p.Nodes, nl)
		switch {
		case nl.Tainted == nil:
			p.NeverTainted++
		case p.LastTaint == nil || nl.Tainted.After(*p.LastTaint):
			p.LastTaint = nl.Tainted
		}
	}
	slices.SortStableFunc(p.Nodes, func(a, b NodeLoss) int {
		return cmp.Or(cmpTime(a.Tainted, b.Tainted), strings.Compare(a.Name, b.Name))
	})
	for _, z := range r.Zones {
		if len(z.States) < 2 {
			continue
		}
		zl := ZoneLoss{Name: z.Name, Nodes: z.Nodes}
		for _, s := range z.States {
			zl.States = append(zl.States, ZoneStateFrom{At: now.Add(s.At), State: s.State, Rate: s.Rate})
		}
		p.Zones = append(p.Zones, zl)
	}
	return p
}

// cmpTime orders times, nil (never) last.
func cmpTime(a, b *time.Time) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return a.Compare(*b)
}

package nodeloss

import (
	"fmt"
	"math"
	"time"
)

// Never is the time of what does not happen: a node never tainted, a pod
// never evicted.
const Never = time.Duration(math.MaxInt64)

// Forever is the Toleration of a pod that tolerates the taint for ever.
const Forever = time.Duration(-1)

// Pod is a pod bound to a node.
type Pod struct {
	Namespace string
	Name      string
	// Ready is its Ready condition: when its node goes Unknown, the
	// controller marks each ready pod not ready, a request each.
	Ready bool
	// Toleration is how long it tolerates node.kubernetes.io/unreachable:
	// NoExecute: 0 with fastover's toleration (or none at all), 300 s with
	// the API server's default, Forever with a toleration without
	// tolerationSeconds.
	Toleration time.Duration
}

// Node is a node of the cluster.
type Node struct {
	Name string
	// Zone is the zone the controller counts it in: "region/zone" from its
	// labels, "" for a node without them.
	Zone string
	// Excluded: labelled node.kubernetes.io/exclude-disruption, so it does
	// not count in its zone's state (it is still tainted when lost).
	Excluded bool
	Pods     []Pod
	// Lost: the node stops renewing its Lease, and LostAt is its last
	// renewal (a kubelet renews every 10 s, so up to 10 s before the
	// node is lost). It may be before Start: a node already lost.
	Lost   bool
	LostAt time.Duration
	// Tainted: the node already has the unreachable taint, since
	// TaintedAt (from the cluster; the model does not taint it again).
	Tainted   bool
	TaintedAt time.Duration
}

// Scenario is a cluster, a loss and the controller's flags.
type Scenario struct {
	Flags Flags
	Nodes []Node
	// Start is when the model starts, and when a pass over the nodes
	// starts: the controller's passes are not in step with the loss, and
	// the model's are from Start on. A node lost more than the grace period
	// before Start is Unknown from the start.
	Start time.Duration
	// Horizon is how far after Start the model looks (default 48 h): what
	// has not happened by then is Never.
	Horizon time.Duration
}

// Result is what the model predicts.
type Result struct {
	// Nodes are the lost nodes, in name order.
	Nodes []NodeResult
	// Zones are the zones in name order, with their states over time.
	Zones []ZoneResult
}

// NodeResult is what happens to a lost node and its pods.
type NodeResult struct {
	Name   string
	Zone   string
	LostAt time.Duration
	// Unknown is when the controller marks it Unknown (and queues it for
	// the taint); Tainted when it gets the unreachable NoExecute taint;
	// Untainted when the controller takes the taint off again (every zone
	// fully disrupted). Never if it does not happen.
	Unknown   time.Duration
	Tainted   time.Duration
	Untainted time.Duration
	Pods      []PodResult
}

// PodResult is when a pod of a lost node is evicted (deleted by the
// taint-eviction controller), or Never.
type PodResult struct {
	Namespace string
	Name      string
	Evicted   time.Duration
}

// ZoneState is a zone's state as the node lifecycle controller computes
// it, named as it logs them.
type ZoneState string

// Zone states.
const (
	Normal            ZoneState = "Normal"
	PartialDisruption ZoneState = "PartialDisruption"
	FullDisruption    ZoneState = "FullDisruption"
)

// ZoneResult is a zone and its states over time.
type ZoneResult struct {
	Name string
	// Nodes is how many nodes count in its state (not excluded).
	Nodes int
	// States are its state at Start and each change, with the taint rate
	// (per second) that came with it.
	States []StateChange
}

// StateChange is a zone's state from At on.
type StateChange struct {
	At    time.Duration
	State ZoneState
	Rate  float64
}

// LastTaint is when the last of the lost nodes is tainted, and how many
// are never tainted (within the horizon).
func (r Result) LastTaint() (last time.Duration, never int) {
	for _, n := range r.Nodes {
		if n.Tainted == Never {
			never++
		} else if n.Tainted > last {
			last = n.Tainted
		}
	}
	return last, never
}

// Simulate runs the model. It fails only on flags or nodes it cannot
// model (Validate's errors, a node named twice).
func Simulate(s Scenario) (Result, error) {
	if err := s.Flags.Validate(); err != nil {
		return Result{}, err
	}
	seen := map[string]bool{}
	for _, n := range s.Nodes {
		if n.Name == "" {
			return Result{}, fmt.Errorf("a node without a name")
		}
		if seen[n.Name] {
			return Result{}, fmt.Errorf("node %s is named twice", n.Name)
		}
		seen[n.Name] = true
	}
	if s.Horizon <= 0 {
		s.Horizon = 48 * time.Hour
	}
	return newSim(s).run(), nil
}

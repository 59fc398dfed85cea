package nodeloss_test

import (
	"fmt"

	"github.com/fastover/fastover/retrofit/nodeloss"
)

// Ten nodes of a 100-node zone lost at once, with kube-controller-manager's
// defaults: the first is tainted 55 s after its last Lease renewal, the
// last a taint every 10 s later, and a pod with fastover's 0 s toleration
// is evicted as soon as its node is tainted.
func ExampleSimulate() {
	var nodes []nodeloss.Node
	for i := range 100 {
		n := nodeloss.Node{Name: fmt.Sprintf("node-%02d", i), Zone: "eu/a"}
		if i < 10 {
			n.Lost = true
			n.Pods = []nodeloss.Pod{{Namespace: "shop", Name: fmt.Sprintf("web-%d", i), Ready: true}}
		}
		nodes = append(nodes, n)
	}
	r, err := nodeloss.Simulate(nodeloss.Scenario{Flags: nodeloss.DefaultFlags(), Nodes: nodes})
	if err != nil {
		panic(err)
	}
	for _, n := range r.Nodes[:2] {
		fmt.Printf("%s: Unknown at %v, tainted at %v, %s evicted at %v\n", n.Name, n.Unknown, n.Tainted, n.Pods[0].Name, n.Pods[0].Evicted)
	}
	last, never := r.LastTaint()
	fmt.Printf("last taint at %v (%.1f min), never tainted: %d\n", last, last.Minutes(), never)
	fmt.Println("zone eu/a:", r.Zones[0].States[len(r.Zones[0].States)-1].State)
	// Output:
	// node-00: Unknown at 55s, tainted at 55.95s, web-0 evicted at 55.95s
	// node-01: Unknown at 55s, tainted at 1m5.15s, web-1 evicted at 1m5.15s
	// last taint at 2m25.15s (2.4 min), never tainted: 0
	// zone eu/a: Normal
}

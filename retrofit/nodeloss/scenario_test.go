package nodeloss

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// cluster builds zones of nodes, each with pods pods of fastover's 0 s
// toleration, ready; the nodes of the zones in name order.
func cluster(zones map[string]int, pods int) []Node {
	var nodes []Node
	// Zones in name order: tests pick nodes by index.
	for _, zone := range slices.Sorted(maps.Keys(zones)) {
		for i := range zones[zone] {
			node := Node{Name: fmt.Sprintf("%s-%03d", zone, i), Zone: "r/" + zone}
			for j := range pods {
				node.Pods = append(node.Pods, Pod{Namespace: "ns", Name: fmt.Sprintf("%s-%03d-%d", zone, i, j), Ready: true})
			}
			nodes = append(nodes, node)
		}
	}
	return nodes
}

// lose marks the first k nodes of zone (in name order) lost at at; k < 0
// loses them all.
func lose(nodes []Node, zone string, k int, at time.Duration) []Node {
	for i := range nodes {
		if nodes[i].Zone == "r/"+zone && (k < 0 || nameIndex(nodes[i].Name) < k) {
			nodes[i].Lost, nodes[i].LostAt = true, at
		}
	}
	return nodes
}

func nameIndex(name string) int {
	var i int
	_, _ = fmt.Sscanf(name[len(name)-3:], "%d", &i)
	return i
}

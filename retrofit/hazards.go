package retrofit

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/retrofit/nodeloss"
)

// Hazards are the cases where a short unreachable toleration does not bring
// a pod back from a lost node by itself (docs/hazards.md has the measured
// figures). The audit warns about them; they are not errors, and fix does
// nothing about them.

// HazardKind names a case.
type HazardKind string

// The cases.
const (
	// HazardStatefulSet: a StatefulSet pod is evicted from a lost node but
	// stays Terminating, and its StatefulSet creates the replacement (same
	// name) only once it is gone from the API server.
	HazardStatefulSet HazardKind = "statefulset"
	// HazardDisruptedZone: the pod's node is in a zone where
	// kube-controller-manager has stopped (or slowed) tainting lost nodes,
	// so no toleration comes into play.
	HazardDisruptedZone HazardKind = "disrupted-zone"
)

// What a user does about each case.
const (
	statefulSetReason = "StatefulSet pod: on a lost node it is evicted but stays Terminating, " +
		"and the StatefulSet creates its replacement only once it is deleted"
	statefulSetAdvice = "once the node is known to be down, taint it " + corev1.TaintNodeOutOfService +
		"=nodeshutdown:NoExecute (or force-delete the pod), by hand or with a node remediation tool; " +
		"for a controller, run standby replicas with fastover's leader library"
	disruptedZoneAdvice = "evictions resume at --node-eviction-rate once fewer nodes of the zone are not ready; " +
		"for a controller that must survive it, run standby replicas (other zones) with fastover's leader library"
)

// Hazard is one pod a short toleration does not bring back by itself.
type Hazard struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Node      string     `json:"node,omitempty"`
	Kind      HazardKind `json:"kind"`
	// Reason says what happens, Advice what to do instead.
	Reason string `json:"reason"`
	Advice string `json:"advice"`
}

// ZoneState is a zone's state as the node lifecycle controller computes it
// from its nodes' Ready conditions (nodeloss.ComputeZoneState).
type ZoneState = nodeloss.ZoneState

// Zone states, named as kube-controller-manager logs them.
const (
	ZoneNormal            = nodeloss.Normal
	ZonePartialDisruption = nodeloss.PartialDisruption
	ZoneFullDisruption    = nodeloss.FullDisruption
)

// Zone is one zone of the cluster: nodes with the same region and zone
// labels (nodes without them form one zone, named "").
type Zone struct {
	Name     string    `json:"name"`
	Nodes    int       `json:"nodes"`
	NotReady int       `json:"notReady"`
	State    ZoneState `json:"state"`
	// Evictions is what the node lifecycle controller does to the zone's
	// lost nodes now: "normal rate", "secondary rate" or "stopped".
	Evictions string `json:"evictions"`
	// StopsAt is how many of its nodes not ready at once stop (or slow)
	// evictions in the zone; 0 if that cannot happen while other zones are
	// healthy (fewer than 3 nodes).
	StopsAt int `json:"stopsAt,omitempty"`
}

// Eviction rates of a zone.
const (
	evictNormal    = "normal rate"
	evictSecondary = "secondary rate"
	evictStopped   = "stopped"
)

// ZoneThresholds are kube-controller-manager's flags that decide when a
// zone is disrupted and what it then does. The audit cannot read them from
// the cluster; DefaultZoneThresholds are Kubernetes' defaults.
type ZoneThresholds struct {
	// Unhealthy is --unhealthy-zone-threshold: the fraction of not-ready
	// nodes (at least 3) from which a zone is disrupted.
	Unhealthy float64
	// LargeCluster is --large-cluster-size-threshold: a disrupted zone of
	// at most this many nodes gets no evictions at all, a larger one
	// --secondary-node-eviction-rate.
	LargeCluster int
}

// DefaultZoneThresholds returns Kubernetes' defaults: 0.55 and 50.
func DefaultZoneThresholds() ZoneThresholds {
	return ZoneThresholds{Unhealthy: 0.55, LargeCluster: 50}
}

// HazardReport is what the audit warns about.
type HazardReport struct {
	Pods  []Hazard `json:"pods"`
	Zones []Zone   `json:"zones,omitempty"`
	// ZonesUnchecked, if not empty, says why the zones were not checked
	// (the nodes could not be listed).
	ZonesUnchecked string `json:"zonesUnchecked,omitempty"`
}

// labelExcludeDisruption is the node label that makes the node lifecycle
// controller leave a node out of its zone's count.
const labelExcludeDisruption = "node.kubernetes.io/exclude-disruption"

// Hazards lists the nodes and returns FindHazards' report for the audit's
// findings, and the nodes, for PredictLoss. Not being allowed to list nodes
// (or any other failure to) is not an error: the zones are then left
// unchecked, the report says why, and the nodes are nil.
func Hazards(ctx context.Context, client kubernetes.Interface, findings []Finding, th ZoneThresholds) (HazardReport, []corev1.Node) {
	nodes, err := ListNodes(ctx, client)
	if err != nil {
		r := FindHazards(findings, nil, th)
		r.Zones, r.ZonesUnchecked = nil, err.Error()
		return r, nil
	}
	return FindHazards(findings, nodes, th), nodes
}

// ListNodes lists the cluster's nodes, 500 at a time.
func ListNodes(ctx context.Context, client kubernetes.Interface) ([]corev1.Node, error) {
	var nodes []corev1.Node
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("cannot list nodes: %w", err)
		}
		nodes = append(nodes, list.Items...)
		if list.Continue == "" {
			return nodes, nil
		}
		opts.Continue = list.Continue
	}
}

// FindHazards finds, among the pods that have (StatusFast) or would get
// (StatusNeedsFix) the rule's toleration, those it does not bring back by
// itself: StatefulSet pods, and pods on nodes in a zone where evictions
// are stopped or slowed now. It also describes every zone of the nodes.
// Pods are sorted by namespace, name and kind; zones by name.
func FindHazards(findings []Finding, nodes []corev1.Node, th ZoneThresholds) HazardReport {
	zones, zoneOf := computeZones(nodes, th)
	r := HazardReport{Pods: []Hazard{}, Zones: zones}
	byName := map[string]*Zone{}
	for i := range zones {
		byName[zones[i].Name] = &zones[i]
	}
	for _, f := range findings {
		if f.Status != StatusFast && f.Status != StatusNeedsFix {
			continue
		}
		if f.pod != nil && ownedByStatefulSet(f.pod) {
			r.Pods = append(r.Pods, Hazard{
				Namespace: f.Namespace, Name: f.Name, Node: f.Node, Kind: HazardStatefulSet,
				Reason: statefulSetReason, Advice: statefulSetAdvice,
			})
		}
		name, ok := zoneOf[f.Node]
		if !ok {
			continue
		}
		if z := byName[name]; z.Evictions != evictNormal {
			r.Pods = append(r.Pods, Hazard{
				Namespace: f.Namespace, Name: f.Name, Node: f.Node, Kind: HazardDisruptedZone,
				Reason: fmt.Sprintf("zone %s is in %s (%d of %d nodes not ready): kube-controller-manager's evictions there are %s",
					ZoneLabel(z.Name), z.State, z.NotReady, z.Nodes, z.Evictions),
				Advice: disruptedZoneAdvice,
			})
		}
	}
	slices.SortStableFunc(r.Pods, func(x, y Hazard) int {
		if c := strings.Compare(x.Namespace, y.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(x.Name, y.Name); c != 0 {
			return c
		}
		return strings.Compare(string(x.Kind), string(y.Kind))
	})
	return r
}

// ownedByStatefulSet reports whether a pod belongs to a StatefulSet:
// apps/v1's or another group's drop-in (such as OpenKruise's), which keeps
// a pod's identity the same way.
func ownedByStatefulSet(pod *corev1.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "StatefulSet" {
			return true
		}
	}
	return false
}

// zoneKey is the zone a node counts in, as the node lifecycle controller
// groups nodes: region and zone labels, the deprecated beta ones first.
func zoneKey(n *corev1.Node) string {
	zone, ok := n.Labels[corev1.LabelFailureDomainBetaZone]
	if !ok {
		zone = n.Labels[corev1.LabelTopologyZone]
	}
	region, ok := n.Labels[corev1.LabelFailureDomainBetaRegion]
	if !ok {
		region = n.Labels[corev1.LabelTopologyRegion]
	}
	if region == "" && zone == "" {
		return ""
	}
	return region + "/" + zone
}

// ZoneLabel names a zone for people: "" is every node without zone labels.
func ZoneLabel(name string) string {
	if name == "" {
		return "<no zone labels>"
	}
	return name
}

// computeZones groups the nodes into zones and computes each one's state
// and eviction rate as the node lifecycle controller does. It returns the
// zones sorted by name and each counted node's zone.
func computeZones(nodes []corev1.Node, th ZoneThresholds) ([]Zone, map[string]string) {
	zoneOf := map[string]string{}
	byName := map[string]*Zone{}
	for i := range nodes {
		n := &nodes[i]
		if _, excluded := n.Labels[labelExcludeDisruption]; excluded {
			continue
		}
		key := zoneKey(n)
		z, ok := byName[key]
		if !ok {
			z = &Zone{Name: key}
			byName[key] = z
		}
		z.Nodes++
		if !nodeReady(n) {
			z.NotReady++
		}
		zoneOf[n.Name] = key
	}
	zones := make([]Zone, 0, len(byName))
	allFull := len(byName) > 0
	for _, z := range byName {
		z.State = nodeloss.ComputeZoneState(z.Nodes-z.NotReady, z.NotReady, th.Unhealthy)
		allFull = allFull && z.State == ZoneFullDisruption
		z.StopsAt = stopsAt(z.Nodes, th.Unhealthy)
		zones = append(zones, *z)
	}
	for i := range zones {
		zones[i].Evictions = evictions(zones[i], allFull, th.LargeCluster)
	}
	slices.SortFunc(zones, func(x, y Zone) int { return strings.Compare(x.Name, y.Name) })
	return zones, zoneOf
}

// nodeReady reports whether the node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	c := readyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
}

// stopsAt is the smallest number of not-ready nodes that disrupts a zone of
// n nodes, or 0 if only losing all of them does (a full disruption, which
// stops evictions only when every zone is fully disrupted).
func stopsAt(n int, unhealthy float64) int {
	for k := 3; k < n; k++ {
		if nodeloss.ComputeZoneState(n-k, k, unhealthy) == ZonePartialDisruption {
			return k
		}
	}
	return 0
}

// evictions is the rate the node lifecycle controller taints the zone's
// lost nodes at: stopped when every zone is fully disrupted, or in a
// partially disrupted zone of at most largeCluster nodes; the secondary
// rate in a larger one; the normal rate otherwise.
func evictions(z Zone, allFull bool, largeCluster int) string {
	switch {
	case allFull:
		return evictStopped
	case z.State == ZonePartialDisruption && z.Nodes <= largeCluster:
		return evictStopped
	case z.State == ZonePartialDisruption:
		return evictSecondary
	}
	return evictNormal
}

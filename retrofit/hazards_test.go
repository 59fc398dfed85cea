package retrofit

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/toleration"
)

// node is a node of the zone ("" for none), Ready or not.
func node(name, zone string, ready bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if zone != "" {
		n.Labels[corev1.LabelTopologyRegion] = "eu"
		n.Labels[corev1.LabelTopologyZone] = zone
	}
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	return n
}

// nodes are n nodes of the zone, the first notReady of them not ready.
func zoneNodes(zone string, n, notReady int) []runtime.Object {
	var out []runtime.Object
	for i := range n {
		out = append(out, node(fmt.Sprintf("%s-%d", zone, i+1), zone, i >= notReady))
	}
	return out
}

// podOn is a pod of shop on the node, injected unless defaulted, owned by
// a controller of the kind ("" for none).
func podOn(name, nodeName, kind string, injected bool) *corev1.Pod {
	p := podIn("shop", name)
	p.Spec.NodeName = nodeName
	if injected {
		p.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](0)
		p.Annotations = map[string]string{toleration.AnnotationInjected: "unreachable=0s"}
	}
	if kind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "owner", UID: "owner-uid", Controller: ptr.To(true)}}
	}
	return p
}

func hazardNames(r HazardReport) []string {
	var out []string
	for _, h := range r.Pods {
		out = append(out, h.Namespace+"/"+h.Name+":"+string(h.Kind))
	}
	return out
}

func auditWithHazards(t *testing.T, objs ...runtime.Object) ([]Finding, HazardReport) {
	t.Helper()
	client := fake.NewClientset(append([]runtime.Object{namespace("shop", true)}, objs...)...)
	findings, err := Auditor{Rule: toleration.DefaultRule()}.Audit(context.Background(), client, Scope{})
	require.NoError(t, err)
	r, _ := Hazards(context.Background(), client, findings, DefaultZoneThresholds())
	return findings, r
}

func TestHazardsStatefulSet(t *testing.T) {
	optOut := podOn("opted-out-0", "a-1", "StatefulSet", false)
	optOut.Annotations = map[string]string{toleration.AnnotationInject: "false"}
	user := podOn("user-0", "a-1", "StatefulSet", false)
	user.Spec.Tolerations[1].TolerationSeconds = ptr.To[int64](600)
	done := podOn("done-0", "a-1", "StatefulSet", true)
	done.Status.Phase = corev1.PodSucceeded
	kruise := podOn("kruise-0", "a-1", "StatefulSet", true)
	kruise.OwnerReferences[0].APIVersion = "apps.kruise.io/v1beta1"

	_, r := auditWithHazards(t, append(zoneNodes("a", 2, 0),
		podOn("db-0", "a-1", "StatefulSet", true),      // injected
		podOn("cache-0", "a-2", "StatefulSet", false),  // to be injected
		podOn("web-7d9c-x", "a-1", "ReplicaSet", true), // replaced by its ReplicaSet
		podOn("agent-x", "a-1", "DaemonSet", false),    // kept by the rule
		optOut, user, done, kruise,
	)...)
	assert.Equal(t, []string{"shop/cache-0:statefulset", "shop/db-0:statefulset", "shop/kruise-0:statefulset"}, hazardNames(r))
	h := r.Pods[1]
	assert.Equal(t, "a-1", h.Node)
	assert.Contains(t, h.Reason, "stays Terminating")
	assert.Contains(t, h.Advice, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
	assert.Contains(t, h.Advice, "force-delete")
	assert.Contains(t, h.Advice, "leader library")
	assert.Empty(t, r.ZonesUnchecked)
	assert.Equal(t, []Zone{{Name: "eu/a", Nodes: 2, State: ZoneNormal, Evictions: "normal rate"}}, r.Zones)
}

func TestHazardsDisruptedZone(t *testing.T) {
	objs := append(zoneNodes("a", 5, 3), zoneNodes("b", 4, 1)...) // a: 3 of 5 lost; b: 1 of 4
	objs = append(objs,
		podOn("lost", "a-1", "ReplicaSet", true),      // on a lost node of the disrupted zone
		podOn("next", "a-4", "ReplicaSet", false),     // on a ready node there: would not be evicted either
		podOn("db-0", "a-5", "StatefulSet", true),     // both hazards
		podOn("fine", "b-1", "ReplicaSet", true),      // zone b evicts
		podOn("agent", "a-1", "DaemonSet", false),     // kept: not the rule's
		podOn("unscheduled", "", "ReplicaSet", false), // on no node
	)
	_, r := auditWithHazards(t, objs...)
	assert.Equal(t, []string{
		"shop/db-0:disrupted-zone", "shop/db-0:statefulset", "shop/lost:disrupted-zone", "shop/next:disrupted-zone",
	}, hazardNames(r))
	assert.Equal(t, `zone eu/a is in PartialDisruption (3 of 5 nodes not ready): kube-controller-manager's evictions there are stopped`, r.Pods[2].Reason)
	assert.Contains(t, r.Pods[2].Advice, "leader library")
	assert.Equal(t, []Zone{
		{Name: "eu/a", Nodes: 5, NotReady: 3, State: ZonePartialDisruption, Evictions: "stopped", StopsAt: 3},
		{Name: "eu/b", Nodes: 4, NotReady: 1, State: ZoneNormal, Evictions: "normal rate", StopsAt: 3},
	}, r.Zones)
}

// TestZoneStates holds computeZones to the node lifecycle controller's
// rules: the thresholds, full disruption, large zones, nodes without zone
// labels, excluded nodes.
func TestZoneStates(t *testing.T) {
	nodesOf := func(objs ...[]runtime.Object) []corev1.Node {
		var out []corev1.Node
		for _, o := range objs {
			for _, n := range o {
				out = append(out, *n.(*corev1.Node))
			}
		}
		return out
	}
	th := DefaultZoneThresholds()
	for _, tc := range []struct {
		name  string
		nodes []corev1.Node
		th    ZoneThresholds
		want  []string // name state evictions stopsAt
	}{
		{"healthy", nodesOf(zoneNodes("a", 3, 0)), th, []string{"eu/a Normal normal rate 0"}},
		{"2 of 3 lost: fewer than 3", nodesOf(zoneNodes("a", 3, 2)), th, []string{"eu/a Normal normal rate 0"}},
		{"3 of 6 lost: under 55%", nodesOf(zoneNodes("a", 6, 3)), th, []string{"eu/a Normal normal rate 4"}},
		{"4 of 6 lost", nodesOf(zoneNodes("a", 6, 4)), th, []string{"eu/a PartialDisruption stopped 4"}},
		{"a large zone slows", nodesOf(zoneNodes("a", 60, 40)), th, []string{"eu/a PartialDisruption secondary rate 33"}},
		{"lower large-cluster threshold", nodesOf(zoneNodes("a", 5, 3)), ZoneThresholds{Unhealthy: 0.55, LargeCluster: 4}, []string{"eu/a PartialDisruption secondary rate 3"}},
		{"one zone fully down, another up", nodesOf(zoneNodes("a", 2, 2), zoneNodes("b", 2, 0)), th, []string{"eu/a FullDisruption normal rate 0", "eu/b Normal normal rate 0"}},
		{"every zone fully down", nodesOf(zoneNodes("a", 2, 2), zoneNodes("b", 1, 1)), th, []string{"eu/a FullDisruption stopped 0", "eu/b FullDisruption stopped 0"}},
		{"no zone labels: one zone", nodesOf(zoneNodes("", 5, 3)), th, []string{" PartialDisruption stopped 3"}},
		{"no nodes", nil, th, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			zones, _ := computeZones(tc.nodes, tc.th)
			got := []string{}
			for _, z := range zones {
				got = append(got, fmt.Sprintf("%s %s %s %d", z.Name, z.State, z.Evictions, z.StopsAt))
			}
			assert.Equal(t, tc.want, got)
		})
	}

	// A node labelled node.kubernetes.io/exclude-disruption is not
	// counted: 3 of 5 lost, but one of the lost is excluded.
	nodes := nodesOf(zoneNodes("a", 5, 3))
	nodes[0].Labels[labelExcludeDisruption] = ""
	zones, zoneOf := computeZones(nodes, th)
	assert.Equal(t, Zone{Name: "eu/a", Nodes: 4, NotReady: 2, State: ZoneNormal, Evictions: "normal rate", StopsAt: 3}, zones[0])
	assert.NotContains(t, zoneOf, "a-1")

	// The deprecated beta labels win over the topology ones, as for the
	// controller.
	beta := node("old", "a", true)
	beta.Labels[corev1.LabelFailureDomainBetaZone] = "legacy"
	assert.Equal(t, "eu/legacy", zoneKey(beta))
}

// TestHazardsWithoutNodes: a user who may not list nodes still gets the
// StatefulSet hazards, and the report says why the zones are unchecked.
func TestHazardsWithoutNodes(t *testing.T) {
	client := fake.NewClientset(namespace("shop", true), podOn("db-0", "a-1", "StatefulSet", true))
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC: not allowed"))
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, forbidden })
	findings, err := Auditor{Rule: toleration.DefaultRule()}.Audit(context.Background(), client, Scope{})
	require.NoError(t, err)
	r, nodes := Hazards(context.Background(), client, findings, DefaultZoneThresholds())
	assert.Nil(t, nodes)
	assert.Equal(t, []string{"shop/db-0:statefulset"}, hazardNames(r))
	assert.Nil(t, r.Zones)
	assert.Contains(t, r.ZonesUnchecked, "cannot list nodes:")
	assert.Contains(t, r.ZonesUnchecked, "RBAC: not allowed")
}

// TestHazardsNodePages: the nodes are read in pages.
func TestHazardsNodePages(t *testing.T) {
	client := fake.NewClientset()
	var continues []string
	client.PrependReactor("list", "nodes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		opts := action.(k8stesting.ListActionImpl).ListOptions
		continues = append(continues, opts.Continue)
		page := &corev1.NodeList{}
		if opts.Continue == "" {
			page.Items = []corev1.Node{*node("a-1", "a", false), *node("a-2", "a", false)}
			page.Continue = "next"
		} else {
			page.Items = []corev1.Node{*node("a-3", "a", false), *node("a-4", "a", true)}
		}
		return true, page, nil
	})
	r, nodes := Hazards(context.Background(), client, nil, DefaultZoneThresholds())
	assert.Len(t, nodes, 4, "every page")
	assert.Equal(t, []string{"", "next"}, continues)
	require.Len(t, r.Zones, 1)
	assert.Equal(t, 4, r.Zones[0].Nodes)
	assert.Equal(t, ZonePartialDisruption, r.Zones[0].State)
	assert.Empty(t, r.Pods)
	assert.NotNil(t, r.Pods, "an empty list, not null, in JSON")
}

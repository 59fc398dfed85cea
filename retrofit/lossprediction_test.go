package retrofit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fastover/fastover/retrofit/nodeloss"
	"github.com/fastover/fastover/toleration"
)

// predict audits the objects and predicts the loss, now.
func predict(t *testing.T, now time.Time, whatIf *Loss, objs ...runtime.Object) (LossPrediction, error) {
	t.Helper()
	client := fake.NewClientset(append([]runtime.Object{namespace("shop", true)}, objs...)...)
	findings, err := Auditor{Rule: toleration.DefaultRule()}.Audit(context.Background(), client, Scope{})
	require.NoError(t, err)
	nodes, err := ListNodes(context.Background(), client)
	require.NoError(t, err)
	return PredictLoss(findings, nodes, nodeloss.DefaultFlags(), whatIf, now)
}

func readyPod(p *corev1.Pod) *corev1.Pod {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return p
}

// A what-if: 10 nodes of the largest zone, those with the audited pods
// first; an injected pod goes with its node's taint, a defaulted one 300 s
// later; the pods of the last three nodes tainted are late (more than a
// minute after a lone loss's 60 s).
func TestPredictLossWhatIf(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	objs := append(zoneNodes("a", 20, 0), zoneNodes("b", 5, 0)...)
	objs = append(objs,
		readyPod(podOn("fast", "a-20", "ReplicaSet", true)),
		readyPod(podOn("slow", "a-20", "ReplicaSet", false)),
		readyPod(podOn("other", "b-1", "ReplicaSet", true)),
	)
	for i := range 9 {
		objs = append(objs, readyPod(podOn(fmt.Sprintf("w-%d", i), fmt.Sprintf("a-%d", i+2), "ReplicaSet", true)))
	}
	p, err := predict(t, now, &Loss{Count: 10}, objs...)
	require.NoError(t, err)
	require.Len(t, p.Nodes, 10)
	var names []string
	for _, n := range p.Nodes {
		names = append(names, n.Name)
		assert.Equal(t, "eu/a", n.Zone)
		assert.Equal(t, now, n.Lost)
	}
	assert.ElementsMatch(t, []string{"a-20", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7", "a-8", "a-9", "a-10"}, names)
	first, last := p.Nodes[0], p.Nodes[9]
	require.NotNil(t, first.Tainted)
	assert.Equal(t, 55*time.Second, first.Unknown.Sub(now))
	require.NotNil(t, last.Tainted)
	assert.InDelta(t, 145, last.Tainted.Sub(now).Seconds(), 1, "a taint every 10 s")
	assert.Equal(t, last.Tainted, p.LastTaint)
	assert.Zero(t, p.NeverTainted)
	var fast, slow *PodLoss
	for i, n := range p.Nodes {
		for j := range n.Pods {
			switch n.Pods[j].Name {
			case "fast":
				fast = &p.Nodes[i].Pods[j]
			case "slow":
				slow = &p.Nodes[i].Pods[j]
			}
		}
	}
	require.NotNil(t, fast)
	require.NotNil(t, slow)
	assert.Equal(t, "0s", fast.Toleration)
	assert.Equal(t, "300s (default)", slow.Toleration)
	assert.Equal(t, 300*time.Second, slow.Evicted.Sub(*fast.Evicted))
	assert.False(t, fast.Late)
	assert.Equal(t, 3, p.Late)
	assert.True(t, last.Pods[0].Late)
	assert.False(t, p.Nodes[6].Pods[0].Late, "the seventh, at 115 s")
	assert.Empty(t, p.Zones, "zone a stays Normal")
}

// The nodes not Ready now: one tainted a minute ago, one Unknown without
// a taint yet; a zone of 5 with 3 not ready is disrupted, so its
// untainted node is never tainted.
func TestPredictLossNow(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	objs := append(zoneNodes("a", 5, 3), zoneNodes("b", 2, 0)...)
	for i, n := range objs[:3] {
		node := n.(*corev1.Node)
		node.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-time.Duration(120-i) * time.Second))
		if i < 2 {
			node.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: ptrTime(now.Add(-time.Minute))}}
		}
	}
	objs = append(objs, readyPod(podOn("lost", "a-3", "ReplicaSet", true)), readyPod(podOn("gone", "a-1", "ReplicaSet", true)))
	p, err := predict(t, now, nil, objs...)
	require.NoError(t, err)
	require.Len(t, p.Nodes, 3)
	assert.Nil(t, p.WhatIf)
	assert.Equal(t, "a-1", p.Nodes[0].Name)
	assert.Equal(t, now.Add(-time.Minute), *p.Nodes[0].Tainted)
	assert.Equal(t, now.Add(-170*time.Second), p.Nodes[0].Lost, "its Ready change less the grace period")
	assert.Equal(t, now, *p.Nodes[0].Pods[0].Evicted, "overdue: at once")
	assert.Equal(t, "a-3", p.Nodes[2].Name)
	assert.Nil(t, p.Nodes[2].Tainted, "zone a is partially disrupted and small: never")
	assert.Nil(t, p.Nodes[2].Pods[0].Evicted)
	assert.True(t, p.Nodes[2].Pods[0].Late)
	assert.True(t, p.Nodes[0].Pods[0].Late, "still there a minute after its taint: overdue")
	assert.Equal(t, 2, p.Late)
	assert.Equal(t, 1, p.NeverTainted, "a-3")
	require.NotNil(t, p.LastTaint, "a taint in the past is the last one")
	assert.Equal(t, p.Nodes[1].Tainted, p.LastTaint)
}

// A node named in --lose that is lost already keeps its loss time: the
// what-if loses the others now.
func TestPredictLossNamesALostNode(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	objs := zoneNodes("a", 5, 1) // a-1 not Ready
	objs[0].(*corev1.Node).Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-time.Minute))
	l, err := ParseLoss("nodes=a-1,a-2")
	require.NoError(t, err)
	p, err := predict(t, now, &l, objs...)
	require.NoError(t, err)
	lost := map[string]time.Time{}
	for _, n := range p.Nodes {
		lost[n.Name] = n.Lost
	}
	assert.Equal(t, map[string]time.Time{"a-1": now.Add(-110 * time.Second), "a-2": now}, lost)
}

func TestPredictLossErrors(t *testing.T) {
	now := time.Now()
	objs := zoneNodes("a", 3, 1)
	for loss, want := range map[string]string{
		"nodes=a-1,x": "--lose nodes=a-1,x: no node x in the cluster",
		"zone=eu/b":   "--lose zone=eu/b: no zone eu/b; the zones are eu/a",
		"3":           "--lose 3: zone eu/a has 2 Ready nodes",
		"zone=eu/a:5": "zone eu/a has 2 Ready nodes",
	} {
		l, err := ParseLoss(loss)
		require.NoError(t, err)
		_, err = predict(t, now, &l, objs...)
		assert.ErrorContains(t, err, want, loss)
	}
	f := nodeloss.DefaultFlags()
	f.KubeAPIQPS = 0
	_, err := PredictLoss(nil, nil, f, nil, now)
	assert.ErrorContains(t, err, "--kube-api-qps")
}

func ptrTime(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}

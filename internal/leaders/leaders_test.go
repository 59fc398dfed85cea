package leaders

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/leader"
)

var t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

func lease(ns, name, holder string, term int32, acquired, renewed time.Time, annotations map[string]string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseTransitions:     ptr.To(term),
			AcquireTime:          &metav1.MicroTime{Time: acquired},
			RenewTime:            &metav1.MicroTime{Time: renewed},
			LeaseDurationSeconds: ptr.To[int32](4),
		},
	}
}

func slice(ns, name, svc, identity, term, handOver string, addrs ...string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelManagedBy: leader.ManagedBy, discoveryv1.LabelServiceName: svc},
			Annotations: map[string]string{
				leader.AnnotationIdentity: identity, leader.AnnotationTerm: term, leader.AnnotationHandOver: handOver,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: addrs}},
	}
}

func event(ns, name, lease, reason, msg string, at time.Time, component string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "Lease", Namespace: ns, Name: lease},
		Reason:         reason, Message: msg, Type: corev1.EventTypeNormal, Count: 1,
		Source:        corev1.EventSource{Component: component},
		LastTimestamp: metav1.Time{Time: at},
	}
}

func pod(ns, name string, owner types.UID, ready bool, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "node-" + name},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ready]},
		}},
	}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-" + string(owner), UID: owner, Controller: ptr.To(true)}}
	}
	return p
}

func TestList(t *testing.T) {
	now := t0.Add(time.Minute)
	objs := []runtime.Object{
		// ha/ctl: replica-2 took over from a crash in term 3, publishes
		// itself; its Pod's siblings are its standbys.
		lease("ha", "ctl", "replica-2", 3, t0.Add(50*time.Second), now.Add(-time.Second), map[string]string{
			leader.AnnotationHolderPod: `{"holder":"replica-2","term":3,"namespace":"ha","pod":"ctl-2","uid":"uid-ctl-2","container":"c","since":"2026-12-05T10:00:50Z"}`,
		}),
		slice("ha", "ctl-fastover-ipv4", "ctl", "replica-2", "3", "unplanned", "10.0.0.2"),
		event("ha", "e1", "ctl", "LeaderElection", "replica-1 became leader", t0, eventComponent),
		event("ha", "e2", "ctl", "CrashTakeover", "replica-2 took over from replica-1 before its Lease expired: its container ended", t0.Add(50*time.Second), eventComponent),
		event("ha", "e3", "ctl", "LeaderElection", "replica-2 became leader", t0.Add(50*time.Second), eventComponent),
		pod("ha", "ctl-1", "rs", true, nil),
		pod("ha", "ctl-2", "rs", true, nil),
		pod("ha", "ctl-3", "rs", false, nil),
		pod("ha", "other", "rs-other", true, nil),
		// ha/client-go: another library's Lease, with another
		// component's Events: not listed.
		lease("ha", "client-go", "someone", 1, t0, now, nil),
		event("ha", "e4", "client-go", "LeaderElection", "someone became leader", t0, "kube-controller-manager"),
		// ops/stale: its holder (term 5) has not published; the slice is
		// the previous holder's, known by its Events; the Lease expired.
		lease("ops", "stale", "replica-9", 5, t0, t0.Add(10*time.Second), nil),
		slice("ops", "api-fastover-ipv4", "api", "replica-8", "4", "planned", "10.0.0.8"),
		event("ops", "e5", "stale", "LeaderElection", "replica-8 became leader", t0, eventComponent),
		// ops/free: released by its last holder, labelled Pods without
		// a controller.
		lease("ops", "free", "", 2, t0, t0, nil),
		event("ops", "e6", "free", "LeaderElection", "replica-1 became leader", t0, eventComponent),
	}
	client := fake.NewClientset(objs...)

	got, err := List(context.Background(), client, "", now)
	require.NoError(t, err)
	require.Len(t, got, 3)

	ctl := got[0]
	assert.Equal(t, "ha", ctl.Namespace)
	assert.Equal(t, "ctl", ctl.Lease)
	assert.Equal(t, "replica-2", ctl.Holder)
	assert.Equal(t, int32(3), ctl.Term)
	assert.False(t, ctl.Expired)
	assert.Equal(t, "crash takeover", ctl.HandOver)
	assert.Equal(t, &Published{Service: "ctl", Identity: "replica-2", Term: 3, Addresses: []string{"10.0.0.2"}, IsHolder: true, handOver: "unplanned"}, ctl.Published)
	assert.Equal(t, &Replica{Pod: "ha/ctl-2", Node: "node-ctl-2", Phase: "Running", Ready: true}, ctl.HolderPod)
	assert.Equal(t, []Replica{
		{Pod: "ha/ctl-1", Node: "node-ctl-1", Phase: "Running", Ready: true},
		{Pod: "ha/ctl-3", Node: "node-ctl-3", Phase: "Running"},
	}, ctl.Standbys)
	require.Len(t, ctl.Handovers, 3)
	assert.Equal(t, "LeaderElection", ctl.Handovers[0].Reason)
	assert.Equal(t, "replica-1 became leader", ctl.Handovers[0].Message)
	assert.Empty(t, ctl.Problems)

	free, stale := got[1], got[2]
	assert.Equal(t, "free", free.Lease)
	assert.Equal(t, []string{"no leader: the Lease is free"}, free.Problems)
	assert.Nil(t, free.Published)

	assert.Equal(t, "stale", stale.Lease)
	assert.True(t, stale.Expired)
	assert.Equal(t, []string{
		"no leader: the Lease of replica-9 expired",
		"Service api publishes replica-8 (term 4), not the holder replica-9 (term 5)",
	}, stale.Problems)
	assert.Empty(t, stale.HandOver, "unknown: its holder left no trace")

	// One namespace.
	got, err = List(context.Background(), client, "ops", now)
	require.NoError(t, err)
	assert.Len(t, got, 2)
}

func TestListStandbysAndProblems(t *testing.T) {
	now := t0.Add(time.Minute)
	rec := `{"holder":"a","term":1,"namespace":"x","pod":"p-a","uid":"uid-p-a","container":"c","since":"2026-12-05T10:00:00Z"}`
	labelled := map[string]string{"app": "ctl"}
	terminating := pod("x", "p-b", "", true, labelled)
	terminating.DeletionTimestamp = &metav1.Time{Time: now}
	terminating.Finalizers = []string{"hold"}

	// Without a controller, the siblings are the Pods of the same
	// labels; a Terminating standby is not a ready one.
	client := fake.NewClientset(
		lease("x", "l", "a", 1, t0, now, map[string]string{leader.AnnotationHolderPod: rec}),
		pod("x", "p-a", "", true, labelled), terminating, pod("x", "unrelated", "", true, map[string]string{"app": "other"}),
	)
	got, err := List(context.Background(), client, "x", now)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, []Replica{{Pod: "x/p-b", Node: "node-p-b", Phase: "Running", Ready: true, Terminating: true}}, got[0].Standbys)
	assert.Equal(t, []string{"no standby is ready: a failover has no replica to go to"}, got[0].Problems)

	// The recorded Pod is gone, or of another term: no standbys known.
	client = fake.NewClientset(lease("x", "l", "a", 1, t0, now, map[string]string{leader.AnnotationHolderPod: rec}))
	got, err = List(context.Background(), client, "x", now)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, &Replica{Pod: "x/p-a", Missing: true}, got[0].HolderPod)
	assert.Nil(t, got[0].Standbys)
	assert.Equal(t, []string{"the holder's Pod x/p-a does not exist"}, got[0].Problems)

	client = fake.NewClientset(lease("x", "l", "b", 2, t0, now, map[string]string{leader.AnnotationHolderPod: rec}))
	got, err = List(context.Background(), client, "x", now)
	require.NoError(t, err)
	require.Len(t, got, 1, "still fastover's: the annotation")
	assert.Nil(t, got[0].HolderPod, "a record of another holder's term")

	// A record that does not parse is not trusted, and not an error.
	client = fake.NewClientset(lease("x", "l", "a", 1, t0, now, map[string]string{leader.AnnotationHolderPod: "{"}))
	got, err = List(context.Background(), client, "x", now)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Nil(t, got[0].HolderPod)
}

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/internal/netns"
	"github.com/fastover/fastover/leader"
)

// migPodNode is the node the migrated replicas' Pods are bound to. No kwok
// process manages it: kwok would give the Pods addresses of its own, and
// their statuses here are the test's (it plays their kubelet), so that
// each Pod's address is the one its replica binds (192.0.2.N).
const migPodNode = "node-pods"

// endpointSliceController is the managed-by value of the endpointslice
// controller's slices: a selector Service's.
const endpointSliceController = "endpointslice-controller.k8s.io"

// TestKubeProxyMigration watches the migration from a Service that selects
// a controller's Pods to fastover (issue 16 §3) through kube-proxy's
// ClusterIP (nftables mode), in a network namespace of the test's own. A
// Service with a selector sends calls to every replica, standbys included:
// that is the seed's worry. With --remove-selector the leader removes the
// selector and takes the Service's endpoints over; the test measures, as a
// client calling the ClusterIP every 10 ms sees it, how long after the
// takeover standbys still answer, and why.
//
// The story, as a cluster would play it: three Pods labelled for the
// Service's selector, Ready, bound to a node and with the addresses their
// replicas bind (the endpointslice controller publishes the three). The
// old version of the controller runs in them: fastover-example without
// --remove-selector, which elects a leader but leaves the Service to its
// selector, so every replica answers calls through the ClusterIP (the
// "before" state; each must answer). Then the new version rolls out in
// place, one Pod at a time, as a container image update does: the Pod goes
// NotReady, its process stops (SIGTERM) and starts again with
// --remove-selector, and the Pod is Ready again once it serves. The
// standbys go first and the old leader last, so that the Lease passes to a
// replica of the new version while the selector still sends calls to all
// three, the worst case for a standby answering (the old leader first
// would hand the Lease to a replica of the old version). The new leader
// removes the selector, writes its EndpointSlice and deletes the others;
// kube-proxy's next sync drops the standbys.
//
// It runs with kube-proxy's default --iptables-min-sync-period (1s) and
// with 0s, and logs, from the new leader's acquire time (the Lease's):
// when the test saw the selector removed, the leader's slice appear and the
// Service name the leader alone (its watches); kube-proxy's sync that
// dropped the standbys (its log); and the last call a standby answered,
// relative to each of them. It asserts what holds: before the rollout all
// three replicas answer; no standby answers a call sent after that sync
// ended, and every call sent after it is answered by the new leader.
func TestKubeProxyMigration(t *testing.T) {
	ns := netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	// The Pods' node has no kubelet (nor kwok) renewing its Lease: a
	// grace period longer than the test keeps the node lifecycle
	// controller from marking it, and its Pods, not ready.
	env := cluster.Start(t, cluster.Options{Netns: ns, Nodes: []string{"node-a"}, NodeMonitorGracePeriod: 10 * time.Minute})
	const namespace = "migrate"
	require.NoError(t, env.CreateNamespace(ctx, namespace, nil))
	// Every replica of the old version serves (a selector Service
	// spreads the calls over them), and a standby of the new one answers
	// too: the test follows who answers, not what a standby refuses.
	f := newFleet(t, env, namespace, "ctl", shortDurations, "--standby=answer")
	f.BindPublished = true
	f.Name = "ctl" // replica ctl-N runs in Pod ctl-N
	m := &migRig{t: t, env: env, f: f, selector: map[string]string{"app": "ctl"}, oldArgs: slices.Clone(f.Args)}
	require.NoError(t, f.CreateService(ctx, m.selector))
	require.NoError(t, m.createPods(ctx, 3))

	client := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			return env.DialContext(ctx, network, address)
		},
	}}

	var rows []migRow
	for _, sync := range []struct {
		name string
		min  time.Duration
	}{{"1s", 0}, {"0s", kubeproxy.NoMinSync}} {
		row := m.migrate(ctx, client, sync.name, sync.min)
		t.Logf("min-sync %s: %s", sync.name, row)
		rows = append(rows, row)
	}
	t.Logf("migration from a selector Service through kube-proxy's ClusterIP (nftables), lease %v, client every 10 ms; times from the new leader's acquire time (the Lease's)\n%s(the test took %v)",
		shortDurations, migTable(rows), time.Since(start).Round(time.Second))
}

// migRig is the control plane, the Service and its Pods, and the replicas
// a migration runs on.
type migRig struct {
	t        *testing.T
	env      *cluster.Env
	f        *fleet.Fleet
	selector map[string]string
	// oldArgs are the old version's flags (no --remove-selector).
	oldArgs []string
}

// createPods creates the node the Pods are bound to and n Pods, named as
// the fleet names its replicas, labelled for the selector, Ready, with the
// addresses the replicas publish and bind.
func (m *migRig) createPods(ctx context.Context, n int) error {
	c := m.env.Client.CoreV1()
	if _, err := c.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   migPodNode,
		Labels: map[string]string{corev1.LabelHostname: migPodNode, corev1.LabelOSStable: "linux"},
	}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", migPodNode, err)
	}
	// kube-controller-manager's node controllers write the new node too.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.Nodes().Get(ctx, migPodNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = c.Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s Ready: %w", migPodNode, err)
	}
	for i := 1; i <= n; i++ {
		r := fleet.Replica{ID: fmt.Sprintf("%s-%d", m.f.Name, i), N: i}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: r.ID, Labels: m.selector},
			Spec: corev1.PodSpec{
				NodeName: migPodNode,
				Containers: []corev1.Container{{Name: "ctl", Image: "fastover-example:old",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(m.f.Port)}}}},
			},
		}
		if _, err := c.Pods(m.f.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", r.ID, err)
		}
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			return m.setRunning(ctx, r)
		}); err != nil {
			return fmt.Errorf("pod %s status: %w", r.ID, err)
		}
	}
	return nil
}

// setRunning writes the status of replica r's Pod: running, Ready, with
// the replica's address.
func (m *migRig) setRunning(ctx context.Context, r fleet.Replica) error {
	pods := m.env.Client.CoreV1().Pods(m.f.Namespace)
	pod, err := pods.Get(ctx, r.ID, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     r.Address(),
		PodIPs:    []corev1.PodIP{{IP: r.Address()}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "ctl", Image: "fastover-example:old", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// setReady sets the Ready and ContainersReady conditions of a replica's
// Pod, as its kubelet would when its container stops and when it serves
// again.
func (m *migRig) setReady(ctx context.Context, id string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pods := m.env.Client.CoreV1().Pods(m.f.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				pod.Status.Conditions[i].Status = status
				pod.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		for i := range pod.Status.ContainerStatuses {
			pod.Status.ContainerStatuses[i].Ready = ready
		}
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

// reset brings the Service back to the state before a migration: no
// replica runs, no Lease, the selector set, and only the endpointslice
// controller's slice, with the three Pods.
func (m *migRig) reset(ctx context.Context) {
	t := m.t
	t.Helper()
	f := m.f
	for _, r := range f.Replicas {
		r.Proc.Stop(syscall.SIGKILL, 0)
	}
	c := m.env.Client
	err := c.CoordinationV1().Leases(f.Namespace).Delete(ctx, f.Lease, metav1.DeleteOptions{})
	require.True(t, err == nil || apierrors.IsNotFound(err), "delete the Lease: %v", err)
	svc, err := c.CoreV1().Services(f.Namespace).Get(ctx, f.Service, metav1.GetOptions{})
	require.NoError(t, err)
	if len(svc.Spec.Selector) == 0 {
		patch := fmt.Sprintf(`{"spec":{"selector":{"app":%q}}}`, m.selector["app"])
		_, err := c.CoreV1().Services(f.Namespace).Patch(ctx, f.Service, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err, "set the selector again")
	}
	// The leader's Endpoints object is labelled for the mirroring
	// controller to skip; the endpoints controller makes its own again.
	err = c.CoreV1().Endpoints(f.Namespace).Delete(ctx, f.Service, metav1.DeleteOptions{})
	require.True(t, err == nil || apierrors.IsNotFound(err), "delete the Endpoints object: %v", err)
	want := []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}
	var last []discoveryv1.EndpointSlice
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sl, err := f.Slices(ctx)
		if err != nil {
			return false, nil
		}
		last = sl
		ok := true
		for _, s := range sl {
			if s.Labels[discoveryv1.LabelManagedBy] != endpointSliceController {
				ok = false
				_ = c.DiscoveryV1().EndpointSlices(f.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
			}
		}
		return ok && slices.Equal(fleet.PublishedAddresses(sl), want), nil
	}), "the endpointslice controller publishes the three Pods: slices %v", sliceSummary(last))
}

// startOld starts the old version (no --remove-selector) in every Pod and
// returns its leader, once every replica serves.
func (m *migRig) startOld(ctx context.Context) string {
	t := m.t
	t.Helper()
	f := m.f
	f.Args = slices.Clone(m.oldArgs)
	if len(f.Replicas) == 0 {
		require.NoError(t, f.Add(3))
	} else {
		for _, r := range f.Replicas {
			r.Proc = nil // a new command line
			require.NoError(t, f.Start(r))
		}
	}
	var holder string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		h, _, err := f.Holder(ctx)
		if err != nil || h == "" {
			return false, nil
		}
		for _, r := range f.Replicas {
			if code, id, err := f.Get(r.Address(), "/"); err != nil || code != http.StatusOK || id != r.ID {
				return false, nil
			}
		}
		holder = h
		return true, nil
	}), "the old version elects a leader and every replica serves")
	return holder
}

// roll restarts replica r with the new version's flags, in place: its Pod
// goes NotReady, its process stops (SIGTERM) and starts again, and once it
// serves its Pod is Ready again. It returns when the process was signalled.
func (m *migRig) roll(ctx context.Context, r *fleet.Replica, newArgs []string) time.Time {
	t := m.t
	t.Helper()
	f := m.f
	require.NoError(t, m.setReady(ctx, r.ID, false))
	signalled := time.Now()
	require.NoError(t, r.Proc.Signal(syscall.SIGTERM))
	exited, err := r.Proc.WaitExit(15 * time.Second)
	require.True(t, exited, "%s did not exit after SIGTERM", r.ID)
	require.NoError(t, err, "%s: a planned stop exits cleanly", r.ID)
	f.Args = newArgs
	r.Proc = nil
	require.NoError(t, f.Start(r))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		code, id, err := f.Get(r.Address(), "/")
		return err == nil && code == http.StatusOK && id == r.ID, nil
	}), "%s serves again", r.ID)
	require.NoError(t, m.setReady(ctx, r.ID, true))
	return signalled
}

// migRow is one migration as the client saw it. The durations are from
// the new leader's acquire time (the Lease's); zero means not seen.
type migRow struct {
	setting   string
	old, next string
	// before counts the answers, by replica, before the rollout.
	before map[string]int
	// signalled is when the old leader got SIGTERM; selector, slice and
	// only when the test's watches saw the selector removed, the new
	// leader's slice written and the Service name the leader alone;
	// syncStart and syncDone the start and end of kube-proxy's sync that
	// dropped the standbys (its log).
	signalled, selector, slice, only, syncStart, syncDone time.Duration
	// calls is every call of the rollout; standbyAfter counts the
	// standbys' answers to calls sent after the acquire time; lastSent and
	// lastDone are the latest such call's send and answer times (zero
	// if none).
	calls, standbyAfter int
	lastSent, lastDone  time.Duration
	// failedAfter counts the calls sent after the acquire time that got
	// no answer, by kind.
	failedAfter map[string]int
	// failedBefore counts the calls of the rollout, sent before the
	// acquire time, that got no answer (to a replica restarting).
	failedBefore int
	// byStandby counts the standbys' answers after the acquire time, by
	// replica; lastFailed is the latest failed call's send time.
	byStandby  map[string]int
	lastFailed time.Duration
	// syncs are kube-proxy's IPv4 syncs from 2 s before the acquire time
	// to the one that dropped the standbys: start and endpoints.
	syncs []string
}

func (r migRow) String() string {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	var before []string
	for _, id := range slices.Sorted(maps.Keys(r.before)) {
		before = append(before, fmt.Sprintf("%s %d", id, r.before[id]))
	}
	var failed []string
	for _, k := range slices.Sorted(maps.Keys(r.failedAfter)) {
		failed = append(failed, fmt.Sprintf("%d %s", r.failedAfter[k], k))
	}
	last := "none"
	if r.standbyAfter > 0 {
		last = fmt.Sprintf("sent %v, answered %v (sent %v after the selector's removal, %v after the Service named the leader alone, %v after kube-proxy's sync ended)",
			ms(r.lastSent), ms(r.lastDone), ms(r.lastSent-r.selector), ms(r.lastSent-r.only), ms(r.lastSent-r.syncDone))
	}
	var by []string
	for _, id := range slices.Sorted(maps.Keys(r.byStandby)) {
		by = append(by, fmt.Sprintf("%s %d", id, r.byStandby[id]))
	}
	if len(failed) > 0 {
		failed = append(failed, fmt.Sprintf("the last sent %v", ms(r.lastFailed)))
	}
	return fmt.Sprintf("%s to %s; before the rollout, answers by replica: %s; the old leader's SIGTERM %v, selector removed %v, leader's slice %v, the leader alone %v, kube-proxy's sync that dropped the standbys %v to %v (its syncs from -2s: %s); %d calls; %d standby answers to calls sent after the acquire time (%s), the last %s; %d calls failed before the acquire time (replicas restarting), after it: %s",
		r.old, r.next, strings.Join(before, ", "), ms(r.signalled), ms(r.selector), ms(r.slice), ms(r.only), ms(r.syncStart), ms(r.syncDone),
		strings.Join(r.syncs, ", "), r.calls, r.standbyAfter, cmp.Or(strings.Join(by, ", "), "none"), last, r.failedBefore, cmp.Or(strings.Join(failed, ", "), "none"))
}

// migWatch records, from watches, when the Service lost its selector and
// every change of its EndpointSlices.
type migWatch struct {
	mu         sync.Mutex
	noSelector time.Time // first seen without selector
	byName     map[string]discoveryv1.EndpointSlice
	changes    []migSlices
}

// migSlices is the Service's slices after one change.
type migSlices struct {
	at time.Time
	// addrs are the ready addresses of every slice, sorted; leader says
	// whether a slice of fastover's (the leader's) is among them.
	addrs  []string
	leader bool
}

func watchMigration(ctx context.Context, t *testing.T, f *fleet.Fleet) *migWatch {
	t.Helper()
	w := &migWatch{byName: map[string]discoveryv1.EndpointSlice{}}
	sw, err := f.Env.Client.CoreV1().Services(f.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + f.Service})
	require.NoError(t, err)
	ew, err := f.Env.Client.DiscoveryV1().EndpointSlices(f.Namespace).Watch(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + f.Service,
	})
	require.NoError(t, err)
	go func() {
		defer sw.Stop()
		for ev := range sw.ResultChan() {
			if svc, ok := ev.Object.(*corev1.Service); ok && len(svc.Spec.Selector) == 0 {
				w.mu.Lock()
				if w.noSelector.IsZero() {
					w.noSelector = time.Now()
				}
				w.mu.Unlock()
			}
		}
	}()
	go func() {
		defer ew.Stop()
		for ev := range ew.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			at := time.Now()
			w.mu.Lock()
			if ev.Type == "DELETED" {
				delete(w.byName, s.Name)
			} else {
				w.byName[s.Name] = *s
			}
			c := migSlices{at: at, addrs: fleet.PublishedAddresses(slices.Collect(maps.Values(w.byName)))}
			for _, s := range w.byName {
				c.leader = c.leader || s.Labels[discoveryv1.LabelManagedBy] == leader.ManagedBy
			}
			w.changes = append(w.changes, c)
			w.mu.Unlock()
		}
	}()
	return w
}

// times returns when the selector was seen removed, when the leader's
// slice first appeared and when the Service first named addr alone, each
// after since (zero if not seen).
func (w *migWatch) times(since time.Time, addr string) (selector, slice, only time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes {
		if c.at.Before(since) {
			continue
		}
		if slice.IsZero() && c.leader {
			slice = c.at
		}
		if only.IsZero() && slices.Equal(c.addrs, []string{addr}) {
			only = c.at
		}
	}
	return w.noSelector, slice, only
}

// migrate runs one migration with kube-proxy at the min-sync setting and
// returns what the client saw.
func (m *migRig) migrate(ctx context.Context, client *http.Client, setting string, minSync time.Duration) migRow {
	t := m.t
	t.Helper()
	f := m.f
	m.reset(ctx)
	kp, err := kubeproxy.Start(m.env, kubeproxy.Options{Node: "node-a", MinSyncPeriod: minSync, Name: "kube-proxy-migration-" + setting})
	require.NoError(t, err)
	defer func() { assert.NoError(t, kp.Stop(ctx)) }()
	vip, err := kp.WaitService(ctx, f.Namespace, f.Service, 30*time.Second)
	require.NoError(t, err)
	old := m.startOld(ctx)

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w := watchMigration(wctx, t, f)
	mc := startCalls(&vipClient{client: client, url: "http://" + vip + ":80/"})
	ended := false
	defer func() {
		if !ended {
			mc.end()
		}
	}()

	// Before: the selector sends calls to every replica.
	time.Sleep(time.Second)
	row := migRow{setting: setting, old: old, before: map[string]int{}}
	rollout := time.Now()
	for _, a := range mc.snapshot() {
		if a.err == nil {
			row.before[a.id]++
		}
	}
	for _, r := range f.Replicas {
		assert.Positive(t, row.before[r.ID], "min-sync %s: before the rollout the selector Service sends calls to %s too", setting, r.ID)
	}

	// The rollout of the new version: the standbys first, the old
	// leader last.
	newArgs := append(slices.Clone(m.oldArgs), "--remove-selector")
	for _, r := range f.Replicas {
		if r.ID != old {
			m.roll(ctx, r, newArgs)
		}
	}
	signalled := m.roll(ctx, f.ByID(old), newArgs)

	lease, err := f.Env.Client.CoordinationV1().Leases(f.Namespace).Get(ctx, f.Lease, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, lease.Spec.HolderIdentity)
	require.NotNil(t, lease.Spec.AcquireTime)
	next := *lease.Spec.HolderIdentity
	acquired := lease.Spec.AcquireTime.Time
	nr := f.ByID(next)
	require.NotNil(t, nr, "the Lease's holder %q is a replica", next)
	// Every replica runs the new version now: a standby takes the Lease
	// (it watches the Lease) within milliseconds of its release, usually
	// before the old leader runs again, which may win it too.
	require.True(t, acquired.After(signalled), "the Lease was acquired (%v) after the old leader's SIGTERM (%v)", acquired, signalled)
	row.next = next

	// kube-proxy's sync that dropped the standbys: the first, begun after
	// the acquire time, with fewer endpoints than before it (the three
	// Pods, then the leader alone; on the way the Service has as many
	// addresses or more).
	var drop kubeproxy.Sync
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		drop = migDropSync(t, kp, acquired)
		return !drop.Start.IsZero(), nil
	}), "min-sync %s: kube-proxy never dropped the standbys", setting)
	// The client goes on calling: every answer must now name the leader.
	time.Sleep(1500 * time.Millisecond)
	answers := mc.end()
	ended = true
	stopWatch()

	sel, slice, only := w.times(acquired.Add(-time.Second), nr.Address())
	rel := func(at time.Time) time.Duration {
		if at.IsZero() {
			return 0
		}
		return at.Sub(acquired)
	}
	row.signalled, row.selector, row.slice, row.only = rel(signalled), rel(sel), rel(slice), rel(only)
	row.syncStart, row.syncDone = rel(drop.Start), rel(drop.Done)
	row.failedAfter, row.byStandby = map[string]int{}, map[string]int{}
	syncs, err := kp.Syncs()
	require.NoError(t, err)
	for _, s := range syncs {
		if s.Family == "IPv4" && !s.Start.Before(acquired.Add(-2*time.Second)) && !s.Start.After(drop.Start) {
			row.syncs = append(row.syncs, fmt.Sprintf("%v (%d endpoints)", s.Start.Sub(acquired).Round(time.Millisecond), s.Endpoints))
		}
	}
	for _, a := range answers {
		if a.sent.Before(rollout) {
			continue
		}
		row.calls++
		switch {
		case a.err != nil && a.sent.Before(acquired):
			row.failedBefore++
		case a.err != nil:
			row.failedAfter[errKind(a.err)]++
			row.lastFailed = a.sent.Sub(acquired)
			assert.True(t, a.sent.Before(drop.Done), "min-sync %s: the call sent %v after the acquire time, after kube-proxy's sync dropped the standbys, failed: %v",
				setting, a.sent.Sub(acquired), a.err)
		case a.id != next && a.sent.After(acquired):
			row.standbyAfter++
			row.byStandby[a.id]++
			row.lastSent, row.lastDone = a.sent.Sub(acquired), max(row.lastDone, a.done.Sub(acquired))
			assert.True(t, a.sent.Before(drop.Done), "min-sync %s: standby %s answered a call sent %v after the acquire time, after kube-proxy's sync that dropped the standbys ended (%v)",
				setting, a.id, a.sent.Sub(acquired), drop.Done.Sub(acquired))
		}
	}
	assert.NotZero(t, sel, "min-sync %s: the selector was not seen removed", setting)
	assert.NotZero(t, only, "min-sync %s: the Service was not seen naming %s alone", setting, next)
	assert.Less(t, row.syncDone, 10*time.Second, "min-sync %s: kube-proxy dropped the standbys long after the takeover", setting)
	return row
}

// migDropSync finds kube-proxy's first IPv4 sync begun after since with
// fewer endpoints than the last one before since; zero if none yet.
func migDropSync(t *testing.T, kp *kubeproxy.Proxy, since time.Time) kubeproxy.Sync {
	t.Helper()
	syncs, err := kp.Syncs()
	require.NoError(t, err)
	before := -1
	for _, s := range syncs {
		if s.Family != "IPv4" || s.Endpoints < 0 {
			continue
		}
		if s.Start.Before(since) {
			before = s.Endpoints
			continue
		}
		if before >= 0 && s.Endpoints < before {
			return s
		}
	}
	return kubeproxy.Sync{}
}

// migTable is the rows as a table.
func migTable(rows []migRow) string {
	var b strings.Builder
	ms := func(d time.Duration) string { return fmt.Sprintf("%d", d.Round(time.Millisecond).Milliseconds()) }
	fmt.Fprintf(&b, "%-8s %8s %8s %8s %8s %13s %8s %9s %9s %9s %9s\n", "min-sync", "SIGTERM", "selector", "slice", "alone", "kp sync", "standby", "last", "-selector", "-alone", "-kp done")
	for _, r := range rows {
		last, lsel, lalone, lsync := "-", "-", "-", "-"
		if r.standbyAfter > 0 {
			last, lsel, lalone, lsync = ms(r.lastSent), ms(r.lastSent-r.selector), ms(r.lastSent-r.only), ms(r.lastSent-r.syncDone)
		}
		fmt.Fprintf(&b, "%-8s %8s %8s %8s %8s %13s %8d %9s %9s %9s %9s\n", r.setting, ms(r.signalled), ms(r.selector), ms(r.slice), ms(r.only),
			ms(r.syncStart)+"-"+ms(r.syncDone), r.standbyAfter, last, lsel, lalone, lsync)
	}
	b.WriteString("(ms from the acquire time: the old leader's SIGTERM; the selector seen removed, the leader's slice, the Service naming the leader alone; kube-proxy's sync that dropped the standbys;\n" +
		" standby answers to calls sent after the acquire time; the last such call's send time, and it relative to the selector's removal, the leader alone and the sync's end)\n")
	return b.String()
}

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/leader"
)

// TestLeaderThreeReplicas: three replicas, one leader, and the Service's
// EndpointSlices list exactly it; every replica is ready.
func TestLeaderThreeReplicas(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, f := startFleet(ctx, t, 3, shortDurations)

	id := waitServing(ctx, t, f, "", 30*time.Second)
	holder, _, err := f.Holder(ctx)
	require.NoError(t, err)
	assert.Equal(t, holder, id, "the Service answers from the Lease holder")

	sl, err := f.Slices(ctx)
	require.NoError(t, err)
	require.Len(t, sl, 1)
	assert.Equal(t, leader.ManagedBy, sl[0].Labels[discoveryv1.LabelManagedBy])
	assert.Equal(t, []string{f.ByID(id).Address()}, fleet.PublishedAddresses(sl))
	assert.Equal(t, id, sl[0].Annotations[leader.AnnotationIdentity])
	require.Len(t, sl[0].OwnerReferences, 1)
	assert.Equal(t, "Service", sl[0].OwnerReferences[0].Kind)

	// Probes and metrics, as a kubelet and Prometheus would see them: a
	// replica just started may take a moment to become ready.
	for _, r := range f.Replicas {
		want := []string{"fastover_leader_is_leader 0", "fastover_leader_transitions_total 0"}
		if r.ID == id {
			want = []string{"fastover_leader_is_leader 1", "fastover_leader_transitions_total 1", "fastover_leader_endpoint_publish_seconds_count 1"}
		}
		var last string
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			ready, _, err := f.Get(r.Address(), "/readyz")
			if err != nil || ready != 200 {
				last = fmt.Sprintf("readyz %d %v", ready, err)
				return false, nil
			}
			healthy, _, err := f.Get(r.Address(), "/healthz")
			if err != nil || healthy != 200 {
				last = fmt.Sprintf("healthz %d %v", healthy, err)
				return false, nil
			}
			_, metrics, err := f.Get(r.Address(), "/metrics")
			for _, w := range want {
				if err != nil || !strings.Contains(metrics, w) {
					last = "metrics lack " + w
					return false, nil
				}
			}
			return true, nil
		})
		assert.NoError(t, err, "%s (leader: %t): %s", r.ID, r.ID == id, last)
	}
}

// TestLeaderMigration moves a running Service from selector mode, with
// real kube-controller-manager managing its EndpointSlices and Endpoints,
// to the leader's endpoint: a Service that still has a selector is
// reported and left alone; with --remove-selector only the leader's slice
// remains, and stays alone.
func TestLeaderMigration(t *testing.T) {
	t.Parallel()
	env := cluster.Start(t, cluster.Options{Nodes: []string{"node-a", "node-b"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "migrate"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	f := newFleet(t, env, ns, "ctl", shortDurations)
	// The replicas run with the Role the library documents, nothing more.
	kubeconfig, err := env.KubeconfigFor(ctx, ns, "ctl", fleet.LeaderRole)
	require.NoError(t, err)
	f.Kubeconfig = kubeconfig
	// The old way: a Deployment behind a Service that selects its pods.
	require.NoError(t, f.CreateService(ctx, map[string]string{"app": "old-ctl"}))
	old := deployment("old-ctl", nil)
	old.Spec.Replicas = ptr.To[int32](3)
	_, err = env.Client.AppsV1().Deployments(ns).Create(ctx, old, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		sl, err := f.Slices(ctx)
		_, eerr := env.Client.CoreV1().Endpoints(ns).Get(ctx, "ctl", metav1.GetOptions{})
		return err == nil && eerr == nil && len(fleet.PublishedAddresses(sl)) == 3, nil
	}), "kube-controller-manager never published the three pods")
	sl, err := f.Slices(ctx)
	require.NoError(t, err)
	t.Logf("before: %d slice(s) managed by %s, %d addresses", len(sl), sl[0].Labels[discoveryv1.LabelManagedBy], len(fleet.PublishedAddresses(sl)))

	t.Run("a Service with a selector is reported and left alone", func(t *testing.T) {
		require.NoError(t, f.Add(1))
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			events, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=ctl,reason=ServiceHasSelector"})
			return err == nil && len(events.Items) > 0 && strings.Contains(events.Items[0].Message, "Remove the selector"), nil
		}), "no ServiceHasSelector Event on the Service")
		sl, err := f.Slices(ctx)
		require.NoError(t, err)
		assert.Len(t, fleet.PublishedAddresses(sl), 3, "the controller's endpoints are untouched")
		for _, s := range sl {
			assert.NotEqual(t, leader.ManagedBy, s.Labels[discoveryv1.LabelManagedBy])
		}
		f.Replicas[0].Proc.Stop(syscall.SIGTERM, 10*time.Second)
	})

	t.Run("with --remove-selector only the leader's endpoint remains", func(t *testing.T) {
		// Three new replicas (a rollout of the new version), allowed to
		// remove the selector.
		f.Args = append(f.Args, "--remove-selector")
		seen := mustWatch(ctx, t, f)
		start := time.Now()
		require.NoError(t, f.Add(3))
		id := waitServing(ctx, t, f, "", 30*time.Second)
		addr := f.ByID(id).Address()
		svc, err := env.Client.CoreV1().Services(ns).Get(ctx, "ctl", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Empty(t, svc.Spec.Selector)
		// The old endpoints go: the endpointslice controller's slices,
		// the endpoints controller's addresses in the Endpoints object
		// (which the leader takes over, labelled skip-mirror, with its
		// own address), and the slice the mirroring controller may make
		// of that object between the selector's removal and the
		// takeover.
		only := func(ctx context.Context) (bool, []discoveryv1.EndpointSlice, error) {
			sl, err := f.Slices(ctx)
			if err != nil {
				return false, nil, err
			}
			v, eerr := viewEndpoints(ctx, f)
			if eerr != nil && !apierrors.IsNotFound(eerr) {
				return false, nil, eerr
			}
			ok := len(sl) == 1 && sl[0].Labels[discoveryv1.LabelManagedBy] == leader.ManagedBy &&
				slices.Equal(fleet.PublishedAddresses(sl), []string{addr}) && eerr == nil && slices.Equal(v.addrs, []string{addr})
			return ok, sl, nil
		}
		// Settled means so for a second in a row: the mirrored slice can
		// show up a moment after the first clean state.
		var (
			last     []discoveryv1.EndpointSlice
			since    time.Time
			relapses int
		)
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
			ok, sl, err := only(ctx)
			last = sl
			switch {
			case err != nil:
				return false, err
			case !ok && !since.IsZero():
				relapses++
				since = time.Time{}
			case ok && since.IsZero():
				since = time.Now()
			}
			return ok && time.Since(since) >= time.Second, nil
		})
		require.NoError(t, err, "the old endpoints stay: slices %v", sliceSummary(last))
		assert.LessOrEqual(t, relapses, 3, "the old endpoints came back %d times", relapses)
		var sets []string
		for _, p := range seen.Snapshot() {
			sets = append(sets, fmt.Sprintf("%v at +%v", p.Addrs, p.At.Sub(start).Round(time.Millisecond)))
		}
		t.Logf("only %s's endpoint %v after the new replicas started (old endpoints back %d times after a clean state); published addresses seen: %s",
			id, since.Sub(start).Round(time.Millisecond), relapses, strings.Join(sets, "; "))
		// It must stay so: the endpointslice and mirroring controllers
		// have had their chances to bring the old endpoints back.
		deadline := time.Now().Add(8 * time.Second)
		for time.Now().Before(deadline) {
			ok, sl, err := only(ctx)
			require.NoError(t, err)
			require.True(t, ok, "old endpoints came back: slices %v", sliceSummary(sl))
			time.Sleep(200 * time.Millisecond)
		}
	})
}

func sliceSummary(sl []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range sl {
		out = append(out, s.Name+"("+s.Labels[discoveryv1.LabelManagedBy]+"):"+strings.Join(fleet.PublishedAddresses([]discoveryv1.EndpointSlice{s}), ","))
	}
	return out
}

// TestLeaderFailover kills, freezes and stops the leader; a client that
// keeps resolving the Service's EndpointSlices and calling GET / must
// reach the new leader. It logs the time to the first answer from it.
func TestLeaderFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := shortDurations
	_, f := startFleet(ctx, t, 3, d)

	for _, tc := range []struct {
		name  string
		sig   syscall.Signal
		bound time.Duration
	}{
		{"SIGTERM: planned handover", syscall.SIGTERM, 2 * time.Second},
		{"SIGKILL: the leader dies", syscall.SIGKILL, d.Lease + 3*time.Second},
		{"SIGSTOP: the leader freezes", syscall.SIGSTOP, d.Lease + 3*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := waitServing(ctx, t, f, "", 30*time.Second)
			r := f.ByID(old)
			require.NoError(t, r.Proc.Signal(tc.sig))
			signalled := time.Now()
			id := waitServing(ctx, t, f, old, tc.bound)
			took := time.Since(signalled)
			t.Logf("%s: %s answers for the Service %v after %s was signalled (lease %v)", tc.sig, id, took.Round(time.Millisecond), old, d.Lease)

			switch tc.sig {
			case syscall.SIGSTOP:
				// The frozen ex-leader wakes up: it must not publish
				// itself again, and it exits.
				log := mustWatch(ctx, t, f)
				require.NoError(t, r.Proc.Signal(syscall.SIGCONT))
				exited, err := r.Proc.WaitExit(10 * time.Second)
				require.True(t, exited, "the woken ex-leader did not exit")
				assert.Error(t, err, "an ex-leader exits with an error status")
				time.Sleep(d.Retry)
				for _, p := range log.Snapshot() {
					assert.NotContains(t, p.Addrs, r.Address(), "the ex-leader was published again at %v", p.At)
				}
				assert.Contains(t, r.Proc.Tail(50), "leadership lost")
			case syscall.SIGTERM:
				exited, err := r.Proc.WaitExit(10 * time.Second)
				require.True(t, exited, "the leader did not exit after SIGTERM")
				assert.NoError(t, err, "a planned stop exits cleanly")
			}
			r.Proc.Stop(syscall.SIGKILL, 0)
			require.NoError(t, f.Start(r)) // back as a standby, as the kubelet would
		})
	}
}

// TestLeaderAPIServerRestart: kube-apiserver is down for less than the
// renew deadline; the leader stays the leader and its endpoint stays.
func TestLeaderAPIServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, f := startFleet(ctx, t, 3, fleet.Durations{Lease: leader.DefaultLeaseDuration, Renew: leader.DefaultRenewDeadline, Retry: leader.DefaultRetryPeriod})
	id := waitServing(ctx, t, f, "", 30*time.Second)
	_, transitions, err := f.Holder(ctx)
	require.NoError(t, err)

	down := time.Now()
	require.NoError(t, env.StopComponent(cluster.APIServer))
	require.NoError(t, env.StartComponent(cluster.APIServer))
	t.Logf("kube-apiserver was down for %v (renew deadline %v)", time.Since(down).Round(time.Millisecond), leader.DefaultRenewDeadline)
	require.Less(t, time.Since(down), leader.DefaultRenewDeadline, "the restart took too long to test this")

	// Two renewals later, nothing has changed.
	time.Sleep(2 * leader.DefaultRetryPeriod)
	holder, tr, err := f.Holder(ctx)
	require.NoError(t, err)
	assert.Equal(t, id, holder)
	assert.Equal(t, transitions, tr, "no leader transition")
	assert.True(t, f.ByID(id).Proc.Running())
	got, err := f.Call(ctx)
	require.NoError(t, err)
	assert.Equal(t, id, got)
}

// TestLeaderSingleReplica: one replica, the same Service: it publishes
// itself; on SIGTERM, with no standby to take its endpoint over, it
// withdraws it (after a retry period); back, it publishes again.
func TestLeaderSingleReplica(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, f := startFleet(ctx, t, 1, shortDurations)
	assert.Equal(t, "replica-1", waitServing(ctx, t, f, "", 30*time.Second))

	r := f.Replicas[0]
	require.NoError(t, r.Proc.Signal(syscall.SIGTERM))
	exited, err := r.Proc.WaitExit(10 * time.Second)
	require.True(t, exited)
	require.NoError(t, err)
	sl, err := f.Slices(ctx)
	require.NoError(t, err)
	assert.Empty(t, fleet.PublishedAddresses(sl), "a stopped leader withdraws its endpoint")
	holder, _, err := f.Holder(ctx)
	require.NoError(t, err)
	assert.Empty(t, holder, "and releases the Lease")

	require.NoError(t, f.Start(r))
	start := time.Now()
	assert.Equal(t, "replica-1", waitServing(ctx, t, f, "", 10*time.Second))
	t.Logf("a restarted single replica serves again %v after its start", time.Since(start).Round(time.Millisecond))
}

// TestLeaderPlannedStopWaitsForTheWork: a leader told to stop whose work
// takes longer than the renew deadline to finish keeps the Lease until it
// has, so no other replica works at the same time; then it hands over.
func TestLeaderPlannedStopWaitsForTheWork(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const drain = 5 * time.Second // more than the lease duration (4s)
	_, f := startFleet(ctx, t, 2, shortDurations, "--drain="+drain.String())
	old := waitServing(ctx, t, f, "", 30*time.Second)
	r := f.ByID(old)

	require.NoError(t, r.Proc.Signal(syscall.SIGTERM))
	start := time.Now()
	id := waitServing(ctx, t, f, old, drain+5*time.Second)
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, drain, "%s took over while %s was still draining", id, old)
	exited, err := r.Proc.WaitExit(5 * time.Second)
	require.True(t, exited)
	assert.NoError(t, err)
	t.Logf("%s drained for %v, then handed over: %s answers %v after the SIGTERM", old, drain, id, took.Round(time.Millisecond))
}

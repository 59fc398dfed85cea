package e2e

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/leaders"
)

// TestKubectlFastoverLeaders runs `kubectl fastover leaders` (the built
// plugin) against a fleet of three fastover-example replicas through a
// crash takeover, a planned handover and the loss of every replica. Each
// replica runs "in" a Pod of its own (addPodReplicas): no kubelet acts on
// it, so the test writes the status a kubelet would (Ready, and the
// leader's container terminated after it is killed: the evidence crash
// takeover reads).
func TestKubectlFastoverLeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	const ns = "ha"
	require.NoError(t, env.CreateNamespace(ctx, ns, nil))
	f := newFleet(t, env, ns, "ctl", shortDurations)
	require.NoError(t, f.CreateService(ctx, nil))
	addPodReplicas(ctx, t, f, 3, map[string]string{"app": "ctl"})
	for _, r := range f.Replicas {
		setPodStatus(ctx, t, env, ns, r.ID, true, nil)
		require.NoError(t, f.Start(r))
	}
	first := waitServing(ctx, t, f, "", time.Minute)

	// All well: the holder publishes itself, two ready standbys; exit 0.
	l := waitLeader(ctx, t, env, ns, func(l leaders.Leader) bool {
		return l.Holder == first && l.Published != nil && l.Published.IsHolder && l.HolderPod != nil
	})
	assert.Equal(t, "ctl", l.Published.Service)
	assert.Equal(t, ns+"/"+first, l.HolderPod.Pod)
	require.Len(t, l.Standbys, 2)
	for _, s := range l.Standbys {
		assert.True(t, s.Ready, s.Pod)
	}
	assert.Empty(t, l.Problems)
	out, code := kubectlFastover(ctx, t, env, "leaders", "-n", ns)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "LEASE")
	t.Logf("kubectl fastover leaders, all well:\n%s", out)

	// Crash: the leader is killed and its container reported ended; a
	// standby takes over at once, and the view says so.
	killed := f.ByID(first)
	killed.Proc.Stop(syscall.SIGKILL, 0)
	setPodStatus(ctx, t, env, ns, first, false, &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "Error", FinishedAt: metav1.Time{Time: time.Now().Add(time.Second).Truncate(time.Second)},
	})
	second := waitServing(ctx, t, f, first, time.Minute)
	l = waitLeader(ctx, t, env, ns, func(l leaders.Leader) bool {
		return l.Holder == second && l.Published != nil && l.Published.IsHolder
	})
	assert.Equal(t, "crash takeover", l.HandOver, "%+v", l)
	require.NotEmpty(t, l.Handovers)
	assert.Contains(t, reasons(l.Handovers), "CrashTakeover")
	require.Len(t, l.Standbys, 2)
	assert.Empty(t, l.Problems, "one standby is still ready")
	out, code = kubectlFastover(ctx, t, env, "leaders", "-n", ns)
	assert.Equal(t, 0, code, out)
	t.Logf("after the crash takeover:\n%s", out)

	// A planned handover.
	f.ByID(second).Proc.Stop(syscall.SIGTERM, 10*time.Second)
	third := waitServing(ctx, t, f, second, time.Minute)
	l = waitLeader(ctx, t, env, ns, func(l leaders.Leader) bool {
		return l.Holder == third && l.Published != nil && l.Published.IsHolder
	})
	assert.Equal(t, "planned", l.HandOver, "%+v", l)

	// The last replica stops: no leader, the command exits 1 and says why.
	f.ByID(third).Proc.Stop(syscall.SIGTERM, 10*time.Second)
	l = waitLeader(ctx, t, env, ns, func(l leaders.Leader) bool { return l.Holder == "" })
	assert.Contains(t, l.Problems, "no leader: the Lease is free")
	out, code = kubectlFastover(ctx, t, env, "leaders", "-n", ns)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "ha/ctl: no leader: the Lease is free")
	t.Logf("with no replica left:\n%s", out)

	// Another namespace holds no fastover leader.
	out, code = kubectlFastover(ctx, t, env, "leaders", "-n", "default")
	assert.Equal(t, 0, code)
	assert.Equal(t, "No fastover leaders found in namespace default.\n", out)
}

// waitLeader runs `kubectl fastover leaders -n ns -o json` until its only
// Lease satisfies ok, and returns it.
func waitLeader(ctx context.Context, t *testing.T, env *cluster.Env, ns string, ok func(leaders.Leader) bool) leaders.Leader {
	t.Helper()
	var last string
	var got leaders.Leader
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ := kubectlFastover(ctx, t, env, "leaders", "-n", ns, "-o", "json")
		last = out
		var doc struct{ Leaders []leaders.Leader }
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			return false, err
		}
		if len(doc.Leaders) != 1 {
			return false, nil
		}
		got = doc.Leaders[0]
		return ok(got), nil
	})
	require.NoError(t, err, "kubectl fastover leaders -o json:\n%s", last)
	return got
}

func reasons(hs []leaders.Handover) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Reason)
	}
	return out
}

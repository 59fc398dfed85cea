package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/fastover/fastover/internal/agents"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/internal/procstat"
)

// agentsJudged is the most agents for which the test judges the times.
const agentsJudged = 100

// The payload every agent lists from each new leader (issue 41): a policy
// set of 200 objects of 2 KiB.
const (
	agentPolicies   = 200
	agentPolicySize = 2048
)

// TestAgentsFollowTheLeader is the storm of issue 41: AGENTS_N agents (100
// by default; make bench-agents runs 1,000), each with a connection of its
// own and client-go informers of the example's aggregated API through
// kube-proxy's ClusterIP (replicas, and a policy set of 200 objects of
// 2 KiB that each lists again from every new leader), every other one
// through leader/follow; the payload's versions are each replica's own
// (a new leader answers a watch 410 Gone, and the agents list again) or,
// with AGENTS_VERSIONS=shared, the same on every replica (the watches
// resume). The leader is signalled (AGENTS_FAULTS, default
// SIGTERM and SIGKILL; the bench adds SIGSTOP and cut), and the test logs
// how long after the fault 50 %, 90 %, 99 % and 100 % of the agents were
// served by the new leader (an event from it and all its policies), how
// many agents had a request fail and for how long, how many still heard
// from the old leader after the new one served them, and the new leader's
// CPU time and peak memory.
//
// The agents run in the test's process, on the same two cores as the
// replicas and the control plane: the figures are pessimistic for a
// cluster, where agents are on other nodes. The replicas are processes
// with the Lease, not pods, so a SIGKILL is taken over at the Lease's
// expiry (shortDurations: 4 s), not by crash takeover.
//
// AGENTS_BASELINE=replace is the baseline of a controller that runs one
// replica: the same agents, and one replica, replaced by a new one (a new
// identity, a new address, as a Deployment's new Pod) once it has exited
// after the fault. The replacement starts at once, without scheduling,
// image or readiness, and the library still publishes its endpoint: the
// baseline at its best. Its times are reported, not judged.
//
// It fails if an agent is not served by the new leader within
// agentsBound after a stop or a kill, or if one is fed by the old leader
// after the new one served it. Past agentsJudged agents it reports and
// does not judge the times: with 1,000 the bounds are not met yet (issue
// 41 §3), and make bench-agents is the measurement.
func TestAgentsFollowTheLeader(t *testing.T) {
	n := 100
	if s := os.Getenv("AGENTS_N"); s != "" {
		v, err := strconv.Atoi(s)
		require.NoError(t, err, "AGENTS_N")
		n = v
	}
	// AGENTS_VERSIONS: the example's --api-versions, replica (a new
	// leader answers the agents' watches of the payload 410 Gone, and they
	// list it again) or shared (their watches resume there).
	versions := cmp.Or(os.Getenv("AGENTS_VERSIONS"), "replica")
	faults := []leaderFault{faultTerm, faultKill}
	if s := os.Getenv("AGENTS_FAULTS"); s != "" {
		faults = nil
		for _, f := range strings.Split(s, ",") {
			faults = append(faults, leaderFault(strings.TrimSpace(f)))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(len(faults))*(heldCap+time.Minute))
	defer cancel()
	start := time.Now()
	// The replicas' fault proxies run in this process, beside the agents:
	// only a cut needs them, and without them the leader's renewals do not
	// wait on the agents' share of the cores.
	cut := slices.Contains(faults, faultCut)
	args := []string{"--api-policies", strconv.Itoa(agentPolicies), "--api-policy-size", strconv.Itoa(agentPolicySize), "--api-versions", versions}
	if os.Getenv("AGENTS_PROFILE") != "" {
		args = append(args, "--debug-pprof")
	}
	replace := os.Getenv("AGENTS_BASELINE") == "replace"
	replicas := 3
	if replace {
		replicas = 1
	}
	env, rig, leader := startHeldFleetOf(ctx, t, replicas, cluster.Options{}, cut, args...)
	f := rig.f
	kp, err := kubeproxy.Start(env, kubeproxy.Options{Node: "node-a", Name: "kube-proxy"})
	require.NoError(t, err)
	defer func() { _ = kp.Stop(context.Background()) }()
	vip, err := kp.WaitService(ctx, "ha", "ctl", 30*time.Second)
	require.NoError(t, err)
	host := "https://" + net.JoinHostPort(vip, "80")

	actx, stopAgents := context.WithCancel(ctx)
	defer stopAgents()
	l, err := agents.Start(actx, agents.Config{
		N:         n,
		Agent:     func(i int) *rest.Config { return f.AgentConfig(host, fmt.Sprintf("agent-%d", i)) },
		Policies:  agentPolicies,
		Follows:   func(i int) bool { return i%2 == 1 },
		Kube:      env.Config,
		Namespace: f.Namespace, Service: f.Service,
	})
	require.NoError(t, err)
	require.NoError(t, l.Wait(ctx, leader, time.Time{}, 2*time.Minute), "the agents' first list")
	t.Logf("%d agents served by %s %v after the test began", n, leader, time.Since(start).Round(time.Millisecond))
	// The watches run a while before a fault, as in a cluster (client-go
	// backs off after a watch that ends within a second without events).
	time.Sleep(2 * time.Second)

	var b strings.Builder
	what := "3 replicas"
	if replace {
		what = "1 replica, replaced once it exited (AGENTS_BASELINE=replace)"
	}
	fmt.Fprintf(&b, "%d agents (half through leader/follow), %d policies of %d B each, versions %s, lease %v, %s; from the fault to the agents served by the new leader\n",
		n, agentPolicies, agentPolicySize, versions, rig.d, what)
	fmt.Fprintf(&b, "%-8s %-7s %-48s %-24s %5s %10s %8s\n", "fault", "agents", "served", "errored (longest)", "stale", "leader CPU", "peak RSS")
	for _, flt := range faults {
		row := agentsHandover(ctx, t, rig, l, leader, flt, n <= agentsJudged && !replace, replace)
		b.WriteString(row.text)
		leader = row.next
	}
	t.Logf("%s(the test took %v)", b.String(), time.Since(start).Round(time.Second))
}

// agentsBound bounds, generously, the time from a stop or a kill of the
// leader to every agent of a group served by the new one, in make test's
// N = 100. An agent without leader/follow retries a killed leader's
// address, refused until the lease expires, with client-go's reflector
// back-off (0.8 s doubling, up to twice that with jitter), and its
// payload's 410 costs one more back-off: up to about 45 s; heldCap bounds
// it. One through leader/follow waits in its dial instead.
func agentsBound(flt leaderFault, follows bool) time.Duration {
	switch {
	case flt == faultTerm:
		return 20 * time.Second
	case follows:
		return shortDurations.Lease + 20*time.Second
	}
	return heldCap
}

type agentsRow struct {
	next string
	text string
}

// agentsHandover plays one fault on the leader old and sums up how the
// agents followed; judge: check the times against agentsBound; replace:
// old is the only replica, and a new one replaces it once it has exited.
func agentsHandover(ctx context.Context, t *testing.T, h *handoverRig, l *agents.Load, old string, flt leaderFault, judge, replace bool) agentsRow {
	t.Helper()
	r := h.f.ByID(old)
	require.NotNil(t, r)
	fault := time.Now()
	stopProfiles := profileStorm(ctx, t, h, old, flt)
	restoreGC := holdGC()
	self0, _ := procstat.CPU(os.Getpid())
	heal := h.inject(ctx, t, r, flt)
	if replace {
		h.replace(t, r, flt)
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, heldCap, true, func(ctx context.Context) (bool, error) {
		lease, err := h.f.Env.Client.CoordinationV1().Leases(h.f.Namespace).Get(ctx, h.f.Lease, metav1.GetOptions{})
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != old, nil
	}), "no new leader after %s", flt)
	next, acquired := h.successor(ctx, t, old, fault)
	nr := h.f.ByID(next)
	cpu0, _ := procstat.CPU(nr.Proc.Pid())
	waitErr := l.Wait(ctx, next, fault, heldCap)
	until := time.Now()
	cpu1, _ := procstat.CPU(nr.Proc.Pid())
	self1, _ := procstat.CPU(os.Getpid())
	restoreGC()
	stopProfiles()
	rss, _ := procstat.PeakRSS(nr.Proc.Pid())
	if heal != nil {
		require.NoError(t, heal(ctx))
	}
	served := l.ServedBy(next, fault)
	failures := l.Failures(fault)
	last := l.LastFrom(old)
	var text strings.Builder
	for _, group := range []struct {
		name string
		in   func(i int) bool
	}{
		{"all", func(int) bool { return true }},
		{"plain", func(i int) bool { return !l.Follows(i) }},
		{"follow", l.Follows},
	} {
		var s []time.Time
		var fs [][]time.Time
		var ls []time.Time
		for i := range l.N() {
			if group.in(i) {
				s, fs, ls = append(s, served[i]), append(fs, failures[i]), append(ls, last[i])
			}
		}
		sp := agents.SpreadOf(fault, s)
		o := agents.OutageOf(fs, s, until)
		stale := agents.Stale(ls, s)
		cpu, peak := "", ""
		if group.name == "all" {
			cpu, peak = (cpu1 - cpu0).Round(10*time.Millisecond).String(), fmt.Sprintf("%d MiB", rss>>20)
		}
		fmt.Fprintf(&text, "%-8s %-7s %-48s %-24s %5d %10s %8s\n", flt, group.name, sp,
			fmt.Sprintf("%d (%s)", o.Agents, agents.FormatDuration(o.Longest)), stale, cpu, peak)
		if flt == faultTerm || flt == faultKill {
			switch {
			case group.name == "all":
				assert.NoError(t, waitErr, "after %s", flt)
			case judge:
				assert.NotEqual(t, agents.Never, sp.Max, "after %s, not every %s agent was served by %s", flt, group.name, next)
				assert.Less(t, sp.Max, agentsBound(flt, group.name == "follow"), "after %s, the last %s agent served by %s", flt, group.name, next)
			}
			assert.Zero(t, stale, "%s agents fed by the old leader %s after %s served them (%s)", group.name, old, next, flt)
		}
	}
	fmt.Fprintf(&text, "%-8s the new leader took the Lease %v after the fault; the agents' first request after it: %s; their first answer from the new leader: %s; the agents' process's CPU (this test's) %v; failed requests, by kind: %s\n",
		flt, acquired.Sub(fault).Round(time.Millisecond), agents.SpreadOf(fault, l.SentAfter(fault)), agents.SpreadOf(fault, l.ReachedBy(next, fault)),
		(self1 - self0).Round(10*time.Millisecond), agents.FormatKinds(l.FailureKinds(fault)))
	t.Logf("%s: leader %s -> %s\n%s", flt, old, next, text.String())
	if !replace {
		h.restart(ctx, t, r, flt)
	}
	// Let the agents' new watches run a while before the next fault.
	time.Sleep(2 * time.Second)
	return agentsRow{next: next, text: text.String()}
}

// replace replaces the only replica r, signalled with flt, with a new one
// once r has exited, as a Deployment replaces its one Pod (at once here:
// no scheduling, image or readiness).
func (h *handoverRig) replace(t *testing.T, r *fleet.Replica, flt leaderFault) {
	t.Helper()
	switch flt {
	case faultTerm, faultKill:
	default:
		require.FailNow(t, "AGENTS_BASELINE=replace plays SIGTERM and SIGKILL only", "not %s", flt)
	}
	exited, _ := r.Proc.WaitExit(10 * time.Second)
	require.True(t, exited, "the only replica did not exit after %s", flt)
	require.NoError(t, h.f.Add(1))
}

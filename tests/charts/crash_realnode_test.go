package charts_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/tests/charts"
)

// crashKind is a way a leader's process ends on a healthy node, and what
// the kubelet then reports of its container.
type crashKind struct {
	name   string
	signal syscall.Signal // sent to the container's process from its node
	reason string         // the kubelet's lastState.terminated.reason
	code   int32          // and exit code
}

// The crashes: SIGKILL (as the kernel or a runtime kills it), an OOM kill
// (the example allocates past its 64Mi limit on SIGUSR2,
// --crash-signals), a panic (SIGUSR1: exit code 2).
var crashKinds = []crashKind{
	{"SIGKILL", syscall.SIGKILL, "Error", 137},
	{"OOMKilled", syscall.SIGUSR2, "OOMKilled", 137},
	{"panic", syscall.SIGUSR1, "Error", 2},
}

// TestCrashTakeoverOnRealNodes crashes the example's leader on real nodes,
// three replicas at 15s/10s/2s (the chart's defaults), and measures the time
// from the crash to the first answer of the new leader through the
// ClusterIP, for a client in a pod that calls every 20 ms on connections it
// keeps: with crash takeover (the standbys take over when the kubelet
// reports the container ended) and without it (the Lease decides, as with
// client-go's election), each crash kind FASTOVER_CRASH_RUNS times (1 by
// default; `make bench-crash` runs 5). After each crash the crashed pod is
// deleted and the Deployment's replacement awaited, so that no container is
// in a CrashLoopBackOff when its turn to lead comes.
func TestCrashTakeoverOnRealNodes(t *testing.T) {
	runs := 1
	if s := os.Getenv("FASTOVER_CRASH_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "FASTOVER_CRASH_RUNS")
		runs = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+time.Duration(runs)*3*time.Minute)
	defer cancel()
	nodes := []string{"real-1", "real-2", "real-3"}
	env, realNodes := realEnv(ctx, t, cluster.Options{}, nodes...)
	ch, err := charts.Load(charts.Example)
	require.NoError(t, err)
	_, err = env.PushImages(ctx, ch.Metadata.AppVersion)
	require.NoError(t, err)
	require.NoError(t, env.CreateNamespace(ctx, exampleNS, restricted(nil)))
	h := newHelm(t, env, "fastover-example", exampleNS)
	h.install(ctx, t, charts.Example, 3*time.Minute, "crashSignals=true")
	svc, err := env.Client.CoreV1().Services(exampleNS).Get(ctx, "fastover-example", metav1.GetOptions{})
	require.NoError(t, err)
	leader := waitPublished(ctx, t, env, "")
	const clientNS = "crash-client"
	require.NoError(t, env.CreateNamespace(ctx, clientNS, nil))
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "8080") + "/"
	client := startPodClientEvery(ctx, t, env, clientNS, "client", nodes[0], url, 20*time.Millisecond)
	waitAnswer(ctx, t, client, leader.Identity, time.Now())
	const lease = 15 * time.Second

	results := map[string][]time.Duration{}
	for _, takeover := range []bool{true, false} {
		mode := "crash takeover"
		if !takeover {
			mode = "lease only"
			h.upgrade(ctx, t, charts.Example, 3*time.Minute, "crashSignals=true", "crashTakeover=false")
			waitReplicas(ctx, t, env, 3, "")
		}
		for _, kind := range crashKinds {
			for run := range runs {
				name := fmt.Sprintf("%s, %s, run %d", mode, kind.name, run+1)
				d := crashLeader(ctx, t, env, realNodes, client, kind, name)
				results[mode+" "+kind.name] = append(results[mode+" "+kind.name], d)
				if takeover {
					assert.Less(t, d, lease/2, "%s: crash takeover waited for the Lease", name)
				} else {
					assert.Greater(t, d, lease-5*time.Second, "%s: replaced before the Lease expired without crash takeover", name)
				}
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "crash → new leader answering through the ClusterIP (client in a pod, every 20 ms, kept connections), lease %v, %d run(s) each:\n", lease, runs)
	fmt.Fprintf(&b, "%-10s %-16s %-9s %s\n", "crash", "mode", "p50", "min–max")
	for _, kind := range crashKinds {
		for _, mode := range []string{"crash takeover", "lease only"} {
			ds := slices.Clone(results[mode+" "+kind.name])
			slices.Sort(ds)
			if len(ds) == 0 {
				continue
			}
			fmt.Fprintf(&b, "%-10s %-16s %-9v %v–%v\n", kind.name, mode, ds[len(ds)/2].Round(10*time.Millisecond), ds[0].Round(10*time.Millisecond), ds[len(ds)-1].Round(10*time.Millisecond))
		}
	}
	t.Log(b.String())
}

// crashLeader crashes the leader as kind says, waits for another replica
// to answer the client, checks what the kubelet reported of the crashed
// container, replaces the crashed pod, and returns the time from the crash
// to the first answer of the new leader.
func crashLeader(ctx context.Context, t *testing.T, env *cluster.Env, nodes map[string]*cluster.RealNode, client *podClient, kind crashKind, name string) time.Duration {
	t.Helper()
	old := waitPublished(ctx, t, env, "")
	waitAnswer(ctx, t, client, old.Identity, time.Now())
	running, ok := runningContainer(old.Pod)
	require.True(t, ok, "%s: the leader %s's container does not run", name, old.Name)
	crashed := time.Now()
	require.NoError(t, nodes[old.Spec.NodeName].SignalContainer(ctx, running.ContainerID, kind.signal), name)
	var first clientCall
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, c := range client.calls(ctx, t, crashed) {
			if c.ok && c.answer != old.Identity {
				first = c
				return true, nil
			}
		}
		return false, nil
	}), "%s: no new leader answered", name)
	d := first.at.Sub(crashed)
	// The new leader may be the crashed pod's restarted container.
	next := waitPublished(ctx, t, env, "")
	assert.Equal(t, first.answer, next.Identity, "%s: the first to answer is not the Lease's holder", name)

	// What the kubelet reports of the crashed container.
	var term *corev1.ContainerStateTerminated
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(exampleNS).Get(ctx, old.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		st := p.Status.ContainerStatuses[0]
		for _, tm := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
			if tm != nil && tm.ContainerID == running.ContainerID {
				term = tm
				return true, nil
			}
		}
		return false, nil
	}), "%s: the kubelet did not report the crashed container's end", name)
	assert.Equal(t, kind.reason, term.Reason, "%s: the crashed container's reason", name)
	assert.Equal(t, kind.code, term.ExitCode, "%s: the crashed container's exit code", name)
	t.Logf("%s: %s (%s) crashed: %s, exit code %d; %s answered through the ClusterIP %v later", name, old.Name, old.Spec.NodeName, term.Reason, term.ExitCode, next.Identity, d.Round(time.Millisecond))

	require.NoError(t, env.Client.CoreV1().Pods(exampleNS).Delete(ctx, old.Name, metav1.DeleteOptions{}))
	waitReplicas(ctx, t, env, 3, old.Name)
	return d
}

// runningContainer is the running container of an example pod.
func runningContainer(p corev1.Pod) (corev1.ContainerStatus, bool) {
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running != nil && st.ContainerID != "" {
			return st, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// waitReplicas waits until n example pods (none named gone) are Ready.
func waitReplicas(ctx context.Context, t *testing.T, env *cluster.Env, n int, gone string) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ready := 0
		for _, p := range examplePods(ctx, t, env) {
			if p.Name == gone {
				return false, nil
			}
			if podReady(p) {
				ready++
			}
		}
		return ready == n, nil
	}), "%d example replicas Ready", n)
}

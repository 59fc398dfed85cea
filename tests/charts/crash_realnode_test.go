package charts_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/imagebuild"
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
// reports the container ended), without it (the Lease decides), and for
// client-go's election (tests/bench/leaderbaseline in pods: a LeaseLock, an
// endpoint written when leading), each crash kind FASTOVER_CRASH_RUNS times
// (1 by default; `make bench-crash` runs 5). After each crash the crashed
// pod is replaced once its container has restarted, so that no container
// is in a CrashLoopBackOff when its turn to lead comes.
func TestCrashTakeoverOnRealNodes(t *testing.T) {
	runs := countFromEnv(t, "FASTOVER_CRASH_RUNS")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+time.Duration(runs)*4*time.Minute)
	defer cancel()
	env, realNodes, h := crashableExample(ctx, t, restricted(nil))
	// client-go's replicas start now, so that they are up when their turn
	// comes; they take no part in the example's crashes.
	baseline := createBaseline(ctx, t, env)
	const clientNS = "crash-client"
	require.NoError(t, env.CreateNamespace(ctx, clientNS, nil))
	client := startAppClient(ctx, t, env, exampleApp, clientNS, "client", crashNodes[0])
	const lease = 15 * time.Second

	const (
		modeTakeover = "crash takeover"
		modeLease    = "lease only"
		modeClientGo = "client-go"
	)
	modes := []string{modeTakeover, modeLease, modeClientGo}
	results := map[string][]time.Duration{}
	ends := watchEnds(ctx, t, env, exampleApp)
	for _, mode := range modes {
		a := exampleApp
		switch mode {
		case modeLease:
			h.upgrade(ctx, t, charts.Example, 3*time.Minute, "crashSignals=true", "crashTakeover=false")
			a.waitReplicas(ctx, t, env, 3, "")
		case modeClientGo:
			a = baseline
			a.waitReplicas(ctx, t, env, 3, "")
			client = startAppClient(ctx, t, env, a, clientNS, "baseline-client", crashNodes[0])
			ends = watchEnds(ctx, t, env, a)
		}
		for _, kind := range crashKinds {
			for run := range runs {
				name := fmt.Sprintf("%s, %s, run %d", mode, kind.name, run+1)
				d, reported := crashLeader(ctx, t, env, realNodes, client, a, ends, kind, name)
				results[mode+" "+kind.name] = append(results[mode+" "+kind.name], d)
				switch {
				case mode == modeTakeover && reported < lease/2:
					assert.Less(t, d, reported+3*time.Second, "%s: crash takeover waited for the Lease", name)
				case mode == modeTakeover:
					// Crash takeover acts on the kubelet's report.
					t.Logf("%s: the kubelet reported the end only %v after the crash (its API connection?): not counted against crash takeover", name, reported.Round(time.Millisecond))
				default:
					assert.Greater(t, d, lease-5*time.Second, "%s: replaced before the Lease expired", name)
				}
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "crash → new leader answering through the ClusterIP (client in a pod, every 20 ms, kept connections), lease %v, %d run(s) each:\n", lease, runs)
	fmt.Fprintf(&b, "%-10s %-16s %-9s %s\n", "crash", "mode", "p50", "min–max")
	for _, kind := range crashKinds {
		for _, mode := range modes {
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

// countFromEnv is the positive count in the environment variable name, 1
// if it is unset.
func countFromEnv(t *testing.T, name string) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

// crashNodes are the real nodes of the crash tests.
var crashNodes = []string{"real-1", "real-2", "real-3"}

// crashableExample is the crashNodes with charts/fastover-example
// installed (crashSignals: true) in a namespace of the given labels.
func crashableExample(ctx context.Context, t *testing.T, nsLabels map[string]string) (*cluster.Env, map[string]*cluster.RealNode, *helm) {
	t.Helper()
	env, realNodes := realEnv(ctx, t, cluster.Options{}, crashNodes...)
	ch, err := charts.Load(charts.Example)
	require.NoError(t, err)
	_, err = env.PushImages(ctx, ch.Metadata.AppVersion)
	require.NoError(t, err)
	require.NoError(t, env.CreateNamespace(ctx, exampleNS, nsLabels))
	h := newHelm(t, env, "fastover-example", exampleNS)
	h.install(ctx, t, charts.Example, 3*time.Minute, "crashSignals=true")
	return env, realNodes, h
}

// startAppClient starts a client in a pod on node that calls the app's
// ClusterIP every 20 ms, and waits for its leader's answer.
func startAppClient(ctx context.Context, t *testing.T, env *cluster.Env, a app, ns, name, node string) *podClient {
	t.Helper()
	svc, err := env.Client.CoreV1().Services(a.ns).Get(ctx, a.service, metav1.GetOptions{})
	require.NoError(t, err)
	leader := a.waitPublished(ctx, t, env, "")
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "8080") + "/"
	c := startPodClientEvery(ctx, t, env, ns, name, node, url, 20*time.Millisecond)
	waitAnswer(ctx, t, c, leader.Identity, time.Now())
	return c
}

// baselineImage is tests/bench/leaderbaseline's image, client-go's
// election in pods.
const baselineImage = "ghcr.io/fastover/leaderbaseline:test"

// installBaseline runs three replicas of tests/bench/leaderbaseline (the
// example's program written with client-go's leaderelection) in namespace
// "baseline", as the example's chart runs its own: a selector-less
// Service, a Role for its Lease and EndpointSlices, 15s/10s/2s, a 64Mi
// memory limit, --crash-signals; and returns it as an app once its three
// replicas run.
func installBaseline(ctx context.Context, t *testing.T, env *cluster.Env) app {
	t.Helper()
	a := createBaseline(ctx, t, env)
	a.waitReplicas(ctx, t, env, 3, "")
	return a
}

// createBaseline is installBaseline without the wait: it pushes the image
// and creates the objects.
func createBaseline(ctx context.Context, t *testing.T, env *cluster.Env) app {
	t.Helper()
	require.NoError(t, env.PushBinaryImage(ctx, baselineImage, imagebuild.Binary{Name: "leaderbaseline", Package: "./tests/bench/leaderbaseline"}))
	const ns, name = "baseline", "leaderbaseline"
	require.NoError(t, env.CreateNamespace(ctx, ns, restricted(nil)))
	labels := map[string]string{"app.kubernetes.io/name": name}
	_, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            name,
					TerminationGracePeriodSeconds: ptr.To[int64](40),
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
					Containers: []corev1.Container{{
						Name: name, Image: baselineImage,
						Args: []string{"--namespace=$(POD_NAMESPACE)", "--service=" + name, "--lease=" + name,
							"--address=$(POD_IP)", "--listen=:8080", "--port=8080", "--crash-signals",
							"--lease-duration=15s", "--renew-deadline=10s", "--retry-period=2s"},
						Env:       []corev1.EnvVar{fromField("POD_NAMESPACE", "metadata.namespace"), fromField("POD_IP", "status.podIP")},
						Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return app{ns: ns, lease: name, service: name, selector: "app.kubernetes.io/name=" + name}
}

// crashLeader crashes the leader as kind says, waits for another replica
// to answer the client, checks what the kubelet reported of the crashed
// container, replaces the crashed pod, and returns the time from the crash
// to the first answer of the new leader.
func crashLeader(ctx context.Context, t *testing.T, env *cluster.Env, nodes map[string]*cluster.RealNode, client *podClient, a app, ends *endWatch, kind crashKind, name string) (d, reported time.Duration) {
	t.Helper()
	old := a.waitPublished(ctx, t, env, "")
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
	d = first.at.Sub(crashed)
	reported = ends.wait(ctx, t, running.ContainerID).Sub(crashed)
	// The new leader may be the crashed pod's restarted container.
	next := a.waitPublished(ctx, t, env, "")
	assert.Equal(t, next.Identity, first.answer, "%s: the first to answer is not the Lease's holder", name)

	// What the kubelet reports of the crashed container.
	var term *corev1.ContainerStateTerminated
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(a.ns).Get(ctx, old.Name, metav1.GetOptions{})
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
	t.Logf("%s: %s (%s) crashed: %s, exit code %d, reported by its kubelet %v later; %s answered through the ClusterIP %v later",
		name, old.Name, old.Spec.NodeName, term.Reason, term.ExitCode, reported.Round(time.Millisecond), next.Identity, d.Round(time.Millisecond))

	replaceCrashed(ctx, t, env, a, old.Name, running.RestartCount)
	return d, reported
}

// replaceCrashed deletes an example pod whose container ended, once the
// kubelet has restarted it (restarts above before) and it is Ready, and
// waits for the Deployment's replacement: so that no container is in a
// CrashLoopBackOff when its turn to lead comes. (Deleted while the
// restarted container is starting, a pod may miss its SIGTERM and stand
// by, Terminating, until its grace period ends.)
func replaceCrashed(ctx context.Context, t *testing.T, env *cluster.Env, a app, name string, before int32) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(a.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		st := p.Status.ContainerStatuses[0]
		return st.RestartCount > before && st.Ready, nil
	}), "the kubelet did not restart %s's container", name)
	require.NoError(t, env.Client.CoreV1().Pods(a.ns).Delete(ctx, name, metav1.DeleteOptions{}))
	a.waitReplicas(ctx, t, env, 3, name)
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

// waitReplicas waits until n of the app's pods (none named gone) are
// Ready.
func (a app) waitReplicas(ctx context.Context, t *testing.T, env *cluster.Env, n int, gone string) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ready := 0
		for _, p := range a.pods(ctx, t, env) {
			if p.Name == gone {
				return false, nil
			}
			if podReady(p) {
				ready++
			}
		}
		return ready == n, nil
	}), "%d replicas of %s/%s Ready", n, a.ns, a.service)
}

// endWatch records when the kubelet first reported each container of an
// app's pods ended (state or lastState terminated), as a watch saw it:
// crash takeover acts on that report, and a kubelet that makes it late
// (its API connection lost) leaves the Lease to decide.
type endWatch struct {
	mu    sync.Mutex
	ended map[string]time.Time // by containerID
}

func watchEnds(ctx context.Context, t *testing.T, env *cluster.Env, a app) *endWatch {
	t.Helper()
	w := &endWatch{ended: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(a.ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = a.selector }))
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, st := range p.Status.ContainerStatuses {
			for _, tm := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
				if tm == nil || tm.ContainerID == "" {
					continue
				}
				if _, seen := w.ended[tm.ContainerID]; !seen {
					w.ended[tm.ContainerID] = now
				}
			}
		}
	}
	_, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, obj any) { onPod(obj) },
	})
	require.NoError(t, err)
	runInformers(ctx, t, f)
	return w
}

// runInformers starts the factory's informers until the test ends (or ctx
// does) and waits for their caches.
func runInformers(ctx context.Context, t *testing.T, f informers.SharedInformerFactory) {
	t.Helper()
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(func() {
		stop()
		f.Shutdown()
	})
	f.Start(wctx.Done())
	f.WaitForCacheSync(wctx.Done())
}

// wait returns when the container's end was first reported, waiting for
// the report up to a minute.
func (w *endWatch) wait(ctx context.Context, t *testing.T, containerID string) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		var ok bool
		at, ok = w.ended[containerID]
		return ok, nil
	}), "the kubelet never reported the end of container %s", containerID)
	return at
}

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fastover/fastover/internal/acting"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/harness/faultproxy"
)

// The program fastover-run wraps in these tests: this test binary, run
// again with $wrappedServe set (TestMain). It knows nothing of leaders: it
// logs its start, an act every 20 ms and its stop to the acting log,
// warms up for $wrappedWarmup before it listens, answers GET / with its
// name, and GET /exit?code=N by exiting with N. On SIGTERM it exits 0.
const (
	wrappedServe  = "FASTOVER_E2E_WRAPPED_LISTEN"
	wrappedName   = "FASTOVER_E2E_WRAPPED_NAME"
	wrappedActing = "FASTOVER_E2E_WRAPPED_ACTING"
	wrappedWarmup = "FASTOVER_E2E_WRAPPED_WARMUP"
)

// serveWrapped is the wrapped program; it returns its exit status.
func serveWrapped() int {
	name := os.Getenv(wrappedName)
	logf, err := os.OpenFile(os.Getenv(wrappedActing), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	log := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = fmt.Fprintf(logf, "%d %s %s\n", time.Now().UnixNano(), name, what)
	}
	exit := func(code int, why string) {
		log("stop " + why)
		mu.Lock() // no act after the stop
		os.Exit(code)
	}
	log("start")
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		exit(0, "nil")
	}()
	go func() {
		for range time.Tick(20 * time.Millisecond) {
			log("act")
		}
	}()
	warmup, _ := time.ParseDuration(os.Getenv(wrappedWarmup))
	time.Sleep(warmup)
	l, err := net.Listen("tcp", os.Getenv(wrappedServe))
	if err != nil {
		exit(1, strings.ReplaceAll(err.Error(), "\n", " "))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, name) })
	mux.HandleFunc("/exit", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.WriteHeader(http.StatusAccepted)
		// Once the answer is out.
		time.AfterFunc(50*time.Millisecond, func() { exit(code, "crash") })
	})
	_ = (&http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}).Serve(l)
	return 0
}

// TestRunMakesAProcessActiveStandby: three replicas of fastover-run, each
// wrapping a program that knows nothing of leaders, with the Role and the
// flags `kubectl fastover wrap` writes for its Deployment, each through a proxy to the API server that can cut it
// off. Only the leader runs the program; it is published once the
// program answers its readiness check, not before. Then each way a
// leader's term ends:
//
//   - the program crashes (exit 3): fastover-run releases the Lease at
//     once and exits 3; a standby starts its program and serves;
//   - SIGTERM to the leader (a planned stop): the program gets it, ends,
//     and the Lease is released;
//   - the leader is cut off from the API server: it stops its program
//     before the Lease can expire, and exits 1; a standby leads after
//     the expiry.
//
// Last, the leader's fastover-run is killed (SIGKILL): its program dies
// with it. The acting log shows no two programs ever running at once. A replica
// whose Role lacks a permission exits at once and says which.
func TestRunMakesAProcessActiveStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := fleet.Durations{Lease: 3 * time.Second, Renew: 2 * time.Second, Retry: 500 * time.Millisecond}
	env := cluster.Start(t, cluster.Options{})
	const ns, svc = "run", "wrapped"
	// Pod Security's restricted profile: what wrap adds keeps a pod in it.
	require.NoError(t, env.CreateNamespace(ctx, ns, map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}))
	run := binary(t, "fastover-run")
	self, err := os.Executable()
	require.NoError(t, err)
	f, err := fleet.New(env, run, ns, svc, d)
	require.NoError(t, err)
	// The workload as its maintainers ship it, a Service with a selector
	// and a Deployment, made active/standby by kubectl fastover wrap and
	// applied: the replicas below run as its ServiceAccount, with the Role
	// wrap wrote, and with the flags of the command line it wrote.
	wrappedFlags := applyWrapped(ctx, t, env, ns, svc, f.Port)
	kubeconfig, err := env.KubeconfigAs(ctx, ns, "default")
	require.NoError(t, err)
	token := kubeconfigToken(t, kubeconfig)
	actingLog := filepath.Join(env.Dir, "acting.log")
	proxies := map[string]*faultproxy.Proxy{}
	probes, err := cluster.FreePorts(1)
	require.NoError(t, err)

	start := func(r *fleet.Replica) {
		t.Helper()
		require.NoError(t, r.Launch(env, r.ID, run, func() ([]string, error) {
			p, err := faultproxy.Start(env.Config)
			if err != nil {
				return nil, err
			}
			proxies[r.ID] = p
			t.Cleanup(p.Close)
			path := filepath.Join(env.Dir, "kubeconfig-"+r.ID)
			if err := p.WriteKubeconfig(path, svc, token, ns); err != nil {
				return nil, err
			}
			local := "127.0.0." + strconv.Itoa(r.N)
			// What a pod gets from the downward API and the kubelet's
			// network, and the short timings of these tests, after wrap's
			// flags (a later flag wins).
			return append(slices.Clone(wrappedFlags),
				"--kubeconfig="+path, "--namespace="+ns,
				"--id="+r.ID, "--address="+r.Address(),
				"--ready-http=http://"+local+":"+strconv.Itoa(f.Port)+"/",
				"--probe-address="+local+":"+strconv.Itoa(probes[0]),
				"--lease-duration="+d.Lease.String(), "--renew-deadline="+d.Renew.String(), "--retry-period="+d.Retry.String(),
				"--", self,
			), nil
		}))
	}
	for n := 1; n <= 3; n++ {
		r := fleet.NewReplica("run", n)
		r.Environ = []string{
			wrappedServe + "=127.0.0." + strconv.Itoa(n) + ":" + strconv.Itoa(f.Port),
			wrappedName + "=" + r.ID, wrappedActing + "=" + actingLog, wrappedWarmup + "=300ms",
		}
		f.Replicas = append(f.Replicas, r)
		start(r)
	}
	exitCode := func(r *fleet.Replica) int {
		t.Helper()
		exited, err := r.Proc.WaitExit(20 * time.Second)
		require.True(t, exited, "%s did not exit:\n%s", r.ID, r.Proc.Tail(20))
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	}
	standbysIdle := func(leader string) {
		t.Helper()
		for _, r := range f.Replicas {
			if r.ID != leader && r.Proc.Running() {
				_, _, err := f.Get(r.Address(), "/")
				assert.Error(t, err, "standby %s runs the program", r.ID)
			}
		}
	}

	first := waitServing(ctx, t, f, "", 30*time.Second)
	standbysIdle(first)
	// /metrics beside the probes: the election's metrics, which fastover's
	// leader alerts read (docs/operations.md).
	metricsOf := func(r *fleet.Replica) string {
		resp, err := http.Get("http://127.0.0." + strconv.Itoa(r.N) + ":" + strconv.Itoa(probes[0]) + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	assert.Contains(t, metricsOf(f.ByID(first)), "\nfastover_leader_is_leader 1\n")
	for _, r := range f.Replicas {
		if r.ID != first {
			assert.Eventually(t, func() bool {
				m := metricsOf(r)
				return strings.Contains(m, "\nfastover_leader_is_leader 0\n") && strings.Contains(m, "\nfastover_leader_ready 1\n")
			}, 10*time.Second, 50*time.Millisecond, "standby %s's metrics:\n%s", r.ID, metricsOf(r))
		}
	}
	var log string
	require.Eventually(t, func() bool { // logged once the write is answered
		log = f.ByID(first).Proc.Tail(200)
		return strings.Contains(log, "published the leader as the Service's only endpoint")
	}, 10*time.Second, 20*time.Millisecond, "the leader's log:\n%s", log)
	ready, published := strings.Index(log, "the command is ready"), strings.Index(log, "published the leader as the Service's only endpoint")
	require.GreaterOrEqual(t, ready, 0, "the leader's log:\n%s", log)
	assert.Less(t, ready, published, "published before the program was ready")

	// The program crashes.
	crashed := time.Now()
	code, _, err := f.Get(f.ByID(first).Address(), "/exit?code=3")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code)
	second := waitServing(ctx, t, f, first, 30*time.Second)
	crashTook := time.Since(crashed)
	assert.Equal(t, 3, exitCode(f.ByID(first)), "fastover-run's status is the program's")
	// Released, not waited out (the timing is logged; under load it is
	// no proof).
	assert.Contains(t, f.ByID(first).Proc.Tail(40), "released the Lease", "a crashed program's Lease")
	standbysIdle(second)
	start(f.ByID(first)) // as the kubelet restarts its container

	// A planned stop.
	stopped := time.Now()
	require.NoError(t, f.ByID(second).Proc.Signal(syscall.SIGTERM))
	third := waitServing(ctx, t, f, second, 30*time.Second)
	handoverTook := time.Since(stopped)
	assert.Equal(t, 0, exitCode(f.ByID(second)))
	assert.Contains(t, f.ByID(second).Proc.Tail(40), "released the Lease", "a planned stop")
	start(f.ByID(second))

	// Cut off from the API server.
	cut := time.Now()
	proxies[third].Partition(true)
	fourth := waitServing(ctx, t, f, third, 30*time.Second)
	cutTook := time.Since(cut)
	assert.Equal(t, 1, exitCode(f.ByID(third)), "a leader that lost its Lease exits 1")
	assert.Contains(t, f.ByID(third).Proc.Tail(30), "exiting, to be restarted as a standby")
	t.Logf("new leader serving after: crash %v, SIGTERM %v, cut off %v (lease %v)",
		crashTook.Round(time.Millisecond), handoverTook.Round(time.Millisecond), cutTook.Round(time.Millisecond), d.Lease)
	standbysIdle(fourth)

	// fastover-run itself killed (an OOM kill): its program ends with it,
	// and stops acting; it would otherwise run on beside the next leader's.
	require.NoError(t, f.ByID(fourth).Proc.Signal(syscall.SIGKILL))
	exitCode(f.ByID(fourth))
	killed := time.Now()
	time.Sleep(time.Second)
	_, _, err = f.Get(f.ByID(fourth).Address(), "/")
	assert.Error(t, err, "the program of a killed fastover-run still answers")

	b, err := os.ReadFile(actingLog)
	require.NoError(t, err)
	terms, err := acting.Parse(strings.NewReader(string(b)))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(terms), 4, "a term for each leader")
	assert.Empty(t, acting.Overlaps(terms), "two programs ran at once")
	for _, tm := range terms[:3] {
		assert.NotEmpty(t, tm.Stop, "%s's program did not log its end", tm.ID)
	}
	for _, tm := range terms {
		if tm.ID == fourth {
			assert.True(t, tm.Last.Before(killed.Add(200*time.Millisecond)), "%s's program acted %v after fastover-run was killed", fourth, tm.Last.Sub(killed))
		}
	}

	// A Role without endpointslices: the replica says so and exits 1,
	// without running the program.
	short, err := env.KubeconfigFor(ctx, ns, "no-slices", fleet.LeaderRole[:1])
	require.NoError(t, err)
	p, err := env.StartProcess("run-norole", run, "--kubeconfig="+short, "--namespace="+ns, "--lease=other", "--service="+svc,
		"--address=192.0.2.9", "--probe-address=0", "--", self)
	require.NoError(t, err)
	exited, exitErr := p.WaitExit(30 * time.Second)
	require.True(t, exited, "no exit without the Role:\n%s", p.Tail(20))
	var ee *exec.ExitError
	require.ErrorAs(t, exitErr, &ee)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, p.Tail(10), "lacks: get endpointslices.discovery.k8s.io")
}

// applyWrapped pipes a Service with a selector and a one-replica
// Deployment annotated for fastover-run through `kubectl fastover wrap`,
// applies the result server-side, and returns the flags wrap put before
// the container's command, once it has checked them.
func applyWrapped(ctx context.Context, t *testing.T, env *cluster.Env, ns, svc string, port int) []string {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  selector: {app: %[1]s}
  ports: [{name: http, port: 80, targetPort: %[3]d}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata:
      labels: {app: %[1]s}
      annotations: {fastover.io/run-lease: %[1]s, fastover.io/run-service: %[1]s}
    spec:
      containers:
      - name: server
        image: example.com/server:v1
        command: [/server, --listen=:%[3]d]
        readinessProbe: {httpGet: {path: /, port: %[3]d}}
        securityContext:
          runAsNonRoot: true
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL]}
          seccompProfile: {type: RuntimeDefault}
`, svc, ns, port)
	cmd := exec.CommandContext(ctx, binary(t, "kubectl-fastover"), "wrap")
	cmd.Stdin = strings.NewReader(manifest)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	objs, err := install.Decode(strings.NewReader(string(out)))
	require.NoError(t, err)
	require.Len(t, objs, 4, "the Service, the Deployment, a Role and a RoleBinding:\n%s", out)
	applier, err := install.NewApplier(env.Config)
	require.NoError(t, err)
	res, err := applier.Apply(ctx, objs, install.ApplyOptions{})
	require.NoError(t, err, "the API server takes what wrap wrote")
	assert.Empty(t, res.Warnings, "a pod of the restricted profile stays in it once wrapped")

	got, err := env.Client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Spec.Selector, "wrap removes the Service's selector")
	dep, err := env.Client.AppsV1().Deployments(ns).Get(ctx, svc, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(3), *dep.Spec.Replicas)
	command := dep.Spec.Template.Spec.Containers[0].Command
	end := slices.Index(command, "--")
	require.Positive(t, end, "command: %q", command)
	assert.Equal(t, []string{"/server", "--listen=:" + strconv.Itoa(port)}, command[end+1:])
	flags := command[1:end]
	assert.Subset(t, flags, []string{"--lease=" + svc, "--service=" + svc,
		"--ready-http=http://127.0.0.1:" + strconv.Itoa(port) + "/", "--grace-period=25s"})
	return flags
}

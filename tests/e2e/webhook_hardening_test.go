package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/harness/webhookreplica"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

// webhookBinary is the fastover-webhook under test: this tree's, or the
// one FASTOVER_WEBHOOK_BINARY names (to measure an older build against
// the same test).
func webhookBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FASTOVER_WEBHOOK_BINARY"); p != "" {
		t.Logf("fastover-webhook under test: %s", p)
		return p
	}
	return binary(t, "fastover-webhook")
}

// TestWebhookManifestsHardening: the webhook's pods leave a lost node
// within seconds (their namespace is not injected), their grace period
// covers the shutdown delay and drain, and with failurePolicy Fail they
// have a priority class the overlay ships.
func TestWebhookManifestsHardening(t *testing.T) {
	t.Parallel()
	dir, err := install.Dir()
	require.NoError(t, err)
	for _, k := range []string{".", "overlays/tuned", "overlays/fail-closed"} {
		t.Run(k, func(t *testing.T) {
			objs, err := install.Render(filepath.Join(dir, k))
			require.NoError(t, err)
			o := install.Find(objs, "Deployment", "fastover-webhook")
			require.NotNil(t, o)
			var dep appsv1.Deployment
			require.NoError(t, fromUnstructured(o.Object, &dep))
			pod := dep.Spec.Template.Spec
			for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
				i := toleration.EffectiveToleration(pod.Tolerations, key)
				require.GreaterOrEqual(t, i, 0, key)
				require.NotNil(t, pod.Tolerations[i].TolerationSeconds, key)
				assert.LessOrEqual(t, *pod.Tolerations[i].TolerationSeconds, int64(30), key)
			}
			delay, timeout := 5*time.Second, 15*time.Second
			for _, a := range pod.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--shutdown-delay="); ok {
					delay, err = time.ParseDuration(v)
					require.NoError(t, err)
				}
				if v, ok := strings.CutPrefix(a, "--shutdown-timeout="); ok {
					timeout, err = time.ParseDuration(v)
					require.NoError(t, err)
				}
			}
			require.NotNil(t, pod.TerminationGracePeriodSeconds)
			assert.Greater(t, time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second, delay+timeout)
			assert.Equal(t, "128Mi", pod.Containers[0].Resources.Limits.Memory().String(), "the limit the memory test holds it to")

			mwc := install.Find(objs, "MutatingWebhookConfiguration", "fastover")
			require.NotNil(t, mwc)
			policy, _, _ := unstructuredString(mwc.Object, "webhooks", "failurePolicy")
			if policy == string(admissionregistrationv1.Fail) {
				require.NotEmpty(t, pod.PriorityClassName, "failurePolicy Fail needs a priority class")
				pc := install.Find(objs, "PriorityClass", pod.PriorityClassName)
				require.NotNil(t, pc, "the overlay ships PriorityClass %s", pod.PriorityClassName)
				var class schedulingv1.PriorityClass
				require.NoError(t, fromUnstructured(pc.Object, &class))
				assert.Positive(t, class.Value)
				assert.LessOrEqual(t, class.Value, int32(1_000_000_000), "a user-defined class")
			}
		})
	}
}

// maximalReviews are AdmissionReviews of just under size bytes, each
// shaped to cost the webhook the most: empty entries in the lists and maps
// it decodes, entries it skips, one long string, a user with many groups.
func maximalReviews(size int) [][]byte {
	wrap := func(userInfo, object string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"3a8f-flood",` +
			`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},` +
			`"namespace":"flood","operation":"CREATE","userInfo":` + userInfo + `,"object":` + object + `}}`)
	}
	size -= 400
	empty := strings.TrimSuffix(strings.Repeat(`{},`, size/3), ",")
	var annotations strings.Builder
	for i := 0; annotations.Len() < size-16; i++ {
		fmt.Fprintf(&annotations, `"%x":"",`, i)
	}
	return [][]byte{
		wrap(`{}`, `{"spec":{"tolerations":[`+empty+`]}}`),
		wrap(`{}`, `{"metadata":{"ownerReferences":[`+empty+`]}}`),
		wrap(`{}`, `{"metadata":{"annotations":{`+annotations.String()+`"z":""}}}`),
		wrap(`{}`, `{"metadata":{"annotations":{"a":"`+strings.Repeat("x", size)+`"}},"spec":{}}`),
		wrap(`{"groups":[`+strings.TrimSuffix(strings.Repeat(`"",`, size/3), ",")+`]}`, `{}`),
		wrap(`{}`, `{"spec":{"containers":[`+empty+`]}}`),
	}
}

// memoryCgroup makes a cgroup (v1 memory controller) under the test's own
// with the given limit, for the webhook to run in as in its container, and
// returns its directory; "" if the machine does not let the test do so.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	var own string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && hasField(parts[1], "memory") {
			own = parts[2]
		}
	}
	if own == "" {
		return ""
	}
	dir := filepath.Join("/sys/fs/cgroup/memory", own, fmt.Sprintf("fastover-webhook-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Logf("no memory cgroup for the webhook: %v", err)
		return ""
	}
	t.Cleanup(func() {
		// Empty once the webhook is gone.
		_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) { return os.Remove(dir) == nil, nil })
	})
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o600); err != nil {
		t.Logf("no memory limit for the webhook's cgroup: %v", err)
		return ""
	}
	return dir
}

func hasField(list, name string) bool {
	for _, f := range strings.Split(list, ",") {
		if f == name {
			return true
		}
	}
	return false
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	require.NoError(t, err)
	return n
}

// procStatus returns a field of /proc/PID/status in bytes (VmRSS, VmHWM).
func procStatus(pid int, field string) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// TestWebhookBoundedMemory floods fastover-webhook, in a memory cgroup of
// 128 MiB as in its Deployment (where the machine allows one; else with
// GOMEMLIMIT as the binary would derive it), with 32 clients sending
// maximal reviews (just under 3 MiB, shaped to cost the most) straight to
// its port, as any pod could, while the API server creates a pod every
// 20 ms through it with failurePolicy Fail: the webhook is never killed,
// stays under its limit, and every pod is admitted and injected.
func TestWebhookBoundedMemory(t *testing.T) {
	const limit = 128 << 20
	env := cluster.Start(t, cluster.Options{Nodes: []string{"node-a"}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	cg := memoryCgroup(t, limit)
	if cg == "" {
		t.Setenv("GOMEMLIMIT", strconv.Itoa(limit*9/10))
	}
	ca, err := certs.NewCA("fastover-e2e-ca", time.Hour)
	require.NoError(t, err)
	wh := &webhookServer{certDir: filepath.Join(t.TempDir(), "certs"), ca: ca}
	wh.rotate(t)
	ports, err := cluster.FreePorts(3)
	require.NoError(t, err)
	wh.ports = ports
	wh.addr = "127.0.0.1:" + strconv.Itoa(ports[0])
	wh.health = "http://127.0.0.1:" + strconv.Itoa(ports[1])
	wh.metrics = "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics"
	args := []string{
		"--host=127.0.0.1", "--port=" + strconv.Itoa(ports[0]), "--cert-dir=" + wh.certDir,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[2]),
	}
	bin := webhookBinary(t)
	if cg != "" {
		// Into the cgroup before the binary starts, as a container runtime
		// would: the binary reads its limit there.
		script := `echo $$ > "` + filepath.Join(cg, "cgroup.procs") + `" && exec "$0" "$@"`
		wh.proc, err = env.StartProcess("fastover-webhook", "/bin/sh", append([]string{"-c", script, bin}, args...)...)
	} else {
		wh.proc, err = env.StartProcess("fastover-webhook", bin, args...)
	}
	require.NoError(t, err)
	readyCtx, readyCancel := context.WithTimeout(ctx, 30*time.Second)
	require.NoError(t, wh.proc.WaitHTTP(readyCtx, wh.health+"/readyz"))
	readyCancel()
	pid := wh.proc.Pid()
	wh.register(ctx, t, env, admissionregistrationv1.Fail)
	const ns = "flooded"
	require.NoError(t, env.CreateNamespace(ctx, ns, injectLabel()))
	baseRSS := procStatus(pid, "VmRSS")

	// The flood.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 64,
	}}
	bodies := maximalReviews(webhook.DefaultMaxRequestBytes)
	var mu sync.Mutex
	statuses := map[string]int{}
	var sent atomic.Int64
	stopFlood := make(chan struct{})
	var flood sync.WaitGroup
	for i := range 32 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for n := i; ; n++ {
				select {
				case <-stopFlood:
					return
				default:
				}
				sent.Add(1)
				key := "error"
				resp, err := client.Post("https://"+wh.addr+webhook.Path, "application/json", bytes.NewReader(bodies[n%len(bodies)]))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					key = strconv.Itoa(resp.StatusCode)
				} else if !wh.proc.Running() {
					key = "error (webhook gone)"
					time.Sleep(100 * time.Millisecond)
				}
				mu.Lock()
				statuses[key]++
				mu.Unlock()
			}
		}()
	}
	stream := startPodStream(ctx, env, ns)
	var maxRSS, maxAnon, maxHeap int64
	sample := func() {
		maxRSS = max(maxRSS, procStatus(pid, "VmRSS"))
		maxAnon = max(maxAnon, procStatus(pid, "RssAnon"))
		if h := scrapeQuick(wh.metrics, "go_memstats_heap_inuse_bytes"); h > 0 {
			maxHeap = max(maxHeap, int64(h))
		}
	}
	floodFor := 20 * time.Second
	deadline := time.Now().Add(floodFor)
	for time.Now().Before(deadline) && wh.proc.Running() {
		sample()
		time.Sleep(250 * time.Millisecond)
	}
	close(stopFlood)
	flood.Wait()
	alive := wh.proc.Running()
	if alive {
		stream.waitMore(ctx, t, 10) // still admitting after the flood
	}
	stream.finish(t)

	hwm := procStatus(pid, "VmHWM")
	var cgPeak, oomKills int64 = -1, 0
	if cg != "" {
		cgPeak = readInt(t, filepath.Join(cg, "memory.max_usage_in_bytes"))
		if data, err := os.ReadFile(filepath.Join(cg, "memory.oom_control")); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
					oomKills, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
	}
	stream.mu.Lock()
	t.Logf("flood of %v: %d maximal reviews sent by 32 clients, answers %v; webhook alive: %v; RSS before %.1f MiB, peak RSS %.1f MiB (anonymous %.1f MiB; VmHWM %.1f MiB), peak heap in use %.1f MiB; cgroup (limit %d MiB, %s): peak usage %.1f MiB, OOM kills %d; API server meanwhile: %d pods tried, %d injected, %d failed, %d not injected, slowest creation %v",
		floodFor, sent.Load(), statuses, alive, float64(baseRSS)/(1<<20), float64(maxRSS)/(1<<20), float64(maxAnon)/(1<<20), float64(hwm)/(1<<20), float64(maxHeap)/(1<<20),
		limit>>20, map[bool]string{true: "enforced", false: "not available: GOMEMLIMIT set"}[cg != ""], float64(cgPeak)/(1<<20), oomKills,
		stream.attempts, stream.injected, len(stream.errs), len(stream.notInjected), stream.maxLatency.Round(time.Millisecond))
	stream.mu.Unlock()

	require.True(t, alive, "the webhook died under the flood:\n%s", wh.proc.Tail(20))
	assert.Zero(t, oomKills, "OOM kills in the webhook's cgroup")
	if cg != "" {
		assert.Less(t, cgPeak, int64(limit), "the cgroup's peak usage")
	}
	// The process's own memory (its mapped binary aside, which the kernel
	// reclaims before it kills).
	assert.Less(t, maxAnon, int64(limit), "peak anonymous RSS under the Deployment's limit")
	mu.Lock()
	defer mu.Unlock()
	assert.Positive(t, statuses["200"], "maximal reviews are answered too, a few at a time")
}

// scrapeQuick sums the series of a metric whose labels contain every one
// of the given strings, from a /metrics URL within a second, or returns
// -1: a process that runs out of memory may hang rather than die, one
// that shuts down may be gone.
func scrapeQuick(url, name string, contains ...string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	sum, found := 0.0, false
lines:
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, c := range contains {
			if !strings.Contains(line, c) {
				continue lines
			}
		}
		if f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum, found = sum+f, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// TestWebhookRollingRestart restarts, twice over, both replicas of the
// webhook while a client creates a pod every 20 ms through the API server
// (failurePolicy Fail, so any failed call is a failed admission): no
// creation fails, every pod is injected.
//
// How the restart is modelled: the API server reaches the webhook through
// a Service (fastover-system/fastover-webhook, no selector) and, with
// --enable-aggregator-routing, resolves it itself for each new connection
// to a random ready endpoint of its EndpointSlices, as kube-proxy would
// pick a backend; it verifies the certificate for the Service's DNS name.
// Each replica is a fastover-webhook process on the machine's own address
// (the EndpointSlice API refuses loopback) and a port of its own, with an
// EndpointSlice of its own. The test plays the kubelet and the
// EndpointSlice controller: every second it probes each replica's /readyz
// and sets its endpoint's ready condition accordingly, and deletes the
// slice once the process is gone. A rollout with maxSurge 1 and
// maxUnavailable 0, as in the Deployment: start a new replica, wait until
// its endpoint is ready, SIGTERM an old one, wait for it to exit.
func TestWebhookRollingRestart(t *testing.T) {
	ip := machineIPv4(t)
	env := cluster.Start(t, cluster.Options{
		Nodes:          []string{"node-a"},
		APIServerFlags: []string{"--enable-aggregator-routing=true"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := env.Client
	const sysNS, svcName = "fastover-system", "fastover-webhook"
	require.NoError(t, env.CreateNamespace(ctx, sysNS, nil))
	_, err := c.CoreV1().Services(sysNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "webhook", Port: 443, TargetPort: intstr.FromString("webhook"), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	ca, err := certs.NewCA("fastover-e2e-ca", time.Hour)
	require.NoError(t, err)
	kp, err := ca.Issue([]string{svcName + "." + sysNS + ".svc", ip}, time.Hour)
	require.NoError(t, err)
	certDir := filepath.Join(t.TempDir(), "certs")
	require.NoError(t, certs.WriteDir(certDir, kp, ca))
	bin := webhookBinary(t)

	var replicas []*replica
	start := func() *replica {
		r := startReplica(ctx, t, env, bin, ip, certDir, len(replicas))
		replicas = append(replicas, r)
		return r
	}
	a, b := start(), start()
	require.NoError(t, a.WaitReady(ctx), "replica 0")
	require.NoError(t, b.WaitReady(ctx), "replica 1")

	policy := admissionregistrationv1.Fail
	_, err = c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "fastover"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "pods.fastover.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: sysNS, Name: svcName, Path: ptr.To(webhook.Path), Port: ptr.To[int32](443)},
				CABundle: ca.CertPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: injectLabel()},
			FailurePolicy:           &policy,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	waitInjecting(ctx, t, env)

	const ns = "rolling"
	require.NoError(t, env.CreateNamespace(ctx, ns, injectLabel()))
	stream := startPodStream(ctx, env, ns)
	stream.waitMore(ctx, t, 25)

	var served []string
	var drainServed float64
	began := time.Now()
	old := []*replica{a, b}
	for round := range 2 {
		var next []*replica
		for _, o := range old {
			n := start()
			require.NoError(t, n.WaitReady(ctx), "replica %d", n.ID)
			stream.waitMore(ctx, t, 10)
			before := o.requests(t)
			termAt := time.Now()
			require.NoError(t, o.Proc.Signal(syscall.SIGTERM))
			// Still serving, not ready, until the shutdown delay is over.
			time.Sleep(4 * time.Second)
			during := o.requests(t) - before
			exited, _ := o.Proc.WaitExit(30 * time.Second)
			require.True(t, exited, "replica %d still running 30s after SIGTERM", o.ID)
			drainServed += max(during, 0)
			served = append(served, fmt.Sprintf("r%d: %.0f in all, %.0f after SIGTERM, exited %v after it",
				o.ID, before+max(during, 0), max(during, 0), time.Since(termAt).Round(100*time.Millisecond)))
			next = append(next, n)
			stream.waitMore(ctx, t, 10)
		}
		old = next
		t.Logf("round %d done", round+1)
	}
	stream.waitMore(ctx, t, 25)
	took := time.Since(began)
	stream.mu.Lock()
	t.Logf("rolling restart, 2 rounds of 2 replicas in %v: %d pods tried, %d injected, %d failed, %d not injected, slowest creation %v; reviews answered per terminated replica: %s; %.0f answered during shutdown delays",
		took.Round(100*time.Millisecond), stream.attempts, stream.injected, len(stream.errs), len(stream.notInjected),
		stream.maxLatency.Round(time.Millisecond), strings.Join(served, "; "), drainServed)
	stream.mu.Unlock()
	stream.finish(t)
	for _, r := range old {
		assert.Positive(t, r.requests(t), "replica %d got traffic: the API server spreads over the endpoints", r.ID)
	}
}

// replica is one fastover-webhook process behind the Service, with its
// EndpointSlice, kept by its prober.
type replica struct{ *webhookreplica.Replica }

func startReplica(ctx context.Context, t *testing.T, env *cluster.Env, bin, ip, certDir string, id int) *replica {
	t.Helper()
	r, err := webhookreplica.Start(ctx, env, webhookreplica.Options{
		Binary: bin, Namespace: "fastover-system", Service: "fastover-webhook", IP: ip, CertDir: certDir,
		ID: id, ManagedBy: "e2e.fastover.io", Logf: t.Logf,
	})
	require.NoError(t, err)
	return &replica{r}
}

// requests is how many reviews the replica answered, from its metrics;
// 0 once it is gone.
func (r *replica) requests(*testing.T) float64 {
	return max(scrapeQuick(r.Metrics, "controller_runtime_webhook_requests_total", `webhook="/mutate-v1-pod"`), 0)
}

// machineIPv4 is an address of this machine that an EndpointSlice may
// hold; without one the test is skipped.
func machineIPv4(t *testing.T) string {
	t.Helper()
	ip, ok := webhookreplica.MachineIPv4()
	if !ok {
		t.Skip("no IPv4 address but loopback on this machine: an EndpointSlice cannot point at the webhook")
	}
	return ip
}

var errNoField = errors.New("no such field")

func fromUnstructured(obj map[string]any, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, out, true)
}

// unstructuredString reads a string field below a list's first element
// (webhooks[0].failurePolicy).
func unstructuredString(obj map[string]any, list, field string) (string, bool, error) {
	items, ok := obj[list].([]any)
	if !ok || len(items) == 0 {
		return "", false, errNoField
	}
	m, ok := items[0].(map[string]any)
	if !ok {
		return "", false, errNoField
	}
	s, ok := m[field].(string)
	return s, ok, nil
}

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/tests/harness/commands"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

// built are fastover's commands and examples, built for this run.
var built = &commands.Set{Packages: []string{"./cmd/...", "./examples/..."}}

// binary returns the path of one of fastover's commands, built once per
// test run.
func binary(t *testing.T, name string) string {
	t.Helper()
	return built.Path(t, name)
}

func TestMain(m *testing.M) {
	if os.Getenv(wrappedServe) != "" {
		// This binary as the program fastover-run wraps (run_test.go).
		os.Exit(serveWrapped())
	}
	code := m.Run()
	built.Remove()
	if imagesDir != "" {
		_ = os.RemoveAll(imagesDir)
	}
	os.Exit(code)
}

// webhookServer is a fastover-webhook process with certificates from a CA
// the test made.
type webhookServer struct {
	proc    *cluster.Process
	addr    string // host:port of the TLS server
	health  string // base URL of the probes
	metrics string // URL of /metrics
	certDir string
	ports   []int // webhook, probes, metrics
	ca      *certs.CA
	serial  *big.Int // of the certificate written last
}

func startWebhook(t *testing.T, env *cluster.Env, args ...string) *webhookServer {
	t.Helper()
	ca, err := certs.NewCA("fastover-e2e-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w := &webhookServer{certDir: filepath.Join(t.TempDir(), "certs"), ca: ca}
	w.rotate(t)
	w.run(t, env, args...)
	return w
}

// run starts fastover-webhook with the certificates in w.certDir and waits
// until it is ready.
func (w *webhookServer) run(t *testing.T, env *cluster.Env, args ...string) {
	t.Helper()
	ports, err := cluster.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	w.runAt(t, env, ports, args...)
}

// runAt is run on the given ports: webhook, probes, metrics.
func (w *webhookServer) runAt(t *testing.T, env *cluster.Env, ports []int, args ...string) {
	t.Helper()
	var err error
	w.ports = ports
	w.addr = "127.0.0.1:" + strconv.Itoa(ports[0])
	w.health = "http://127.0.0.1:" + strconv.Itoa(ports[1])
	w.metrics = "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics"
	w.proc, err = env.StartProcess("fastover-webhook", binary(t, "fastover-webhook"), append([]string{
		"--host=127.0.0.1",
		"--port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + w.certDir,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[2]),
	}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.proc.WaitHTTP(ctx, w.health+"/readyz"); err != nil {
		t.Fatal(err)
	}
}

// rotate writes a new serving certificate from the same CA.
func (w *webhookServer) rotate(t *testing.T) {
	t.Helper()
	kp, err := w.ca.Issue([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteDir(w.certDir, kp, w.ca); err != nil {
		t.Fatal(err)
	}
	w.serial = kp.Serial
}

// servedSerial opens a new TLS connection and returns the serial of the
// certificate the webhook presents, verified against the CA.
func (w *webhookServer) servedSerial() (*big.Int, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.ca.CertPEM)
	conn, err := tls.Dial("tcp", w.addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// register makes the API server call the webhook for pod CREATEs in
// labelled namespaces, trusting the webhook's CA, and waits until it does.
func (w *webhookServer) register(ctx context.Context, t *testing.T, env *cluster.Env, policy admissionregistrationv1.FailurePolicyType) {
	t.Helper()
	w.configure(ctx, t, env, policy, w.ca.CertPEM)
	waitInjecting(ctx, t, env)
}

// configure creates the MutatingWebhookConfiguration "fastover" for the
// webhook, with the caBundle given.
func (w *webhookServer) configure(ctx context.Context, t *testing.T, env *cluster.Env, policy admissionregistrationv1.FailurePolicyType, caBundle []byte) {
	t.Helper()
	url := "https://" + w.addr + webhook.Path
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "fastover"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "pods.fastover.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}},
			FailurePolicy:           &policy,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
	if _, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register webhook: %v", err)
	}
}

// waitInjecting waits until the API server calls the webhook (it picks a
// configuration up asynchronously), probing with dry-run pods.
func waitInjecting(ctx context.Context, t *testing.T, env *cluster.Env) {
	t.Helper()
	const probeNS = "fastover-probe"
	if _, err := env.Client.CoreV1().Namespaces().Get(ctx, probeNS, metav1.GetOptions{}); err != nil {
		if err := env.CreateNamespace(ctx, probeNS, injectLabel()); err != nil {
			t.Fatal(err)
		}
	}
	if err := install.WaitInjecting(ctx, env.Client, probeNS, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

func injectLabel() map[string]string {
	return map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}
}

// bare is a pod with no tolerations of its own.
func bare(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

// metricLines fetches the webhook's /metrics, one line per element.
func (w *webhookServer) metricLines(t *testing.T) []string {
	t.Helper()
	resp, err := http.Get(w.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(body), "\n")
}

// scrape returns the value of a metric series from the webhook's /metrics,
// named as in the exposition format (name{labels}), or -1 if absent.
func (w *webhookServer) scrape(t *testing.T, series string) float64 {
	t.Helper()
	for _, line := range w.metricLines(t) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return parseSample(t, line, v)
		}
	}
	return -1
}

// scrapeSum adds up the series of a metric whose labels contain every
// one of the given strings (such as `method="PATCH"`).
func (w *webhookServer) scrapeSum(t *testing.T, name string, contains ...string) float64 {
	t.Helper()
	sum := 0.0
lines:
	for _, line := range w.metricLines(t) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, c := range contains {
			if !strings.Contains(line, c) {
				continue lines
			}
		}
		sum += parseSample(t, line, line[strings.LastIndexByte(line, ' ')+1:])
	}
	return sum
}

func parseSample(t *testing.T, line, value string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(value, 64)
	if err != nil {
		t.Fatalf("metric %q: %v", line, err)
	}
	return f
}

// podStream is a client that creates a pod every 20 ms through the API
// server, as a workload would while the webhook's certificate changes, and
// counts the admissions: injected, failed, or admitted without injection.
type podStream struct {
	mu          sync.Mutex
	injected    int
	errs        []string
	notInjected []string
	attempts    int           // creations tried
	maxLatency  time.Duration // of one creation
	stop, done  chan struct{}
}

func startPodStream(ctx context.Context, env *cluster.Env, ns string) *podStream {
	s := &podStream{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			p := bare("")
			p.GenerateName = "p-"
			began := time.Now()
			pod, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			took := time.Since(began)
			s.mu.Lock()
			s.attempts++
			s.maxLatency = max(s.maxLatency, took)
			switch {
			case err != nil:
				s.errs = append(s.errs, err.Error())
			case pod.Annotations[toleration.AnnotationInjected] != "unreachable=0s":
				s.notInjected = append(s.notInjected, pod.Name)
			default:
				s.injected++
			}
			s.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return s
}

// count is the number of pods admitted with injection so far.
func (s *podStream) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.injected
}

// waitMore waits until n more pods have been admitted with injection.
func (s *podStream) waitMore(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	target := s.count() + n
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return s.count() >= target, nil }); err != nil {
		t.Fatalf("pods are no longer admitted with injection: %d of %d", s.count(), target)
	}
}

// finish stops the client and checks that no admission failed or missed
// injection.
func (s *podStream) finish(t *testing.T) {
	t.Helper()
	close(s.stop)
	<-s.done
	assert.Empty(t, s.errs, "failed admissions")
	assert.Empty(t, s.notInjected, "pods admitted without injection")
}

// Command webhookload measures fastover-webhook over HTTPS on loopback: it
// starts the webhook binary with a fresh certificate, sends AdmissionReviews
// of a realistic pod at fixed rates (open loop: a request is sent when it is
// due, whether or not earlier ones were answered, so a slow server cannot
// slow the load down), and prints latency percentiles per rate, how late
// the sender itself was, the highest rate sustained with p99 under the
// limit, and the server's peak RSS. `make bench` runs it.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/procstat"
	"github.com/fastover/fastover/tests/harness/benchrun"
	"github.com/fastover/fastover/webhook"
)

func main() { benchrun.Main("webhookload", run) }

type config struct {
	bin       string
	pod       string
	base      int
	baseFor   time.Duration
	stepFor   time.Duration
	limit     time.Duration
	rateSteps []int
}

func run() error {
	var c config
	var steps string
	flag.StringVar(&c.bin, "webhook", "bin/fastover-webhook", "path of the fastover-webhook binary")
	flag.StringVar(&c.pod, "pod", "webhook/testdata/pod.json", "pod JSON sent in every review")
	flag.IntVar(&c.base, "rate", 1000, "the reference rate, requests per second")
	flag.DurationVar(&c.baseFor, "duration", 20*time.Second, "how long each full-length run lasts")
	flag.DurationVar(&c.stepFor, "step-duration", 5*time.Second, "how long each step of the search for the highest rate lasts")
	flag.DurationVar(&c.limit, "p99-limit", 10*time.Millisecond, "p99 latency a sustained rate must stay under")
	flag.StringVar(&steps, "search", "1500,2000,2500,3000,4000,5000,6000,8000", "rates tried, in order, when searching for the highest sustained rate")
	if err := benchrun.Parse(); err != nil {
		return err
	}
	for _, s := range strings.Split(steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("--search: bad rate %q", s)
		}
		c.rateSteps = append(c.rateSteps, n)
	}

	body, err := reviewBody(c.pod)
	if err != nil {
		return err
	}
	srv, err := startServer(c.bin)
	if err != nil {
		return err
	}
	defer srv.stop()

	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: srv.pool, MinVersion: tls.VersionTLS12},
			MaxIdleConns:        512,
			MaxIdleConnsPerHost: 512,
			IdleConnTimeout:     time.Minute,
		},
	}
	// Warm up: connections, TLS sessions, the server's first allocations.
	if _, err := load(client, srv.url, body, c.base, 2*time.Second); err != nil {
		return err
	}

	fmt.Printf("fastover-webhook over HTTPS on loopback, %d-byte AdmissionReview (a %s pod), open-loop constant rate; client and server share the machine's %d CPUs\n\n",
		len(body), filepath.Base(c.pod), numCPU())
	fmt.Printf("%-22s %9s %9s %9s %9s %9s %8s %10s\n", "run", "sent", "ok", "p50", "p90", "p99", "max", "sender lag")
	baseRes, err := load(client, srv.url, body, c.base, c.baseFor)
	if err != nil {
		return err
	}
	baseRes.print(fmt.Sprintf("%d req/s for %v", c.base, c.baseFor))
	baseRSS, err := procstat.PeakRSS(srv.proc.Pid())
	if err != nil {
		return err
	}

	// Short steps up until p99 breaks the limit; then the passing rates,
	// highest first, for the full duration, until one holds.
	var passed []int
	for _, rate := range c.rateSteps {
		r, err := load(client, srv.url, body, rate, c.stepFor)
		if err != nil {
			return err
		}
		r.print(fmt.Sprintf("%d req/s for %v", rate, c.stepFor))
		if !r.sustained(c.limit) {
			break
		}
		passed = append(passed, rate)
	}
	best := 0
	for i := len(passed) - 1; i >= 0 && best == 0; i-- {
		r, err := load(client, srv.url, body, passed[i], c.baseFor)
		if err != nil {
			return err
		}
		r.print(fmt.Sprintf("%d req/s for %v", passed[i], c.baseFor))
		if r.sustained(c.limit) {
			best = passed[i]
		}
	}
	rss, err := procstat.PeakRSS(srv.proc.Pid())
	if err != nil {
		return err
	}
	fmt.Printf("\n%-46s %s\n", "p99 at "+strconv.Itoa(c.base)+" req/s:", baseRes.pct(99))
	fmt.Printf("%-46s %d req/s (of those tried, held for %v)\n", "highest rate with p99 < "+c.limit.String()+":", best, c.baseFor)
	fmt.Printf("%-46s %.1f MiB after the %d req/s run, %.1f MiB at the end\n", "server peak RSS (VmHWM):", float64(baseRSS)/(1<<20), c.base, float64(rss)/(1<<20))
	return nil
}

func numCPU() int { return goruntime.NumCPU() }

// reviewBody wraps the pod in a v1 AdmissionReview, as the API server
// sends it.
func reviewBody(podPath string) ([]byte, error) {
	pod, err := os.ReadFile(podPath)
	if err != nil {
		return nil, err
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "7c1f3a52-0000-4000-8000-000000000001",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "shop",
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: pod},
		},
	}
	return json.Marshal(review)
}

type server struct {
	proc *cluster.Process
	url  string
	pool *x509.CertPool
	dir  string
}

func startServer(bin string) (*server, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no webhook binary: %w (make bench builds it)", err)
	}
	dir, err := os.MkdirTemp("", "fastover-webhookload-")
	if err != nil {
		return nil, err
	}
	ca, err := certs.NewCA("webhookload", time.Hour)
	if err != nil {
		return nil, err
	}
	kp, err := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		return nil, err
	}
	if err := certs.WriteDir(filepath.Join(dir, "certs"), kp, ca); err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(3)
	if err != nil {
		return nil, err
	}
	proc := cluster.NewProcess("fastover-webhook", bin, dir,
		"--host=127.0.0.1", "--port="+strconv.Itoa(ports[0]), "--cert-dir="+filepath.Join(dir, "certs"),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports[1]),
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports[2]),
	)
	if err := proc.Start(); err != nil {
		return nil, err
	}
	s := &server{proc: proc, url: "https://127.0.0.1:" + strconv.Itoa(ports[0]) + webhook.Path, pool: x509.NewCertPool(), dir: dir}
	s.pool.AppendCertsFromPEM(ca.CertPEM)
	ready := "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/readyz"
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(ready); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if !proc.Running() || time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("webhook not ready: %s", proc.Tail(20))
		}
	}
}

func (s *server) stop() {
	s.proc.Stop(syscall.SIGTERM, 5*time.Second)
	_ = os.RemoveAll(s.dir)
}

// result of one constant-rate run.
type result struct {
	sent, ok  int
	latencies []time.Duration // from send to the end of the response
	late      []time.Duration // from due time to send: the sender's lag
	firstErr  error
}

func (r *result) pct(p float64) time.Duration { return percentile(r.latencies, p) }

// percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// sustained: every request answered, p99 under the limit, and the sender
// kept to its schedule (else the rate was not really offered).
func (r *result) sustained(limit time.Duration) bool {
	return r.ok == r.sent && r.pct(99) < limit && percentile(r.late, 99) < limit
}

func (r *result) print(name string) {
	fmt.Printf("%-22s %9d %9d %9s %9s %9s %8s %10s\n", name, r.sent, r.ok,
		round(r.pct(50)), round(r.pct(90)), round(r.pct(99)), round(r.pct(100)), round(percentile(r.late, 99)))
	if r.firstErr != nil {
		fmt.Printf("    first error: %v\n", r.firstErr)
	}
}

func round(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return d.Round(time.Microsecond).String()
	default:
		return d.Round(100 * time.Microsecond).String()
	}
}

// load sends rate requests per second for d, each at its due time, and
// times each from its sending to the end of its response; how late each
// was sent is recorded apart. It stops on its own after d plus the client
// timeout.
func load(client *http.Client, url string, body []byte, rate int, d time.Duration) (*result, error) {
	if rate <= 0 || d <= 0 {
		return nil, errors.New("rate and duration must be positive")
	}
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	res := &result{sent: n}
	lat := make([]time.Duration, n)
	late := make([]time.Duration, n)
	okFlags := make([]bool, n)
	var errOnce sync.Once
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			late[i] = sent.Sub(due)
			err := send(ctx, client, url, body)
			lat[i] = time.Since(sent)
			if err != nil {
				errOnce.Do(func() { res.firstErr = err })
				return
			}
			okFlags[i] = true
		}()
	}
	wg.Wait()
	for i, ok := range okFlags {
		if ok {
			res.ok++
			res.latencies = append(res.latencies, lat[i])
		}
	}
	slices.Sort(res.latencies)
	res.late = late
	slices.Sort(res.late)
	return res, nil
}

func send(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	// A cheap check, so the client spends its CPU on sending, not parsing:
	// an allowed review with a patch.
	if !bytes.Contains(out, []byte(`"allowed":true`)) || !bytes.Contains(out, []byte(`"patch":"`)) {
		return fmt.Errorf("unexpected answer %.200s", out)
	}
	return nil
}

package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fastover/fastover/certs"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServerShutdown: on cancel, /readyz fails at once; the webhook keeps
// answering for the shutdown delay, asking clients to close their
// connections; then it stops accepting and Start returns.
func TestServerShutdown(t *testing.T) {
	ca, err := certs.NewCA("test-ca", time.Hour)
	require.NoError(t, err)
	kp, err := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, certs.WriteDir(dir, kp, ca))

	port, probes := freePort(t), freePort(t)
	const delay = 1500 * time.Millisecond
	srv, err := NewServer(Options{
		Host: "127.0.0.1", Port: port, CertDir: dir,
		MetricsBindAddress: "0", HealthProbeBindAddress: "127.0.0.1:" + strconv.Itoa(probes),
		ShutdownDelay: delay, Registry: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Start(ctx) }()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	readyz := "http://127.0.0.1:" + strconv.Itoa(probes) + "/readyz"
	status := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// review posts a review and returns the status and whether the
	// response closes the connection.
	review := func() (int, bool, error) {
		req := request(realisticPod(t))
		body, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request:  &req.AdmissionRequest,
		})
		require.NoError(t, err)
		resp, err := client.Post("https://127.0.0.1:"+strconv.Itoa(port)+Path, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Close, nil
	}
	require.Eventually(t, func() bool { return status(readyz) == http.StatusOK }, 10*time.Second, 20*time.Millisecond)
	code, closes, err := review()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	assert.False(t, closes, "connections are kept alive while serving")

	cancel()
	stoppedAt := time.Now()
	require.Eventually(t, func() bool { return status(readyz) == http.StatusInternalServerError }, time.Second, 5*time.Millisecond,
		"/readyz fails as soon as the shutdown starts")
	answered := 0
	for time.Since(stoppedAt) < delay-300*time.Millisecond {
		code, closes, err := review()
		require.NoError(t, err, "the webhook serves during the shutdown delay")
		assert.Equal(t, http.StatusOK, code)
		assert.True(t, closes, "and asks its clients to close their connections")
		answered++
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case err := <-stopped:
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(stoppedAt), delay)
	case <-time.After(delay + 20*time.Second):
		t.Fatal("Start did not return after the delay and the drain")
	}
	_, _, err = review()
	assert.Error(t, err, "no longer accepting")
	t.Logf("%d reviews answered during the %v shutdown delay", answered, delay)
}

func TestNewServerRejectsBadLimits(t *testing.T) {
	for _, o := range []Options{
		{CertDir: "d", MaxRequestBytes: -1},
		{CertDir: "d", MaxConnections: 4, MaxRequestsInFlight: 8},
		{CertDir: "d", ReadTimeout: -time.Second},
	} {
		o.Registry = prometheus.NewRegistry()
		_, err := NewServer(o)
		assert.Error(t, err, "%+v", o)
	}
}

package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFlagsReconcileOnly(t *testing.T) {
	c, err := parseFlags([]string{"--reconcile-only", "--toleration-seconds=5"}, io.Discard)
	require.NoError(t, err)
	assert.True(t, c.reconcile.only)
	assert.True(t, c.reconcile.enabled, "--reconcile-only implies --reconcile")
	assert.Equal(t, int64(5), c.opts.Rule.TolerationSeconds)
	_, err = parseFlags([]string{"--reconcile-only", "--reconcile-qps=-1"}, io.Discard)
	assert.Error(t, err)
}

// TestRunAloneServesProbesAndMetrics: without a reachable API server the
// reconciler stands by (its election retries), while its probes and
// metrics are served; it returns when its context ends.
func TestRunAloneServesProbesAndMetrics(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))
	c, err := parseFlags([]string{"--reconcile-only", "--kubeconfig=" + kubeconfig,
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}, io.Discard)
	require.NoError(t, err)
	// Port 0 cannot be found again: pick free ports.
	c.opts.MetricsBindAddress, c.opts.HealthProbeBindAddress = freeAddr(t), freeAddr(t)
	c.opts.Registry = prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.reconcile.runAlone(ctx, *c.opts.Rule, c.opts, logr.Discard()) }()

	get := func(url string) (int, string) {
		var code int
		var body string
		require.Eventually(t, func() bool {
			resp, err := http.Get(url)
			if err != nil {
				return false
			}
			defer func() { _ = resp.Body.Close() }()
			b, _ := io.ReadAll(resp.Body)
			code, body = resp.StatusCode, string(b)
			return true
		}, 10*time.Second, 50*time.Millisecond)
		return code, body
	}
	code, _ := get("http://" + c.opts.HealthProbeBindAddress + "/healthz")
	assert.Equal(t, http.StatusOK, code)
	code, body := get("http://" + c.opts.MetricsBindAddress + "/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.True(t, strings.Contains(body, "go_memstats_heap_inuse_bytes"), "the process's memory is exported")
	assert.Contains(t, body, "fastover_retrofit_pods_fixed_total")
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("runAlone did not return when its context ended")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

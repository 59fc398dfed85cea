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
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/retrofit"
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
	go func() { done <- c.reconcile.runAlone(ctx, c.opts, logr.Discard()) }()

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

// TestLostLeadershipStopsTheProcess: when the reconciler's Lease is taken
// (or cannot be renewed), the webhook server is stopped and the error
// returned, so that the process exits and restarts as a fresh standby, as
// the leader library asks; it does not campaign again in-process.
func TestLostLeadershipStopsTheProcess(t *testing.T) {
	client := fake.NewClientset()
	r := &reconcileRunner{
		cfg: &reconcileConfig{namespace: "fastover-system", lease: "fastover-reconciler", identity: "me",
			leaseDuration: 2 * time.Second, renewDeadline: 1500 * time.Millisecond, retryPeriod: 200 * time.Millisecond},
		client: client,
		rec:    &retrofit.Reconciler{Client: client, Logger: logr.Discard()},
		log:    logr.Discard(),
	}
	leases := client.CoordinationV1().Leases("fastover-system")
	served := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.runBeside(context.Background(), func(ctx context.Context) error {
			close(served)
			<-ctx.Done() // the webhook server shuts down
			return nil
		})
	}()
	<-served
	var lease *coordinationv1.Lease
	require.Eventually(t, func() bool {
		l, err := leases.Get(context.Background(), "fastover-reconciler", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "me" {
			return false
		}
		lease = l
		return true
	}, 10*time.Second, 10*time.Millisecond, "the reconciler did not lead")

	// Another replica takes the Lease.
	lease.Spec.HolderIdentity = ptr.To("other")
	lease.Spec.LeaseTransitions = ptr.To(*lease.Spec.LeaseTransitions + 1)
	_, err := leases.Update(context.Background(), lease, metav1.UpdateOptions{})
	require.NoError(t, err)

	select {
	case err := <-done:
		assert.ErrorIs(t, err, leader.ErrLeadershipLost)
	case <-time.After(15 * time.Second):
		t.Fatal("the process went on after its reconciler lost the Lease")
	}
	// One campaign: the Lease was acquired once (created), never again.
	acquires := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "leases" && a.GetVerb() == "create" {
			acquires++
		}
	}
	assert.Equal(t, 1, acquires)
	l, err := leases.Get(context.Background(), "fastover-reconciler", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "other", *l.Spec.HolderIdentity, "the lost replica did not write the Lease again")
}

// TestPlannedStopReturnsNil: on SIGTERM (ctx ends) the reconciler hands
// the Lease over and the process exits cleanly.
func TestPlannedStopReturnsNil(t *testing.T) {
	client := fake.NewClientset()
	r := &reconcileRunner{
		cfg: &reconcileConfig{namespace: "fastover-system", lease: "fastover-reconciler", identity: "me",
			leaseDuration: 2 * time.Second, renewDeadline: 1500 * time.Millisecond, retryPeriod: 200 * time.Millisecond},
		client: client,
		rec:    &retrofit.Reconciler{Client: client, Logger: logr.Discard()},
		log:    logr.Discard(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.runBeside(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil }) }()
	require.Eventually(t, func() bool {
		l, err := client.CoordinationV1().Leases("fastover-system").Get(context.Background(), "fastover-reconciler", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("runBeside did not return when its context ended")
	}
	l, err := client.CoordinationV1().Leases("fastover-system").Get(context.Background(), "fastover-reconciler", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Nil(t, l.Spec.HolderIdentity, "the Lease was released")
}

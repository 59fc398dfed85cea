package main

import (
	"crypto/tls"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFlagsDefaults(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 9443, c.opts.Port)
	assert.Equal(t, ":8080", c.opts.MetricsBindAddress)
	assert.Equal(t, ":8081", c.opts.HealthProbeBindAddress)
	assert.Equal(t, uint16(tls.VersionTLS12), c.opts.TLSMinVersion)
	assert.False(t, c.opts.EnableHTTP2)
	assert.Equal(t, int64(0), c.opts.Rule.TolerationSeconds)
	assert.Nil(t, c.opts.Rule.NotReadyTolerationSeconds)
	assert.Equal(t, int64(300), c.opts.Rule.DefaultTolerationSeconds)
	assert.False(t, c.reconcile.enabled, "the reconciler is opt-in")
	assert.Equal(t, "fastover-reconciler", c.reconcile.lease)
}

func TestParseFlagsReconcile(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "ops")
	c, err := parseFlags([]string{"--reconcile", "--reconcile-qps=5", "--leader-lease-duration=4s"}, io.Discard)
	require.NoError(t, err)
	assert.True(t, c.reconcile.enabled)
	assert.InDelta(t, 5.0, c.reconcile.qps, 0)
	assert.Equal(t, "ops", c.reconcile.namespace)
	assert.Equal(t, "4s", c.reconcile.leaseDuration.String())
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"--toleration-seconds=5", "--not-ready-toleration-seconds=0", "--cert-dir=/c", "--tls-min-version=1.3"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, int64(5), c.opts.Rule.TolerationSeconds)
	require.NotNil(t, c.opts.Rule.NotReadyTolerationSeconds)
	assert.Equal(t, int64(0), *c.opts.Rule.NotReadyTolerationSeconds)
	assert.Equal(t, "/c", c.opts.CertDir)
	assert.Equal(t, uint16(tls.VersionTLS13), c.opts.TLSMinVersion)
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--toleration-seconds=-1"},
		{"--not-ready-toleration-seconds=-2"},
		{"--not-ready-toleration-seconds=soon"},
		{"--tls-min-version=1.1"},
		{"--no-such-flag"},
		{"extra"},
		{"--reconcile", "--reconcile-qps=0"},
	} {
		_, err := parseFlags(args, io.Discard)
		assert.Error(t, err, "%v", args)
	}
}

func TestParseFlagsShutdown(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, c.opts.ShutdownDelay)
	assert.Equal(t, 15*time.Second, c.opts.ShutdownTimeout)

	c, err = parseFlags([]string{"--shutdown-delay=0", "--shutdown-timeout=3s"}, io.Discard)
	require.NoError(t, err)
	assert.Negative(t, c.opts.ShutdownDelay, "0 is no delay, not the option's default")
	assert.Equal(t, 3*time.Second, c.opts.ShutdownTimeout)

	for _, args := range [][]string{{"--shutdown-delay=-1s"}, {"--shutdown-timeout=0"}, {"--shutdown-delay=soon"}} {
		_, err := parseFlags(args, io.Discard)
		assert.Error(t, err, "%v", args)
	}
}

package webhook

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/certs"
)

// gauges reads the registry's gauges without labels, by name.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.Gauge != nil && len(m.GetLabel()) == 0 {
				out[f.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// The certificate's expiry is exported twice: the file's, read at each
// scrape, and the served one's, from the moment the server serves; a
// renewed file shows at once, and the served one follows once the watcher
// has loaded it.
func TestCertificateExpiryMetrics(t *testing.T) {
	const (
		served = "fastover_webhook_certificate_expiry_timestamp_seconds"
		file   = "fastover_webhook_certificate_file_expiry_timestamp_seconds"
	)
	ca, err := certs.NewCA("test-ca", 48*time.Hour)
	require.NoError(t, err)
	first, err := ca.Issue([]string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, certs.WriteDir(dir, first, ca))
	notAfter := func(kp *certs.KeyPair) float64 {
		n, err := pemNotAfter(kp.CertPEM)
		require.NoError(t, err)
		return float64(n)
	}

	reg := prometheus.NewRegistry()
	srv, err := NewServer(Options{
		Host: "127.0.0.1", Port: freePort(t), CertDir: dir,
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", ShutdownDelay: -1, Registry: reg,
	})
	require.NoError(t, err)
	g := gauges(t, reg)
	assert.Equal(t, notAfter(first), g[file])
	assert.NotContains(t, g, served, "nothing is served before Start")

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Start(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-stopped)
	}()
	require.Eventually(t, func() bool { return gauges(t, reg)[served] == notAfter(first) }, 10*time.Second, 10*time.Millisecond)

	// Renewed on disk: the file's expiry moves at once, the served one
	// once the watcher has read the new pair.
	second, err := ca.Issue([]string{"127.0.0.1"}, 2*time.Hour)
	require.NoError(t, err)
	require.NoError(t, certs.WriteDir(dir, second, ca))
	assert.Equal(t, notAfter(second), gauges(t, reg)[file])
	require.Eventually(t, func() bool { return gauges(t, reg)[served] == notAfter(second) }, 30*time.Second, 50*time.Millisecond,
		"the renewed certificate is served")

	// A file that cannot be read: its gauge is absent, the served one stays.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("not PEM"), 0o600))
	g = gauges(t, reg)
	assert.NotContains(t, g, file)
	assert.Equal(t, notAfter(second), g[served])
}

func TestFileNotAfterRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	_, err := fileNotAfter(filepath.Join(dir, "missing"))
	assert.Error(t, err)
	for name, data := range map[string]string{
		"empty":   "",
		"key":     "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"garbage": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
	} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
		_, err := fileNotAfter(path)
		assert.Error(t, err, name)
	}
}

// The certificate file is input the webhook does not control: whatever it
// holds, reading its expiry returns an error or a time, never a panic.
func FuzzPEMNotAfter(f *testing.F) {
	ca, err := certs.NewCA("fuzz-ca", time.Hour)
	require.NoError(f, err)
	f.Add(ca.CertPEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = pemNotAfter(data)
	})
}

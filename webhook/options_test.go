package webhook

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/toleration"
)

func TestOptionsValidate(t *testing.T) {
	assert.NoError(t, Options{CertDir: "d"}.Validate(), "zero values are the defaults")
	assert.NoError(t, Options{CertDir: "d", TLSMinVersion: tls.VersionTLS13, MetricsBindAddress: "0", HealthProbeBindAddress: "127.0.0.1:0",
		ShutdownDelay: -1, RuleFile: "/etc/fastover/rule/rule.yaml"}.Validate())

	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no certificate directory", Options{}, "Options.CertDir: required"},
		{"port", Options{CertDir: "d", Port: 70000}, "Options.Port: want 1-65535"},
		{"TLS", Options{CertDir: "d", TLSMinVersion: tls.VersionTLS11}, "Options.TLSMinVersion: want tls.VersionTLS12 or tls.VersionTLS13"},
		{"metrics address", Options{CertDir: "d", MetricsBindAddress: "8080"}, `Options.MetricsBindAddress: want host:port`},
		{"probe port", Options{CertDir: "d", HealthProbeBindAddress: ":http"}, `Options.HealthProbeBindAddress: want a port number`},
		{"request bytes", Options{CertDir: "d", MaxRequestBytes: -1}, "Options.MaxRequestBytes: must not be negative"},
		{"small above max", Options{CertDir: "d", MaxRequestBytes: 10, SmallRequestBytes: 20}, "Options.SmallRequestBytes: must not exceed MaxRequestBytes (10)"},
		{"connections", Options{CertDir: "d", MaxConnections: 4, MaxRequestsInFlight: 8}, "Options.MaxConnections: must be at least the requests in flight (MaxRequestsInFlight 8 + MaxLargeRequestsInFlight 2), got 4"},
		{"timeout", Options{CertDir: "d", ReadTimeout: -time.Second}, "Options.ReadTimeout: must not be negative"},
		{"reload interval", Options{CertDir: "d", RuleReloadInterval: -time.Second}, "Options.RuleReloadInterval: must not be negative"},
		{"rule", Options{CertDir: "d", Rule: &toleration.Rule{TolerationSeconds: -1}}, "Options.Rule: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// Every problem at once, one a line, each naming its field.
	err := Options{Port: -1, MaxRequestBytes: -1, MaxConnections: -1, IdleTimeout: -1, TLSMinVersion: 1}.Validate()
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	for _, field := range []string{"Port", "CertDir", "TLSMinVersion", "MaxRequestBytes", "MaxConnections", "IdleTimeout"} {
		assert.Contains(t, err.Error(), "Options."+field+": ")
	}
	for _, l := range lines {
		assert.True(t, strings.HasPrefix(l, "Options."), "%q does not name its field", l)
	}
	assert.Len(t, lines, 6)
}

// TestNewServerRuleFile: NewServer reads the rule file; a bad one is an
// error that names the file and the field.
func TestNewServerRuleFile(t *testing.T) {
	dir := t.TempDir()
	path := writeRule(t, dir, ruleHeader+"tolerationSeconds: 9\n")
	srv, err := NewServer(Options{CertDir: "d", RuleFile: path, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	assert.Equal(t, int64(9), srv.Rules().Rule().TolerationSeconds)

	writeRule(t, dir, ruleHeader+"tolerationSeconds: nine\n")
	_, err = NewServer(Options{CertDir: "d", RuleFile: path, Registry: prometheus.NewRegistry()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "tolerationSeconds: want a whole number")

	_, err = NewServer(Options{CertDir: "d", RuleFile: dir + "/none.yaml", Registry: prometheus.NewRegistry()})
	assert.ErrorContains(t, err, "no such file")
}

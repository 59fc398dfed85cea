package leader

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func validConfig() Config {
	return Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "l", Identity: "a"}
}

func TestValidate(t *testing.T) {
	assert.NoError(t, validConfig().Validate())
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no client", func(c *Config) { c.Client = nil }, "no Client"},
		{"no namespace", func(c *Config) { c.Namespace = "" }, "no Namespace"},
		{"no lease", func(c *Config) { c.LeaseName = "" }, "no LeaseName"},
		{"sub-second lease", func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 500*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond
		}, "at least 1s"},
		{"fractional lease", func(c *Config) { c.LeaseDuration = 2500 * time.Millisecond }, "whole seconds"},
		{"deadline not under lease", func(c *Config) { c.RenewDeadline = 15 * time.Second }, "less than LeaseDuration"},
		{"retry too long for the deadline", func(c *Config) { c.RetryPeriod = 9 * time.Second }, "1.2 × RetryPeriod"},
		{"negative retry", func(c *Config) { c.RetryPeriod = -time.Second }, "positive"},
		{"service without address", func(c *Config) { c.Service = "svc" }, "no Address"},
		{"bad address", func(c *Config) { c.Service, c.Address = "svc", "not-an-ip" }, "not an IP address"},
		{"bad port", func(c *Config) {
			c.Service, c.Address = "svc", "10.0.0.1"
			c.Ports = []discoveryv1.EndpointPort{{Port: ptr.To[int32](0)}}
		}, "1-65535"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("POD_IP", "")
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			assert.ErrorContains(t, err, tt.want)
			_, err = New(c)
			assert.ErrorContains(t, err, tt.want, "New validates too")
		})
	}
}

func TestDefaultsFromDownwardAPI(t *testing.T) {
	t.Setenv("POD_NAME", "ctl-0")
	t.Setenv("POD_IP", "10.1.2.3")
	t.Setenv("NODE_NAME", "node-a")
	c := Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "l", Service: "svc"}.withDefaults()
	assert.Regexp(t, `^ctl-0_[0-9a-f]{8}$`, c.Identity)
	assert.Equal(t, "10.1.2.3", c.Address)
	assert.Equal(t, "ctl-0", c.PodName)
	assert.Equal(t, "node-a", c.NodeName)
	assert.Equal(t, DefaultLeaseDuration, c.LeaseDuration)
	assert.Equal(t, DefaultRenewDeadline, c.RenewDeadline)
	assert.Equal(t, DefaultRetryPeriod, c.RetryPeriod)
	assert.NoError(t, c.Validate())
}

// Two renewals in the same second are two observations: a standby must
// restart its expiry clock on each, or it could take a Lease that was
// renewed less than a lease duration ago.
func TestRenewalsInOneSecondAreDistinct(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 10, 200_000_000, time.UTC)
	a := testLease("7", "x", 4, 0, base)
	b := testLease("8", "x", 4, 0, base.Add(500*time.Millisecond))

	cfg := validConfig().withDefaults()
	e := newElection(&cfg)
	t0 := time.Now()
	e.observe(a, t0)
	e.observe(b, t0.Add(500*time.Millisecond))
	assert.Equal(t, t0.Add(500*time.Millisecond).Add(4*time.Second), e.expiry())
	// The same version again is not news.
	e.observe(b, t0.Add(time.Second))
	assert.Equal(t, t0.Add(500*time.Millisecond).Add(4*time.Second), e.expiry())
}

func TestDefaultIdentityIsUniquePerCall(t *testing.T) {
	t.Setenv("POD_NAME", "ctl-0")
	a, b := DefaultIdentity(), DefaultIdentity()
	assert.Regexp(t, `^ctl-0_[0-9a-f]{8}$`, a)
	assert.NotEqual(t, a, b, "a Pod recreated under the same name must not reuse the identity")
	e1, err := New(Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "l"})
	assert.NoError(t, err)
	e2, err := New(Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "l"})
	assert.NoError(t, err)
	assert.NotEqual(t, e1.Identity(), e2.Identity())
}

// Addresses the EndpointSlice API refuses fail Validate, instead of every
// write of the slice failing for good.
func TestValidateAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"fe80::1%eth0":     "zone",
		"127.0.0.1":        "loopback",
		"::1":              "loopback",
		"0.0.0.0":          "unspecified",
		"::":               "unspecified",
		"169.254.1.1":      "link-local",
		"fe80::1":          "link-local",
		"224.0.0.1":        "multicast",
		"ff02::1":          "multicast",
		"::ffff:127.0.0.1": "loopback",
		"10.0.0.1.":        "not an IP address",
	} {
		t.Run(addr, func(t *testing.T) {
			c := validConfig()
			c.Service, c.Address = "svc", addr
			assert.ErrorContains(t, c.Validate(), want)
		})
	}
	for _, addr := range []string{"10.1.2.3", "192.0.2.7", "2001:db8::7", "::ffff:10.1.2.3"} {
		c := validConfig()
		c.Service, c.Address = "svc", addr
		assert.NoError(t, c.Validate(), addr)
	}
}

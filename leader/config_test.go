package leader

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
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
		{"no client", func(c *Config) { c.Client = nil }, "Config.Client: required"},
		{"no namespace", func(c *Config) { c.Namespace = "" }, "Config.Namespace: required"},
		{"no lease", func(c *Config) { c.LeaseName = "" }, "Config.LeaseName: required"},
		{"sub-second lease", func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 500*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond
		}, "Config.LeaseDuration: 500ms must be at least 1s"},
		{"fractional lease", func(c *Config) { c.LeaseDuration = 2500 * time.Millisecond }, "Config.LeaseDuration: 2.5s must be whole seconds"},
		{"deadline not under lease", func(c *Config) { c.RenewDeadline = 15 * time.Second }, "Config.RenewDeadline: 15s must be less than LeaseDuration"},
		{"retry too long for the deadline", func(c *Config) { c.RetryPeriod = 9 * time.Second }, "Config.RenewDeadline: 10s must be greater than 1.2 × RetryPeriod"},
		{"negative retry", func(c *Config) { c.RetryPeriod = -time.Second }, "Config.RetryPeriod: -1s must be positive"},
		{"negative work stop timeout", func(c *Config) { c.WorkStopTimeout = -time.Second }, "Config.WorkStopTimeout: -1s must not be negative"},
		{"endpoint without service", func(c *Config) { c.Endpoint = &EndpointConfig{Address: "10.0.0.1"} }, "Config.Endpoint.Service: required"},
		{"service without address", func(c *Config) { c.Endpoint = &EndpointConfig{Service: "svc"} }, "Config.Endpoint.Address: required"},
		{"bad address", func(c *Config) { c.Endpoint = &EndpointConfig{Service: "svc", Address: "not-an-ip"} }, `Config.Endpoint.Address: "not-an-ip" is not an IP address`},
		{"bad port", func(c *Config) {
			c.Endpoint = &EndpointConfig{Service: "svc", Address: "10.0.0.1", Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](8443)}, {Port: ptr.To[int32](0)}}}
		}, "Config.Endpoint.Ports[1].Port: 0 must be 1-65535"},
		{"bad second address", func(c *Config) {
			c.Endpoint = &EndpointConfig{Service: "svc", Address: "10.0.0.1", Addresses: []string{"10.0.0.1", "fe80::1"}}
		}, `Config.Endpoint.Addresses[1]: "fe80::1" is link-local`},
		{"two addresses of a family", func(c *Config) {
			c.Endpoint = &EndpointConfig{Service: "svc", Address: "10.0.0.1", Addresses: []string{"fd00::1", "10.0.0.2"}}
		}, `Config.Endpoint.Addresses[1]: "10.0.0.2": the leader has 10.0.0.1 already, of the same family`},
		{"port without number", func(c *Config) {
			c.Endpoint = &EndpointConfig{Service: "svc", Address: "10.0.0.1", Ports: []discoveryv1.EndpointPort{{}}}
		}, "Config.Endpoint.Ports[0].Port: required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			assert.ErrorContains(t, err, tt.want)
			_, err = New(c)
			assert.ErrorContains(t, err, tt.want, "New validates too")
		})
	}
}

// Every problem at once, each naming its field.
func TestValidateReportsEveryProblem(t *testing.T) {
	err := Config{
		LeaseDuration: 1500 * time.Millisecond,
		Endpoint:      &EndpointConfig{Address: "::1", Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](70000)}}},
	}.Validate()
	require.Error(t, err)
	for _, want := range []string{
		"Config.Client: required",
		"Config.Namespace: required",
		"Config.LeaseName: required",
		"Config.LeaseDuration: 1.5s must be whole seconds",
		"Config.RenewDeadline: 10s must be less than LeaseDuration 1.5s",
		"Config.Endpoint.Service: required",
		`Config.Endpoint.Address: "::1" is a loopback address`,
		"Config.Endpoint.Ports[0].Port: 70000 must be 1-65535",
	} {
		assert.ErrorContains(t, err, want)
	}
	assert.Len(t, err.(interface{ Unwrap() []error }).Unwrap(), 8)
}

// Validate and the defaults read no environment: the downward API is read
// by EndpointFromEnv alone.
func TestValidateReadsNoEnvironment(t *testing.T) {
	t.Setenv("POD_IP", "10.1.2.3")
	c := validConfig()
	c.Endpoint = &EndpointConfig{Service: "svc"}
	assert.ErrorContains(t, c.Validate(), "Config.Endpoint.Address: required")
	assert.Empty(t, c.withDefaults().Endpoint.Address)
}

func TestDefaultsFromDownwardAPI(t *testing.T) {
	t.Setenv("POD_NAME", "ctl-0")
	t.Setenv("POD_IP", "10.1.2.3")
	t.Setenv("NODE_NAME", "node-a")
	t.Setenv("POD_IPS", "10.1.2.3, fd00::3")
	ep := EndpointFromEnv("svc")
	assert.Equal(t, &EndpointConfig{Service: "svc", Address: "10.1.2.3", Addresses: []string{"10.1.2.3", "fd00::3"}, PodName: "ctl-0", NodeName: "node-a"}, ep)
	c := Config{Client: fake.NewClientset(), Namespace: "ns", LeaseName: "l", Endpoint: ep}.withDefaults()
	assert.Equal(t, DefaultLeaseDuration, c.LeaseDuration)
	assert.Equal(t, DefaultRenewDeadline, c.RenewDeadline)
	assert.Equal(t, DefaultRetryPeriod, c.RetryPeriod)
	assert.Equal(t, DefaultWorkStopTimeout, c.WorkStopTimeout)
	assert.Equal(t, clock.RealClock{}, c.Clock)
	assert.NoError(t, c.Validate())
	el, err := New(c)
	require.NoError(t, err)
	assert.Regexp(t, `^ctl-0_[0-9a-f]{8}$`, el.Identity(), "New picks DefaultIdentity()")
}

// Two renewals in the same second are two observations: a standby must
// restart its expiry clock on each, or it could take a Lease that was
// renewed less than a lease duration ago.
func TestRenewalsInOneSecondAreDistinct(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 10, 200_000_000, time.UTC)
	a := testLease("7", "x", 4, 0, base)
	b := testLease("8", "x", 4, 0, base.Add(500*time.Millisecond))

	cfg := validConfig().withDefaults()
	e := newLeaseState(&cfg)
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
			c.Endpoint = &EndpointConfig{Service: "svc", Address: addr}
			assert.ErrorContains(t, c.Validate(), want)
		})
	}
	for _, addr := range []string{"10.1.2.3", "192.0.2.7", "2001:db8::7", "::ffff:10.1.2.3"} {
		c := validConfig()
		c.Endpoint = &EndpointConfig{Service: "svc", Address: addr}
		assert.NoError(t, c.Validate(), addr)
	}
}

package leader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults, the same as client-go's leader election.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultWorkStopTimeout bounds how long a stepping-down leader waits
	// for its work to return (on a planned stop it renews the Lease
	// meanwhile) before it gives up releasing the Lease, which then
	// expires; the process should exit.
	DefaultWorkStopTimeout = 30 * time.Second
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// leader's EndpointSlice. (The design named it "fastover.io/leader", which
// is not a valid label value: a value cannot hold a slash. This follows the
// upstream form, as in "endpointslice-controller.k8s.io".)
const ManagedBy = "leader.fastover.io"

// Config configures an Elector. Zero values mean the defaults; Validate
// reports what is wrong. Neither reads the environment: the defaults of
// Identity and Pod are picked by New, and EndpointFromEnv reads the
// downward API.
type Config struct {
	// Client reaches the API server. Required.
	Client kubernetes.Interface
	// Namespace of the Lease and the Service. Required.
	Namespace string
	// LeaseName is the name of the Lease. Required.
	LeaseName string
	// Identity names this replica in the Lease. It must be unique to this
	// process: two processes under one identity could both act, since a
	// replica trusts a record that names it. If empty, New uses
	// DefaultIdentity(). A given Identity is used as it is; a record
	// naming it that this process did not write is still waited out like
	// another holder's.
	Identity string

	// LeaseDuration is how long a Lease lasts after its last renewal for
	// the replicas that wait for it (default 15s). RenewDeadline is how
	// long the leader goes on without a successful renewal before it stops
	// its work (default 10s); it must be less than LeaseDuration.
	// RetryPeriod is the interval of renewals (default 2s).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// WorkStopTimeout, see DefaultWorkStopTimeout.
	WorkStopTimeout time.Duration

	// Endpoint, if set, makes the leader publish itself as the only
	// endpoint of a Service. Nil: election only.
	Endpoint *EndpointConfig

	// Pod is the Pod and container this replica runs in: each of its
	// terms records them on the Lease, so that standbys take over the
	// moment the kubelet reports this process ended (crash takeover: an
	// OOM kill, a panic, a failed liveness probe on a healthy node), not
	// when the Lease expires. Nil means PodFromEnv() ($POD_NAME and the
	// rest, which New reads); nil there too (not in a Pod), and the Lease
	// decides, as it does for a lost node.
	Pod *PodConfig
	// DisableCrashTakeover turns crash takeover off: this replica neither
	// records its Pod nor watches the leader's; failover waits for the
	// Lease to expire (or to be released), as client-go's does.
	DisableCrashTakeover bool

	// Prepare, if set, is this replica's standby-time work, and the
	// condition it meets before it competes for the Lease: Run calls it
	// once, at its start, and campaigns only once Prepare has returned
	// nil. It is the place to start informers and wait for their caches
	// to sync, open connections, load state: whatever the work needs,
	// done while another replica leads, so that this one's work starts
	// warm the moment it takes over, and so that a cold replica never
	// takes the Lease from under a warm one. Its context lives until Run
	// returns (across the term, so informers started with it keep running
	// for the work), and ends early if Run's context ends while Prepare
	// runs; Prepare must then return. An error from Prepare ends Run with
	// that error (the process should exit). Ready fails until Prepare has
	// returned, so a rolling update waits for the new replica to be warm.
	Prepare func(ctx context.Context) error

	// OnNewLeader, if set, is called with the identity of each new leader
	// this replica observes, itself included.
	OnNewLeader func(identity string)
	// Metrics, if set, receives the elector's metrics.
	Metrics *Metrics
	// EventRecorder records Events on the Lease and the Service. Default:
	// a recorder that writes them through Client.
	EventRecorder record.EventRecorder
	// Logger logs; the zero Logger means klog's. logr.Discard() is the
	// zero Logger too: to log nothing, give one whose sink drops
	// everything, such as funcr.New(func(string, string) {}, funcr.Options{}).
	Logger logr.Logger
	// Clock tells the time and makes the timers of the elector; default
	// the real clock. Tests give a fake one.
	Clock clock.Clock
}

// EndpointConfig is what the leader publishes, and where.
type EndpointConfig struct {
	// Service is the Service the leader publishes itself in, as its only
	// endpoint. It must have no selector, unless RemoveSelector. Required.
	Service string
	// Address is the IP address the leader publishes. Required.
	Address string
	// Addresses are the leader's addresses, one per family at most
	// ($POD_IPS, which EndpointFromEnv reads); Address need not be among
	// them. For a Service of two families (spec.ipFamilies), the leader
	// publishes its address of each, one EndpointSlice per family, as
	// the endpointslice controller does; a Service of one family gets
	// the leader's address of that family.
	Addresses []string
	// Ports are the ports of the published endpoint. Default: one per port
	// of the Service, with its name and protocol, and its targetPort: a
	// number as it is, a name resolved as the endpointslice controller
	// does, from the ports of the leader's own Pod (PodName; the Role
	// then needs get on pods, which PolicyRules gives when Ports is
	// empty). A name that cannot be resolved is reported (error, Warning
	// Event NamedTargetPort) and nothing is published.
	Ports []discoveryv1.EndpointPort
	// PodName and NodeName, if set, fill the endpoint's targetRef and
	// nodeName; PodName also resolves named targetPorts.
	PodName  string
	NodeName string
	// SkipEndpoints stops the leader from maintaining an Endpoints object
	// (core/v1) for the Service. By default it maintains one, named as
	// the Service, with its address and ports, labelled
	// endpointslice.kubernetes.io/skip-mirror=true so that the
	// EndpointSlice mirroring controller leaves it alone, and withdrawn
	// with the slice on a planned stop: readers of the Endpoints API
	// (Prometheus' endpoints role, older ingress controllers) see the
	// leader as EndpointSlice readers do. With SkipEndpoints, a stale
	// Endpoints object (from selector days) is deleted instead, and the
	// Role needs only delete on endpoints.
	SkipEndpoints bool
	// RemoveSelector lets the leader remove the Service's selector, the
	// step that moves a Service from selector mode to this one. Without
	// it, a Service with a selector is reported (log and Event) and left
	// alone.
	RemoveSelector bool
	// Ready, if set, is waited for before the leader publishes its
	// endpoint in a term: the publisher calls it when the term begins,
	// with a context that ends with the term, and publishes once it
	// returns nil. It is for a leader whose work cannot serve at once (a
	// process started only when leading, as cmd/fastover-run does):
	// traffic reaches the leader only once it can answer. Meanwhile the
	// previous leader's endpoint stays published, or is withdrawn by it on
	// a planned stop after RetryPeriod. An error is logged and nothing is
	// published in that term; the work decides whether the term goes on.
	Ready func(ctx context.Context) error
}

// EndpointFromEnv returns the endpoint of a replica that runs in a Pod,
// for service: Address, PodName and NodeName are $POD_IP, $POD_NAME and
// $NODE_NAME, which the Pod sets from the downward API (status.podIP,
// metadata.name, spec.nodeName). The caller may change any field after.
func EndpointFromEnv(service string) *EndpointConfig {
	return &EndpointConfig{
		Service:   service,
		Address:   os.Getenv("POD_IP"),
		Addresses: splitIPs(os.Getenv("POD_IPS")),
		PodName:   os.Getenv("POD_NAME"),
		NodeName:  os.Getenv("NODE_NAME"),
	}
}

// splitIPs splits a comma-separated list of addresses ($POD_IPS).
func splitIPs(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// DefaultIdentity returns an identity unique to this process: $POD_NAME,
// else the host name, then "_" and 8 random hexadecimal digits, so that a
// Pod recreated under the same name (a StatefulSet's, after a force
// delete) or hostNetwork Pods sharing a host name never share one; "" if
// there is neither name. Each call returns a new one.
func DefaultIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	if name == "" {
		return ""
	}
	return fmt.Sprintf("%s_%08x", name, rand.Uint32())
}

// withDefaults returns the config with every default filled in, except
// Identity's (New's business).
func (c Config) withDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	if c.WorkStopTimeout == 0 {
		c.WorkStopTimeout = DefaultWorkStopTimeout
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return c
}

// Validate reports what is wrong with the config, defaults applied: every
// problem, in one error, each naming its field.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", "Config."+field, fmt.Sprintf(format, args...)))
	}
	if c.Client == nil {
		bad("Client", "required")
	}
	if c.Namespace == "" {
		bad("Namespace", "required")
	}
	if c.LeaseName == "" {
		bad("LeaseName", "required")
	}
	if c.LeaseDuration < time.Second {
		bad("LeaseDuration", "%v must be at least 1s (the Lease counts whole seconds)", c.LeaseDuration)
	}
	if c.LeaseDuration%time.Second != 0 {
		bad("LeaseDuration", "%v must be whole seconds (the Lease counts whole seconds)", c.LeaseDuration)
	}
	if c.RenewDeadline >= c.LeaseDuration {
		bad("RenewDeadline", "%v must be less than LeaseDuration %v, so the leader stops before another replica may take over", c.RenewDeadline, c.LeaseDuration)
	}
	if c.RetryPeriod <= 0 {
		bad("RetryPeriod", "%v must be positive", c.RetryPeriod)
	}
	// As client-go: RenewDeadline > JitterFactor(1.2) * RetryPeriod, so
	// more than one renewal fits in the deadline.
	if float64(c.RenewDeadline) <= 1.2*float64(c.RetryPeriod) {
		bad("RenewDeadline", "%v must be greater than 1.2 × RetryPeriod %v", c.RenewDeadline, c.RetryPeriod)
	}
	if c.Pod != nil && c.Pod.Name == "" {
		bad("Pod.Name", "required with Pod")
	}
	if c.WorkStopTimeout < 0 {
		bad("WorkStopTimeout", "%v must not be negative", c.WorkStopTimeout)
	}
	if ep := c.Endpoint; ep != nil {
		if ep.Service == "" {
			bad("Endpoint.Service", "required with Endpoint")
		}
		if ep.Address == "" {
			bad("Endpoint.Address", "required with Endpoint (EndpointFromEnv takes $POD_IP)")
		} else if err := validateAddress(ep.Address); err != nil {
			bad("Endpoint.Address", "%q %v", ep.Address, err)
		}
		first := map[discoveryv1.AddressType]string{}
		if addr, err := netip.ParseAddr(ep.Address); err == nil {
			first[addressType(addr.Unmap())] = addr.Unmap().String()
		}
		for i, a := range ep.Addresses {
			field := fmt.Sprintf("Endpoint.Addresses[%d]", i)
			if err := validateAddress(a); err != nil {
				bad(field, "%q %v", a, err)
				continue
			}
			addr := netip.MustParseAddr(a).Unmap()
			if seen, ok := first[addressType(addr)]; ok && seen != addr.String() {
				bad(field, "%q: the leader has %s already, of the same family; give one address per family", a, seen)
				continue
			}
			first[addressType(addr)] = addr.String()
		}
		for i, p := range ep.Ports {
			if p.Port == nil {
				bad(fmt.Sprintf("Endpoint.Ports[%d].Port", i), "required, 1-65535")
			} else if *p.Port < 1 || *p.Port > 65535 {
				bad(fmt.Sprintf("Endpoint.Ports[%d].Port", i), "%d must be 1-65535", *p.Port)
			}
		}
	}
	return errors.Join(errs...)
}

// validateAddress refuses what the EndpointSlice API refuses, and what no
// client could reach: the API would reject every write of the slice.
func validateAddress(s string) error {
	addr, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return errors.New("is not an IP address")
	case addr.Zone() != "":
		return errors.New("has a zone: an endpoint address cannot")
	}
	addr = addr.Unmap()
	switch {
	case addr.IsUnspecified():
		return errors.New("is unspecified: publish the Pod's own address")
	case addr.IsLoopback():
		return errors.New("is a loopback address: other nodes cannot reach it, and the EndpointSlice API refuses it")
	case addr.IsLinkLocalUnicast():
		return errors.New("is link-local: the EndpointSlice API refuses it")
	case addr.IsMulticast():
		return errors.New("is a multicast address: an endpoint must be unicast")
	}
	return nil
}

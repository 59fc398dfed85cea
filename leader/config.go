package leader

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
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

// Config configures an Elector. Zero values mean the defaults.
type Config struct {
	// Client reaches the API server. Required.
	Client kubernetes.Interface
	// Namespace of the Lease and the Service. Required.
	Namespace string
	// LeaseName is the name of the Lease. Required.
	LeaseName string
	// Identity names this replica in the Lease. It must be unique to this
	// process: two processes under one identity could both act, since a
	// replica trusts a record that names it. Default: $POD_NAME, else the
	// host name, followed by "_" and 8 random hexadecimal digits, so that
	// a Pod recreated under the same name (a StatefulSet's, after a force
	// delete) or hostNetwork Pods sharing a host name never share one. A
	// given Identity is used as it is; a record naming it that this
	// process did not write is still waited out like another holder's.
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

	// Service, if set, is the Service the leader publishes itself in, as
	// its only endpoint. It must have no selector, unless RemoveSelector.
	Service string
	// Address is the IP address the leader publishes. Default: $POD_IP.
	// Required with Service.
	Address string
	// Ports are the ports of the published endpoint. Default: one per port
	// of the Service, with its name and protocol, and its targetPort if
	// that is a number, else its port.
	Ports []discoveryv1.EndpointPort
	// PodName and NodeName, if set, fill the endpoint's targetRef and
	// nodeName. Defaults: $POD_NAME and $NODE_NAME.
	PodName  string
	NodeName string
	// RemoveSelector lets the leader remove the Service's selector, the
	// step that moves a Service from selector mode to this one. Without
	// it, a Service with a selector is reported (log and Event) and left
	// alone.
	RemoveSelector bool

	// OnNewLeader, if set, is called with the identity of each new leader
	// this replica observes, itself included.
	OnNewLeader func(identity string)
	// Metrics, if set, receives the elector's metrics.
	Metrics *Metrics
	// EventRecorder records Events on the Lease and the Service. Default:
	// a recorder that writes them through Client.
	EventRecorder record.EventRecorder
	// Logger logs; default klog's.
	Logger logr.Logger
}

// withDefaults returns the config with every default filled in.
func (c Config) withDefaults() Config {
	if c.Identity == "" {
		c.Identity = DefaultIdentity()
	}
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
	if c.Service != "" {
		if c.Address == "" {
			c.Address = os.Getenv("POD_IP")
		}
		if c.PodName == "" {
			c.PodName = os.Getenv("POD_NAME")
		}
		if c.NodeName == "" {
			c.NodeName = os.Getenv("NODE_NAME")
		}
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	return c
}

// DefaultIdentity returns an identity unique to this process: $POD_NAME,
// else the host name, then "_" and 8 random hexadecimal digits; "" if
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

// Validate reports what is wrong with the config, defaults applied: all of
// it, in one error.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("no Client"))
	}
	if c.Namespace == "" {
		errs = append(errs, errors.New("no Namespace"))
	}
	if c.LeaseName == "" {
		errs = append(errs, errors.New("no LeaseName"))
	}
	if c.Identity == "" {
		errs = append(errs, errors.New("no Identity (and neither POD_NAME nor the host name gives one)"))
	}
	if c.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("LeaseDuration %v must be at least 1s (the Lease counts whole seconds)", c.LeaseDuration))
	}
	if c.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("LeaseDuration %v must be whole seconds (the Lease counts whole seconds)", c.LeaseDuration))
	}
	if c.RenewDeadline >= c.LeaseDuration {
		errs = append(errs, fmt.Errorf("RenewDeadline %v must be less than LeaseDuration %v, so the leader stops before another replica may take over", c.RenewDeadline, c.LeaseDuration))
	}
	if c.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("RetryPeriod %v must be positive", c.RetryPeriod))
	}
	// As client-go: RenewDeadline > JitterFactor(1.2) * RetryPeriod, so
	// more than one renewal fits in the deadline.
	if float64(c.RenewDeadline) <= 1.2*float64(c.RetryPeriod) {
		errs = append(errs, fmt.Errorf("RenewDeadline %v must be greater than 1.2 × RetryPeriod %v", c.RenewDeadline, c.RetryPeriod))
	}
	if c.WorkStopTimeout < 0 {
		errs = append(errs, fmt.Errorf("WorkStopTimeout %v must not be negative", c.WorkStopTimeout))
	}
	if c.Service != "" {
		if c.Address == "" {
			errs = append(errs, errors.New("no Address with Service (and POD_IP is not set)"))
		} else if err := validateAddress(c.Address); err != nil {
			errs = append(errs, fmt.Errorf("address %q (Address) %w", c.Address, err))
		}
		for i, p := range c.Ports {
			if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
				errs = append(errs, fmt.Errorf("port %d (Ports[%d]) must be 1-65535", ptr.Deref(p.Port, 0), i))
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

package nodeloss

import (
	"fmt"
	"time"
)

// Flags are kube-controller-manager's flags the model follows, named as
// its command line names them. A managed control plane shows none of them:
// DefaultFlags are Kubernetes' defaults.
type Flags struct {
	// NodeMonitorPeriod is --node-monitor-period: the pause between two
	// passes over the nodes.
	NodeMonitorPeriod time.Duration
	// NodeMonitorGracePeriod is --node-monitor-grace-period: how long a
	// node's Lease may go unrenewed before it is marked Unknown.
	NodeMonitorGracePeriod time.Duration
	// NodeEvictionRate is --node-eviction-rate: taints per second per zone.
	NodeEvictionRate float64
	// SecondaryNodeEvictionRate is --secondary-node-eviction-rate: the rate
	// in a partially disrupted zone of more than LargeClusterSizeThreshold
	// nodes.
	SecondaryNodeEvictionRate float64
	// UnhealthyZoneThreshold is --unhealthy-zone-threshold: the fraction of
	// a zone's nodes not Ready (more than 2 of them) from which it is
	// partially disrupted.
	UnhealthyZoneThreshold float64
	// LargeClusterSizeThreshold is --large-cluster-size-threshold: a
	// partially disrupted zone of at most this many nodes gets no taints.
	LargeClusterSizeThreshold int
	// KubeAPIQPS and KubeAPIBurst are --kube-api-qps and --kube-api-burst:
	// each controller's client's rate limit.
	KubeAPIQPS   float64
	KubeAPIBurst int
	// LeaseCircuitBreaker is the NodeControllerLeaseCircuitBreaker feature
	// gate (--feature-gates; beta and on from v1.37, absent before): each
	// pass reads, from the API server, the Lease of every node whose grace
	// period has run out, Unknown ones included, one request each through
	// the controller's client, before it marks the node.
	LeaseCircuitBreaker bool
}

// DefaultFlags returns Kubernetes' defaults (v1.37).
func DefaultFlags() Flags {
	return Flags{
		NodeMonitorPeriod:         5 * time.Second,
		NodeMonitorGracePeriod:    50 * time.Second,
		NodeEvictionRate:          0.1,
		SecondaryNodeEvictionRate: 0.01,
		UnhealthyZoneThreshold:    0.55,
		LargeClusterSizeThreshold: 50,
		KubeAPIQPS:                20,
		KubeAPIBurst:              30,
		LeaseCircuitBreaker:       true,
	}
}

// Validate says which flag has a value kube-controller-manager would not
// run with, or the model cannot (a rate limit of no requests).
func (f Flags) Validate() error {
	switch {
	case f.NodeMonitorPeriod <= 0:
		return fmt.Errorf("--node-monitor-period %v: must be positive", f.NodeMonitorPeriod)
	case f.NodeMonitorGracePeriod <= 0:
		return fmt.Errorf("--node-monitor-grace-period %v: must be positive", f.NodeMonitorGracePeriod)
	case !(f.NodeEvictionRate >= 0):
		return fmt.Errorf("--node-eviction-rate %v: must not be negative", f.NodeEvictionRate)
	case !(f.SecondaryNodeEvictionRate >= 0):
		return fmt.Errorf("--secondary-node-eviction-rate %v: must not be negative", f.SecondaryNodeEvictionRate)
	case !(f.UnhealthyZoneThreshold > 0 && f.UnhealthyZoneThreshold <= 1):
		return fmt.Errorf("--unhealthy-zone-threshold %v: want a fraction above 0 and at most 1", f.UnhealthyZoneThreshold)
	case f.LargeClusterSizeThreshold < 0:
		return fmt.Errorf("--large-cluster-size-threshold %d: must not be negative", f.LargeClusterSizeThreshold)
	case !(f.KubeAPIQPS > 0):
		return fmt.Errorf("--kube-api-qps %v: must be positive", f.KubeAPIQPS)
	case f.KubeAPIBurst < 1:
		return fmt.Errorf("--kube-api-burst %d: must be at least 1", f.KubeAPIBurst)
	}
	return nil
}

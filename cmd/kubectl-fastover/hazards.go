package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/retrofit/nodeloss"
)

// hazardFlags are audit's flags for the zone checks: kube-controller-manager's
// values, which the audit cannot read from the cluster.
type hazardFlags struct {
	th retrofit.ZoneThresholds
	// model are the node lifecycle model's other flags; lose is --lose.
	model nodeloss.Flags
	lose  string
	loss  *retrofit.Loss
	// report and prediction are the audit's, once find has run.
	report     *retrofit.HazardReport
	prediction *retrofit.LossPrediction
}

func (h *hazardFlags) addFlags(flags *pflag.FlagSet) {
	h.th = retrofit.DefaultZoneThresholds()
	h.model = nodeloss.DefaultFlags()
	flags.Float64Var(&h.th.Unhealthy, "unhealthy-zone-threshold", h.th.Unhealthy,
		"kube-controller-manager's --unhealthy-zone-threshold, for the zone checks and the node loss model")
	flags.IntVar(&h.th.LargeCluster, "large-cluster-size-threshold", h.th.LargeCluster,
		"kube-controller-manager's --large-cluster-size-threshold, for the zone checks and the node loss model")
	flags.StringVar(&h.lose, "lose", "",
		"predict a loss of nodes now: N (N nodes of the largest zone), zone=ZONE, zone=ZONE:N or nodes=NAME,...")
	flags.DurationVar(&h.model.NodeMonitorGracePeriod, "node-monitor-grace-period", h.model.NodeMonitorGracePeriod,
		"kube-controller-manager's --node-monitor-grace-period, for the node loss model")
	flags.DurationVar(&h.model.NodeMonitorPeriod, "node-monitor-period", h.model.NodeMonitorPeriod,
		"kube-controller-manager's --node-monitor-period, for the node loss model")
	flags.Float64Var(&h.model.NodeEvictionRate, "node-eviction-rate", h.model.NodeEvictionRate,
		"kube-controller-manager's --node-eviction-rate (taints per second per zone), for the node loss model")
	flags.Float64Var(&h.model.SecondaryNodeEvictionRate, "secondary-node-eviction-rate", h.model.SecondaryNodeEvictionRate,
		"kube-controller-manager's --secondary-node-eviction-rate, for the node loss model")
	flags.Float64Var(&h.model.KubeAPIQPS, "kube-api-qps", h.model.KubeAPIQPS,
		"kube-controller-manager's --kube-api-qps, for the node loss model")
	flags.IntVar(&h.model.KubeAPIBurst, "kube-api-burst", h.model.KubeAPIBurst,
		"kube-controller-manager's --kube-api-burst, for the node loss model")
	flags.BoolVar(&h.model.LeaseCircuitBreaker, "lease-circuit-breaker", h.model.LeaseCircuitBreaker,
		"kube-controller-manager's NodeControllerLeaseCircuitBreaker feature gate (on from Kubernetes 1.37; false for older control planes), for the node loss model")
}

func (h *hazardFlags) validate() error {
	if !(h.th.Unhealthy > 0 && h.th.Unhealthy <= 1) {
		return fmt.Errorf("--unhealthy-zone-threshold %v: want a fraction above 0 and at most 1", h.th.Unhealthy)
	}
	if h.th.LargeCluster < 0 {
		return fmt.Errorf("--large-cluster-size-threshold %d: must not be negative", h.th.LargeCluster)
	}
	h.model.UnhealthyZoneThreshold, h.model.LargeClusterSizeThreshold = h.th.Unhealthy, h.th.LargeCluster
	if err := h.model.Validate(); err != nil {
		return err
	}
	h.loss = nil
	if h.lose != "" {
		l, err := retrofit.ParseLoss(h.lose)
		if err != nil {
			return err
		}
		h.loss = &l
	}
	return nil
}

// find checks the audit's findings for hazards, and predicts the loss of
// the nodes not Ready now, or of --lose's.
func (h *hazardFlags) find(ctx context.Context, client kubernetes.Interface, findings []retrofit.Finding) error {
	r, nodes := retrofit.Hazards(ctx, client, findings, h.th)
	h.report = &r
	if r.ZonesUnchecked != "" {
		if h.loss != nil {
			return fmt.Errorf("--lose: %s", r.ZonesUnchecked)
		}
		return nil
	}
	p, err := retrofit.PredictLoss(findings, nodes, h.model, h.loss, time.Now())
	if err != nil {
		return err
	}
	if len(p.Nodes) > 0 {
		h.prediction = &p
	}
	return nil
}

// printHazards writes, under the audit's table, the pods a short toleration
// does not bring back by themselves, grouped by what happens to them, each
// group with what to do instead; then the zones.
func printHazards(w io.Writer, r *retrofit.HazardReport, th retrofit.ZoneThresholds) error {
	if r == nil {
		return nil
	}
	if len(r.Pods) > 0 {
		_, _ = fmt.Fprintln(w, "\nWarning: the toleration does not bring these pods back from a lost node by itself (see docs/hazards.md):")
		type group struct {
			reason, advice string
			pods           []string
		}
		var groups []*group
		byReason := map[string]*group{}
		for _, h := range r.Pods {
			g, ok := byReason[h.Reason]
			if !ok {
				g = &group{reason: h.Reason, advice: h.Advice}
				byReason[h.Reason] = g
				groups = append(groups, g)
			}
			g.pods = append(g.pods, h.Namespace+"/"+h.Name)
		}
		for _, g := range groups {
			_, _ = fmt.Fprintf(w, "- %s:\n    %s\n  Instead: %s.\n", g.reason, strings.Join(g.pods, ", "), g.advice)
		}
	}
	if r.ZonesUnchecked != "" {
		_, err := fmt.Fprintf(w, "\nZones not checked: %s.\n", r.ZonesUnchecked)
		return err
	}
	if len(r.Zones) == 0 {
		return nil
	}
	_, _ = fmt.Fprintf(w, "\nZones (--unhealthy-zone-threshold %v, --large-cluster-size-threshold %d):\n", th.Unhealthy, th.LargeCluster)
	for _, z := range r.Zones {
		stops := "stop only if all its nodes and every other zone's are lost"
		if z.StopsAt > 0 {
			verb := "stop"
			if z.Nodes > th.LargeCluster {
				verb = "slow to --secondary-node-eviction-rate"
			}
			stops = fmt.Sprintf("%s when %d of its nodes are not ready at once", verb, z.StopsAt)
		}
		if _, err := fmt.Fprintf(w, "  %s: %s, %d not ready, %s; evictions %s (they %s)\n",
			retrofit.ZoneLabel(z.Name), plural(z.Nodes, "node"), z.NotReady, z.State, z.Evictions, stops); err != nil {
			return err
		}
	}
	return nil
}

// plural is "1 node", "2 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/retrofit/nodeloss"
)

// lossRows is how many lost nodes the table shows before it shows only
// the first and the last ones.
const lossRows = 20

// printLoss writes the node loss model's prediction: each lost node's
// taint and its audited pods' evictions, relative to now, the zones whose
// state changes, and the pods evicted late.
func printLoss(w io.Writer, p *retrofit.LossPrediction, f nodeloss.Flags) error {
	if p == nil {
		return nil
	}
	what := "the nodes not Ready now"
	if p.WhatIf != nil {
		what = "a loss of " + p.WhatIf.String() + " now, with the nodes not Ready now"
	}
	_, _ = fmt.Fprintf(w, "\nNode loss predicted for %s (kube-controller-manager's --node-monitor-grace-period %v, --node-eviction-rate %v, --secondary-node-eviction-rate %v; docs/hazards.md):\n",
		what, f.NodeMonitorGracePeriod, f.NodeEvictionRate, f.SecondaryNodeEvictionRate)
	rel := func(t *time.Time) string {
		if t == nil {
			return "never"
		}
		d := t.Sub(p.At).Round(100 * time.Millisecond)
		if d < 0 {
			return d.String()
		}
		return "+" + d.String()
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "  NODE\tZONE\tLOST\tUNKNOWN\tTAINTED\tAUDITED PODS EVICTED")
	for i, n := range p.Nodes {
		if len(p.Nodes) > lossRows && i >= lossRows-5 && i < len(p.Nodes)-5 {
			if i == lossRows-5 {
				_, _ = fmt.Fprintf(tw, "  ... %d more\t\t\t\t\t\n", len(p.Nodes)-lossRows)
			}
			continue
		}
		tainted := rel(n.Tainted)
		if n.Untainted != nil {
			tainted += " (off " + rel(n.Untainted) + ")"
		}
		_, _ = fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", n.Name, retrofit.ZoneLabel(n.Zone), rel(&n.Lost), rel(n.Unknown), tainted, evictions(n.Pods, rel))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(w, "  %s lost: the last taint %s, %d never tainted.\n", plural(len(p.Nodes), "node"), rel(p.LastTaint), p.NeverTainted)
	for _, z := range p.Zones {
		var steps []string
		for _, s := range z.States {
			steps = append(steps, fmt.Sprintf("%s %s (%v/s)", rel(&s.At), s.State, s.Rate))
		}
		_, _ = fmt.Fprintf(w, "  zone %s (%s): %s\n", retrofit.ZoneLabel(z.Name), plural(z.Nodes, "node"), strings.Join(steps, ", then "))
	}
	if f.NodeEvictionRate == 1 || f.SecondaryNodeEvictionRate == 1 {
		_, _ = fmt.Fprintln(w, "Warning: an eviction rate of exactly 1/s meets kubernetes#104639: a zone whose taint rate once went to 0 (every zone fully disrupted, or a zone of at most --large-cluster-size-threshold nodes partly disrupted) never taints again until kube-controller-manager restarts; the prediction assumes no such past. Any other rate (0.9, 2) avoids it.")
	}
	if p.Late == 0 {
		return nil
	}
	var late []string
	for _, n := range p.Nodes {
		for _, pod := range n.Pods {
			if pod.Late {
				late = append(late, fmt.Sprintf("%s/%s (%s)", pod.Namespace, pod.Name, rel(pod.Evicted)))
			}
		}
	}
	_, err := fmt.Fprintf(w, "Warning: %s evicted more than a minute later than a lone node's loss would evict %s, or never:\n    %s\n",
		plural(p.Late, "pod"), map[bool]string{true: "it", false: "them"}[p.Late == 1], strings.Join(late, ", "))
	return err
}

// evictions sums up the evictions of a node's audited pods.
func evictions(pods []retrofit.PodLoss, rel func(*time.Time) string) string {
	if len(pods) == 0 {
		return "-"
	}
	var first, last *time.Time
	never := 0
	for _, p := range pods {
		switch {
		case p.Evicted == nil:
			never++
		case first == nil:
			first, last = p.Evicted, p.Evicted
		default:
			if p.Evicted.Before(*first) {
				first = p.Evicted
			}
			if p.Evicted.After(*last) {
				last = p.Evicted
			}
		}
	}
	var parts []string
	if first != nil {
		span := rel(first)
		if !last.Equal(*first) {
			span += " to " + rel(last)
		}
		parts = append(parts, fmt.Sprintf("%d at %s", len(pods)-never, span))
	}
	if never > 0 {
		parts = append(parts, fmt.Sprintf("%d never", never))
	}
	return strings.Join(parts, ", ")
}

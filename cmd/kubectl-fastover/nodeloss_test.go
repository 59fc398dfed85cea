package main

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/retrofit"
	"github.com/fastover/fastover/retrofit/nodeloss"
)

func TestPrintLoss(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	p := &retrofit.LossPrediction{
		WhatIf: &retrofit.Loss{Zone: "eu/a", Count: 2},
		At:     now,
		Nodes: []retrofit.NodeLoss{
			{Name: "a-1", Zone: "eu/a", Lost: now, Unknown: at(55 * time.Second), Tainted: at(55100 * time.Millisecond), Pods: []retrofit.PodLoss{
				{Namespace: "shop", Name: "web-1", Toleration: "0s", Evicted: at(55100 * time.Millisecond)},
				{Namespace: "shop", Name: "old-1", Toleration: "300s (default)", Evicted: at(355100 * time.Millisecond)},
				{Namespace: "shop", Name: "db-0", Toleration: "forever"},
			}},
			{Name: "a-2", Zone: "eu/a", Lost: now.Add(-2 * time.Minute), Unknown: at(-70 * time.Second), Pods: []retrofit.PodLoss{
				{Namespace: "shop", Name: "web-2", Toleration: "0s", Late: true},
			}},
		},
		Zones: []retrofit.ZoneLoss{{Name: "eu/a", Nodes: 5, States: []retrofit.ZoneStateFrom{
			{At: now, State: retrofit.ZoneNormal, Rate: 0.1},
			{At: now.Add(55 * time.Second), State: retrofit.ZonePartialDisruption, Rate: 0},
		}}},
		Late:         1,
		LastTaint:    at(55100 * time.Millisecond),
		NeverTainted: 1,
	}
	var b bytes.Buffer
	require.NoError(t, printLoss(&b, p, nodeloss.DefaultFlags()))
	assert.Equal(t, `
Node loss predicted for a loss of zone=eu/a:2 now, with the nodes not Ready now (kube-controller-manager's --node-monitor-grace-period 50s, --node-eviction-rate 0.1, --secondary-node-eviction-rate 0.01; docs/hazards.md):
  NODE  ZONE  LOST   UNKNOWN  TAINTED  AUDITED PODS EVICTED
  a-1   eu/a  +0s    +55s     +55.1s   2 at +55.1s to +5m55.1s, 1 never
  a-2   eu/a  -2m0s  -1m10s   never    1 never
  2 nodes lost: the last taint +55.1s, 1 never tainted.
  zone eu/a (5 nodes): +0s Normal (0.1/s), then +55s PartialDisruption (0/s)
Warning: 1 pod evicted more than a minute later than a lone node's loss would evict it, or never:
    shop/web-2 (never)
`, b.String())

	// Many nodes: the first 15 and the last 5.
	p = &retrofit.LossPrediction{At: now}
	for i := range 30 {
		p.Nodes = append(p.Nodes, retrofit.NodeLoss{Name: fmt.Sprintf("n-%02d", i), Lost: now, Unknown: at(55 * time.Second), Tainted: at(time.Duration(55+10*i) * time.Second)})
	}
	p.LastTaint = p.Nodes[29].Tainted
	b.Reset()
	require.NoError(t, printLoss(&b, p, nodeloss.DefaultFlags()))
	out := b.String()
	assert.Contains(t, out, "Node loss predicted for the nodes not Ready now")
	assert.Contains(t, out, "n-14")
	assert.NotContains(t, out, "n-15")
	assert.Contains(t, out, "... 10 more")
	assert.NotContains(t, out, "n-24")
	assert.Contains(t, out, "n-25")
	assert.Contains(t, out, "30 nodes lost: the last taint +5m45s, 0 never tainted.")
	assert.NotContains(t, out, "Warning")

	// An eviction rate of 1/s: kubernetes#104639.
	one := nodeloss.DefaultFlags()
	one.NodeEvictionRate = 1
	b.Reset()
	require.NoError(t, printLoss(&b, p, one))
	assert.Contains(t, b.String(), "Warning: an eviction rate of exactly 1/s meets kubernetes#104639")

	b.Reset()
	require.NoError(t, printLoss(&b, nil, nodeloss.DefaultFlags()))
	assert.Empty(t, b.String())
}

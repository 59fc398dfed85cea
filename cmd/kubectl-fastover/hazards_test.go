package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/retrofit"
)

func TestPrintHazards(t *testing.T) {
	th := retrofit.DefaultZoneThresholds()
	sts := retrofit.Hazard{Namespace: "shop", Name: "db-0", Kind: retrofit.HazardStatefulSet, Reason: "StatefulSet pod: stays Terminating", Advice: "taint the node out-of-service"}
	db1 := sts
	db1.Name = "db-1"
	zone := retrofit.Hazard{Namespace: "shop", Name: "web-x", Kind: retrofit.HazardDisruptedZone, Reason: "zone eu/a is in PartialDisruption", Advice: "wait"}
	r := &retrofit.HazardReport{
		Pods: []retrofit.Hazard{sts, db1, zone},
		Zones: []retrofit.Zone{
			{Name: "eu/a", Nodes: 5, NotReady: 3, State: retrofit.ZonePartialDisruption, Evictions: "stopped", StopsAt: 3},
			{Name: "", Nodes: 1, State: retrofit.ZoneNormal, Evictions: "normal rate"},
			{Name: "eu/big", Nodes: 60, State: retrofit.ZoneNormal, Evictions: "normal rate", StopsAt: 33},
		},
	}
	var b bytes.Buffer
	require.NoError(t, printHazards(&b, r, th))
	assert.Equal(t, `
Warning: the toleration does not bring these pods back from a lost node by itself (see docs/hazards.md):
- StatefulSet pod: stays Terminating:
    shop/db-0, shop/db-1
  Instead: taint the node out-of-service.
- zone eu/a is in PartialDisruption:
    shop/web-x
  Instead: wait.

Zones (--unhealthy-zone-threshold 0.55, --large-cluster-size-threshold 50):
  eu/a: 5 nodes, 3 not ready, PartialDisruption; evictions stopped (they stop when 3 of its nodes are not ready at once)
  <no zone labels>: 1 node, 0 not ready, Normal; evictions normal rate (they stop only if all its nodes and every other zone's are lost)
  eu/big: 60 nodes, 0 not ready, Normal; evictions normal rate (they slow to --secondary-node-eviction-rate when 33 of its nodes are not ready at once)
`, b.String())

	b.Reset()
	require.NoError(t, printHazards(&b, &retrofit.HazardReport{Pods: []retrofit.Hazard{}, ZonesUnchecked: "cannot list nodes: forbidden"}, th))
	assert.Equal(t, "\nZones not checked: cannot list nodes: forbidden.\n", b.String())

	b.Reset()
	require.NoError(t, printHazards(&b, nil, th))
	assert.Empty(t, b.String())

	// -o json carries the report.
	data, err := json.Marshal(auditReport{Pods: []retrofit.Finding{}, Hazards: r})
	require.NoError(t, err)
	assert.Contains(t, string(data), `"hazards":{"pods":[{"namespace":"shop","name":"db-0","kind":"statefulset"`)
	assert.Contains(t, string(data), `"zones":[{"name":"eu/a","nodes":5,"notReady":3,"state":"PartialDisruption","evictions":"stopped","stopsAt":3}`)
}

func TestHazardFlagsBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "--unhealthy-zone-threshold=0"}, "--unhealthy-zone-threshold 0: want a fraction above 0 and at most 1"},
		{[]string{"audit", "--unhealthy-zone-threshold=1.5"}, "--unhealthy-zone-threshold 1.5: want a fraction above 0 and at most 1"},
		{[]string{"audit", "--unhealthy-zone-threshold=half"}, `invalid argument "half"`},
		{[]string{"audit", "--large-cluster-size-threshold=-1"}, "--large-cluster-size-threshold -1: must not be negative"},
		{[]string{"fix", "--large-cluster-size-threshold=10"}, "unknown flag: --large-cluster-size-threshold"},
		{[]string{"audit", "--lose=zero"}, `--lose "zero": "zero" is not a count of nodes`},
		{[]string{"audit", "--lose=rack=r1"}, `--lose "rack=r1": unknown key "rack"`},
		{[]string{"audit", "--node-eviction-rate=-1"}, "--node-eviction-rate -1: must not be negative"},
		{[]string{"audit", "--node-monitor-grace-period=0s"}, "--node-monitor-grace-period 0s: must be positive"},
		{[]string{"audit", "--kube-api-qps=0"}, "--kube-api-qps 0: must be positive"},
		{[]string{"fix", "--lose=3"}, "unknown flag: --lose"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		assert.Equal(t, exitError, code, tc.args)
		assert.Contains(t, stderr.String(), tc.want, tc.args)
	}
}

package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/leaders"
)

func TestPrintLeaders(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 1, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(-d); return &x }
	list := []leaders.Leader{
		{
			Namespace: "ha", Lease: "ctl", Holder: "replica-2", Term: 3, Since: at(45 * time.Second), HandOver: "crash takeover",
			Published: &leaders.Published{Service: "ctl", Identity: "replica-2", Term: 3, Addresses: []string{"10.0.0.2"}, IsHolder: true},
			Standbys:  []leaders.Replica{{Pod: "ha/a", Ready: true}, {Pod: "ha/b"}},
			Handovers: []leaders.Handover{{Time: *at(45 * time.Second), Reason: "LeaderElection", Message: "replica-2 became leader"}},
		},
		{
			Namespace: "ops", Lease: "api", Holder: "replica-9", Term: 5, Since: at(2 * time.Minute), Expired: true,
			Published: &leaders.Published{Service: "api", Identity: "replica-8", Term: 4},
			Problems:  []string{"no leader: the Lease of replica-9 expired"},
		},
	}
	var b bytes.Buffer
	require.NoError(t, printLeaders(&b, "table", "", list, now))
	assert.Equal(t, `NAMESPACE  LEASE  HOLDER               TERM  SINCE  HAND-OVER       SERVICE  PUBLISHED            STANDBYS   LAST EVENT
ha         ctl    replica-2            3     45s    crash takeover  ctl      the holder 10.0.0.2  1/2 ready  LeaderElection, 45s ago
ops        api    replica-9 (expired)  5     2m     -               api      replica-8 (term 4)   -          -
ops/api: no leader: the Lease of replica-9 expired
`, b.String())

	b.Reset()
	require.NoError(t, printLeaders(&b, "table", "shop", nil, now))
	assert.Equal(t, "No fastover leaders found in namespace shop.\n", b.String())

	b.Reset()
	require.NoError(t, printLeaders(&b, "json", "shop", nil, now))
	assert.JSONEq(t, `{"leaders":[]}`, b.String())
}

func TestLeadersBadOutput(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitError, run(context.Background(), []string{"leaders", "-o", "wide"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `--output "wide": want table, json or yaml`)
}

package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/cluster"
)

func TestRunRefusesUnknownNodes(t *testing.T) {
	dir := t.TempDir()
	_, err := Run(context.Background(), Options{Nodes: "vms", BinDir: dir, WebhookBinary: "/bin/true", ExampleBinary: "/bin/true", ManifestsDir: dir, Out: &bytes.Buffer{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `nodes "vms"`)
}

// Without what real nodes need, NodesReal fails with what is missing, and
// NodesAuto says in one line that it skipped them.
func TestRealNodesMissing(t *testing.T) {
	o := Options{BinDir: t.TempDir()}
	why := o.realNodesMissing()
	require.NotEmpty(t, why)
	d := &demo{opts: Options{Nodes: NodesReal, BinDir: o.BinDir}, out: newPrinter(&bytes.Buffer{}, time.Second), sum: &Summary{}}
	assert.ErrorContains(t, d.chooseNodes(), "real nodes cannot run here")
	var out bytes.Buffer
	d = &demo{opts: Options{BinDir: o.BinDir}, out: newPrinter(&out, time.Second), sum: &Summary{}}
	require.NoError(t, d.chooseNodes())
	assert.Nil(t, d.real)
	require.Len(t, d.sum.Skipped, 1)
	assert.Contains(t, d.sum.Skipped[0], "real nodes skipped: "+why)
	assert.Equal(t, 1, strings.Count(out.String(), "real nodes skipped"))
}

// The client in a pod's calls become a lane: an answer, a refusal (503),
// a failed call.
func TestHostCallsMakeALane(t *testing.T) {
	t0 := time.Now()
	in := []cluster.TestHostCall{
		{Sent: t0.Add(-20 * time.Millisecond), Took: time.Millisecond, Status: 200, Answer: "old"},
		{Sent: t0.Add(time.Millisecond), Took: time.Second, Answer: "context deadline exceeded"},
		{Sent: t0.Add(time.Second), Took: time.Millisecond, Status: 503, Answer: "old-restarted does not lead"},
		{Sent: t0.Add(2 * time.Second), Took: time.Millisecond, Status: 200, Answer: "new"},
	}
	l := lane(&realClient{name: podClientLane}, hostCalls(in), t0, t0.Add(3*time.Second), "old", "new")
	assert.True(t, l.Passed, l.Error)
	assert.Equal(t, 2, l.Failed)
	assert.Equal(t, 1, l.FailedBy["status 503"], l.FailedBy)
	assert.Equal(t, 2*time.Second+time.Millisecond, l.Gap)
	assert.Empty(t, l.Standbys)
}

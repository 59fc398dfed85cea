package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/tests/harness/apicost"
	"github.com/fastover/fastover/tests/harness/faultproxy"
)

// apiCostDurations are the defaults the issue measures at.
var apiCostDurations = fleet.Durations{Lease: 15 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second}

// TestLeaderAPICost counts, at a proxy in front of kube-apiserver per
// replica, the requests three replicas of fastover-example and three of
// client-go's tools/leaderelection (leaderbaseline) with the same
// durations make over a 45 s steady-state window, both fleets at once:
//
//   - counting works: a client-go standby polls the Lease every retry
//     period (jittered), so it makes many GETs;
//   - a fastover standby makes no request besides its watches and GETs of
//     its Lease (the re-read in case the watch missed something), far
//     fewer than client-go's standby;
//   - a fastover leader makes no more requests than client-go's leader,
//     with a little slack;
//   - the goal: a fastover standby makes at most one request a minute
//     besides its watches.
//
// It counts and times nothing two busy cores could skew (its bounds are
// on counts, the window a sleep, the durations the chart's 15s/10s/2s), so
// it runs among the parallel tests. make bench (tests/bench/apicost) gives
// the figures for 3 and 30 replicas.
func TestLeaderAPICost(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("counts requests over a 45s window")
	}
	const (
		warmup = 15 * time.Second
		window = 45 * time.Second
	)
	d := apiCostDurations
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	baseline := leaderBaselineBinary(t)

	cg, err := apicost.Start(ctx, env, "client-go", baseline, "cost-client-go", 3, d)
	require.NoError(t, err)
	t.Cleanup(cg.Stop)
	fo, err := apicost.Start(ctx, env, "fastover", binary(t, "fastover-example"), "cost-fastover", 3, d)
	require.NoError(t, err)
	t.Cleanup(fo.Stop)

	time.Sleep(warmup)
	require.NoError(t, cg.Begin(ctx))
	require.NoError(t, fo.Begin(ctx))
	time.Sleep(window)
	cgr, err := cg.End(ctx)
	require.NoError(t, err, "client-go was not in a steady state")
	fos, err := fo.End(ctx)
	require.NoError(t, err, "fastover was not in a steady state")
	for _, r := range []*apicost.Result{cgr, fos} {
		t.Logf("%s over %v: leader %s made %d requests (a minute: %s); standbys %.1f requests/min (mean: %s); open watches %v",
			r.Impl, r.Window.Round(time.Second), r.Leader, r.LeaderCounts().NonWatch(),
			r.Breakdown([]faultproxy.Counts{r.LeaderCounts()}), r.StandbyPerMin(), r.Breakdown(r.Standbys()), r.OpenWatches())
	}
	standbyGets := faultproxy.Request{Verb: "get", Resource: "leases"}
	// The bounds below count requests in the window; it ran at least
	// window, and a little more.
	secs := fos.Window.Seconds()

	t.Run("a client-go standby polls every retry period", func(t *testing.T) {
		// Jittered by up to 1.2 × RetryPeriod: one GET every 2 to 4.4 s.
		least := int(cgr.Window.Seconds() / (2.2 * d.Retry.Seconds()) / 2)
		for _, c := range cgr.Standbys() {
			assert.GreaterOrEqual(t, c.Requests[standbyGets], least, "a client-go standby's GETs of the Lease were not counted: %v", c.Requests)
		}
	})

	t.Run("a fastover standby only watches and re-reads the Lease", func(t *testing.T) {
		most := int(secs/d.Lease.Seconds()) + 1
		cgMedian := apicost.Median(cgr.StandbyPerMin())
		for _, c := range fos.Standbys() {
			for k, v := range c.Requests {
				if k.Verb == "watch" || k == standbyGets {
					continue
				}
				assert.Failf(t, "a fastover standby made a request other than a watch or a GET of the Lease", "%d × %s", v, k)
			}
			assert.LessOrEqual(t, c.NonWatch(), most, "a fastover standby's requests: %v", c.Requests)
			assert.Less(t, float64(c.NonWatch())/fos.Window.Minutes(), cgMedian/3,
				"a fastover standby is not far cheaper than client-go's (%.1f requests/min): %v", cgMedian, c.Requests)
			// Its watches: the Lease, the Service and its EndpointSlices
			// (and room for one more); none reopened in the window
			// beyond once each.
			assert.Positive(t, c.OpenWatches, "a fastover standby holds no watch open")
			assert.LessOrEqual(t, c.OpenWatches, 4)
			assert.LessOrEqual(t, c.Watches(), 4, "watches reopened in the window: %v", c.Requests)
		}
	})

	t.Run("a fastover leader makes no more requests than client-go's", func(t *testing.T) {
		ours, theirs := fos.LeaderCounts().NonWatch(), cgr.LeaderCounts().NonWatch()
		require.Positive(t, theirs, "client-go's leader made no request: the counting is broken")
		assert.LessOrEqual(t, float64(ours), float64(theirs)*1.1+3,
			"fastover's leader made %d requests (%s), client-go's %d (%s)", ours,
			fos.Breakdown([]faultproxy.Counts{fos.LeaderCounts()}), theirs, cgr.Breakdown([]faultproxy.Counts{cgr.LeaderCounts()}))
	})

	t.Run("goal: a fastover standby makes at most one request a minute besides its watches", func(t *testing.T) {
		// One a minute, generously: in the window, window/1min + 2.
		most := int(secs/60) + 2
		var over []string
		for id, c := range fos.ByReplica {
			if id != fos.Leader && c.NonWatch() > most {
				over = append(over, fmt.Sprintf("%s: %d (%s)", id, c.NonWatch(), fos.Breakdown([]faultproxy.Counts{c})))
			}
		}
		assert.Empty(t, over, "in %v a fastover standby may make %d requests besides its watches", fos.Window.Round(time.Second), most)
	})
}

// leaderBaselineMu keeps two tests from building it at once.
var leaderBaselineMu sync.Mutex

// leaderBaselineBinary builds the client-go baseline of the benchmarks
// (tests/bench/leaderbaseline) once per test run.
func leaderBaselineBinary(t *testing.T) string {
	t.Helper()
	leaderBaselineMu.Lock()
	defer leaderBaselineMu.Unlock()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("fastover-e2e-leaderbaseline-%d", os.Getpid()))
	path := filepath.Join(dir, "leaderbaseline")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	out, err := exec.Command("go", "build", "-o", path, "github.com/fastover/fastover/tests/bench/leaderbaseline").CombinedOutput()
	require.NoError(t, err, "go build leaderbaseline: %s", out)
	return path
}

// The agents' storm as the machine sees it: the agents' process's garbage
// collection held, and CPU profiles of the storm.

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// holdGC keeps this process (the agents') from collecting garbage until
// the returned function is called, short of stormMemoryLimit: its heap
// holds every agent's caches (about 400 MB for a thousand), which each
// collection marks, a cost that no agent pays in a cluster, where each
// has its own process and a heap of its own payload. It took 0.4 s of
// the process's CPU in a stop's storm, on the cores that the new leader
// needs.
func holdGC() (restore func()) {
	limit := debug.SetMemoryLimit(stormMemoryLimit)
	percent := debug.SetGCPercent(-1)
	return func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	}
}

// stormMemoryLimit is where the agents' process collects garbage in a
// storm all the same.
const stormMemoryLimit = 8 << 30

// profileStorm, with AGENTS_PROFILE set to a directory, writes CPU profiles
// of the storm there, until the returned function is called: this
// process's (the agents') and each standby's, which the replicas serve
// with --debug-pprof (TestAgentsFollowTheLeader passes it then). Without
// AGENTS_PROFILE it does nothing.
func profileStorm(ctx context.Context, t *testing.T, h *handoverRig, old string, flt leaderFault) (stop func()) {
	t.Helper()
	dir := os.Getenv("AGENTS_PROFILE")
	if dir == "" {
		return func() {}
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	name := func(who string) string { return filepath.Join(dir, fmt.Sprintf("%s-%s.pprof", flt, who)) }
	f, err := os.Create(name("agents"))
	require.NoError(t, err)
	require.NoError(t, pprof.StartCPUProfile(f))
	pctx, cancel := context.WithCancel(ctx)
	var g errgroup.Group
	client := h.f.HTTPClient(time.Minute, 5*time.Second)
	for _, r := range h.f.Replicas {
		if r.ID == old {
			continue
		}
		url, err := h.f.URL(r, "/debug/pprof/profile?seconds="+strconv.Itoa(int(agentsProfileFor/time.Second)))
		require.NoError(t, err)
		g.Go(func() error { return fetchTo(pctx, client, url, name(r.ID)) })
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		err := g.Wait()
		cancel()
		assert.NoError(t, err, "the standbys' profiles")
		t.Logf("CPU profiles of the storm in %s", dir)
	}
}

// agentsProfileFor is how long a standby's profile of the storm runs.
const agentsProfileFor = 10 * time.Second

// fetchTo writes the body of GET url to file.
func fetchTo(ctx context.Context, client *http.Client, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

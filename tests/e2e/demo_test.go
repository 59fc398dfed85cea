package e2e

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/demo"
	"github.com/fastover/fastover/internal/netns"
)

// TestDemoQuick runs `make demo`'s scenarios in quick mode, so that CI
// proves the demo still works: every scenario passes and the timeline is
// written as well-formed XML. As root the demo runs in a network
// namespace of its own: the handovers (SIGKILL, SIGTERM, SIGSTOP) also
// have lanes for a client that calls the Service's ClusterIP through
// kube-proxy, one that lists the example's aggregated API through
// kube-apiserver, and two client-go informers of that API on the
// ClusterIP, one of them with leader/follow; in each the new leader
// answers and no standby ever does, and the informer with leader/follow
// gets the new leader's events within the lease (and a second) of a kill
// or a freeze. Not root, the demo runs without those lanes and says why;
// with $FASTOVER_REQUIRE_NETNS set (CI) that is a failure.
func TestDemoQuick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	svg := filepath.Join(t.TempDir(), "demo-timeline.svg")
	webhookBin, exampleBin := binary(t, "fastover-webhook"), binary(t, "fastover-example")
	start := time.Now()
	sum, err := demo.Run(ctx, demo.Options{
		Nodes:         demo.NodesKwok,
		Quick:         true,
		Grace:         10 * time.Second,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second,
		Out:           &logWriter{t: t},
		SVGPath:       svg,
		WebhookBinary: webhookBin,
		ExampleBinary: exampleBin,
	})
	require.NoError(t, err)
	t.Logf("the quick demo took %v", time.Since(start).Round(time.Millisecond))
	require.Len(t, sum.Results, 5)
	for _, r := range sum.Results {
		assert.True(t, r.Passed, "%s: %s", r.Name, r.Error)
		assert.Positive(t, r.Fastover, r.Name)
		assert.NotEmpty(t, r.Events, r.Name)
	}
	assert.True(t, sum.Passed())
	assert.Equal(t, svg, sum.SVGPath)

	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	if out := os.Getenv("DEMO_SVG_OUT"); out != "" { // to look at it
		require.NoError(t, os.WriteFile(out, data, 0o644))
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var root string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the SVG is not well-formed XML")
		if el, ok := tok.(xml.StartElement); ok && root == "" {
			root = el.Name.Local
		}
	}
	assert.Equal(t, "svg", root)
	for _, r := range sum.Results {
		assert.Contains(t, string(data), r.Name)
	}

	if len(sum.ClientsSkipped) > 0 {
		if os.Getenv(netns.RequireEnv) != "" {
			t.Fatalf("the demo ran without its client lanes, and $%s is set: %s", netns.RequireEnv, strings.Join(sum.ClientsSkipped, "; "))
		}
		t.Logf("the demo ran without its client lanes: %s", strings.Join(sum.ClientsSkipped, "; "))
		return
	}
	handovers := 0
	for _, r := range sum.Results {
		if r.Name != "The leader is killed" && r.Name != "The leader gets SIGTERM" && r.Name != "The leader freezes" {
			assert.Empty(t, r.Clients, r.Name)
			continue
		}
		handovers++
		require.Len(t, r.Clients, 4, "%s: the client lanes (kube-proxy, kube-apiserver, informer, informer+follow)", r.Name)
		for _, c := range r.Clients {
			t.Logf("%s, client %s: the new leader after %v; %s", r.Name, c.Name, c.Gap, c.Verdict())
			assert.True(t, c.Passed, "%s, client %s: %s", r.Name, c.Name, c.Error)
			assert.Empty(t, c.Standbys, "%s, client %s: standbys answered", r.Name, c.Name)
			assert.Zero(t, c.OldAfterNew, "%s, client %s: the old leader answered after the new one", r.Name, c.Name)
			assert.Positive(t, c.Gap, "%s, client %s", r.Name, c.Name)
			assert.NotEmpty(t, c.Segments, "%s, client %s", r.Name, c.Name)
			assert.Contains(t, string(data), "client "+c.Name)
			if c.Name == "informer+follow" && r.Name != "The leader gets SIGTERM" {
				assert.Less(t, c.Gap, 5*time.Second, "%s: leader/follow follows within the lease (4 s) and a second", r.Name)
			}
		}
	}
	assert.Equal(t, 3, handovers)
}

// TestDemoRealNodes runs `make demo` as root runs it: on real nodes
// (kubelet, containerd, runc), fastover's images pushed to the nodes'
// registry and installed by helm from charts/, in quick mode. Every
// scenario passes; in the leader scenarios the client in a pod (Go's
// default transport, keeping its connections) gets the new leader's
// answer, never a standby's, and never the old leader's after it; the
// summary and the timeline say the nodes are real. Not root, it skips
// (with $FASTOVER_REQUIRE_NETNS set, CI, it fails).
func TestDemoRealNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv(netns.RequireEnv) != "" {
			t.Fatalf("real nodes need root, and $%s is set", netns.RequireEnv)
		}
		t.Skip("real nodes need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	svg := filepath.Join(t.TempDir(), "demo-timeline.svg")
	start := time.Now()
	sum, err := demo.Run(ctx, demo.Options{
		Nodes:         demo.NodesReal,
		Quick:         true,
		Grace:         10 * time.Second,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second,
		Out:           &logWriter{t: t},
		SVGPath:       svg,
		WebhookBinary: binary(t, "fastover-webhook"),
		ExampleBinary: binary(t, "fastover-example"),
	})
	require.NoError(t, err)
	t.Logf("the quick demo on real nodes took %v", time.Since(start).Round(time.Millisecond))
	require.Len(t, sum.Results, 5)
	assert.True(t, sum.Passed())
	assert.Contains(t, sum.Platform, "real nodes")
	for _, r := range sum.Results {
		assert.True(t, r.Passed, "%s: %s", r.Name, r.Error)
		assert.Positive(t, r.Fastover, r.Name)
		assert.NotEmpty(t, r.Events, r.Name)
		if r.Name == "A node is lost" || r.Name == "A Service migrated from selector mode" {
			continue
		}
		require.Len(t, r.Clients, 1, "%s: the client in a pod", r.Name)
		c := r.Clients[0]
		t.Logf("%s, client %s: the new leader after %v; %s", r.Name, c.Name, c.Gap, c.Verdict())
		assert.True(t, c.Passed, "%s: %s", r.Name, c.Error)
		assert.Empty(t, c.Standbys, "%s: standbys answered", r.Name)
		assert.Zero(t, c.OldAfterNew, "%s: the old leader answered after the new one", r.Name)
		if r.Name != "The leader gets SIGTERM" {
			assert.Less(t, c.Gap, 4*time.Second+3*time.Second, "%s: within the lease (4 s) and 3 s", r.Name)
		}
		if r.Name == "The leader is killed" {
			// Crash takeover: the kubelet's report, not the Lease.
			assert.Less(t, c.Gap, 4*time.Second, "%s: crash takeover waited for the Lease (4 s)", r.Name)
			assert.True(t, slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, "crash takeover: ") }), "%s: no crash takeover in %q", r.Name, r.Notes)
		}
	}
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.Contains(t, string(data), "real nodes")
}

// logWriter sends whole lines to the test's log.
type logWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // no newline yet
			return len(p), nil
		}
		w.t.Log(strings.TrimRight(line, "\n"))
	}
}

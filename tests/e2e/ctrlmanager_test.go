package e2e

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/opfleet"
)

// TestCtrlManagerOperator runs three replicas of the kubebuilder-style
// example operator (examples/configmap-operator) on the controller-runtime
// adapter (leader/ctrlmanager): only the Lease holder reconciles, and the
// Service's EndpointSlice names it; SIGTERM hands over to a standby at
// once, SIGKILL within about a lease duration, and each new leader
// reconciles and is published.
func TestCtrlManagerOperator(t *testing.T) {
	t.Parallel()
	env := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := opfleet.New(env, binary(t, "configmap-operator"), "cmop", "configmap-operator", opfleet.Fastover, shortDurations)
	require.NoError(t, f.Setup(ctx))
	stamps, err := f.WatchStamps(ctx)
	require.NoError(t, err)
	published := mustWatch(ctx, t, f.Service())
	require.NoError(t, f.Add(3))
	defer f.StopAll()

	holder := func() string {
		t.Helper()
		h, _, err := f.Service().Holder(ctx)
		require.NoError(t, err)
		return h
	}
	// expectLeader waits for a stamp by a replica other than not, checks
	// that it is the Lease holder's and that the Service names it.
	expectLeader := func(after int, not string, timeout time.Duration) *opfleet.Replica {
		t.Helper()
		st, err := stamps.Next(after, not, timeout)
		require.NoError(t, err)
		r := f.ByID(st.By)
		require.NotNil(t, r, "stamped by %q, not a replica", st.By)
		assert.Equal(t, st.By, holder(), "the replica that reconciles holds the Lease")
		_, err = opfleet.WaitPublished(ctx, published, r.Address(), 10*time.Second)
		assert.NoError(t, err)
		return r
	}

	first := expectLeader(0, "", time.Minute)
	t.Logf("leader: %s", first.ID)

	t.Run("only the leader reconciles", func(t *testing.T) {
		cms := env.Client.CoreV1().ConfigMaps(f.Namespace)
		for i := range 3 {
			// Take the stamp off: the leader puts its own back; a
			// standby that reconciled would put its own.
			n := stamps.Len()
			patch := `{"metadata":{"annotations":{"example.fastover.io/stamped-by":null}},"data":{"round":"` + strconv.Itoa(i) + `"}}`
			_, err := cms.Patch(ctx, f.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			require.NoError(t, err)
			st, err := stamps.Next(n, "", 20*time.Second)
			require.NoError(t, err)
			assert.Equal(t, first.ID, st.By)
		}
		time.Sleep(time.Second)
		for _, r := range f.Replicas {
			metrics, err := f.Metrics(r)
			require.NoError(t, err, r.ID)
			n := reconciles(metrics, "configmap")
			if r == first {
				assert.GreaterOrEqual(t, n, 4, "%s (leader) reconciles", r.ID)
				assert.Contains(t, metrics, "fastover_leader_is_leader 1", r.ID)
			} else {
				assert.Zero(t, n, "%s (standby) reconciles nothing", r.ID)
				assert.Contains(t, metrics, "fastover_leader_is_leader 0", r.ID)
			}
		}
	})

	t.Run("SIGTERM hands over at once", func(t *testing.T) {
		n := stamps.Len()
		require.NoError(t, first.Proc.Signal(syscall.SIGTERM))
		start := time.Now()
		next := expectLeader(n, first.ID, 10*time.Second)
		t.Logf("SIGTERM: %s leads and reconciled after %v", next.ID, time.Since(start).Round(time.Millisecond))
		exited, exitErr := first.Proc.WaitExit(20 * time.Second)
		assert.True(t, exited, "the old leader exits")
		assert.NoError(t, exitErr, "a planned stop exits 0")

		t.Run("SIGKILL fails over within a lease duration", func(t *testing.T) {
			n := stamps.Len()
			require.NoError(t, next.Proc.Signal(syscall.SIGKILL))
			start := time.Now()
			last := expectLeader(n, next.ID, shortDurations.Lease+15*time.Second)
			took := time.Since(start)
			t.Logf("SIGKILL: %s leads and reconciled after %v", last.ID, took.Round(time.Millisecond))
			assert.NotEqual(t, first.ID, last.ID)
		})
	})

	// Each leader stamped in its term only: the stamps name the leaders
	// in turn, never a standby in between.
	var seq []string
	for _, st := range stamps.All() {
		if len(seq) == 0 || seq[len(seq)-1] != st.By {
			seq = append(seq, st.By)
		}
	}
	assert.Len(t, seq, 3, "stamps by the three leaders in turn: %v", seq)
}

// reconciles sums controller-runtime's reconcile counter of a controller
// in a /metrics page.
func reconciles(metrics, ctrl string) int {
	total := 0
	prefix := `controller_runtime_reconcile_total{controller="` + ctrl + `"`
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			total += int(v)
		}
	}
	return total
}

package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHandoverAtARenewal: the leader is sent SIGTERM the moment the test's
// watch shows its next renewal, while its own answer to that renewal may
// still be on the way (the SIGTERM then cancels it). Every one of 25
// planned handovers must hand the Lease to a standby within 1 s: none may
// wait for the Lease to expire (4 s here), as 5 or 6 of 25 did when a
// release started from the Lease's version before the renewal. The time
// printed per round is from the SIGTERM to the watch showing another
// holder.
func TestHandoverAtARenewal(t *testing.T) {
	const rounds = 25
	d := shortDurations // lease 4 s, renew 3 s, retry 1 s
	// Each round waits up to a retry period for the renewal, hands over,
	// and restarts the old leader as a standby: about 2 s.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, f := startFleet(ctx, t, 3, d)
	waitServing(ctx, t, f, "", 30*time.Second)
	seen := watchLease(ctx, t, env, f.Namespace, f.Lease)

	var took []time.Duration
	slow := 0
	for round := 1; round <= rounds; round++ {
		// From the newest version: the renewal to wait for is the next.
		cur, err := seen.holder(ctx, d.Lease+d.Retry, func(leaseVersion) {})
		require.NoError(t, err, "round %d: no holder", round)
		old := f.ByID(cur.holder)
		require.NotNil(t, old, "round %d: holder %q is none of the fleet", round, cur.holder)
		renewal, err := seen.next(ctx, 2*d.Retry, func(s leaseVersion) bool {
			return s.holder == old.ID && s.renewed.After(cur.renewed)
		})
		require.NoError(t, err, "round %d: %s did not renew", round, old.ID)
		require.NoError(t, old.Proc.Signal(syscall.SIGTERM))
		signalled := time.Now()
		succ, err := seen.next(ctx, 2*d.Lease, func(s leaseVersion) bool { return s.holder != "" && s.holder != old.ID })
		require.NoError(t, err, "round %d: no successor to %s", round, old.ID)
		dt := succ.at.Sub(signalled)
		took = append(took, dt)
		t.Logf("round %2d: %s signalled %v after the watch showed its renewal; %s took the Lease %v later",
			round, old.ID, signalled.Sub(renewal.at).Round(time.Microsecond), succ.holder, dt.Round(time.Millisecond))

		exited, exitErr := old.Proc.WaitExit(10 * time.Second)
		require.True(t, exited, "round %d: %s did not exit after SIGTERM", round, old.ID)
		assert.NoError(t, exitErr, "round %d: a planned stop exits cleanly", round)
		if tail := lastRun(old.Proc.Tail(200)); dt > time.Second || strings.Contains(tail, "could not release the Lease") {
			slow++
			t.Errorf("round %d: the handover took %v (lease %v); %s's log:\n%s", round, dt.Round(time.Millisecond), d.Lease, old.ID, tail)
		}
		require.NoError(t, f.Start(old)) // back as a standby, as the kubelet would
	}
	t.Logf("%d/%d handovers within 1 s; takeover after SIGTERM at a renewal: %s", rounds-slow, rounds, spread(took))
	assert.Zero(t, slow, "handovers that waited")
}

// lastRun is the part of a process's log tail written by its last run (a
// restarted process appends to its log after a "### " line).
func lastRun(tail string) string {
	if i := strings.LastIndex(tail, "\n### "); i >= 0 {
		return tail[i+1:]
	}
	return tail
}

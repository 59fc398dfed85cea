package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/tests/fleet"
)

// chaosEvent is one thing done to a replica.
type chaosEvent struct {
	at         time.Time
	kind       string // kill, stop, term, restart
	target     string
	wasLeading bool
	standbys   int // running, unfrozen replicas other than the target
}

// TestLeaderChaos plays 50 random kill / stop / term / restart events over
// three replicas with short lease settings, while a watch records every
// change of the Service's EndpointSlices: two identities must never be
// published at the same time. It reports the longest time without an
// endpoint after each kind of event.
func TestLeaderChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos takes minutes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	_, f := startFleet(ctx, t, 3, fleet.Durations{Lease: 3 * time.Second, Renew: 2 * time.Second, Retry: 500 * time.Millisecond})
	waitServing(ctx, t, f, "", 30*time.Second)
	log := mustWatch(ctx, t, f)

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("chaos seed %d", seed)
	frozen := map[string]time.Time{} // replica → when it thaws
	var events []chaosEvent

	running := func() []*fleet.Replica {
		var out []*fleet.Replica
		for _, r := range f.Replicas {
			if _, ok := frozen[r.ID]; !ok && r.Proc.Running() {
				out = append(out, r)
			}
		}
		return out
	}
	thaw := func(now time.Time) {
		for id, until := range frozen {
			if now.After(until) {
				_ = f.ByID(id).Proc.Signal(syscall.SIGCONT)
				delete(frozen, id)
			}
		}
	}

	const total = 50
	for len(events) < total {
		thaw(time.Now())
		holder, _, _ := f.Holder(ctx)
		alive := running()
		kind := []string{"kill", "stop", "term", "restart"}[rng.IntN(4)]
		var dead []*fleet.Replica
		for _, r := range f.Replicas {
			if !r.Proc.Running() {
				dead = append(dead, r)
			}
		}
		if len(alive) <= 1 && len(dead) > 0 || kind == "restart" && len(dead) == 0 && len(alive) > 1 {
			kind = "restart"
			if len(dead) == 0 {
				kind = "kill"
			}
		}
		if len(alive) == 0 && kind != "restart" {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		ev := chaosEvent{at: time.Now(), kind: kind}
		switch kind {
		case "restart":
			for _, r := range dead {
				require.NoError(t, f.Start(r))
			}
			ev.target = fmt.Sprint(len(dead), " replica(s)")
		default:
			// The leader most of the time: that is where failover is.
			target := alive[rng.IntN(len(alive))]
			if l := f.ByID(holder); l != nil && rng.IntN(10) < 7 && slices.Contains(alive, l) {
				target = l
			}
			ev.target, ev.wasLeading, ev.standbys = target.ID, target.ID == holder, len(alive)-1
			switch kind {
			case "kill":
				_ = target.Proc.Signal(syscall.SIGKILL)
			case "term":
				_ = target.Proc.Signal(syscall.SIGTERM)
			case "stop":
				_ = target.Proc.Signal(syscall.SIGSTOP)
				frozen[target.ID] = time.Now().Add(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
			}
		}
		events = append(events, ev)
		time.Sleep(time.Duration(1000+rng.IntN(2500)) * time.Millisecond)
	}
	for id := range frozen {
		_ = f.ByID(id).Proc.Signal(syscall.SIGCONT)
	}
	time.Sleep(time.Second)
	for _, r := range f.Replicas {
		if !r.Proc.Running() {
			require.NoError(t, f.Start(r))
		}
	}
	waitServing(ctx, t, f, "", 30*time.Second)
	end := time.Now()

	changes := log.Snapshot()
	for _, c := range changes {
		if distinct(c.Addrs) > 1 {
			t.Errorf("two identities published at once at %v: %v", c.At.Format(time.StampMilli), c.Addrs)
		}
	}
	// Gaps without an endpoint, each blamed on the last event before it.
	longest := map[string]time.Duration{}
	count := map[string]int{}
	for _, e := range events {
		count[e.kind]++
	}
	for i, c := range changes {
		if len(c.Addrs) != 0 {
			continue
		}
		gapEnd := end
		for _, n := range changes[i+1:] {
			if len(n.Addrs) != 0 {
				gapEnd = n.At
				break
			}
		}
		cause := "none"
		for _, e := range events {
			if !e.at.After(c.At) {
				cause = e.kind
				if e.wasLeading {
					cause += " (leader)"
				}
			}
		}
		if gap := gapEnd.Sub(c.At); gap > longest[cause] {
			longest[cause] = gap
		}
	}
	// The outage that matters: from an event on the leader to another
	// replica's address being published. Counted only where a standby was
	// there to take over and no other event came in between.
	takeover := map[string][]time.Duration{}
	for i, e := range events {
		if !e.wasLeading || e.standbys == 0 {
			continue
		}
		next := end
		if i+1 < len(events) {
			next = events[i+1].at
		}
		old := f.ByID(e.target).Address()
		for _, c := range changes {
			if c.At.After(e.at) && len(c.Addrs) == 1 && c.Addrs[0] != old {
				if c.At.Before(next) {
					takeover[e.kind] = append(takeover[e.kind], c.At.Sub(e.at))
				}
				break
			}
		}
	}
	var b strings.Builder
	for _, k := range []string{"kill", "stop", "term", "restart"} {
		leaderHits := 0
		for _, e := range events {
			if e.kind == k && e.wasLeading {
				leaderHits++
			}
		}
		tk := takeover[k]
		slices.Sort(tk)
		var med, worst time.Duration
		if len(tk) > 0 {
			med, worst = tk[len(tk)/2], tk[len(tk)-1]
		}
		fmt.Fprintf(&b, "\n  %-8s %2d events, %2d on the leader; where a standby took over before the next event (%d): next leader published after %v median, %v max; longest time with no endpoint %v",
			k, count[k], leaderHits, len(tk), med.Round(time.Millisecond), worst.Round(time.Millisecond),
			max(longest[k+" (leader)"], longest[k]).Round(time.Millisecond))
	}
	t.Logf("chaos: %d events, %d EndpointSlice changes watched, never two identities at once:%s", len(events), len(changes), b.String())
}

func distinct(addrs []string) int {
	seen := map[string]bool{}
	for _, a := range addrs {
		seen[a] = true
	}
	return len(seen)
}

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/acting"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
)

// mixedRounds is the rounds of each fault TestMixedFleet runs:
// FASTOVER_MIXED_ROUNDS, default 3 in make test (about 1 min); the
// figures in docs/leader.md come from 20.
func mixedRounds(t *testing.T) int { return envCount(t, "FASTOVER_MIXED_ROUNDS", 3) }

// mixedFleet is a Deployment in the middle of its migration: replicas of
// client-go's leader election (tests/bench/leaderbaseline, the library
// itself at the version the tests pin) and fastover replicas
// (fastover-example) on one Lease and one Service, each logging when it
// acts to one shared acting log.
type mixedFleet struct {
	fastover, clientgo *fleet.Fleet
	freezes            []freeze
}

func (m *mixedFleet) byID(id string) (*fleet.Fleet, *fleet.Replica) {
	for _, f := range []*fleet.Fleet{m.fastover, m.clientgo} {
		if r := f.ByID(id); r != nil {
			return f, r
		}
	}
	return nil, nil
}

func (m *mixedFleet) kind(id string) string {
	if f, _ := m.byID(id); f == m.clientgo {
		return "client-go"
	}
	return "fastover"
}

// mixedRow is one round: the fault on the holder, who held and who took
// over, and how long after the fault the watch showed the new holder.
type mixedRow struct {
	fault     string
	old, next string
	took      time.Duration
}

// TestMixedFleet: client-go and fastover replicas share one Lease, as
// while a running controller is rolled from client-go's leader election
// onto fastover. Rounds of SIGTERM, SIGKILL and SIGSTOP of the holder,
// whichever kind holds it; in every other round the holder's fastover
// peers are frozen while it fails, so that a client-go standby takes over
// (a fastover standby, which watches the Lease, otherwise wins the race
// against client-go's poll). Asserted: no two replicas ever act at once
// (their acting log, but for the one excuse below), every term in the log is one the Lease recorded,
// and a SIGTERM hands over without waiting the lease out, in either
// direction. One overlap is excused, and counted: a client-go leader
// frozen while it led and woken after another took the Lease acts once
// more on its stale record (wokenClientGo), as it would beside a client-go
// successor; a fastover replica is never excused. Printed: each round,
// and the takeover times by direction.
func TestMixedFleet(t *testing.T) {
	rounds := mixedRounds(t)
	d := shortDurations // client-go's 15/10/2 s scaled to 4/3/1 s, on both kinds
	// SIGKILL and SIGSTOP rounds wait the lease out (about 5 s), SIGTERM
	// rounds about 1 s; each restarts the old holder.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+time.Duration(rounds)*30*time.Second)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	actingLog := filepath.Join(t.TempDir(), "acting.log")

	m := &mixedFleet{fastover: newFleet(t, env, "ha", "ctl", d, "--acting-log="+actingLog)}
	m.fastover.Name = "fastover"
	cg, err := fleet.New(env, leaderBaselineBinary(t), "ha", "ctl", d, "--acting-log="+actingLog)
	require.NoError(t, err)
	cg.Name, cg.Port, cg.Lease = "clientgo", m.fastover.Port, m.fastover.Lease
	m.clientgo = cg
	require.NoError(t, m.fastover.CreateService(ctx, nil))
	// Client-go first: the old version holds the Lease when the new one
	// arrives.
	for _, n := range []int{11, 12} {
		r := &fleet.Replica{N: n, ID: "clientgo-" + strconv.Itoa(n)}
		cg.Replicas = append(cg.Replicas, r)
		require.NoError(t, cg.Start(r))
	}
	seen := watchLease(ctx, t, env, "ha", "ctl")
	_, err = seen.next(ctx, 30*time.Second, func(s leaseVersion) bool { return strings.HasPrefix(s.holder, "clientgo-") })
	require.NoError(t, err, "no client-go replica took the Lease")
	require.NoError(t, m.fastover.Add(2))
	time.Sleep(2 * time.Second) // the fastover replicas stand by

	terms := map[string]bool{} // holder/transitions the Lease recorded
	record := func(s leaseVersion) {
		if s.holder != "" {
			terms[s.holder+"/"+strconv.Itoa(int(s.term))] = true
		}
	}
	var rows []mixedRow
	faults := []struct {
		name  string
		sig   syscall.Signal
		bound time.Duration // the takeover's bound, from the fault
	}{
		// A client-go standby polls every retry period (+ up to 20 %).
		{"SIGTERM", syscall.SIGTERM, d.Retry*12/10 + time.Second},
		{"SIGKILL", syscall.SIGKILL, d.Lease + d.Retry*12/10 + 2*time.Second},
		{"SIGSTOP", syscall.SIGSTOP, d.Lease + d.Retry*12/10 + 2*time.Second},
	}
	for _, flt := range faults {
		for round := 1; round <= rounds; round++ {
			cur, err := seen.holder(ctx, d.Lease+2*d.Retry, record)
			require.NoError(t, err, "%s round %d: no holder", flt.name, round)
			f, old := m.byID(cur.holder)
			require.NotNil(t, old, "%s round %d: holder %q is none of the fleet", flt.name, round, cur.holder)
			// Every other round, a client-go standby is to take over.
			var frozen []*fleet.Replica
			if round%2 == 0 && f == m.fastover {
				for _, r := range m.fastover.Replicas {
					if r != old && r.Proc.Running() {
						require.NoError(t, r.Proc.Signal(syscall.SIGSTOP))
						frozen = append(frozen, r)
					}
				}
			}
			require.NoError(t, old.Proc.Signal(flt.sig))
			signalled := time.Now()
			succ, err := seen.next(ctx, flt.bound, func(s leaseVersion) bool {
				record(s)
				return s.holder != "" && s.holder != old.ID
			})
			require.NoError(t, err, "%s round %d: no successor to %s within %v", flt.name, round, old.ID, flt.bound)
			row := mixedRow{fault: flt.name, old: old.ID, next: succ.holder, took: succ.at.Sub(signalled)}
			rows = append(rows, row)
			t.Logf("%s round %d: %s (%s) -> %s (%s) in %v", flt.name, round, old.ID, m.kind(old.ID), succ.holder, m.kind(succ.holder), row.took.Round(time.Millisecond))
			for _, r := range frozen {
				require.NoError(t, r.Proc.Signal(syscall.SIGCONT))
			}

			// The old holder ends: at once (SIGKILL), after its planned
			// stop (SIGTERM), or once woken, having lost the Lease
			// (SIGSTOP); it comes back as a standby, as the kubelet
			// would bring it back.
			if flt.sig == syscall.SIGSTOP {
				// Dated before the signal: the woken process may act
				// before Signal returns.
				woken := time.Now()
				require.NoError(t, old.Proc.Signal(syscall.SIGCONT))
				if f == m.clientgo {
					m.freezes = append(m.freezes, freeze{id: old.ID, from: signalled.Add(-time.Millisecond), to: woken})
				}
			}
			exited, exitErr := old.Proc.WaitExit(15 * time.Second)
			require.True(t, exited, "%s round %d: %s did not exit", flt.name, round, old.ID)
			if flt.sig == syscall.SIGTERM && exitErr != nil {
				t.Errorf("%s round %d: a planned stop of %s ended with %v:\n%s", flt.name, round, old.ID, exitErr, old.Proc.Tail(20))
			}
			require.NoError(t, f.Start(old))
		}
	}
	// The last term's actions.
	time.Sleep(2 * d.Retry)
	seen.drain(record)

	logged := readActingLog(t, actingLog)
	stale := map[*acting.Term]bool{} // client-go terms that acted after a freeze, stale
	for _, p := range acting.OverlappingPairs(logged) {
		if c := m.wokenClientGo(p); c != nil {
			stale[c] = true
			t.Logf("client-go's own: %s, woken from a freeze, acted on its stale record: %s", c.ID, acting.Describe(p))
			continue
		}
		t.Error(acting.Describe(p))
	}
	for _, tm := range logged {
		t.Logf("term %d: %s (%s) acted %d times, %s to %s", tm.N, tm.ID, m.kind(tm.ID), tm.Acts, tm.Start.Format(time.StampMilli), tm.Last.Format(time.StampMilli))
		// client-go's replicas log -1 where they could not read their term.
		if tm.Acts > 0 && tm.N >= 0 && !stale[tm] && !terms[tm.ID+"/"+strconv.Itoa(tm.N)] {
			t.Errorf("%s acted in term %d, which the Lease never recorded for it", tm.ID, tm.N)
		}
	}
	t.Logf("%d terms in the acting log; no fastover replica ever acted beside another leader; "+
		"%d of %d client-go leaders woken from a freeze acted once more on their stale record (client-go's IsLeader has no deadline)",
		len(logged), len(stale), len(m.freezes))
	t.Logf("takeover after the fault, by direction:\n%s", m.table(rows))
}

// freeze is a client-go holder frozen (SIGSTOP) from, woken (SIGCONT) to.
type freeze struct {
	id       string
	from, to time.Time
}

// wokenClientGo returns the term of an overlapping pair that is client-go's
// own doing, if it is: a client-go replica frozen while it led, which,
// woken after another replica took the Lease, acts on the record it had
// before the freeze (its elector's IsLeader reads that record; nothing
// tells it the renew deadline passed) until its renewal fails. All its
// actions beside the other term came after the wake: it was frozen from
// before the other term began, and acted last within a second of the
// wake. A fastover replica is never excused: its IsLeader checks its
// renew deadline.
func (m *mixedFleet) wokenClientGo(p [2]*acting.Term) *acting.Term {
	a, b := p[0], p[1]
	since := a.Start
	if b.Start.After(since) {
		since = b.Start
	}
	for _, c := range []*acting.Term{a, b} {
		if m.kind(c.ID) != "client-go" {
			continue
		}
		for _, fr := range m.freezes {
			if fr.id == c.ID && !fr.from.After(since) && c.Last.After(fr.to) && c.Last.Before(fr.to.Add(time.Second)) {
				return c
			}
		}
	}
	return nil
}

// table is the takeover times by fault and direction.
func (m *mixedFleet) table(rows []mixedRow) string {
	groups := map[string][]time.Duration{}
	for _, r := range rows {
		k := fmt.Sprintf("%-8s %-9s -> %-9s", r.fault, m.kind(r.old), m.kind(r.next))
		groups[k] = append(groups[k], r.took)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%-32s %5s  %s\n", "fault    holder       successor", "n", "median (min-max)")
	for _, k := range keys {
		fmt.Fprintf(&b, "%-32s %5d  %s\n", k, len(groups[k]), spread(groups[k]))
	}
	return b.String()
}

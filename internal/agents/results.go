// What the agents saw, asked of the Load: when each was served, reached,
// failed, and waiting until all are served.

package agents

import (
	"context"
	"fmt"
	"time"
)

// ReachedBy returns, for each agent, when at or after from a request of
// it was first answered by replica id, whatever it asked: when it got
// through to id, which ServedBy follows. Zero: it did not.
func (l *Load) ReachedBy(id string, from time.Time) []time.Time {
	out := make([]time.Time, len(l.agents))
	for i, a := range l.agents {
		a.mu.Lock()
		if at, ok := a.answers.from(id, from); ok {
			out[i] = at
		}
		a.mu.Unlock()
	}
	return out
}

// SentAfter returns, for each agent, its first request sent at or after from.
func (l *Load) SentAfter(from time.Time) []time.Time {
	out := make([]time.Time, len(l.agents))
	for i, a := range l.agents {
		a.mu.Lock()
		for _, t := range a.sent {
			if !t.Before(from) {
				out[i] = t
				break
			}
		}
		a.mu.Unlock()
	}
	return out
}

// N is how many agents run.
func (l *Load) N() int { return len(l.agents) }

// Follows reports whether agent i dials through leader/follow.
func (l *Load) Follows(i int) bool { return l.agents[i].follows }

// ServedBy returns, for each agent, when at or after from it was first
// served by replica id: events of replicas from it, and all the policies
// listed from it. Zero: it is not.
func (l *Load) ServedBy(id string, from time.Time) []time.Time {
	out := make([]time.Time, len(l.agents))
	for i, a := range l.agents {
		out[i] = a.served(id, from)
	}
	return out
}

// LastFrom returns, for each agent, when it last had an event of replicas
// from replica id (zero: never).
func (l *Load) LastFrom(id string) []time.Time {
	out := make([]time.Time, len(l.agents))
	for i, a := range l.agents {
		a.mu.Lock()
		out[i] = a.last[id]
		a.mu.Unlock()
	}
	return out
}

// Failures returns, for each agent, the times at or after since at which a
// list or watch of it failed.
func (l *Load) Failures(since time.Time) [][]time.Time {
	out := make([][]time.Time, len(l.agents))
	for i, a := range l.agents {
		a.mu.Lock()
		for _, f := range a.failures {
			if !f.at.Before(since) {
				out[i] = append(out[i], f.at)
			}
		}
		a.mu.Unlock()
	}
	return out
}

// FailureKinds counts the agents' failures at or after since by kind
// (kindOf: "connection refused", "410 Gone", ...).
func (l *Load) FailureKinds(since time.Time) map[string]int {
	out := map[string]int{}
	for _, a := range l.agents {
		a.mu.Lock()
		for _, f := range a.failures {
			if !f.at.Before(since) {
				out[f.kind]++
			}
		}
		a.mu.Unlock()
	}
	return out
}

// Wait waits until every agent is served by replica id at or after from,
// or timeout passes (an error that says how many are not), or ctx ends.
func (l *Load) Wait(ctx context.Context, id string, from time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	// The times are the agents' own (ServedBy); the tick only says when
	// to stop waiting, and a thousand agents' check costs CPU that a
	// storm needs.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := 0
		for _, t := range l.ServedBy(id, from) {
			if t.IsZero() {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agents: %d of %d not served by %s within %v", missing, len(l.agents), id, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

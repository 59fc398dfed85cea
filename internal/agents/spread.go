package agents

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Never is a Spread's percentile that the agents did not reach: fewer
// than that share of them were served.
const Never time.Duration = -1

// Spread is how long after a fault the agents were served by the new
// leader: the time by which 50 %, 90 %, 99 % and 100 % of them were.
type Spread struct {
	// N is how many agents; Served how many were served.
	N, Served          int
	P50, P90, P99, Max time.Duration
}

// SpreadOf returns the spread of served (one time per agent, zero: not
// served) after fault. An agent served before the fault counts as served
// at once.
func SpreadOf(fault time.Time, served []time.Time) Spread {
	var d []time.Duration
	for _, t := range served {
		if !t.IsZero() {
			d = append(d, max(t.Sub(fault), 0))
		}
	}
	slices.Sort(d)
	s := Spread{N: len(served), Served: len(d)}
	at := func(p float64) time.Duration {
		k := int(math.Ceil(p*float64(s.N))) - 1
		if s.N == 0 || k >= len(d) {
			return Never
		}
		return d[max(k, 0)]
	}
	s.P50, s.P90, s.P99, s.Max = at(0.5), at(0.9), at(0.99), at(1)
	return s
}

// FormatDuration prints a percentile: milliseconds up to 10 s, then tenths
// of seconds; Never as "never".
func FormatDuration(d time.Duration) string {
	switch {
	case d == Never:
		return "never"
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

func (s Spread) String() string {
	return fmt.Sprintf("served %d/%d: p50 %s, p90 %s, p99 %s, max %s", s.Served, s.N,
		FormatDuration(s.P50), FormatDuration(s.P90), FormatDuration(s.P99), FormatDuration(s.Max))
}

// Outage sums up the failed requests of agents after a fault: how many
// agents had one, and the longest time from an agent's first failure to
// its being served (to until, if it was not).
type Outage struct {
	Agents  int
	Longest time.Duration
}

// OutageOf returns the outage of the agents whose failures after the fault
// are failures[i] and which were served at served[i] (zero: not, by until).
func OutageOf(failures [][]time.Time, served []time.Time, until time.Time) Outage {
	var o Outage
	for i, fs := range failures {
		if len(fs) == 0 {
			continue
		}
		o.Agents++
		end := until
		if i < len(served) && !served[i].IsZero() {
			end = served[i]
		}
		o.Longest = max(o.Longest, end.Sub(fs[0]))
	}
	return o
}

// Stale counts the agents that had an event from the old leader after they
// were served by the new one (lastOld[i] after served[i]): fed by an older
// term's leader.
func Stale(lastOld, served []time.Time) int {
	n := 0
	for i := range served {
		if !served[i].IsZero() && i < len(lastOld) && lastOld[i].After(served[i]) {
			n++
		}
	}
	return n
}

// Runs of observations by the replica they came from.

package agents

import "time"

// runs records, for a sequence of observations each from one replica,
// when the latest run of observations from each replica began.
type runs struct {
	cur   string
	since map[string]time.Time
}

// see records an observation from replica id at t.
func (r *runs) see(id string, t time.Time) {
	if id == r.cur {
		return
	}
	r.cur = id
	if r.since == nil {
		r.since = map[string]time.Time{}
	}
	r.since[id] = t
}

// from is when the latest run from id began, if it began at or after t.
func (r *runs) from(id string, t time.Time) (time.Time, bool) {
	at, ok := r.since[id]
	return at, ok && !at.Before(t)
}

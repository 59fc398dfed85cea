package agents

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSpreadOf(t *testing.T) {
	fault := time.Now()
	at := func(ms int) time.Time { return fault.Add(time.Duration(ms) * time.Millisecond) }
	var served []time.Time
	for i := 1; i <= 100; i++ {
		served = append(served, at(10*i))
	}
	s := SpreadOf(fault, served)
	assert.Equal(t, Spread{N: 100, Served: 100, P50: 500 * time.Millisecond, P90: 900 * time.Millisecond, P99: 990 * time.Millisecond, Max: time.Second}, s)
	assert.Equal(t, "served 100/100: p50 500ms, p90 900ms, p99 990ms, max 1s", s.String())

	// Two not served: p99 and max never reached; one served before the
	// fault counts as at once.
	served[0], served[1], served[2] = time.Time{}, time.Time{}, fault.Add(-time.Second)
	s = SpreadOf(fault, served)
	assert.Equal(t, 98, s.Served)
	assert.Equal(t, time.Duration(0), min(s.P50, 0))
	assert.Equal(t, Never, s.P99)
	assert.Equal(t, Never, s.Max)
	assert.Contains(t, s.String(), "max never")

	assert.Equal(t, Spread{N: 0, P50: Never, P90: Never, P99: Never, Max: Never}, SpreadOf(fault, nil))
	assert.Equal(t, "12.3s", FormatDuration(12345*time.Millisecond))
	assert.Equal(t, "1.235s", FormatDuration(1234567*time.Microsecond))
}

func TestOutageAndStale(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	failures := [][]time.Time{nil, {at(100), at(300)}, {at(200)}}
	served := []time.Time{at(50), at(1100), {}}
	o := OutageOf(failures, served, at(5000))
	assert.Equal(t, Outage{Agents: 2, Longest: 4800 * time.Millisecond}, o, "the agent never served errs until the end")
	o = OutageOf(failures[:2], served, at(5000))
	assert.Equal(t, Outage{Agents: 1, Longest: time.Second}, o)

	assert.Equal(t, 1, Stale([]time.Time{at(60), at(1000), at(9000)}, served), "only the first heard from the old leader after it was served")
}

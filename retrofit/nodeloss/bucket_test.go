package nodeloss

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Polled every 100 ms, a bucket of 1/s and burst 1 gives a token every
// second exactly, not a tick late: the float steps of its refill must add
// up to a whole token on time.
func TestBucketPolled(t *testing.T) {
	for _, qps := range []float64{1, 0.1, 0.01} {
		b := newBucket(qps, 1, 0)
		var got []time.Duration
		for now := time.Duration(0); len(got) < 4; now += 100 * time.Millisecond {
			if b.tryAccept(now) {
				got = append(got, now)
			}
		}
		period := time.Duration(float64(time.Second) / qps)
		assert.Equal(t, []time.Duration{0, period, 2 * period, 3 * period}, got, "qps %v", qps)
	}
	// reserve: a burst, then one every 1/qps.
	b := newBucket(20, 30, 0)
	for range 30 {
		assert.Zero(t, b.reserve(0))
	}
	assert.Equal(t, 50*time.Millisecond, b.reserve(0))
	assert.Equal(t, 100*time.Millisecond, b.reserve(0))
	assert.False(t, newBucket(0, 1, 0).tryAccept(time.Hour), "a rate of 0 never gives a token")
}

package benchstat

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSummary(t *testing.T) {
	ms := time.Millisecond
	v := []time.Duration{90 * ms, 12 * ms, 1234567 * time.Microsecond, 40 * ms}
	assert.Equal(t, "90ms (12ms–1.23s)", Summary(v))
	assert.Equal(t, []time.Duration{90 * ms, 12 * ms, 1234567 * time.Microsecond, 40 * ms}, v, "the samples are left alone")
	assert.Equal(t, 90*ms, Median(v))
	assert.Equal(t, 1234567*time.Microsecond, Max(v))
	assert.Equal(t, "–", Summary(nil))
	assert.Equal(t, time.Duration(0), Median(nil))
	assert.Equal(t, time.Duration(0), Max(nil))
	assert.Equal(t, "63ms", Round(63400*time.Microsecond))
	assert.Equal(t, "-250ms", Round(-250*ms))
	assert.Equal(t, "15.01s", Round(15013*ms))
}

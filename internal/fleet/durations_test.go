package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDurations(t *testing.T) {
	d, err := ParseDurations(" 15s/10s/2s ")
	require.NoError(t, err)
	assert.Equal(t, Durations{Lease: 15 * time.Second, Renew: 10 * time.Second, Retry: 2 * time.Second}, d)
	back, err := ParseDurations(d.String())
	require.NoError(t, err)
	assert.Equal(t, d, back)
	for in, msg := range map[string]string{
		"15s/10s":     "want lease/renew/retry",
		"15s/ten/2s":  `time: invalid duration "ten"`,
		"15s/0s/2s":   "0s must be positive",
		"15s/10s/-2s": "-2s must be positive",
	} {
		_, err := ParseDurations(in)
		assert.ErrorContains(t, err, msg, in)
	}
}

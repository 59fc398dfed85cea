package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTestHostLog(t *testing.T) {
	log := "2026-12-03T10:00:00.5Z 3.2ms 200 example-7d9f_x1\n" +
		"2026-12-03T10:00:00.6Z 1s error Get \"http://198.51.100.9:8080/\": context deadline exceeded\n" +
		"2026-12-03T10:00:01.6Z 2ms 503 not leading\n" +
		"garbage\n" +
		"2026-12-03T10:00:01.7Z -2ms 200 negative\n" +
		"2026-12-03T10:00:01.8Z 2ms 20x bad status\n" +
		"2026-12-03T10:00:01" // a line cut by the container's end
	calls := ParseTestHostLog([]byte(log))
	require.Len(t, calls, 3)
	assert.True(t, calls[0].OK())
	assert.Equal(t, "example-7d9f_x1", calls[0].Answer)
	assert.Equal(t, time.Date(2026, 12, 3, 10, 0, 0, 500_000_000, time.UTC).Add(3200*time.Microsecond), calls[0].Done())
	assert.False(t, calls[1].OK())
	assert.Zero(t, calls[1].Status)
	assert.Equal(t, time.Second, calls[1].Took)
	assert.Contains(t, calls[1].Answer, "context deadline exceeded")
	assert.Equal(t, 503, calls[2].Status)
	assert.False(t, calls[2].OK())
}

func FuzzParseTestHostLog(f *testing.F) {
	f.Add([]byte("2026-12-03T10:00:00.5Z 3.2ms 200 a\n2026-12-03T10:00:00.6Z 1s error x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range ParseTestHostLog(b) {
			if c.Took < 0 || (c.Status != 0 && (c.Status < 100 || c.Status > 999)) {
				t.Fatalf("a call parsed out of range: %+v", c)
			}
		}
	})
}

package fleet

import (
	"fmt"
	"strings"
	"time"
)

// ParseDurations reads durations in String's form, lease/renew/retry
// (e.g. 15s/10s/2s), each positive, as the benchmarks' -durations flag.
func ParseDurations(s string) (Durations, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) != 3 {
		return Durations{}, fmt.Errorf("durations %q: want lease/renew/retry, e.g. 15s/10s/2s", s)
	}
	var v [3]time.Duration
	for i, p := range parts {
		d, err := time.ParseDuration(p)
		if err != nil {
			return Durations{}, fmt.Errorf("durations %q: %w", s, err)
		}
		if d <= 0 {
			return Durations{}, fmt.Errorf("durations %q: %v must be positive", s, d)
		}
		v[i] = d
	}
	return Durations{Lease: v[0], Renew: v[1], Retry: v[2]}, nil
}

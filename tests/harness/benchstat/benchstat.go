// Package benchstat summarises the samples of the benchmark programs
// (tests/bench/*) the one way their tables show them: the median and the
// range, rounded for reading.
package benchstat

import (
	"fmt"
	"slices"
	"time"
)

// Sorted returns a sorted copy of v.
func Sorted(v []time.Duration) []time.Duration {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}

// Median is the middle sample (the upper one of an even count); 0 for
// none.
func Median(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	return Sorted(v)[len(v)/2]
}

// Max is the largest sample; 0 for none.
func Max(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	return slices.Max(v)
}

// Summary is "p50 (min–max)", or "–" for no samples.
func Summary(v []time.Duration) string {
	if len(v) == 0 {
		return "–"
	}
	s := Sorted(v)
	return fmt.Sprintf("%s (%s–%s)", Round(s[len(s)/2]), Round(s[0]), Round(s[len(s)-1]))
}

// Round prints a duration to the millisecond below a second, to ten
// milliseconds above.
func Round(d time.Duration) string {
	if d < time.Second && d > -time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

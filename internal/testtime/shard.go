package testtime

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Shard is the i-th of n shards of names (1 <= i <= n): every n-th name
// from the i-th, so that shards of a sorted list are alike in size and
// every name is in exactly one. Balance does better when the names' times
// are known.
func Shard(names []string, i, n int) []string {
	if i < 1 || i > n {
		return nil
	}
	var out []string
	for k := i - 1; k < len(names); k += n {
		out = append(out, names[k])
	}
	return out
}

// Balance is the i-th of n shards of names (1 <= i <= n) whose times, as
// took gives them, add up to about the same: the longest name first, each
// to the shard with the least time so far (ties to the first shard, names
// of equal time in name order). A name took does not know counts as the
// mean of those it knows (a new test is taken to be a usual one); when it
// knows none, Balance is Shard. Every name is in exactly one shard, and
// the result is in name order.
func Balance(names []string, took map[string]time.Duration, i, n int) []string {
	var sum time.Duration
	known := 0
	for _, name := range names {
		if d, ok := took[name]; ok {
			sum += d
			known++
		}
	}
	if known == 0 || i < 1 || i > n {
		return Shard(names, i, n)
	}
	mean := sum / time.Duration(known)
	weight := func(name string) time.Duration {
		if d, ok := took[name]; ok {
			return d
		}
		return mean
	}
	order := slices.Clone(names)
	slices.SortFunc(order, func(a, b string) int {
		return cmp.Or(cmp.Compare(weight(b), weight(a)), cmp.Compare(a, b))
	})
	loads := make([]time.Duration, n)
	var out []string
	for _, name := range order {
		least := 0
		for k := range loads {
			if loads[k] < loads[least] {
				least = k
			}
		}
		loads[least] += weight(name)
		if least == i-1 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// BalanceGroups is Balance over several groups of names at once (the
// tests of several packages, say, took[k] giving group k's times): the
// i-th of n shards, as one list per group, so that each shard's whole
// time, all groups counted, is about the same. The mean that stands for
// an unknown time is over every group's known times.
func BalanceGroups(groups [][]string, took []map[string]time.Duration, i, n int) [][]string {
	var keys []string
	all := map[string]time.Duration{}
	key := func(k int, name string) string { return fmt.Sprintf("%06d/%s", k, name) }
	for k, names := range groups {
		for _, name := range names {
			keys = append(keys, key(k, name))
			if k < len(took) {
				if d, ok := took[k][name]; ok {
					all[key(k, name)] = d
				}
			}
		}
	}
	out := make([][]string, len(groups))
	for _, kn := range Balance(keys, all, i, n) {
		idx, name, _ := strings.Cut(kn, "/")
		k, _ := strconv.Atoi(idx)
		out[k] = append(out[k], name)
	}
	return out
}

// Took is how long each top-level test of pkg took in s, by name; a test
// that did not end (Incomplete) is left out.
func Took(s Summary, pkg string) map[string]time.Duration {
	took := map[string]time.Duration{}
	for _, r := range s.Tests {
		if r.Package == pkg && r.Outcome != Incomplete {
			took[r.Test] = r.Elapsed
		}
	}
	return took
}

package testtime

import (
	"cmp"
	"slices"
	"time"
)

// Shard is the i-th of n shards of names (1 <= i <= n): every n-th name
// from the i-th, so that shards of a sorted list are alike in size and
// every name is in exactly one. Balance does better when the names' times
// are known.
func Shard(names []string, i, n int) []string {
	return shard(names, i, n)
}

func shard[T any](items []T, i, n int) []T {
	if i < 1 || i > n {
		return nil
	}
	var out []T
	for k := i - 1; k < len(items); k += n {
		out = append(out, items[k])
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
	return balance(names, func(name string) (time.Duration, bool) {
		d, ok := took[name]
		return d, ok
	}, cmp.Compare[string], i, n)
}

// BalanceGroups is Balance over several groups of names at once (the
// tests of several packages, say, took[k] giving group k's times): the
// i-th of n shards, as one list per group, so that each shard's whole
// time, all groups counted, is about the same. The mean that stands for
// an unknown time is over every group's known times.
func BalanceGroups(groups [][]string, took []map[string]time.Duration, i, n int) [][]string {
	type member struct {
		group int
		name  string
	}
	var all []member
	for k, names := range groups {
		for _, name := range names {
			all = append(all, member{k, name})
		}
	}
	picked := balance(all, func(m member) (time.Duration, bool) {
		if m.group >= len(took) {
			return 0, false
		}
		d, ok := took[m.group][m.name]
		return d, ok
	}, func(a, b member) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.name, b.name))
	}, i, n)
	out := make([][]string, len(groups))
	for _, m := range picked {
		out[m.group] = append(out[m.group], m.name)
	}
	return out
}

// balance is Balance over any items, took giving their times and compare
// their order (for ties, and the result's).
func balance[T any](items []T, took func(T) (time.Duration, bool), compare func(a, b T) int, i, n int) []T {
	var sum time.Duration
	known := 0
	for _, it := range items {
		if d, ok := took(it); ok {
			sum += d
			known++
		}
	}
	if known == 0 || i < 1 || i > n {
		return shard(items, i, n)
	}
	mean := sum / time.Duration(known)
	weight := func(it T) time.Duration {
		if d, ok := took(it); ok {
			return d
		}
		return mean
	}
	order := slices.Clone(items)
	slices.SortFunc(order, func(a, b T) int {
		return cmp.Or(cmp.Compare(weight(b), weight(a)), compare(a, b))
	})
	loads := make([]time.Duration, n)
	var out []T
	for _, it := range order {
		least := 0
		for k := range loads {
			if loads[k] < loads[least] {
				least = k
			}
		}
		loads[least] += weight(it)
		if least == i-1 {
			out = append(out, it)
		}
	}
	slices.SortFunc(out, compare)
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

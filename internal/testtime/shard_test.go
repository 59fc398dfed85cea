package testtime

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShard(t *testing.T) {
	names := []string{"A", "B", "C", "D", "E"}
	assert.Equal(t, []string{"A", "C", "E"}, Shard(names, 1, 2))
	assert.Equal(t, []string{"B", "D"}, Shard(names, 2, 2))
	assert.Equal(t, names, Shard(names, 1, 1))
	assert.Empty(t, Shard(names, 0, 2), "no shard 0")
	assert.Empty(t, Shard(names, 3, 2), "no shard 3 of 2")
	assert.Empty(t, Shard(nil, 1, 2))
}

func TestBalance(t *testing.T) {
	s := time.Second
	// Name order puts the two long tests in one shard (A, C: 200 s against
	// 20 s); balanced, each long one has a shard.
	names := []string{"A", "B", "C", "D"}
	took := map[string]time.Duration{"A": 100 * s, "B": 10 * s, "C": 100 * s, "D": 10 * s}
	one, two := Balance(names, took, 1, 2), Balance(names, took, 2, 2)
	assert.Equal(t, []string{"A", "B"}, one)
	assert.Equal(t, []string{"C", "D"}, two)

	// Longest first onto the least loaded shard: 9 | 5+2+1 | 4+3.
	names = []string{"T1", "T2", "T3", "T4", "T5", "T6"}
	took = map[string]time.Duration{"T1": 9 * s, "T2": 5 * s, "T3": 4 * s, "T4": 3 * s, "T5": 2 * s, "T6": 1 * s}
	shards := [][]string{Balance(names, took, 1, 3), Balance(names, took, 2, 3), Balance(names, took, 3, 3)}
	assert.Equal(t, [][]string{{"T1"}, {"T2", "T5", "T6"}, {"T3", "T4"}}, shards)
	assertPartition(t, names, shards)

	// A test of unknown time counts as the mean of the known (50 s).
	names = []string{"A", "B", "C", "New"}
	took = map[string]time.Duration{"A": 90 * s, "B": 50 * s, "C": 10 * s}
	assert.Equal(t, []string{"A", "C"}, Balance(names, took, 1, 2))
	assert.Equal(t, []string{"B", "New"}, Balance(names, took, 2, 2))

	// Nothing known, or out of range: Shard.
	assert.Equal(t, Shard(names, 2, 2), Balance(names, nil, 2, 2))
	assert.Empty(t, Balance(names, took, 3, 2))
	assert.Equal(t, names, Balance(names, took, 1, 1))
}

func assertPartition(t *testing.T, names []string, shards [][]string) {
	t.Helper()
	seen := map[string]int{}
	for _, sh := range shards {
		for _, n := range sh {
			seen[n]++
		}
	}
	for _, n := range names {
		assert.Equal(t, 1, seen[n], "%s in exactly one shard", n)
	}
	assert.Len(t, seen, len(names))
}

func TestTook(t *testing.T) {
	events := strings.Join([]string{
		`{"Action":"run","Package":"m/e2e","Test":"TestA"}`,
		`{"Action":"pass","Package":"m/e2e","Test":"TestA","Elapsed":12.5}`,
		`{"Action":"run","Package":"m/e2e","Test":"TestB"}`,
		`{"Action":"fail","Package":"m/e2e","Test":"TestB","Elapsed":3}`,
		`{"Action":"run","Package":"m/e2e","Test":"TestStopped"}`,
		`{"Action":"pass","Package":"m/charts","Test":"TestC","Elapsed":7}`,
	}, "\n")
	s, err := Summarize(strings.NewReader(events))
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Duration{"TestA": 12500 * time.Millisecond, "TestB": 3 * time.Second}, Took(s, "m/e2e"),
		"a failed test's time counts; one that never ended does not")
	assert.Empty(t, Took(s, "m/other"))
}

func TestBalanceGroups(t *testing.T) {
	s := time.Second
	// Balanced apart, shard 1 gets E1 (100 s) and C1 (60 s), shard 2 E2
	// and E3 (100 s) and C2 (40 s): 160 s against 140 s. Balanced together
	// (100 | 90, 60 | 40 | 10), 150 s each.
	groups := [][]string{{"E1", "E2", "E3"}, {"C1", "C2"}}
	took := []map[string]time.Duration{
		{"E1": 100 * s, "E2": 90 * s, "E3": 10 * s},
		{"C1": 60 * s, "C2": 40 * s},
	}
	one, two := BalanceGroups(groups, took, 1, 2), BalanceGroups(groups, took, 2, 2)
	assert.Equal(t, [][]string{{"E1", "E3"}, {"C2"}}, one)
	assert.Equal(t, [][]string{{"E2"}, {"C1"}}, two)
	assertPartition(t, groups[0], [][]string{one[0], two[0]})
	assertPartition(t, groups[1], [][]string{one[1], two[1]})

	// The same name in two groups is two tests.
	same := BalanceGroups([][]string{{"T"}, {"T"}}, []map[string]time.Duration{{"T": s}, {"T": s}}, 1, 2)
	assert.Equal(t, [][]string{{"T"}, nil}, same)

	// No times: every other name of the groups in turn.
	none := BalanceGroups(groups, nil, 1, 2)
	assert.Equal(t, [][]string{{"E1", "E3"}, {"C2"}}, none)
}

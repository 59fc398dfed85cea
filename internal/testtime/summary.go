package testtime

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Outcomes of a package or a test. Incomplete is one the stream ended
// before: the run was stopped, or the package's binary died.
const (
	Pass       = "pass"
	Fail       = "fail"
	Skip       = "skip"
	Incomplete = "incomplete"
)

// Result is the outcome and wall time of one package, or one top-level test
// of a package (subtests count in their parent's time).
type Result struct {
	Package string
	Test    string // empty for a package
	Outcome string
	Elapsed time.Duration
	Tests   int // a package's top-level tests that ran
}

// Summary is what a stream of `go test -json` events says of its packages
// and their top-level tests.
type Summary struct {
	Packages []Result  // in the order they started
	Tests    []Result  // top-level tests, in the order they started
	Failures []Failure // in the order they failed
	Skipped  int       // lines that were not events
}

type pkgState struct {
	Result
	first, last   time.Time
	order         int
	starts, dones int // runs of the package begun and ended (one stream may hold several)
}

type testState struct {
	Result
	start, last time.Time
	order       int
}

// Summarize reads a stream of `go test -json` events (several streams
// concatenated are one). A line that is not an event is counted in
// Skipped, never an error; a package or test that started and never ended
// is Incomplete, with the time from its first event to its last. A package
// run more than once (make test runs tests/e2e's timed and untimed tests
// as two runs) is one Result: the sum of the runs' times, and the worst
// outcome (fail, then incomplete, then pass, then skip).
func Summarize(r io.Reader) (Summary, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	pkgs := map[string]*pkgState{}
	tests := map[[2]string]*testState{}
	var s Summary
	fails := newFailures()
	for sc.Scan() {
		var e Event
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" || e.Package == "" {
			s.Skipped++
			continue
		}
		fails.add(e)
		p := pkgs[e.Package]
		if p == nil {
			p = &pkgState{Result: Result{Package: e.Package, Outcome: Incomplete}, first: e.Time, order: len(pkgs)}
			pkgs[e.Package] = p
		}
		if !e.Time.IsZero() {
			if p.first.IsZero() {
				p.first = e.Time
			}
			p.last = e.Time
		}
		done := e.Action == Pass || e.Action == Fail || e.Action == Skip
		if e.Test == "" {
			switch {
			case e.Action == "start":
				p.starts++
			case done && p.dones == 0:
				p.Outcome, p.Elapsed = e.Action, seconds(e.Elapsed)
				p.dones++
			case done:
				p.Outcome, p.Elapsed = worse(p.Outcome, e.Action), p.Elapsed+seconds(e.Elapsed)
				p.dones++
			}
			continue
		}
		if strings.Contains(e.Test, "/") {
			continue // a subtest: its time is its parent's
		}
		k := [2]string{e.Package, e.Test}
		t := tests[k]
		if t == nil {
			t = &testState{Result: Result{Package: e.Package, Test: e.Test, Outcome: Incomplete}, start: e.Time, order: len(tests)}
			tests[k] = t
			p.Tests++
		}
		if !e.Time.IsZero() {
			t.last = e.Time
			if e.Action == "run" || e.Action == "cont" {
				// From the test's latest run (if it ran more than once),
				// or from when a parallel test went on after its pause.
				t.start = e.Time
			}
		}
		if done {
			t.Outcome, t.Elapsed = e.Action, seconds(e.Elapsed)
			// A test whose subtests are parallel reports the time of its
			// own function only (0 s): its time is from its start to its end.
			if !t.start.IsZero() && !e.Time.IsZero() {
				t.Elapsed = max(t.Elapsed, e.Time.Sub(t.start).Round(time.Millisecond))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Summary{}, fmt.Errorf("reading the events: %w", err)
	}
	ps := make([]*pkgState, 0, len(pkgs))
	for _, p := range pkgs {
		switch {
		case p.dones == 0 && !p.first.IsZero():
			p.Elapsed = p.last.Sub(p.first)
		case p.dones < p.starts && p.Outcome != Fail:
			p.Outcome = Incomplete // a run that never ended
		}
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].order < ps[j].order })
	for _, p := range ps {
		s.Packages = append(s.Packages, p.Result)
	}
	ts := make([]*testState, 0, len(tests))
	for _, t := range tests {
		if t.Outcome == Incomplete && !t.start.IsZero() {
			t.Elapsed = t.last.Sub(t.start)
		}
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].order < ts[j].order })
	for _, t := range ts {
		s.Tests = append(s.Tests, t.Result)
	}
	s.Failures = fails.list()
	return s, nil
}

// worse is the worse of two outcomes of a package's runs.
func worse(a, b string) string {
	rank := map[string]int{Fail: 3, Incomplete: 2, Pass: 1, Skip: 0}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

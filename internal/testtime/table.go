package testtime

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Phase is one step of `make test` (a make target) and its wall time.
type Phase struct {
	Name    string
	Elapsed time.Duration
	Failed  bool
}

// ReadPhases reads the phases file `make test` writes: one phase a line,
// "NAME<TAB>SECONDS<TAB>STATUS" (STATUS is make's exit status). A line it
// cannot read is an error that names it.
func ReadPhases(r io.Reader) ([]Phase, error) {
	var phases []Phase
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("phases, line %d: %q: want NAME<TAB>SECONDS<TAB>STATUS", n, line)
		}
		secs, err := strconv.ParseFloat(f[1], 64)
		if err != nil || secs < 0 {
			return nil, fmt.Errorf("phases, line %d: %q is not a number of seconds", n, f[1])
		}
		status, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("phases, line %d: %q is not an exit status", n, f[2])
		}
		phases = append(phases, Phase{Name: f[0], Elapsed: seconds(secs), Failed: status != 0})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the phases: %w", err)
	}
	return phases, nil
}

// Report is what the table shows.
type Report struct {
	Phases   []Phase
	Summary  Summary
	Module   string // package names are shown relative to it
	Slowest  int    // how many of the slowest tests to list
	Parallel int    // how many packages go test ran at once (its -p), for the note
}

// WriteTable writes the report as three tables: make's phases and their
// total, every package by wall time (slowest first), and the slowest
// top-level tests; then, if any failed, the failures and their last
// messages, so that the end of a long run's output says why it failed.
func WriteTable(w io.Writer, r Report) error {
	var sections [][][]string
	if len(r.Phases) > 0 {
		var total time.Duration
		rows := [][]string{{"phase", "wall", "result"}}
		for _, p := range r.Phases {
			total += p.Elapsed
			rows = append(rows, []string{p.Name, clock(p.Elapsed), okFail(p.Failed)})
		}
		sections = append(sections, append(rows, []string{"total", clock(total), ""}))
	}
	pkgs := append([]Result(nil), r.Summary.Packages...)
	sort.SliceStable(pkgs, func(i, j int) bool { return pkgs[i].Elapsed > pkgs[j].Elapsed })
	if len(pkgs) > 0 {
		var sum time.Duration
		rows := [][]string{{"package", "wall", "tests", "result"}}
		for _, p := range pkgs {
			sum += p.Elapsed
			rows = append(rows, []string{ShortName(p.Package, r.Module), clock(p.Elapsed), strconv.Itoa(p.Tests), p.Outcome})
		}
		sections = append(sections, append(rows, []string{"sum of packages", clock(sum), "", ""}))
	}
	tests := append([]Result(nil), r.Summary.Tests...)
	sort.SliceStable(tests, func(i, j int) bool { return tests[i].Elapsed > tests[j].Elapsed })
	if r.Slowest > 0 && len(tests) > r.Slowest {
		tests = tests[:r.Slowest]
	}
	if len(tests) > 0 {
		rows := [][]string{{"slowest tests", "wall", "package", "result"}}
		for _, t := range tests {
			rows = append(rows, []string{t.Test, clock(t.Elapsed), ShortName(t.Package, r.Module), t.Outcome})
		}
		sections = append(sections, rows)
	}
	for i, rows := range sections {
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		for _, row := range rows {
			if _, err := io.WriteString(tw, strings.Join(row, "\t")+"\n"); err != nil {
				return err
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(pkgs) > 0 && r.Parallel > 1 {
		if _, err := fmt.Fprintf(w, "(go test runs up to %d packages at once, so the packages' sum exceeds their phase's wall time)\n", r.Parallel); err != nil {
			return err
		}
	}
	return writeFailures(w, r)
}

// writeFailures lists the failures and their last messages.
func writeFailures(w io.Writer, r Report) error {
	if len(r.Summary.Failures) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nfailed (the last %d messages of each; the whole output is above):\n", failureLines)
	for _, f := range r.Summary.Failures {
		name := f.Test
		if name == "" {
			name = "(the package itself)"
		}
		fmt.Fprintf(&b, "%s  %s\n", ShortName(f.Package, r.Module), name)
		if len(f.Lines) == 0 {
			b.WriteString("    (no message)\n")
		}
		for _, l := range f.Lines {
			b.WriteString("    " + l + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// clock shows d as minutes and seconds, to the tenth of a second.
func clock(d time.Duration) string {
	d = d.Round(100 * time.Millisecond)
	m := d / time.Minute
	s := float64(d%time.Minute) / float64(time.Second)
	if m == 0 {
		return fmt.Sprintf("%.1fs", s)
	}
	return fmt.Sprintf("%dm%04.1fs", m, s)
}

func okFail(failed bool) string {
	if failed {
		return "FAILED"
	}
	return "ok"
}

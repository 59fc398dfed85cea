package testtime

import (
	"regexp"
	"strings"
)

// Failure is a failed test, or a failed package with no failed test (a
// build error, a panic, a timeout), and the last of its messages: for a
// test, the lines its t.Log, t.Error and t.Fatal calls began (file.go:N:
// ...), their continuations (the log dumps a cleanup writes) left out; for
// a package, the last lines of its own output.
type Failure struct {
	Package string
	Test    string // empty for a package
	Lines   []string
}

// Bounds of what a Failure keeps, so that the table's end shows the cause
// of every failure without the dumps that may follow it.
const (
	failureLines   = 6
	failureLineLen = 300
)

// message matches the first line of a test's log call, as the testing
// package indents it: "    file_test.go:123: text".
var message = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// testifyLabel matches a line of a testify assertion's block that begins
// a field ("\tError:      \t..."); testifyError the fields worth keeping,
// whose continuation lines ("\t            \t...") are kept with them:
// the error and the message, not the trace.
var (
	testifyLabel = regexp.MustCompile(`^\s+\t[A-Z][\w ]*:\s*\t`)
	testifyError = regexp.MustCompile(`^\s+\t(Error|Messages):\s*\t`)
	testifyMore  = regexp.MustCompile(`^\s+\t\s*\t`)
)

// failures collects the failures of a stream of events, as Summarize
// reads it.
type failures struct {
	pending map[[2]string]string   // a test's output line not ended yet
	lines   map[[2]string][]string // the last message lines of each test
	inError map[[2]string]bool     // within a testify block's Error or Messages
	failed  [][2]string            // in the order they failed
}

func newFailures() *failures {
	return &failures{pending: map[[2]string]string{}, lines: map[[2]string][]string{}, inError: map[[2]string]bool{}}
}

func (f *failures) add(e Event) {
	k := [2]string{e.Package, e.Test}
	switch e.Action {
	case "output":
		text := f.pending[k] + e.Output
		lines := strings.SplitAfter(text, "\n")
		f.pending[k] = lines[len(lines)-1]
		if len(f.pending[k]) > maxLine {
			f.pending[k] = ""
		}
		for _, l := range lines[:len(lines)-1] {
			f.keep(k, l)
		}
	case Fail:
		if rest := f.pending[k]; rest != "" {
			f.keep(k, rest)
			f.pending[k] = ""
		}
		f.failed = append(f.failed, k)
	}
}

// keep appends line to k's messages if it is one: a test's log call, the
// Error and Messages of a testify assertion, or any line of a package's
// own output; only the last failureLines stay.
func (f *failures) keep(k [2]string, line string) {
	line = strings.TrimRight(line, "\n")
	if k[1] != "" {
		switch {
		case testifyLabel.MatchString(line):
			f.inError[k] = testifyError.MatchString(line)
		case !testifyMore.MatchString(line):
			f.inError[k] = false
		}
		if !message.MatchString(line) {
			if !f.inError[k] {
				return
			}
			line = strings.Join(strings.Fields(line), " ")
		}
	}
	if k[1] == "" && strings.TrimSpace(line) == "" {
		return
	}
	line = strings.TrimSpace(line)
	if len(line) > failureLineLen {
		line = line[:failureLineLen] + " …"
	}
	f.lines[k] = append(f.lines[k], line)
	if n := len(f.lines[k]); n > failureLines {
		f.lines[k] = f.lines[k][n-failureLines:]
	}
}

// list is the failures worth showing: a failed test, unless it has no
// message of its own and a subtest of it failed (that one is shown); a
// failed package, only if none of its tests failed.
func (f *failures) list() []Failure {
	testFailed := map[string]bool{}
	subFailed := map[[2]string]bool{}
	for _, k := range f.failed {
		if k[1] == "" {
			continue
		}
		testFailed[k[0]] = true
		name := k[1]
		for i := strings.LastIndexByte(name, '/'); i > 0; i = strings.LastIndexByte(name, '/') {
			name = name[:i]
			subFailed[[2]string{k[0], name}] = true
		}
	}
	var out []Failure
	seen := map[[2]string]bool{}
	for _, k := range f.failed {
		if seen[k] {
			continue
		}
		seen[k] = true
		if k[1] == "" && testFailed[k[0]] {
			continue
		}
		if len(f.lines[k]) == 0 && subFailed[k] {
			continue
		}
		out = append(out, Failure{Package: k[0], Test: k[1], Lines: f.lines[k]})
	}
	return out
}

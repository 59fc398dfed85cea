package testtime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mod = "example.com/m"

// stream is two packages' events, interleaved as go test -p 2 writes them:
// a passes with a subtest and a skipped test, b's TestSlow is cut off
// when the stream ends, and a go command's message sits between events.
const stream = `{"Time":"2026-12-05T10:00:00Z","Action":"start","Package":"example.com/m/a"}
{"Time":"2026-12-05T10:00:00Z","Action":"start","Package":"example.com/m/b"}
{"Time":"2026-12-05T10:00:01Z","Action":"run","Package":"example.com/m/a","Test":"TestOne"}
{"Time":"2026-12-05T10:00:01Z","Action":"output","Package":"example.com/m/a","Test":"TestOne","Output":"=== RUN   TestOne\n"}
{"Time":"2026-12-05T10:00:01Z","Action":"run","Package":"example.com/m/b","Test":"TestSlow"}
{"Time":"2026-12-05T10:00:01Z","Action":"output","Package":"example.com/m/b","Test":"TestSlow","Output":"half a "}
{"Time":"2026-12-05T10:00:02Z","Action":"run","Package":"example.com/m/a","Test":"TestOne/sub"}
{"Time":"2026-12-05T10:00:03Z","Action":"pass","Package":"example.com/m/a","Test":"TestOne/sub","Elapsed":1}
{"Time":"2026-12-05T10:00:03Z","Action":"output","Package":"example.com/m/b","Test":"TestSlow","Output":"line\n"}
go: downloading example.com/dep v1.0.0
{"Time":"2026-12-05T10:00:04Z","Action":"pass","Package":"example.com/m/a","Test":"TestOne","Elapsed":3.2}
{"Time":"2026-12-05T10:00:04Z","Action":"run","Package":"example.com/m/a","Test":"TestSkipped"}
{"Time":"2026-12-05T10:00:04Z","Action":"skip","Package":"example.com/m/a","Test":"TestSkipped","Elapsed":0}
{"Time":"2026-12-05T10:00:05Z","Action":"output","Package":"example.com/m/a","Output":"ok  \texample.com/m/a\t4.5s\n"}
{"Time":"2026-12-05T10:00:05Z","Action":"pass","Package":"example.com/m/a","Elapsed":4.5}
{"Time":"2026-12-05T10:01:31Z","Action":"output","Package":"example.com/m/b","Test":"TestSlow","Output":"no newline at the end"}
`

func TestSummarize(t *testing.T) {
	s, err := Summarize(strings.NewReader(stream))
	require.NoError(t, err)
	assert.Equal(t, 1, s.Skipped, "the go command's line")
	assert.Equal(t, []Result{
		{Package: "example.com/m/a", Outcome: Pass, Elapsed: 4500 * time.Millisecond, Tests: 2},
		{Package: "example.com/m/b", Outcome: Incomplete, Elapsed: 91 * time.Second, Tests: 1},
	}, s.Packages)
	assert.Equal(t, []Result{
		{Package: "example.com/m/a", Test: "TestOne", Outcome: Pass, Elapsed: 3200 * time.Millisecond},
		{Package: "example.com/m/b", Test: "TestSlow", Outcome: Incomplete, Elapsed: 90 * time.Second},
		{Package: "example.com/m/a", Test: "TestSkipped", Outcome: Skip},
	}, s.Tests)
}

func TestSummarizeBadInput(t *testing.T) {
	s, err := Summarize(strings.NewReader("not json\n{\"Action\":\n{}\n{\"Action\":\"pass\"}\n\n"))
	require.NoError(t, err)
	assert.Empty(t, s.Packages)
	assert.Equal(t, 5, s.Skipped)

	_, err = Summarize(strings.NewReader(strings.Repeat("x", maxLine+1)))
	assert.ErrorContains(t, err, "reading the events")
}

func TestTee(t *testing.T) {
	var out, record bytes.Buffer
	require.NoError(t, Tee(strings.NewReader(stream), &out, &record, mod, false))
	assert.Equal(t, stream, record.String(), "every line is kept as it came")
	assert.Equal(t, "a| === RUN   TestOne\n"+
		"b| half a line\n"+
		"go: downloading example.com/dep v1.0.0\n"+
		"a| ok  \texample.com/m/a\t4.5s\n"+
		"b| no newline at the end\n", out.String())

	// One package: no prefix, as go test -v prints it.
	out.Reset()
	one := `{"Action":"output","Package":"example.com/m","Output":"=== RUN   TestX\n"}` + "\n"
	require.NoError(t, Tee(strings.NewReader(one), &out, &record, mod, false))
	assert.Equal(t, "=== RUN   TestX\n", out.String())
}

func TestShortName(t *testing.T) {
	assert.Equal(t, ".", ShortName(mod, mod))
	assert.Equal(t, "tests/e2e", ShortName(mod+"/tests/e2e", mod))
	assert.Equal(t, "example.com/mod2", ShortName("example.com/mod2", mod))
	assert.Equal(t, "x/y", ShortName("x/y", ""))
}

func TestReadPhases(t *testing.T) {
	ps, err := ReadPhases(strings.NewReader("tools\t75.25\t0\n\nlint\t120\t2\n"))
	require.NoError(t, err)
	assert.Equal(t, []Phase{
		{Name: "tools", Elapsed: 75250 * time.Millisecond},
		{Name: "lint", Elapsed: 2 * time.Minute, Failed: true},
	}, ps)
	for in, want := range map[string]string{
		"tools 75 0\n":    "line 1",
		"tools\tx\t0\n":   `"x" is not a number of seconds`,
		"tools\t-1\t0\n":  `"-1" is not a number of seconds`,
		"tools\t1\tok\n":  `"ok" is not an exit status`,
		"a\t1\t0\nb\t1\n": "line 2",
	} {
		_, err := ReadPhases(strings.NewReader(in))
		assert.ErrorContains(t, err, want, "input %q", in)
	}
}

func TestWriteTable(t *testing.T) {
	s, err := Summarize(strings.NewReader(stream))
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, WriteTable(&b, Report{
		Phases:   []Phase{{Name: "tools", Elapsed: 65 * time.Second}, {Name: "e2e", Elapsed: 95 * time.Second, Failed: true}},
		Summary:  s,
		Module:   mod,
		Slowest:  2,
		Parallel: 2,
	}))
	assert.Equal(t, `phase  wall     result
tools  1m05.0s  ok
e2e    1m35.0s  FAILED
total  2m40.0s  

package          wall     tests  result
b                1m31.0s  1      incomplete
a                4.5s     2      pass
sum of packages  1m35.5s         

slowest tests  wall     package  result
TestSlow       1m30.0s  b        incomplete
TestOne        3.2s     a        pass
(go test runs up to 2 packages at once, so the packages' sum exceeds their phase's wall time)
`, b.String())
}

func FuzzSummarize(f *testing.F) {
	f.Add([]byte(stream))
	f.Add([]byte(`{"Action":"pass","Package":"p","Test":"T/","Elapsed":-1e308}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Summarize(bytes.NewReader(b))
		if err != nil {
			return
		}
		var out bytes.Buffer
		require.NoError(t, WriteTable(&out, Report{Summary: s, Slowest: 3}))
		var rec bytes.Buffer
		require.NoError(t, Tee(bytes.NewReader(b), &out, &rec, mod, false))
	})
}

// failing is a run where a subtest fails (its cause, then a cleanup's
// dump, which the summary leaves out), its parent fails with no message
// of its own, and another package dies of a panic outside any test's
// verdict.
const failing = `{"Action":"run","Package":"example.com/m/e2e","Test":"TestLoss"}
{"Action":"run","Package":"example.com/m/e2e","Test":"TestLoss/cut"}
{"Action":"output","Package":"example.com/m/e2e","Test":"TestLoss/cut","Output":"    loss_test.go:12: node cut off\n"}
{"Action":"output","Package":"example.com/m/e2e","Test":"TestLoss/cut","Output":"    loss_test.go:40: app not replaced "}
{"Action":"output","Package":"example.com/m/e2e","Test":"TestLoss/cut","Output":"within 13s\n"}
{"Action":"output","Package":"example.com/m/e2e","Test":"TestLoss/cut","Output":"    cluster.go:151: control-plane logs:\n        {\"level\":\"info\",\"msg\":\"a dumped line\"}\n"}
{"Action":"output","Package":"example.com/m/e2e","Test":"TestLoss/cut","Output":"--- FAIL: TestLoss/cut (33.65s)\n"}
{"Action":"fail","Package":"example.com/m/e2e","Test":"TestLoss/cut","Elapsed":33.65}
{"Action":"output","Package":"example.com/m/e2e","Test":"TestLoss","Output":"--- FAIL: TestLoss (0.00s)\n"}
{"Action":"fail","Package":"example.com/m/e2e","Test":"TestLoss","Elapsed":0}
{"Action":"fail","Package":"example.com/m/e2e","Elapsed":40}
{"Action":"run","Package":"example.com/m/unit","Test":"TestQuick"}
{"Action":"output","Package":"example.com/m/unit","Output":"panic: test timed out after 1m0s\n"}
{"Action":"output","Package":"example.com/m/unit","Output":"\trunning tests:\n\t\tTestQuick (1m0s)\n"}
{"Action":"fail","Package":"example.com/m/unit","Elapsed":60}
`

func TestFailures(t *testing.T) {
	s, err := Summarize(strings.NewReader(failing + stream))
	require.NoError(t, err)
	assert.Equal(t, []Failure{
		{Package: "example.com/m/e2e", Test: "TestLoss/cut", Lines: []string{
			"loss_test.go:12: node cut off",
			"loss_test.go:40: app not replaced within 13s",
			"cluster.go:151: control-plane logs:",
		}},
		{Package: "example.com/m/unit", Lines: []string{
			"panic: test timed out after 1m0s", "running tests:", "TestQuick (1m0s)",
		}},
	}, s.Failures)

	var b bytes.Buffer
	require.NoError(t, WriteTable(&b, Report{Summary: s, Module: mod, Slowest: 1}))
	assert.True(t, strings.HasSuffix(b.String(), `
failed (the last 6 messages of each; the whole output is above):
e2e  TestLoss/cut
    loss_test.go:12: node cut off
    loss_test.go:40: app not replaced within 13s
    cluster.go:151: control-plane logs:
unit  (the package itself)
    panic: test timed out after 1m0s
    running tests:
    TestQuick (1m0s)
`), b.String())

	// A testify assertion: its Error and Messages, with their
	// continuations, not its trace.
	var testify strings.Builder
	for _, l := range []string{
		"    images_test.go:81: ",
		"        \tError Trace:\t/src/images_test.go:81",
		"        \t            \t\t\t\t/src/images_test.go:73",
		"        \tError:      \tReceived unexpected error:",
		"        \t            \tpush 127.0.0.1:41043/x: context deadline exceeded",
		"        \tTest:       \tTestImages/push",
		"        \tMessages:   \tthe registry",
		"    cleanup dump that is not a message",
	} {
		fmt.Fprintf(&testify, `{"Action":"output","Package":"p","Test":"T","Output":%q}`+"\n", l+"\n")
	}
	testify.WriteString(`{"Action":"fail","Package":"p","Test":"T"}` + "\n")
	s, err = Summarize(strings.NewReader(testify.String()))
	require.NoError(t, err)
	require.Len(t, s.Failures, 1)
	assert.Equal(t, []string{
		"images_test.go:81:",
		"Error: Received unexpected error:",
		"push 127.0.0.1:41043/x: context deadline exceeded",
		"Messages: the registry",
	}, s.Failures[0].Lines)

	// Only the last messages stay, each cut to a bounded length.
	var many strings.Builder
	for i := range 10 {
		fmt.Fprintf(&many, `{"Action":"output","Package":"p","Test":"T","Output":"    x_test.go:%d: %s\n"}`+"\n", i, strings.Repeat("y", 2*failureLineLen))
	}
	many.WriteString(`{"Action":"fail","Package":"p","Test":"T"}` + "\n")
	s, err = Summarize(strings.NewReader(many.String()))
	require.NoError(t, err)
	require.Len(t, s.Failures, 1)
	require.Len(t, s.Failures[0].Lines, failureLines)
	assert.True(t, strings.HasPrefix(s.Failures[0].Lines[0], "x_test.go:4: y"))
	assert.Len(t, s.Failures[0].Lines[0], failureLineLen+len(" …"))
}

func TestSummarizeRuns(t *testing.T) {
	// tests/e2e run twice (make test's timed and untimed runs), the second
	// failing; c run twice, the second cut off.
	const runs = `{"Time":"2026-12-05T10:00:00Z","Action":"start","Package":"example.com/m/e2e"}
{"Time":"2026-12-05T10:00:01Z","Action":"pass","Package":"example.com/m/e2e","Test":"TestTimed","Elapsed":1}
{"Time":"2026-12-05T10:00:02Z","Action":"pass","Package":"example.com/m/e2e","Elapsed":2}
{"Time":"2026-12-05T10:00:00Z","Action":"start","Package":"example.com/m/e2e"}
{"Time":"2026-12-05T10:00:03Z","Action":"fail","Package":"example.com/m/e2e","Test":"TestUntimed","Elapsed":3}
{"Time":"2026-12-05T10:00:04Z","Action":"fail","Package":"example.com/m/e2e","Elapsed":4}
{"Time":"2026-12-05T10:00:00Z","Action":"start","Package":"example.com/m/c"}
{"Time":"2026-12-05T10:00:01Z","Action":"pass","Package":"example.com/m/c","Elapsed":1}
{"Time":"2026-12-05T10:00:02Z","Action":"start","Package":"example.com/m/c"}
{"Time":"2026-12-05T10:00:09Z","Action":"run","Package":"example.com/m/c","Test":"TestCut"}
`
	s, err := Summarize(strings.NewReader(runs))
	require.NoError(t, err)
	assert.Equal(t, []Result{
		{Package: "example.com/m/e2e", Outcome: Fail, Elapsed: 6 * time.Second, Tests: 2},
		{Package: "example.com/m/c", Outcome: Incomplete, Elapsed: time.Second, Tests: 1},
	}, s.Packages)

	// The order of the runs does not change the outcome.
	assert.Equal(t, Fail, worse(Fail, Pass))
	assert.Equal(t, Fail, worse(Pass, Fail))
	assert.Equal(t, Pass, worse(Skip, Pass))
	assert.Equal(t, Incomplete, worse(Pass, Incomplete))
}

func TestSummarizeParallelSubtests(t *testing.T) {
	// A test whose subtests call t.Parallel reports 0 s, its own function's
	// time; it took from its run to its pass (tests/e2e's TestRealNodeLoss).
	// A test run twice takes its last run's time. A parallel test's time
	// starts when it goes on after its pause.
	const events = `{"Time":"2026-12-05T10:00:00Z","Action":"run","Package":"m/e2e","Test":"TestLoss"}
{"Time":"2026-12-05T10:00:00Z","Action":"run","Package":"m/e2e","Test":"TestLoss/cut"}
{"Time":"2026-12-05T10:00:00Z","Action":"pause","Package":"m/e2e","Test":"TestLoss/cut"}
{"Time":"2026-12-05T10:00:00Z","Action":"cont","Package":"m/e2e","Test":"TestLoss/cut"}
{"Time":"2026-12-05T10:01:11Z","Action":"pass","Package":"m/e2e","Test":"TestLoss/cut","Elapsed":71}
{"Time":"2026-12-05T10:01:11Z","Action":"pass","Package":"m/e2e","Test":"TestLoss","Elapsed":0}
{"Time":"2026-12-05T10:05:00Z","Action":"run","Package":"m/e2e","Test":"TestTwice"}
{"Time":"2026-12-05T10:05:02Z","Action":"pass","Package":"m/e2e","Test":"TestTwice","Elapsed":2}
{"Time":"2026-12-05T10:09:00Z","Action":"run","Package":"m/e2e","Test":"TestTwice"}
{"Time":"2026-12-05T10:09:03Z","Action":"pass","Package":"m/e2e","Test":"TestTwice","Elapsed":3}
{"Time":"2026-12-05T10:10:00Z","Action":"run","Package":"m/e2e","Test":"TestParallel"}
{"Time":"2026-12-05T10:10:00Z","Action":"pause","Package":"m/e2e","Test":"TestParallel"}
{"Time":"2026-12-05T10:15:00Z","Action":"cont","Package":"m/e2e","Test":"TestParallel"}
{"Time":"2026-12-05T10:15:04Z","Action":"pass","Package":"m/e2e","Test":"TestParallel","Elapsed":4}
`
	s, err := Summarize(strings.NewReader(events))
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Duration{
		"TestLoss": 71 * time.Second, "TestTwice": 3 * time.Second, "TestParallel": 4 * time.Second,
	}, Took(s, "m/e2e"))
}

func TestTeePrefix(t *testing.T) {
	var out, record bytes.Buffer
	one := `{"Action":"output","Package":"example.com/m/charts","Output":"=== RUN   TestX\n"}` + "\n"
	require.NoError(t, Tee(strings.NewReader(one), &out, &record, mod, true))
	assert.Equal(t, "charts| === RUN   TestX\n", out.String(), "one package, printed beside another stream")
}

func TestTests(t *testing.T) {
	serial, parallel, err := Tests("testdata/classify")
	require.NoError(t, err)
	assert.Equal(t, []string{"Test", "TestEmpty", "TestLate", "TestOther"}, serial)
	assert.Equal(t, []string{"TestB", "Test_A"}, parallel)

	_, _, err = Tests(t.TempDir())
	assert.ErrorContains(t, err, "holds no _test.go file")
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "x_test.go"), []byte("package x\nfunc TestX(t *testing.T) {"), 0o644))
	_, _, err = Tests(bad)
	assert.ErrorContains(t, err, "x_test.go")
}

func TestPattern(t *testing.T) {
	p := Pattern([]string{"TestB", "Test_A"})
	assert.Equal(t, "^(TestB|Test_A)$", p)
	re := regexp.MustCompile(p)
	assert.True(t, re.MatchString("TestB"))
	assert.False(t, re.MatchString("TestBB"), "a test whose name extends another's is not matched")
	assert.False(t, regexp.MustCompile(Pattern(nil)).MatchString("TestB"))
}

package toleration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
)

const header = "apiVersion: fastover.io/v1alpha1\nkind: Rule\n"

func TestParseRuleConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Rule
	}{
		{name: "every field", in: header + "tolerationSeconds: 5\nnotReadyTolerationSeconds: 30\ndefaultTolerationSeconds: 120\n",
			want: Rule{TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 120}},
		{name: "absent fields take the defaults", in: header, want: DefaultRule()},
		{name: "null is absent", in: header + "tolerationSeconds: null\nnotReadyTolerationSeconds: null\n", want: DefaultRule()},
		{name: "not-ready 0 is managed", in: header + "notReadyTolerationSeconds: 0\n",
			want: Rule{NotReadyTolerationSeconds: ptr.To[int64](0), DefaultTolerationSeconds: 300}},
		{name: "comments", in: "# the rule\n" + header + "tolerationSeconds: 7 # seconds\n",
			want: Rule{TolerationSeconds: 7, DefaultTolerationSeconds: 300}},
		{name: "comments and separators around one document", in: "---\n# c\n---\n" + header + "---\n# only comments\n", want: DefaultRule()},
		{name: "JSON", in: `{"apiVersion":"fastover.io/v1alpha1","kind":"Rule","tolerationSeconds":3}`,
			want: Rule{TolerationSeconds: 3, DefaultTolerationSeconds: 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRuleConfig([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseRuleConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string // each in the error
	}{
		{name: "empty", in: " \n", want: []string{"empty", "apiVersion: fastover.io/v1alpha1"}},
		{name: "no header", in: "tolerationSeconds: 5\n", want: []string{`apiVersion: want fastover.io/v1alpha1, got ""`, `kind: want Rule, got ""`}},
		{name: "another version", in: "apiVersion: fastover.io/v1\nkind: Rule\n", want: []string{`apiVersion: want fastover.io/v1alpha1, got "fastover.io/v1"`}},
		{name: "another kind", in: "apiVersion: fastover.io/v1alpha1\nkind: ConfigMap\n", want: []string{`kind: want Rule, got "ConfigMap"`}},
		{name: "unknown field", in: header + "tolerationSecond: 5\n", want: []string{`unknown field "tolerationSecond"`}},
		{name: "repeated field", in: header + "tolerationSeconds: 5\ntolerationSeconds: 6\n", want: []string{"tolerationSeconds"}},
		{name: "a string", in: header + "tolerationSeconds: \"5\"\n", want: []string{"tolerationSeconds: want a whole number of seconds", "got a string"}},
		{name: "a fraction", in: header + "defaultTolerationSeconds: 1.5\n", want: []string{"defaultTolerationSeconds: want a whole number", "got 1.5"}},
		{name: "a duration", in: header + "notReadyTolerationSeconds: 30s\n", want: []string{"notReadyTolerationSeconds: want a whole number", "got a string"}},
		{name: "too large", in: header + "tolerationSeconds: 99999999999999999999\n", want: []string{"tolerationSeconds: want a whole number"}},
		{name: "negative, every one at once", in: header + "tolerationSeconds: -1\nnotReadyTolerationSeconds: -2\ndefaultTolerationSeconds: -3\n",
			want: []string{"tolerationSeconds: must not be negative, got -1", "notReadyTolerationSeconds: must not be negative, got -2", "defaultTolerationSeconds: must not be negative, got -3"}},
		{name: "header and value at once", in: "kind: Rule\ntolerationSeconds: -1\n", want: []string{"apiVersion:", "tolerationSeconds: must not be negative"}},
		{name: "not a mapping", in: "- 1\n- 2\n", want: []string{"want a mapping of fields, got a list"}},
		{name: "a field in capitals", in: header + "TolerationSeconds: 5\n", want: []string{`unknown field "TolerationSeconds"`}},
		{name: "apiVersion a number", in: "apiVersion: 1\nkind: Rule\n", want: []string{"apiVersion: want a string, got a number"}},
		{name: "a list of seconds", in: header + "tolerationSeconds: [1]\n", want: []string{"tolerationSeconds: want a whole number", "got a list"}},
		{name: "two documents", in: header + "---\n" + header, want: []string{"2 YAML documents: want one"}},
		{name: "not YAML", in: "{tolerationSeconds: [", want: []string{"does not parse"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRuleConfig([]byte(tc.in))
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "ruleConfig", "the error names the field, not the Go type")
		})
	}
}

func TestMarshalRuleConfig(t *testing.T) {
	out, err := MarshalRuleConfig(DefaultRule())
	require.NoError(t, err)
	assert.Equal(t, header+"tolerationSeconds: 0\ndefaultTolerationSeconds: 300\n", string(out))
	for _, r := range []Rule{
		DefaultRule(),
		{TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 120},
		{NotReadyTolerationSeconds: ptr.To[int64](0)},
	} {
		out, err := MarshalRuleConfig(r)
		require.NoError(t, err)
		got, err := ParseRuleConfig(out)
		require.NoError(t, err, "%s", out)
		assert.Equal(t, r, got)
	}
	_, err = MarshalRuleConfig(Rule{TolerationSeconds: -1})
	assert.Error(t, err)
}

func TestWithFlags(t *testing.T) {
	file := Rule{TolerationSeconds: 5, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 120}
	flags := Rule{TolerationSeconds: 1, NotReadyTolerationSeconds: ptr.To[int64](2), DefaultTolerationSeconds: 3}
	given := func(names ...string) func(string) bool {
		return func(n string) bool {
			for _, g := range names {
				if g == n {
					return true
				}
			}
			return false
		}
	}
	assert.Equal(t, file, file.WithFlags(flags, given()), "no flag given: the file's rule")
	assert.Equal(t, flags, file.WithFlags(flags, given("toleration-seconds", "not-ready-toleration-seconds", "default-toleration-seconds")))
	got := file.WithFlags(flags, given("toleration-seconds"))
	assert.Equal(t, Rule{TolerationSeconds: 1, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 120}, got)
	got = DefaultRule().WithFlags(flags, given("not-ready-toleration-seconds"))
	assert.Equal(t, ptr.To[int64](2), got.NotReadyTolerationSeconds)
	*flags.NotReadyTolerationSeconds = 9
	assert.Equal(t, ptr.To[int64](2), got.NotReadyTolerationSeconds, "the result shares no pointer with the flags")
}

// FuzzParseRuleConfig: any input parses or fails with an error, never a
// panic; a rule that parses is valid, and writes back to itself.
func FuzzParseRuleConfig(f *testing.F) {
	for _, s := range []string{
		header,
		header + "tolerationSeconds: 5\nnotReadyTolerationSeconds: 30\ndefaultTolerationSeconds: 120\n",
		header + "tolerationSeconds: -1\n",
		header + "tolerationSeconds: 9223372036854775807\n",
		header + "x: 1\n",
		"{}", "null", "[]", "", "apiVersion: [", "&a [*a]",
		`{"apiVersion":"fastover.io/v1alpha1","kind":"Rule","notReadyTolerationSeconds":0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRuleConfig(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		require.NoError(t, r.Validate())
		out, err := MarshalRuleConfig(r)
		require.NoError(t, err)
		again, err := ParseRuleConfig(out)
		require.NoError(t, err, "%s", out)
		require.Equal(t, r, again)
	})
}

// kubeletWrite writes files into dir as the kubelet does for a ConfigMap
// volume: into a new timestamped directory, then the ..data symlink
// swapped to it (atomically, by rename), each file a symlink through
// ..data.
func kubeletWrite(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ts, err := os.MkdirTemp(dir, "..ts-")
	require.NoError(t, err)
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644))
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	require.NoError(t, os.Symlink(filepath.Base(ts), tmp))
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			require.NoError(t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if old != "" {
		require.NoError(t, os.RemoveAll(filepath.Join(dir, old)))
	}
}

// events records what a RuleWatcher reports.
type events struct {
	mu      sync.Mutex
	changed []Rule
	failed  []error
}

func (e *events) watcher(path string) *RuleWatcher {
	return &RuleWatcher{
		Path:     path,
		Interval: 10 * time.Millisecond,
		Changed: func(r Rule) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.changed = append(e.changed, r)
		},
		Failed: func(err error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.failed = append(e.failed, err)
		},
	}
}

func (e *events) counts() (int, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.changed), len(e.failed)
}

func (e *events) last() (Rule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var r Rule
	var err error
	if len(e.changed) > 0 {
		r = e.changed[len(e.changed)-1]
	}
	if len(e.failed) > 0 {
		err = e.failed[len(e.failed)-1]
	}
	return r, err
}

// TestRuleWatcher: the watcher follows the kubelet's updates of a
// ConfigMap volume, the directory of the ConfigMap fastover-rule's keys: a
// new rule is reported, a bad one is an error once (the last good rule
// stays), a vanished directory an error once, and the same content again
// nothing.
func TestRuleWatcher(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rule")
	path := dir
	kubeletWrite(t, dir, map[string]string{RuleKeyTolerationSeconds: "5"})
	e := &events{}
	w := e.watcher(path)
	r, err := w.Load()
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.TolerationSeconds)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Watch(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitFor := func(changed, failed int) {
		t.Helper()
		require.Eventually(t, func() bool {
			c, f := e.counts()
			return c == changed && f == failed
		}, 10*time.Second, 5*time.Millisecond)
		// And no more: the same content is read again without a report.
		time.Sleep(50 * time.Millisecond)
		c, f := e.counts()
		require.Equal(t, []int{changed, failed}, []int{c, f}, "errors: %v", e.failed)
	}
	waitFor(0, 0)

	kubeletWrite(t, dir, map[string]string{RuleKeyTolerationSeconds: "6", RuleKeyNotReadyTolerationSeconds: "30"})
	waitFor(1, 0)
	got, _ := e.last()
	assert.Equal(t, Rule{TolerationSeconds: 6, NotReadyTolerationSeconds: ptr.To[int64](30), DefaultTolerationSeconds: 300}, got)

	kubeletWrite(t, dir, map[string]string{RuleKeyTolerationSeconds: "-6"})
	waitFor(1, 1)
	_, err = e.last()
	assert.ErrorContains(t, err, `tolerationSeconds: want a whole number of seconds, decimal digits only (at most 15), got "-6"`)
	assert.ErrorContains(t, err, path)
	assert.ErrorContains(t, err, "the last good rule stays in force")

	require.NoError(t, os.RemoveAll(path))
	waitFor(1, 2)
	_, err = e.last()
	assert.ErrorIs(t, err, os.ErrNotExist)

	// Back at once, as a volume is mounted (kubeletWrite fills a new
	// directory in steps, which a read in between would see half-made).
	next := dir + ".next"
	kubeletWrite(t, next, map[string]string{RuleKeyTolerationSeconds: "7"})
	require.NoError(t, os.Rename(next, dir))
	waitFor(2, 2)
	got, _ = e.last()
	assert.Equal(t, int64(7), got.TolerationSeconds)
}

func TestRuleWatcherLoad(t *testing.T) {
	dir := t.TempDir()
	_, err := (&RuleWatcher{Path: filepath.Join(dir, "none.yaml")}).Load()
	assert.ErrorIs(t, err, os.ErrNotExist)
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(header+"tolerationSeconds: x\n"), 0o600))
	_, err = (&RuleWatcher{Path: bad}).Load()
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad)
	assert.Contains(t, err.Error(), "tolerationSeconds")
	_, err = LoadRuleFile(bad)
	assert.Error(t, err)

	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte(header+"tolerationSeconds: 1\n"), 0o600))
	r, err := LoadRuleFile(good)
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.TolerationSeconds)
	// Watch without callbacks: nothing to report to, no panic.
	w := &RuleWatcher{Path: good, Interval: time.Millisecond}
	_, err = w.Load()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(good, []byte("bad"), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	w.Watch(ctx)
	require.NoError(t, os.WriteFile(good, []byte(header), 0o600))
	w.check()
	require.NoError(t, os.Remove(good))
	w.check()
}

func TestRuleFileConstants(t *testing.T) {
	assert.Equal(t, "/etc/fastover/rule", RuleFile, "a directory: the ConfigMap's keys as files")
	assert.Equal(t, []string{"tolerationSeconds", "notReadyTolerationSeconds", "defaultTolerationSeconds"}, RuleKeys())
}

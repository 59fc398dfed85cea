package toleration

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parseRule(args ...string) (Rule, error) {
	r := DefaultRule()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r.AddFlags(fs)
	return r, fs.Parse(args)
}

func TestRuleFlags(t *testing.T) {
	r, err := parseRule()
	require.NoError(t, err)
	assert.Equal(t, DefaultRule(), r, "no flags: the defaults, not-ready unset")

	r, err = parseRule("--toleration-seconds=5", "--not-ready-toleration-seconds=0", "--default-toleration-seconds=200")
	require.NoError(t, err)
	assert.Equal(t, int64(5), r.TolerationSeconds)
	require.NotNil(t, r.NotReadyTolerationSeconds)
	assert.Equal(t, int64(0), *r.NotReadyTolerationSeconds)
	assert.Equal(t, int64(200), r.DefaultTolerationSeconds)

	for _, bad := range []string{"-1", "soon", ""} {
		_, err := parseRule("--not-ready-toleration-seconds=" + bad)
		assert.Error(t, err, bad)
	}
}

// TestOptionalSecondsFlag: the not-ready flag prints as unset until set,
// and names its value for pflag's help.
func TestOptionalSecondsFlag(t *testing.T) {
	r := DefaultRule()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	r.AddFlags(fs)
	f := fs.Lookup("not-ready-toleration-seconds")
	require.NotNil(t, f)
	assert.Empty(t, f.DefValue, "unset by default")
	assert.Empty(t, f.Value.String())
	require.NoError(t, fs.Set("not-ready-toleration-seconds", "30"))
	assert.Equal(t, "30", f.Value.String())
	typed, ok := f.Value.(interface{ Type() string })
	require.True(t, ok, "pflag reads the value's Type")
	assert.Equal(t, "seconds", typed.Type())
	assert.Empty(t, (&optionalSeconds{}).String(), "the zero value, as flag's help makes it")
}

func TestParseArgs(t *testing.T) {
	five, thirty := int64(5), int64(30)
	for _, tc := range []struct {
		name string
		args []string
		want Rule
	}{
		{"none: the defaults", []string{"--port=9443", "--cert-dir", "/tls"}, DefaultRule()},
		{"the base manifest", []string{"--port=9443", "--cert-dir=/etc/fastover/tls", "--metrics-bind-address=:8080", "--toleration-seconds=0"}, DefaultRule()},
		{"the tuned overlay", []string{"--port=9443", "--toleration-seconds=5", "--not-ready-toleration-seconds=30"},
			Rule{TolerationSeconds: 5, NotReadyTolerationSeconds: &thirty, DefaultTolerationSeconds: 300}},
		{"separate values, one dash", []string{"-toleration-seconds", "5", "-default-toleration-seconds", "200", "--enable-http2"},
			Rule{TolerationSeconds: 5, DefaultTolerationSeconds: 200}},
		{"the last one wins", []string{"--toleration-seconds=30", "--toleration-seconds=5"}, Rule{TolerationSeconds: five, DefaultTolerationSeconds: 300}},
		{"nothing after --", []string{"--", "--toleration-seconds=5"}, DefaultRule()},
		{"other flags' values are skipped", []string{"--zap-log-level", "debug", "positional"}, DefaultRule()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := DefaultRule()
			require.NoError(t, r.ParseArgs(tc.args))
			assert.Equal(t, tc.want, r)
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--toleration-seconds"}, "flag --toleration-seconds: no value"},
		{[]string{"--toleration-seconds=soon"}, "flag -toleration-seconds=soon"},
		{[]string{"--toleration-seconds=-1"}, "must not be negative"},
		{[]string{"--not-ready-toleration-seconds=-1"}, "want a non-negative integer"},
		{[]string{"--toleration-seconds=$(SECONDS)"}, "comes from the container's environment"},
	} {
		r := DefaultRule()
		err := r.ParseArgs(tc.args)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want, tc.args)
	}
}

func TestFlagsRoundTrip(t *testing.T) {
	thirty := int64(30)
	for _, r := range []Rule{DefaultRule(), {TolerationSeconds: 5, NotReadyTolerationSeconds: &thirty, DefaultTolerationSeconds: 200}} {
		got := DefaultRule()
		require.NoError(t, got.ParseArgs(r.Flags()))
		assert.Equal(t, r, got)
	}
}

// FuzzParseArgs: any command line gives a valid rule or an error, never a
// panic; a rule it gives reads back the same from its Flags.
func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		"--port=9443\x00--toleration-seconds=0",
		"-toleration-seconds\x005\x00--not-ready-toleration-seconds=30",
		"--toleration-seconds",
		"--\x00--toleration-seconds=1",
		"--not-ready-toleration-seconds=$(X)",
		"--default-toleration-seconds=0x10",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r := DefaultRule()
		if err := r.ParseArgs(strings.Split(line, "\x00")); err != nil {
			return
		}
		require.NoError(t, r.Validate())
		back := DefaultRule()
		require.NoError(t, back.ParseArgs(r.Flags()))
		assert.Equal(t, r, back)
	})
}

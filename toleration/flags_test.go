package toleration

import (
	"flag"
	"io"
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

func TestFlagsRoundTrip(t *testing.T) {
	thirty := int64(30)
	for _, r := range []Rule{DefaultRule(), {TolerationSeconds: 5, NotReadyTolerationSeconds: &thirty, DefaultTolerationSeconds: 200}} {
		got, err := parseRule(r.Flags()...)
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
}

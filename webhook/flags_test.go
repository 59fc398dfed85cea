package webhook

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

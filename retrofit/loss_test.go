package retrofit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLoss(t *testing.T) {
	for in, want := range map[string]Loss{
		"10":                {Count: 10},
		"zone=eu/a":         {Zone: "eu/a"},
		"zone=/a:3":         {Zone: "/a", Count: 3},
		"nodes=n1,n2,n1":    {Nodes: []string{"n1", "n2"}},
		"nodes=worker-1.io": {Nodes: []string{"worker-1.io"}},
	} {
		got, err := ParseLoss(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
		again, err := ParseLoss(got.String())
		require.NoError(t, err, got.String())
		assert.Equal(t, got, again)
	}
	for in, want := range map[string]string{
		"":           "is not a count",
		"0":          "is not a count",
		"-3":         "is not a count",
		"ten":        "is not a count",
		"zone=":      "no zone named",
		"zone=a:0":   "is not a count",
		"zone=a:x":   "is not a count",
		"nodes=":     "node name \"\"",
		"nodes=A,b":  "node name \"A\"",
		"region=eu":  "unknown key \"region\"",
		"nodes=a,,b": "node name \"\"",
	} {
		_, err := ParseLoss(in)
		assert.ErrorContains(t, err, want, in)
		assert.ErrorContains(t, err, "want N, zone=ZONE", in)
	}
}

func FuzzParseLoss(f *testing.F) {
	for _, s := range []string{"10", "zone=eu/a", "zone=a:3", "nodes=a,b", "", "zone=:", "nodes=,", "x=y=z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLoss(s)
		if err != nil {
			return
		}
		again, err := ParseLoss(l.String())
		if err != nil {
			t.Fatalf("%q parsed to %+v, whose String %q does not parse: %v", s, l, l.String(), err)
		}
		if again.String() != l.String() {
			t.Fatalf("%q: %q then %q", s, l.String(), again.String())
		}
	})
}

package acting

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	terms, err := Parse(strings.NewReader(`100 a start 1
110 a act
120 a act
125 a stop leadership lost: no successful renewal within 10s
130 b act
200 b start 2
210 b act
`))
	require.NoError(t, err)
	require.Len(t, terms, 2)
	a, b := terms[0], terms[1]
	assert.Equal(t, "a", a.ID)
	assert.Equal(t, 1, a.N)
	assert.Equal(t, 2, a.Acts)
	assert.Equal(t, int64(120), a.Last.UnixNano())
	assert.Equal(t, "leadership lost: no successful renewal within 10s", a.Stop)
	assert.Equal(t, int64(125), a.StopAt.UnixNano())
	assert.Equal(t, 1, b.Acts, "the act before its start is outside a term")
	assert.Empty(t, b.Stop, "died without a stop")
	assert.Empty(t, Overlaps(terms))
}

func TestOverlaps(t *testing.T) {
	terms, err := Parse(strings.NewReader("100 a start 1\n110 a act\n150 a act\n120 b start 2\n130 b act\n"))
	require.NoError(t, err)
	o := Overlaps(terms)
	require.Len(t, o, 1)
	assert.Contains(t, o[0], "two leaders acted at once: a (term 1)")
}

func TestParseRefusesBadLines(t *testing.T) {
	for _, in := range []string{"100 a\n", "x a act\n", "100 a start x\n", "100 a jump\n"} {
		_, err := Parse(strings.NewReader(in))
		assert.ErrorContains(t, err, "acting log, line 1", in)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("100 a start 1\n110 a act\n125 a stop nil\n")
	f.Add("1 b stop\n")
	f.Fuzz(func(t *testing.T, in string) {
		terms, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		// A term per start line, each with its actions counted once.
		acts := 0
		for _, tm := range terms {
			if tm.ID == "" && !strings.Contains(in, "  start") {
				t.Fatalf("a term without an identity: %+v", tm)
			}
			acts += tm.Acts
		}
		if len(terms) > strings.Count(in, "\n")+1 || acts > strings.Count(in, " act") {
			t.Fatalf("%d terms, %d acts from %q", len(terms), acts, in)
		}
		_ = Overlaps(terms)
	})
}

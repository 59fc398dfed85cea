package cluster

import (
	"strconv"
	"strings"
	"time"
)

// TestHostCall is one call of `testhost get` (TestHostImage), as its line
// in the pod's log says.
type TestHostCall struct {
	// Sent is when the call began; Took how long it took.
	Sent time.Time
	Took time.Duration
	// Status is the HTTP status code; zero when the call failed.
	Status int
	// Answer is the body's first line, or the error.
	Answer string
}

// Done is when the call ended.
func (c TestHostCall) Done() time.Time { return c.Sent.Add(c.Took) }

// OK reports whether the call got a 200.
func (c TestHostCall) OK() bool { return c.Status == 200 }

// ParseTestHostLog reads the calls of a `testhost get` log, in order,
// skipping lines that are not calls (what the kubelet's log rotation or a
// dying container leaves: a cut line, a message on stderr).
func ParseTestHostLog(b []byte) []TestHostCall {
	var out []TestHostCall
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) < 3 {
			continue
		}
		sent, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			continue
		}
		took, err := time.ParseDuration(f[1])
		if err != nil || took < 0 {
			continue
		}
		c := TestHostCall{Sent: sent, Took: took}
		if len(f) == 4 {
			c.Answer = f[3]
		}
		if f[2] != "error" {
			if c.Status, err = strconv.Atoi(f[2]); err != nil || c.Status < 100 || c.Status > 999 {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}

package toleration

import (
	"flag"
	"fmt"
	"strconv"
)

// AddFlags binds the rule's command-line flags to r: --toleration-seconds,
// --not-ready-toleration-seconds (unset by default: not-ready is left
// alone) and --default-toleration-seconds, with r's values as defaults.
// fastover-webhook and kubectl-fastover share them, so the rule is given
// the same way to both; given explicitly, they override the rule's
// ConfigMap for that process only (Rule.WithFlags). Call Validate after
// parsing.
func (r *Rule) AddFlags(fs *flag.FlagSet) {
	fs.Int64Var(&r.TolerationSeconds, "toleration-seconds", r.TolerationSeconds,
		"tolerationSeconds of the effective node.kubernetes.io/unreachable:NoExecute toleration")
	fs.Var(&optionalSeconds{p: &r.NotReadyTolerationSeconds}, "not-ready-toleration-seconds",
		"if set, the same for node.kubernetes.io/not-ready:NoExecute (unset: not-ready is left alone)")
	fs.Int64Var(&r.DefaultTolerationSeconds, "default-toleration-seconds", r.DefaultTolerationSeconds,
		"the API server's --default-unreachable-toleration-seconds: a toleration with this value is its default and is rewritten")
}

// Flags returns the rule as the command-line flags that give it (as
// kubectl-fastover prints the rule it applies).
func (r Rule) Flags() []string {
	out := []string{"--toleration-seconds=" + strconv.FormatInt(r.TolerationSeconds, 10)}
	if r.NotReadyTolerationSeconds != nil {
		out = append(out, "--not-ready-toleration-seconds="+strconv.FormatInt(*r.NotReadyTolerationSeconds, 10))
	}
	return append(out, "--default-toleration-seconds="+strconv.FormatInt(r.DefaultTolerationSeconds, 10))
}

// optionalSeconds is a flag that is either unset (nil) or a non-negative
// number of seconds.
type optionalSeconds struct{ p **int64 }

func (o *optionalSeconds) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return strconv.FormatInt(**o.p, 10)
}

func (o *optionalSeconds) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("want a non-negative integer, got %q", s)
	}
	*o.p = &n
	return nil
}

// Type names the value in pflag's help (kubectl-fastover).
func (o *optionalSeconds) Type() string { return "seconds" }

package webhook

import (
	"flag"
	"fmt"
	"strconv"
)

// AddFlags binds the rule's command-line flags to r: --toleration-seconds,
// --not-ready-toleration-seconds (unset by default: not-ready is left
// alone) and --default-toleration-seconds, with r's values as defaults.
// fastover-webhook and kubectl-fastover share them, so the rule is given
// the same way to both; call Validate after parsing.
func (r *Rule) AddFlags(fs *flag.FlagSet) {
	fs.Int64Var(&r.TolerationSeconds, "toleration-seconds", r.TolerationSeconds,
		"tolerationSeconds of the effective node.kubernetes.io/unreachable:NoExecute toleration")
	fs.Var(&optionalSeconds{p: &r.NotReadyTolerationSeconds}, "not-ready-toleration-seconds",
		"if set, the same for node.kubernetes.io/not-ready:NoExecute (unset: not-ready is left alone)")
	fs.Int64Var(&r.DefaultTolerationSeconds, "default-toleration-seconds", r.DefaultTolerationSeconds,
		"the API server's --default-unreachable-toleration-seconds: a toleration with this value is its default and is rewritten")
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

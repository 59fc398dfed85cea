package demo

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Event is a moment of a scenario's timeline.
type Event struct {
	// At is the time since the scenario's fault (the node lost, the
	// signal sent, the replicas started).
	At time.Duration
	// What happened, for a reader: "node-a tainted unreachable:NoExecute".
	What string
}

// Baseline is what Kubernetes does without fastover, for comparison.
type Baseline struct {
	// From and Upto bound the time it takes: equal when it is known,
	// From zero for "up to Upto". Never: it does not happen by itself;
	// Upto is then how long the demo saw it not happen.
	From, Upto time.Duration
	Never      bool
	// Why, in one line.
	Why string
}

// String is the baseline's time: "5 min 21 s", "15–17 s", "≤ 2 s", "never".
func (b Baseline) String() string {
	switch {
	case b.Never:
		return "never"
	case b.From == 0:
		return "≤ " + FormatDuration(b.Upto)
	case b.From == b.Upto:
		return FormatDuration(b.Upto)
	default:
		return formatRange(b.From, b.Upto)
	}
}

// Result is one scenario, measured.
type Result struct {
	// Name of the scenario: "A node is lost".
	Name string
	// Measured says what Fastover measures: "until the injected pod runs
	// on another node".
	Measured string
	// Fastover is the time it took with fastover.
	Fastover time.Duration
	// Baseline is what it takes without.
	Baseline Baseline
	// Passed is false when fastover did not do what it should; Error
	// says why.
	Passed bool
	Error  string
	// Notes are what else was observed (the control group's pod, ...),
	// one line each.
	Notes []string
	// Events are the scenario's timeline, in order.
	Events []Event
	// Spans are stretches of the timeline worth naming: the grace
	// period, the dead leader's Lease running out.
	Spans []Span
	// Clients are the handover as real clients saw it (the kube-proxy,
	// kube-apiserver and informer lanes), in the handover scenarios of a
	// run in a network namespace.
	Clients []ClientLane
}

// Span is a stretch of a scenario's timeline.
type Span struct {
	From, To time.Duration
	What     string
}

// Summary is a run of the demo.
type Summary struct {
	// Grace is the node-monitor grace period; LeaseDuration,
	// RenewDeadline and RetryPeriod the leader election's durations.
	Grace, LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// KubernetesVersion is kube-apiserver's.
	KubernetesVersion string
	// Nodes are the nodes' names; Platform says what they are ("3 kwok
	// nodes", "4 real nodes (kubelet, containerd, runc); ...").
	Nodes    []string
	Platform string
	// Started is when the run started; Took how long it took, setup
	// included.
	Started time.Time
	Took    time.Duration
	// Results, one per scenario played, in order.
	Results []Result
	// SVGPath is where the picture was written ("" if not).
	SVGPath string
	// RealClients say how each real client called the example's Service
	// during the handovers (one line each); ClientsSkipped why a lane of
	// them did not run (not root, a binary missing).
	RealClients, ClientsSkipped []string
	// Skipped says what else the run left out, and why: real nodes
	// without root.
	Skipped []string
}

// Passed reports whether every scenario passed (and there was one).
func (s *Summary) Passed() bool {
	if s == nil || len(s.Results) == 0 {
		return false
	}
	for _, r := range s.Results {
		if !r.Passed {
			return false
		}
		for _, c := range r.Clients {
			if !c.Passed {
				return false
			}
		}
	}
	return true
}

// WriteTable writes the summary table: each scenario, fastover's measured
// time, the Kubernetes default it replaces, the result; then why each
// default is what it is.
func (s *Summary) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "scenario\tfastover\tKubernetes default\tresult")
	for i, r := range s.Results {
		got := FormatDuration(r.Fastover)
		result := "passed"
		if !r.Passed {
			result = "FAILED: " + r.Error
			if r.Fastover == 0 {
				got = "-"
			}
		}
		_, _ = fmt.Fprintf(tw, "%d. %s\t%s\t%s [%d]\t%s\n", i+1, r.Name, got, r.Baseline, i+1, result)
		for _, c := range r.Clients {
			gap := formatFine(c.Gap)
			if c.Gap == 0 {
				gap = "-"
			}
			_, _ = fmt.Fprintf(tw, "   client %s\t%s\t\t%s\n", c.Name, gap, c.Verdict())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, r := range s.Results {
		if _, err := fmt.Fprintf(w, "[%d] %s\n", i+1, r.Baseline.Why); err != nil {
			return err
		}
	}
	if len(s.RealClients) > 0 {
		if _, err := fmt.Fprintf(w, "client lines: the gap from the fault to the first answer (an informer's: event) from the new leader; clients that call start one every %v, an informer's watch gets an event a second:\n", clientEvery); err != nil {
			return err
		}
		for _, c := range s.RealClients {
			if _, err := fmt.Fprintf(w, "  %s\n", c); err != nil {
				return err
			}
		}
	}
	for _, why := range append(slices.Clone(s.Skipped), s.ClientsSkipped...) {
		if _, err := fmt.Fprintf(w, "note: %s\n", why); err != nil {
			return err
		}
	}
	return nil
}

// FormatDuration formats a duration for a reader: "27 ms", "1.09 s",
// "14.9 s", "5 min 21 s".
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0 s"
	case d < 0:
		return "-" + FormatDuration(-d)
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond)/time.Millisecond)
	case d < 10*time.Second:
		return trimZero(fmt.Sprintf("%.2f", d.Seconds())) + " s"
	case d < 100*time.Second:
		return trimZero(fmt.Sprintf("%.1f", d.Seconds())) + " s"
	default:
		d = d.Round(time.Second)
		m, sec := d/time.Minute, (d%time.Minute)/time.Second
		if sec == 0 {
			return fmt.Sprintf("%d min", m)
		}
		return fmt.Sprintf("%d min %d s", m, sec)
	}
}

// formatFine formats a duration to the millisecond: "27 ms", "1.09 s",
// "14.02 s", for times that differ by a few milliseconds (the real
// clients').
func formatFine(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + formatFine(-d)
	case d < time.Second:
		return FormatDuration(d)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// formatRange formats "15–17 s", "14.4–18.4 s" for ends between 1 s and
// 100 s, else "a – b".
func formatRange(from, upto time.Duration) string {
	if from >= time.Second && upto < 100*time.Second {
		return strings.TrimSuffix(FormatDuration(from), " s") + "–" + FormatDuration(upto)
	}
	return FormatDuration(from) + " – " + FormatDuration(upto)
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// secs formats a duration as seconds with one decimal, for status lines.
func secs(d time.Duration) string {
	return fmt.Sprintf("%.1fs", math.Max(0, d.Seconds()))
}

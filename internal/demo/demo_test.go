package demo

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sample is a summary like a real run's.
func sample() *Summary {
	return &Summary{
		Grace: 20 * time.Second, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		KubernetesVersion: "v1.37.2", Nodes: []string{"node-a", "node-b", "node-c"},
		Started: time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC), Took: 150 * time.Second,
		Results: []Result{
			{
				Name: "A node is lost", Measured: "the injected pod runs on another node", Passed: true,
				Fastover: 21300 * time.Millisecond,
				Baseline: Baseline{From: 321300 * time.Millisecond, Upto: 321300 * time.Millisecond, Why: "grace 20s, then the 300s <toleration> & more"},
				Events: []Event{
					{0, "node-a lost (its kwok killed)"},
					{20100 * time.Millisecond, "node-a NotReady (Ready=Unknown)"},
					{20200 * time.Millisecond, "node-a tainted"},
					{20300 * time.Millisecond, "injected pod evicted"},
					{20500 * time.Millisecond, "replacement scheduled on node-b"},
					{21300 * time.Millisecond, "injected pod runs on node-b"},
				},
				Spans: []Span{{0, 20 * time.Second, "grace period: node-a silent, still Ready"}},
			},
			{
				Name: "The leader is killed", Measured: "a new leader answers", Passed: true, Fastover: 14900 * time.Millisecond,
				Baseline: Baseline{From: 15 * time.Second, Upto: 17 * time.Second, Why: "client-go"},
				Events:   []Event{{0, "SIGKILL"}, {14800 * time.Millisecond, "example-2 takes the Lease"}, {14900 * time.Millisecond, "answers"}},
				Spans:    []Span{{0, 14700 * time.Millisecond, "the dead leader's Lease runs out"}},
			},
			{
				Name: "The leader gets SIGTERM", Measured: "a new leader answers", Passed: true, Fastover: 27 * time.Millisecond,
				Baseline: Baseline{Upto: 2 * time.Second, Why: "client-go with ReleaseOnCancel"},
				Events:   []Event{{0, "SIGTERM"}, {12 * time.Millisecond, "released"}, {27 * time.Millisecond, "answers"}},
			},
			{
				Name: "A Service migrated from selector mode", Measured: "only the leader's endpoint remains", Passed: false,
				Error:    "the migrated Service still has 2 slices",
				Baseline: Baseline{Never: true, Why: "stale until deleted by hand"},
			},
		},
	}
}

func TestRenderSVGIsXML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeline.svg")
	if err := WriteSVG(path, sample()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkXML(data); err != nil {
		t.Fatalf("not XML: %v\n%s", err, data)
	}
	for _, want := range []string{"<svg", "A node is lost", "5 min 21 s", "15–17 s", "≤ 2 s", "never", "&lt;toleration&gt; &amp; more", "FAILED"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("the picture lacks %q", want)
		}
	}
	if dir, _ := os.ReadDir(filepath.Dir(path)); len(dir) != 1 {
		t.Errorf("temporary files left: %v", dir)
	}
	if out := os.Getenv("DEMO_SVG_OUT"); out != "" { // to look at it
		_ = os.WriteFile(out, data, 0o644)
	}
}

func checkXML(data []byte) error {
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		if _, err := dec.Token(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := sample().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"21.3 s", "5 min 21 s", "14.9 s", "27 ms", "≤ 2 s", "never", "FAILED"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		27 * time.Millisecond:    "27 ms",
		1090 * time.Millisecond:  "1.09 s",
		2 * time.Second:          "2 s",
		14900 * time.Millisecond: "14.9 s",
		321 * time.Second:        "5 min 21 s",
		300 * time.Second:        "5 min",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestNiceAxis(t *testing.T) {
	for _, tc := range []struct {
		span, step, end time.Duration
	}{
		{21300 * time.Millisecond, 5 * time.Second, 25 * time.Second},
		{27 * time.Millisecond, 5 * time.Millisecond, 30 * time.Millisecond},
		{14900 * time.Millisecond, 2 * time.Second, 16 * time.Second},
		{0, 200 * time.Millisecond, time.Second},
	} {
		step, end := niceAxis(tc.span)
		if step != tc.step || end != tc.end {
			t.Errorf("niceAxis(%v) = %v, %v; want %v, %v", tc.span, step, end, tc.step, tc.end)
		}
	}
}

func TestStatusNotTerminal(t *testing.T) {
	var b strings.Builder
	p := newPrinter(&b, time.Hour)
	p.Status("one %d", 1)
	p.Status("two") // too soon: dropped
	p.Printf("a line")
	p.Status("three") // a line resets the interval
	if got, want := b.String(), "    … one 1\na line\n    … three\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

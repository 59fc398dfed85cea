package demo

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// calls makes a client's calls from t0-20ms on, one every 10 ms, each
// answered by the identity given ("" for a refused call, "!503" for an
// error status), 5 ms long.
func calls(t0 time.Time, ids ...string) []call {
	out := make([]call, 0, len(ids))
	for i, id := range ids {
		c := call{sent: t0.Add(time.Duration(i-2) * 10 * time.Millisecond)}
		c.done = c.sent.Add(5 * time.Millisecond)
		switch {
		case id == "":
			c.err = fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
		case strings.HasPrefix(id, "!"):
			c.err = statusError(503)
		default:
			c.id = id
		}
		out = append(out, c)
	}
	return out
}

func TestLaneHandover(t *testing.T) {
	t0 := time.Now()
	c := &realClient{name: kubeProxyLane, via: "GET http://198.51.100.10:80/"}
	l := lane(c, calls(t0, "old", "old", "old", "", "", "!503", "new", "new"), t0, "old", "new")
	if !l.Passed || l.Error != "" {
		t.Fatalf("lane failed: %s", l.Error)
	}
	// The first answer from new: the 7th call, sent at t0+40ms, done 5 ms later.
	if want := 45 * time.Millisecond; l.Gap != want {
		t.Errorf("gap %v, want %v", l.Gap, want)
	}
	if want := 5 * time.Millisecond; l.LastOld != want {
		t.Errorf("last answer from the old leader at %v, want %v", l.LastOld, want)
	}
	if l.Calls != 8 || l.Failed != 3 || l.FailedBy["refused"] != 2 || l.FailedBy["status 503"] != 1 {
		t.Errorf("calls %d, failed %d %v", l.Calls, l.Failed, l.FailedBy)
	}
	want := []ClientSegment{
		{-20 * time.Millisecond, 10 * time.Millisecond, FromOld},
		{10 * time.Millisecond, 40 * time.Millisecond, Failed},
		{40 * time.Millisecond, 55 * time.Millisecond, FromNew},
	}
	if !slices.Equal(l.Segments, want) {
		t.Errorf("segments %v, want %v", l.Segments, want)
	}
	if got := l.Verdict(); got != "no standby answered (8 calls, 3 without an answer: 2 refused, 1 status 503)" {
		t.Errorf("verdict %q", got)
	}
}

func TestLaneStandbyAndNoNewLeader(t *testing.T) {
	t0 := time.Now()
	c := &realClient{name: apiServerLane}
	l := lane(c, calls(t0, "old", "", "standby-3", "new", "old"), t0, "old", "new")
	if l.Passed || !strings.Contains(l.Error, "a standby answered: standby-3") {
		t.Errorf("a standby's answer passed: %+v", l)
	}
	if l.OldAfterNew != 1 {
		t.Errorf("answers from the old leader after the new one: %d, want 1", l.OldAfterNew)
	}
	if !strings.HasPrefix(l.Verdict(), "FAILED: ") {
		t.Errorf("verdict %q", l.Verdict())
	}

	l = lane(c, calls(t0, "old", "", ""), t0, "old", "new")
	if l.Passed || l.Gap != 0 || !strings.Contains(l.Error, "the new leader new never answered") {
		t.Errorf("no answer from the new leader passed: %+v", l)
	}
}

func TestFailKind(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED): "refused",
		fmt.Errorf("read: %w", syscall.ECONNRESET):   "reset",
		fmt.Errorf("x: %w", statusError(503)):        "status 503",
		fmt.Errorf("read: %w", io.EOF):               "closed",
		errors.New("something else"):                 "other",
	} {
		if got := failKind(err); got != want {
			t.Errorf("failKind(%v) = %q, want %q", err, got, want)
		}
	}
}

// withClients is sample() with client lanes in its handovers.
func withClients() *Summary {
	s := sample()
	s.RealClients = []string{"GET http://198.51.100.10:80/, the Service's ClusterIP, through kube-proxy"}
	s.Results[1].Clients = []ClientLane{{
		Name: kubeProxyLane, Passed: true, Gap: 15800 * time.Millisecond, Calls: 1600, Failed: 150, FailedBy: map[string]int{"refused": 150},
		Segments: []ClientSegment{{-200 * time.Millisecond, 0, FromOld}, {0, 15700 * time.Millisecond, Failed}, {15700 * time.Millisecond, 16100 * time.Millisecond, FromNew}},
	}}
	s.Results[2].Clients = []ClientLane{{
		Name: kubeProxyLane, Passed: false, Error: "a standby answered: example-3", Gap: 1200 * time.Millisecond,
		Segments: []ClientSegment{{-200 * time.Millisecond, 20 * time.Millisecond, FromOld}, {20 * time.Millisecond, 1100 * time.Millisecond, Failed},
			{1100 * time.Millisecond, 1120 * time.Millisecond, FromStandby}, {1120 * time.Millisecond, 1500 * time.Millisecond, FromNew}},
	}}
	return s
}

func TestClientLanesInTableAndSVG(t *testing.T) {
	s := withClients()
	var b strings.Builder
	if err := s.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"client through kube-proxy", "15.80 s", "no standby answered (1600 calls, 150 without an answer: 150 refused)",
		"1.20 s", "FAILED: a standby answered: example-3", "through kube-proxy\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if s.Passed() {
		t.Error("a lane with a standby's answer passed the summary")
	}

	data := []byte(RenderSVG(s))
	if err := checkXML(data); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	for _, want := range []string{"client through kube-proxy", "new leader answers", "failed calls", "15.80 s", colorStandby} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the picture lacks %q", want)
		}
	}
	// The picture grows by the lanes.
	if len(RenderSVG(sample())) >= len(data) {
		t.Error("the lanes add nothing to the picture")
	}
}

func TestSkippedClientsInTable(t *testing.T) {
	s := sample()
	s.ClientsSkipped = []string{"the kube-proxy and kube-apiserver lanes need root"}
	var b strings.Builder
	if err := s.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "note: the kube-proxy and kube-apiserver lanes need root") {
		t.Errorf("the table does not say why the lanes are missing:\n%s", b.String())
	}
}

func TestFormatFine(t *testing.T) {
	for d, want := range map[time.Duration]string{
		27 * time.Millisecond:     "27 ms",
		14023 * time.Millisecond:  "14.02 s",
		14 * time.Second:          "14.00 s",
		-24300 * time.Millisecond: "-24.30 s",
	} {
		if got := formatFine(d); got != want {
			t.Errorf("formatFine(%v) = %q, want %q", d, got, want)
		}
	}
}

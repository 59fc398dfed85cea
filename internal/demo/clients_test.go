package demo

import (
	"errors"
	"fmt"
	"io"
	"net"
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
	l := lane(c, calls(t0, "old", "old", "old", "", "", "!503", "new", "new"), t0, time.Time{}, "old", "new")
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
	l := lane(c, calls(t0, "old", "", "standby-3", "new", "old"), t0, time.Time{}, "old", "new")
	if l.Passed || !strings.Contains(l.Error, "a standby answered: standby-3") {
		t.Errorf("a standby's answer passed: %+v", l)
	}
	if l.OldAfterNew != 1 {
		t.Errorf("answers from the old leader after the new one: %d, want 1", l.OldAfterNew)
	}
	if !strings.HasPrefix(l.Verdict(), "FAILED: ") {
		t.Errorf("verdict %q", l.Verdict())
	}

	l = lane(c, calls(t0, "old", "", ""), t0, time.Time{}, "old", "new")
	if l.Passed || l.Gap != 0 || !strings.Contains(l.Error, "the new leader new never answered") {
		t.Errorf("no answer from the new leader passed: %+v", l)
	}
}

// events makes a stream's observations at the offsets from t0 given,
// each from the identity given ("" for a watch error).
func events(t0 time.Time, evs ...any) []call {
	var out []call
	for i := 0; i+1 < len(evs); i += 2 {
		at := t0.Add(evs[i].(time.Duration))
		c := call{sent: at, done: at}
		if id := evs[i+1].(string); id == "" {
			c.err = errors.New("unable to decode an event from the watch stream: http2: client connection lost")
		} else {
			c.id = id
		}
		out = append(out, c)
	}
	return out
}

func TestLaneOfAStream(t *testing.T) {
	t0 := time.Now()
	c := &realClient{name: informerLane, stream: &observations{}}
	// An event a second from old, then nothing for 45 s (a frozen
	// leader), the health check's error, events from new.
	l := lane(c, events(t0,
		-time.Second, "old", -100*time.Millisecond, "old",
		45*time.Second, "", 45800*time.Millisecond, "new", 46800*time.Millisecond, "new",
	), t0, t0.Add(47*time.Second), "old", "new")
	if !l.Passed || !l.Stream {
		t.Fatalf("lane %+v", l)
	}
	if l.Gap != 45800*time.Millisecond || l.FirstError != 45*time.Second || l.FirstErrorKind != "connection lost" {
		t.Errorf("gap %v, first error %v (%s)", l.Gap, l.FirstError, l.FirstErrorKind)
	}
	want := []ClientSegment{
		{-time.Second, 1400 * time.Millisecond, FromOld}, // the last event stands for 1.5 s
		{1400 * time.Millisecond, 45 * time.Second, Silent},
		{45 * time.Second, 45800 * time.Millisecond, Failed},
		{45800 * time.Millisecond, 47 * time.Second, FromNew}, // the last event stands until the end
	}
	if !slices.Equal(l.Segments, want) {
		t.Errorf("segments %v, want %v", l.Segments, want)
	}
	if got := l.Verdict(); got != "no event from a standby (5 events, 1 watch errors: 1 connection lost)" {
		t.Errorf("verdict %q", got)
	}
	var d demo
	notes := d.clientNotes(&l, &timeline{t0: t0}, "new", time.Time{})
	if len(notes) != 1 || !strings.Contains(notes[0], "the first at 45.00 s (connection lost)") || !strings.Contains(notes[0], "the new leader's first event at 45.80 s") {
		t.Errorf("notes %q", notes)
	}
}

func TestStreamSettled(t *testing.T) {
	now := time.Now()
	o := &observations{}
	if o.settled("a") {
		t.Error("an empty stream is settled")
	}
	for _, c := range events(now, -5*time.Second, "b", -2500*time.Millisecond, "", -2*time.Second, "a", -time.Second, "a", -100*time.Millisecond, "a") {
		o.add(c)
	}
	if !o.settled("a") {
		t.Error("2.5 s on a since the last error: not settled")
	}
	if o.settled("b") {
		t.Error("settled on b, which the stream left")
	}
	o.add(call{sent: time.Now(), done: time.Now(), err: errors.New("x")})
	if o.settled("a") {
		t.Error("settled right after an error")
	}
	young := &observations{}
	for _, c := range events(now, -time.Second, "a", -100*time.Millisecond, "a") {
		young.add(c)
	}
	if young.settled("a") {
		t.Error("a stream a second old is settled")
	}
	stale := &observations{}
	for _, c := range events(now, -5*time.Second, "a", -4*time.Second, "a") {
		stale.add(c)
	}
	if stale.settled("a") {
		t.Error("a stream silent for 4 s is settled")
	}
}

// An informer's wait for the new leader runs reflectorBackoffMax past the
// fault and past its last failure: a frozen leader's watch fails at the
// HTTP/2 health check, 45 s on (TestDemoQuick's informer, failed at 44.5 s,
// was given up at 60 s, before its back-off was over).
func TestWaitUntil(t *testing.T) {
	t0 := time.Now()
	deadline := t0.Add(10 * time.Second)
	plain := &recorder{c: &realClient{}, from: t0}
	if got := plain.waitUntil(deadline, t0); !got.Equal(deadline) {
		t.Errorf("a client that calls waits until the deadline, not %v", got.Sub(t0))
	}
	o := &observations{}
	stream := &recorder{c: &realClient{stream: o}, obs: o, from: t0.Add(-streamSettle)}
	if got := stream.waitUntil(deadline, t0); got.Sub(t0) != reflectorBackoffMax {
		t.Errorf("an informer without a failure waits %v after the fault, want %v", got.Sub(t0), reflectorBackoffMax)
	}
	o.add(call{sent: t0.Add(44500 * time.Millisecond), done: t0.Add(44500 * time.Millisecond), err: errors.New("http2: client connection lost")})
	if got := stream.waitUntil(deadline, t0); got.Sub(t0) != 44500*time.Millisecond+reflectorBackoffMax {
		t.Errorf("an informer that failed at 44.5 s waits %v after the fault, want %v", got.Sub(t0), 44500*time.Millisecond+reflectorBackoffMax)
	}
	if got := stream.waitUntil(t0.Add(10*time.Minute), t0); !got.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("a later deadline wins: %v", got.Sub(t0))
	}
}

func TestFailKind(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED): "refused",
		fmt.Errorf("read: %w", syscall.ECONNRESET):   "reset",
		fmt.Errorf("x: %w", statusError(503)):        "status 503",
		fmt.Errorf("read: %w", io.EOF):               "closed",
		errors.New("something else"):                 "other",
		// A watch's errors, as an informer gets them.
		errors.New("unable to decode an event from the watch stream: http2: client connection lost"):                   "connection lost",
		fmt.Errorf("read: %w", net.ErrClosed):                                                                          "closed",
		errors.New(`Get "https://10.96.0.12:80/apis": dial tcp 10.96.0.12:80: connect: connection refused`):            "refused",
		errors.New("very short watch: Unexpected watch close - watch lasted less than a second and no items received"): "watch ended",
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
	}, {
		Name: informerLane, Stream: true, Passed: true, Gap: 46 * time.Second, Calls: 20, Failed: 1, FailedBy: map[string]int{"connection lost": 1},
		Segments: []ClientSegment{{-time.Second, 1500 * time.Millisecond, FromOld}, {1500 * time.Millisecond, 45 * time.Second, Silent},
			{45 * time.Second, 46 * time.Second, Failed}, {46 * time.Second, 48 * time.Second, FromNew}},
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
		"client informer", "46.00 s", "no event from a standby (20 events, 1 watch errors: 1 connection lost)",
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
	for _, want := range []string{"client through kube-proxy", "new leader answers", "failed, watch error", "15.80 s", colorStandby, "watch silent", colorSilent} {
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

func TestLegendFits(t *testing.T) {
	x := float64(clientsLegendX)
	for _, o := range []Outcome{FromOld, Failed, FromNew, FromStandby, Silent} {
		x += 18 + textWidth(legendLabel(o), 13) + 22
	}
	if x-22 > svgWidth-svgMargin {
		t.Errorf("the clients' legend ends at %.0f, past %d", x-22, svgWidth-svgMargin)
	}
}

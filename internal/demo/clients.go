package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fastover/fastover/internal/kubeproxy"
)

// The real clients of the example's Service: a client that calls its
// ClusterIP through kube-proxy, and one that calls its aggregated API
// through kube-apiserver. Both need the control plane in a network
// namespace of the demo's own (root).

// clientEvery is how often a real client calls.
const clientEvery = 10 * time.Millisecond

// kubeProxyNode is the node kube-proxy runs for: not the one the demo
// loses.
const kubeProxyNode = "node-b"

// The lanes' names.
const (
	kubeProxyLane = "through kube-proxy"
	apiServerLane = "through kube-apiserver"
)

// realClient is one kind of client: a name for the output and either a
// call that returns the identity of the replica that answered, made every
// clientEvery during a handover, or a stream of what a watch observed.
type realClient struct {
	// name is the lane's name: "through kube-proxy".
	name string
	// via says how it calls, for the notes; target is what it calls.
	via, target string
	call        func(ctx context.Context) (string, error)
	// stream, for a client that watches (an informer), is everything it
	// observed since the demo started it: an event is a call sent and
	// done when it came, a watch error a failed one.
	stream *observations
}

// observations are a client's calls, or a stream's events, as they come.
type observations struct {
	mu    sync.Mutex
	calls []call
}

func (o *observations) add(c call) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, c)
}

// since returns the calls sent at or after t, in the order they were sent.
func (o *observations) since(t time.Time) []call {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []call
	for _, c := range o.calls {
		if !c.sent.Before(t) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b call) int { return a.sent.Compare(b.sent) })
	return out
}

// firstFrom returns when the first answer from id came at or after t.
func (o *observations) firstFrom(id string, t time.Time) (time.Time, bool) {
	var first time.Time
	for _, c := range o.since(t) {
		if c.err == nil && c.id == id && (first.IsZero() || c.done.Before(first)) {
			first = c.done
		}
	}
	return first, !first.IsZero()
}

// lastError returns when the last failed call at or after t ended.
func (o *observations) lastError(t time.Time) (time.Time, bool) {
	var last time.Time
	for _, c := range o.since(t) {
		if c.err != nil && c.done.After(last) {
			last = c.done
		}
	}
	return last, !last.IsZero()
}

// startKubeProxy starts kube-proxy in the control plane's namespace; it
// returns a reason instead when the lane cannot run here (no binary).
func (d *demo) startKubeProxy() (skipped string, err error) {
	bin := filepath.Join(d.opts.BinDir, "kube-proxy")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Sprintf("the kube-proxy and informer lanes need %s: run `tests/tools/build.sh kubeproxy` (or `make tools`)", bin), nil
	}
	d.kp, err = kubeproxy.Start(d.env, kubeproxy.Options{Node: kubeProxyNode, MinSyncPeriod: d.opts.KubeProxyMinSync, Binary: bin})
	return "", err
}

// kubeProxyMinSync is the --iptables-min-sync-period kube-proxy runs with.
func (d *demo) kubeProxyMinSync() time.Duration {
	switch m := d.opts.KubeProxyMinSync; {
	case m == 0:
		return kubeproxy.DefaultMinSyncPeriod
	case m < 0:
		return 0
	default:
		return m
	}
}

// kubeProxyClient waits for kube-proxy to program the example's Service
// and returns the client of its ClusterIP, once that answers from the
// leader.
func (d *demo) kubeProxyClient(ctx context.Context, leaderID string) (*realClient, error) {
	vip, err := d.kp.WaitService(ctx, haNS, haService, 30*time.Second)
	if err != nil {
		return nil, err
	}
	// As the fleet calls the replicas: in the namespace, a new connection
	// each time, HTTPS when they serve the aggregated API.
	hc := d.ha.HTTPClient(300*time.Millisecond, 200*time.Millisecond)
	scheme := "http"
	if d.ha.APIEnabled() {
		scheme = "https"
	}
	url := scheme + "://" + vip + ":80/"
	if d.vip, err = netip.ParseAddrPort(vip + ":80"); err != nil {
		return nil, fmt.Errorf("kube-proxy's ClusterIP %q: %w", vip, err)
	}
	c := &realClient{
		name:   kubeProxyLane,
		target: vip + ":80",
		via:    fmt.Sprintf("GET %s, the Service's ClusterIP, through kube-proxy (nftables, --iptables-min-sync-period=%v)", url, d.kubeProxyMinSync()),
		call: func(ctx context.Context) (string, error) {
			b, err := get(ctx, hc, url)
			return strings.TrimSpace(string(b)), err
		},
	}
	if err := answersFrom(ctx, c, leaderID, 10*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// staleFlowsWait bounds how long a handover waits for the ClusterIP's
// stale flows: a flow a reset ended stays 10 s.
const staleFlowsWait = 15 * time.Second

// awaitStaleFlows waits until no conntrack flow of the ClusterIP leads to
// a replica other than the leader at leaderAddr, but for flows in
// TIME_WAIT, which a new connection does not follow. A previous handover
// leaves such flows (to the old leader, since restarted as a standby), and
// a connection of the kube-proxy lane's client from the source port of one
// would go where it led (netns.Flow). It returns how long it waited, how
// many there were when it began and how many are left.
func (d *demo) awaitStaleFlows(ctx context.Context, leaderAddr string) (waited time.Duration, found, left int) {
	start := time.Now()
	for first := true; ; first = false {
		flows, err := d.ns.TCPFlows(d.vip)
		if err != nil {
			d.out.Printf("    note: conntrack's flows of %s: %v", d.vip, err)
			return time.Since(start), found, 0
		}
		left = 0
		for _, f := range flows {
			if f.State != "TIME_WAIT" && f.Backend.Addr().String() != leaderAddr {
				left++
			}
		}
		if first {
			found = left
		}
		if left == 0 || time.Since(start) > staleFlowsWait {
			return time.Since(start), found, left
		}
		d.out.Status("waiting for %d conntrack flows of %s to other replicas than the leader to expire (%s)", left, d.vip, secs(time.Since(start)))
		if !sleep(ctx, 100*time.Millisecond) {
			return time.Since(start), found, left
		}
	}
}

// answersFrom waits until c answers from id (a stream: until it gets an
// event from id).
func answersFrom(ctx context.Context, c *realClient, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	start := time.Now()
	for {
		var got string
		var err error
		if c.stream != nil {
			if _, ok := c.stream.firstFrom(id, start); ok {
				return nil
			}
			err = errors.New("no event from it yet")
		} else if got, err = c.call(ctx); err == nil && got == id {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("answered %q", got)
			}
			return fmt.Errorf("the client %s does not answer from the leader %s after %v: %w", c.name, id, timeout, err)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// call is one call of a real client.
type call struct {
	sent, done time.Time
	id         string
	err        error
}

// recorder starts a call of a client every clientEvery, whatever the
// calls before it do, until stopped, and keeps every call; for a stream,
// it keeps what the stream observes from its start on.
type recorder struct {
	c       *realClient
	from    time.Time
	obs     *observations
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
	// end is when finish was first called.
	end time.Time
}

func record(ctx context.Context, c *realClient) *recorder {
	r := &recorder{c: c, from: time.Now(), obs: c.stream, stop: make(chan struct{}), stopped: make(chan struct{})}
	if c.stream != nil {
		// What it got a little before, too: an event comes a second.
		r.from = r.from.Add(-streamSettle)
		close(r.stopped)
		return r
	}
	r.obs = &observations{}
	go func() {
		defer close(r.stopped)
		var inflight sync.WaitGroup
		defer inflight.Wait()
		tick := time.NewTicker(clientEvery)
		defer tick.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				cl := call{sent: time.Now()}
				cl.id, cl.err = c.call(ctx)
				cl.done = time.Now()
				r.obs.add(cl)
			}()
		}
	}()
	return r
}

// waitUntil is how long finishClients waits for r's first answer from the
// new leader after a fault at t0: until deadline, and a stream (a client-go
// informer) also until reflectorBackoffMax after the fault and after its
// last failure. A frozen leader's watch fails only at client-go's HTTP/2
// health check, 45 s on, and the back-off comes after that.
func (r *recorder) waitUntil(deadline, t0 time.Time) time.Time {
	if r.c.stream == nil {
		return deadline
	}
	until := latest(deadline, t0.Add(reflectorBackoffMax))
	if at, ok := r.obs.lastError(r.from); ok {
		until = latest(until, at.Add(reflectorBackoffMax))
	}
	return until
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// firstFrom returns when the first answer from id came, if one has.
func (r *recorder) firstFrom(id string) (time.Time, bool) { return r.obs.firstFrom(id, r.from) }

// finish stops the calls, waits for those under way, and returns them in
// the order they were sent. It may be called more than once.
func (r *recorder) finish() []call {
	r.once.Do(func() {
		r.end = time.Now()
		close(r.stop)
	})
	<-r.stopped
	return r.obs.since(r.from)
}

// Outcome is what a client's call got.
type Outcome int

// The outcomes of a call in a handover.
const (
	// FromOld: the old leader answered.
	FromOld Outcome = iota
	// Failed: no answer (refused, timed out, an error status).
	Failed
	// FromNew: the new leader answered.
	FromNew
	// FromStandby: a replica that was neither answered: what must never
	// happen.
	FromStandby
	// Silent: a stream got nothing for longer than it should (the
	// example sends an event a second): its watch is held by a replica
	// that does not answer.
	Silent
)

// streamStale is how long a stream may go without an event before its
// lane shows it Silent: the example's watch sends one every second.
const streamStale = 1500 * time.Millisecond

// reflectorBackoffMax is the longest a client-go informer waits before it
// lists and watches again after a failure: its reflector's backoff starts
// at 800 ms, doubles with each failure up to 30 s, adds up to as much
// again in jitter, and resets only after 2 min without a failure. A
// handover soon after another one (the demo's scenarios are seconds
// apart) can find it grown: the plain informer then waits it out, which is
// what it measures, and the demo waits for it.
const reflectorBackoffMax = 60 * time.Second

func (o Outcome) String() string {
	switch o {
	case FromOld:
		return "old leader"
	case Failed:
		return "failed"
	case FromNew:
		return "new leader"
	case FromStandby:
		return "a standby"
	case Silent:
		return "silent"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// ClientSegment is a stretch of a client's calls with one outcome, from
// the send of its first call to the send of the next stretch's first (or
// the end of its last call).
type ClientSegment struct {
	From, To time.Duration
	Outcome  Outcome
}

// ClientLane is a handover as a real client saw it.
type ClientLane struct {
	// Name is the lane's: "through kube-proxy".
	Name string
	// Stream: the client watches (an informer); its calls are the events
	// it got, its failed calls its watch's errors.
	Stream bool
	// Via says how the client calls: the URL, kube-proxy's settings.
	Via string
	// Gap is the time from the fault to the first answer from the new
	// leader (zero if none came).
	Gap time.Duration
	// LastOld is when the old leader's last answer came (zero if none
	// came after the fault).
	LastOld time.Duration
	// Calls, Failed: how many calls were made around the fault, how many
	// got no answer; FailedBy counts them by kind (refused, timeout,
	// reset, status 503, ...).
	Calls, Failed int
	FailedBy      map[string]int
	// Standbys are the identities of standbys that answered (none, when
	// fastover does its job).
	Standbys []string
	// FirstError is when the first call after the fault failed (a
	// stream: its watch's first error), FirstErrorKind how.
	FirstError     time.Duration
	FirstErrorKind string
	// OldAfterNew counts answers from the old leader to calls sent after
	// the new one's first answer came.
	OldAfterNew int
	// Segments are the calls by outcome, in order, for the picture.
	Segments []ClientSegment
	// Passed: the new leader answered, and no standby ever did; Error
	// says why not.
	Passed bool
	Error  string
	// Notes are what else was measured, one line each.
	Notes []string
}

// lane turns a client's calls around a handover from old to next, with
// the fault at t0, into a lane; end is when the recording ended (a
// stream's last event stands until then, if it is not stale by then).
func lane(c *realClient, calls []call, t0, end time.Time, old, next string) ClientLane {
	l := ClientLane{Name: c.name, Via: c.via, Stream: c.stream != nil, Calls: len(calls), FailedBy: map[string]int{}}
	var firstNew time.Time
	var oldSent []time.Time
	standbys := map[string]bool{}
	for i, cl := range calls {
		var o Outcome
		switch {
		case cl.err != nil:
			o = Failed
			l.Failed++
			kind := failKind(cl.err)
			l.FailedBy[kind]++
			if at := cl.done.Sub(t0); at > 0 && (l.FirstErrorKind == "" || at < l.FirstError) {
				l.FirstError, l.FirstErrorKind = at, kind
			}
		case cl.id == old:
			o = FromOld
			if cl.done.After(t0) {
				l.LastOld = max(l.LastOld, cl.done.Sub(t0))
			}
			oldSent = append(oldSent, cl.sent)
		case cl.id == next:
			o = FromNew
			if firstNew.IsZero() || cl.done.Before(firstNew) {
				firstNew = cl.done
			}
		default:
			o = FromStandby
			standbys[cl.id] = true
		}
		to := cl.done
		switch {
		case i+1 < len(calls):
			to = calls[i+1].sent
		case l.Stream && end.After(to):
			to = cl.done.Add(streamStale)
			if end.Before(to) {
				to = end
			}
		}
		// A stream's event stands for what came until the next one, as
		// long as events come as often as they should; then it went
		// silent.
		silent := l.Stream && to.Sub(cl.done) > streamStale
		if silent {
			to = cl.done.Add(streamStale)
		}
		l.Segments = addSegment(l.Segments, cl.sent.Sub(t0), to.Sub(t0), o)
		if silent {
			l.Segments = addSegment(l.Segments, to.Sub(t0), calls[i+1].sent.Sub(t0), Silent)
		}
	}
	// Calls sent after the new leader's first answer came.
	for _, sent := range oldSent {
		if !firstNew.IsZero() && sent.After(firstNew) {
			l.OldAfterNew++
		}
	}
	for id := range standbys {
		l.Standbys = append(l.Standbys, id)
	}
	slices.Sort(l.Standbys)
	if !firstNew.IsZero() {
		l.Gap = firstNew.Sub(t0)
	}
	switch {
	case len(l.Standbys) > 0:
		l.Error = fmt.Sprintf("a standby answered: %s", strings.Join(l.Standbys, ", "))
	case firstNew.IsZero():
		l.Error = fmt.Sprintf("the new leader %s never answered (%d calls, %d failed)", next, l.Calls, l.Failed)
	default:
		l.Passed = true
	}
	return l
}

// addSegment adds the stretch from..to with the outcome o to segs,
// extending the last one if it has the same outcome.
func addSegment(segs []ClientSegment, from, to time.Duration, o Outcome) []ClientSegment {
	if n := len(segs); n > 0 && segs[n-1].Outcome == o {
		segs[n-1].To = to
		return segs
	}
	return append(segs, ClientSegment{From: from, To: to, Outcome: o})
}

// Verdict is the lane's result in a few words: "no standby answered (312
// calls, 97 failed: 97 refused)".
func (l ClientLane) Verdict() string {
	if !l.Passed {
		return "FAILED: " + l.Error
	}
	s := fmt.Sprintf("no standby answered (%d calls, %d without an answer", l.Calls, l.Failed)
	if l.Stream {
		s = fmt.Sprintf("no event from a standby (%d events, %d watch errors", l.Calls, l.Failed)
	}
	if l.Failed > 0 {
		kinds := make([]string, 0, len(l.FailedBy))
		for k := range l.FailedBy {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		parts := make([]string, 0, len(kinds))
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%d %s", l.FailedBy[k], k))
		}
		s += ": " + strings.Join(parts, ", ")
	}
	return s + ")"
}

// failKind names how a call failed.
func failKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// The server closed the connection without an answer: a
		// replica stopping.
		return "closed"
	}
	var se statusError
	if errors.As(err, &se) {
		return se.Error()
	}
	// A watch's errors reach an informer as text.
	switch msg := err.Error(); {
	case errors.Is(err, net.ErrClosed), strings.Contains(msg, "use of closed network connection"):
		return "closed"
	case strings.Contains(msg, "connection lost"):
		// client-go's HTTP/2 health check gave up on the connection.
		return "connection lost"
	case strings.Contains(msg, "very short watch"):
		return "watch ended"
	case strings.Contains(msg, "connection refused"):
		return "refused"
	case strings.Contains(msg, "connection reset"):
		return "reset"
	}
	return "other"
}

// statusError is an answer with an error status.
type statusError int

func (e statusError) Error() string { return fmt.Sprintf("status %d", int(e)) }

// recordClients starts calling the example's Service with every real
// client, once every watch has been on the leader id a while, and lets
// them collect a few answers from it first.
func (d *demo) recordClients(ctx context.Context, id string) []*recorder {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		waiting := ""
		for _, c := range d.clients {
			if c.stream != nil && !c.stream.settled(id) {
				waiting = c.name
			}
		}
		if waiting == "" {
			break
		}
		d.out.Status("waiting for the client %s to have watched %s for %v", waiting, id, streamSettle)
		if !sleep(ctx, 50*time.Millisecond) {
			break
		}
	}
	recs := make([]*recorder, 0, len(d.clients))
	for _, c := range d.clients {
		recs = append(recs, record(ctx, c))
	}
	if len(recs) > 0 {
		sleep(ctx, 200*time.Millisecond)
	}
	return recs
}

// finishClients waits (until deadline; an informer until waitUntil) for
// every real client to get an answer from the new leader next, watches a moment more, stops them and
// returns their lanes; the timeline gets their first answers from next
// and kube-proxy's sync that programmed it (sliceAt is when next's
// EndpointSlice was seen; zero if not).
func (d *demo) finishClients(ctx context.Context, recs []*recorder, tl *timeline, deadline time.Time, old, next string, sliceAt time.Time) []ClientLane {
	if len(recs) == 0 {
		return nil
	}
	for _, r := range recs {
		for {
			if _, ok := r.firstFrom(next); ok || time.Now().After(r.waitUntil(deadline, tl.t0)) {
				break
			}
			what := "an answer"
			if r.c.stream != nil {
				what = "an event"
			}
			d.out.Status("%s answers through the Service; waiting for the client %s to get %s from it (%s)", next, r.c.name, what, secs(time.Since(tl.t0)))
			if !sleep(ctx, 10*time.Millisecond) {
				break
			}
		}
	}
	// What comes after the first answer: the new leader's, only.
	sleep(ctx, 300*time.Millisecond)
	lanes := make([]ClientLane, 0, len(recs))
	for _, r := range recs {
		l := lane(r.c, r.finish(), tl.t0, r.end, old, next)
		if l.Gap > 0 {
			tl.mark(tl.t0.Add(l.Gap), next+" answers the client "+l.Name)
		}
		lanes = append(lanes, l)
	}
	for i := range lanes {
		lanes[i].Notes = d.clientNotes(&lanes[i], tl, next, sliceAt)
	}
	return lanes
}

// clientNotes describe a lane: when the old leader last answered, the
// calls without an answer, kube-proxy's part.
func (d *demo) clientNotes(l *ClientLane, tl *timeline, next string, sliceAt time.Time) []string {
	answer, answers, failed := "answer", "answers", "calls without an answer"
	if l.Stream {
		answer, answers, failed = "event", "events", "watch errors"
	}
	var parts []string
	if l.LastOld > 0 {
		parts = append(parts, "the old leader's last "+answer+" at "+formatFine(l.LastOld))
	} else {
		parts = append(parts, "no "+answer+" from the old leader after the fault")
	}
	if l.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d %s", l.Failed, failed))
		if l.Stream && l.FirstError > 0 {
			parts = append(parts, fmt.Sprintf("the first at %s (%s)", formatFine(l.FirstError), l.FirstErrorKind))
		}
	}
	if l.Gap > 0 {
		parts = append(parts, "the new leader's first "+answer+" at "+formatFine(l.Gap))
	}
	if l.OldAfterNew > 0 {
		parts = append(parts, fmt.Sprintf("%d %s from the old leader after that", l.OldAfterNew, answers))
	}
	notes := []string{"client " + l.Name + ": " + strings.Join(parts, ", ")}
	if l.Name == kubeProxyLane && d.kp != nil && !sliceAt.IsZero() && l.Gap > 0 {
		if s, prev, ok := d.programmingSync(tl.t0, sliceAt); ok {
			tl.mark(s.Start, "kube-proxy's sync for "+next+" begins")
			why := "at once"
			if wait := s.Start.Sub(sliceAt); wait > 20*time.Millisecond {
				why = "after " + formatFine(wait)
			}
			if !prev.IsZero() {
				why += fmt.Sprintf("; its sync before began at %s, and it syncs at most once per --iptables-min-sync-period=%v", formatFine(prev.Sub(tl.t0)), d.kubeProxyMinSync())
			}
			notes = append(notes, fmt.Sprintf("kube-proxy: %s's EndpointSlice seen at %s; kube-proxy's sync that sends the ClusterIP to it ran from %s to %s (%s)",
				next, formatFine(sliceAt.Sub(tl.t0)), formatFine(s.Start.Sub(tl.t0)), formatFine(s.Done.Sub(tl.t0)), why))
		}
	}
	return notes
}

// programmingSync is kube-proxy's sync that programmed the new leader: the
// first IPv4 one that began after its EndpointSlice was seen (less a
// little: kube-proxy's watch may see it before the demo's) with as many
// endpoints as before the fault at t0 (a SIGTERM's withdrawal syncs one
// fewer).
// It also returns when the IPv4 sync before it began.
func (d *demo) programmingSync(t0, sliceAt time.Time) (sync kubeproxy.Sync, prev time.Time, ok bool) {
	syncs, err := d.kp.Syncs()
	if err != nil {
		return kubeproxy.Sync{}, time.Time{}, false
	}
	before := -1
	for _, s := range syncs {
		if s.Family != "IPv4" {
			continue
		}
		if s.Done.Before(t0) {
			before = s.Endpoints
		} else if s.Start.After(sliceAt.Add(-50*time.Millisecond)) && s.Endpoints == before {
			return s, prev, true
		}
		prev = s.Start
	}
	return kubeproxy.Sync{}, time.Time{}, false
}

// get is one call of a lane's client: the body of a 200 OK answer, else an
// error (a statusError for another status).
func get(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp.StatusCode)
	}
	return b, nil
}

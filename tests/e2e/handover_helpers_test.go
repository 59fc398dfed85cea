package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/tests/harness/faultproxy"
)

// leaderFault is what happens to the leader in a handover.
type leaderFault string

const (
	// faultTerm is a planned stop (a rolling update): SIGTERM.
	faultTerm leaderFault = "SIGTERM"
	// faultKill is a crash: SIGKILL.
	faultKill leaderFault = "SIGKILL"
	// faultFreeze freezes the leader (SIGSTOP) until a new leader
	// answers, then lets it run again (SIGCONT): a long GC pause, a
	// throttled container, a VM paused.
	faultFreeze leaderFault = "SIGSTOP"
	// faultCut pulls the leader's cable: its address drops every packet
	// and its way to the API server stalls, until a new leader answers;
	// then the network heals.
	faultCut leaderFault = "cut"
)

// caller is a client of the leader's Service: one call, and the identity
// of the replica that answered it.
type caller interface {
	call() (string, error)
}

// leadCaller is a caller whose answers also say whether the replica that
// answered led when it answered (the example's aggregated API does).
type leadCaller interface {
	callLeading() (id string, leading bool, err error)
}

// handoverRig is what a handover test plays its faults on.
type handoverRig struct {
	f    *fleet.Fleet
	d    fleet.Durations
	pubs *fleet.Log
	c    caller
	// kp, if set, is the kube-proxy between the client and the replicas:
	// the row gets its sync's times.
	kp *kubeproxy.Proxy
	// proxies are the replicas' ways to the API server (faultCut needs
	// them), by identity.
	proxies map[string]*faultproxy.Proxy
	// staleCheck, if set, is how long after the new leader took the
	// Lease kube-apiserver may still answer 503 "service unavailable"
	// after an unplanned fault: its APIService availability check, begun
	// against the old leader's address while that hung, can fail (up to
	// its 5 s timeout, or when a healed network refuses) after the new
	// leader serves, and mark the APIService unavailable until the next
	// check. Such answers are counted apart.
	staleCheck time.Duration
}

// useFaultProxies gives every replica of f its own fault-injecting proxy
// to the API server, inside the control plane's network namespace, with
// the admin's token; call it before f.Add.
func (h *handoverRig) useFaultProxies(t *testing.T) {
	t.Helper()
	env := h.f.Env
	require.NotNil(t, env.Netns(), "the fault proxies listen in the control plane's network namespace")
	token := kubeconfigToken(t, env.Kubeconfig)
	h.proxies = map[string]*faultproxy.Proxy{}
	h.f.KubeconfigOf = func(r *fleet.Replica) (string, error) {
		p := h.proxies[r.ID]
		if p == nil {
			var err error
			if p, err = faultproxy.StartListening(env.Config, env.Netns().Listen); err != nil {
				return "", err
			}
			h.proxies[r.ID] = p
			t.Cleanup(p.Close)
		}
		path := filepath.Join(env.Dir, "kubeconfig-proxy-"+r.ID)
		return path, p.WriteKubeconfig(path, "admin", token, h.f.Namespace)
	}
}

// handoverRow is one handover as a client saw it.
type handoverRow struct {
	// setting names the configuration of the run (kube-proxy's
	// min-sync, ...).
	setting   string
	fault     leaderFault
	old, next string
	// From the fault: the last answer from the old leader, the new
	// leader's acquire time (the Lease's), the new leader's slice seen
	// by the test's watch, the start and end of kube-proxy's first sync
	// that programmed it (its log: the rules take effect in between; zero
	// without kube-proxy), and the first answer from the new leader.
	lastOld, acquired, toSlice, syncStart, syncDone, gap time.Duration
	calls, failed                                        int
	// late counts the old leader's answers to calls sent after the new
	// leader's acquire time (while it stepped down); lateBy is the
	// latest such call.
	late   int
	lateBy time.Duration
	// disowned counts the old leader's answers that said it no longer
	// led.
	disowned int
	// staleCheck counts kube-apiserver's 503s after the new leader had
	// answered (handoverRig.staleCheck).
	staleCheck int
	// errs counts the failed calls by kind (refused, timeout, reset,
	// other), each with the longest such call.
	errs map[string]time.Duration
	errN map[string]int
}

func (r handoverRow) String() string {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	sync := ""
	if r.syncStart > 0 {
		sync = fmt.Sprintf(", kube-proxy's sync %v to %v", ms(r.syncStart), ms(r.syncDone))
	}
	return fmt.Sprintf("%s %s to %s: last answer from the old leader %v, Lease acquired %v, slice %v%s, first answer from the new leader %v (slice to answer %v); %d calls, %d without an answer; %d answers from the old leader to calls sent after the acquire time (latest +%v)",
		r.fault, r.old, r.next, ms(r.lastOld), ms(r.acquired), ms(r.toSlice), sync, ms(r.gap), ms(r.gap-r.toSlice),
		r.calls, r.failed, r.late, ms(r.lateBy)) + r.disownedSummary() + r.errSummary()
}

// gapBound is how long a fault may keep a client without an answer:
// generous, for a loaded machine.
func gapBound(flt leaderFault, d fleet.Durations) time.Duration {
	if flt == faultTerm {
		return 5 * time.Second
	}
	return d.Lease + 2*d.Retry + 5*time.Second
}

// answer is one call: when it was sent, when it ended, who answered.
type answer struct {
	sent, done time.Time
	id         string
	err        error
	// leading is what the replica said of itself, if the caller knows.
	leading *bool
}

// handover plays flt on the leader old while the rig's client calls every
// 10 ms, checks that every answer names the leader of the moment (the old
// one until the new one has taken the Lease, the new one after it, never
// a standby, never the old one again), starts the old leader again as a
// standby, and returns the times.
func (h *handoverRig) handover(ctx context.Context, t *testing.T, old string, flt leaderFault) handoverRow {
	t.Helper()
	f := h.f
	r := f.ByID(old)
	require.NotNil(t, r, "leader %q is a replica", old)

	cs := startCalls(h.c)
	newAnswers := func() (n int, first time.Time) {
		for _, a := range cs.snapshot() {
			if a.err == nil && a.id != old {
				if n == 0 || a.done.Before(first) {
					first = a.done
				}
				n++
			}
		}
		return n, first
	}

	time.Sleep(200 * time.Millisecond)
	signalled := time.Now()
	heal := h.inject(ctx, t, r, flt)
	// Wait for the new leader's answers, and some more of them.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n, first := newAnswers()
		return n > 0 && time.Since(first) > 300*time.Millisecond, nil
	})
	if err == nil && heal != nil {
		// The old leader wakes up or gets its network back while the
		// client goes on calling: it must not answer any more.
		require.NoError(t, heal(ctx))
		time.Sleep(1500 * time.Millisecond)
	}
	answers := cs.end()
	if heal != nil && err != nil {
		_ = heal(ctx)
	}
	require.NoError(t, err, "no answer from a new leader after %s to %s", flt, old)

	next, acquired := h.successor(ctx, t, old, signalled)
	nr := f.ByID(next)

	row := handoverRow{fault: flt, old: old, next: next, acquired: acquired.Sub(signalled), calls: len(answers),
		errs: map[string]time.Duration{}, errN: map[string]int{}}
	for _, p := range h.pubs.Snapshot() {
		if p.At.After(signalled) && slices.Equal(p.Addrs, []string{nr.Address()}) {
			row.toSlice = p.At.Sub(signalled)
			break
		}
	}
	// The first answer from the new leader; then every call, in the order
	// it was sent.
	var firstNew time.Time
	for _, a := range answers {
		if a.err == nil && a.id == next && (firstNew.IsZero() || a.done.Before(firstNew)) {
			firstNew = a.done
		}
	}
	for _, a := range answers {
		switch {
		case a.err != nil && !a.sent.Before(firstNew) && h.staleCheckAnswer(flt, a, acquired):
			row.staleCheck++
		case a.err != nil:
			row.failed++
			kind := errKind(a.err)
			row.errN[kind]++
			row.errs[kind] = max(row.errs[kind], a.done.Sub(a.sent))
			assert.True(t, a.done.After(signalled) && a.sent.Before(firstNew),
				"%s: the call sent %v after the fault failed outside the handover: %v", flt, a.sent.Sub(signalled), a.err)
		case a.id == old && a.leading != nil && !*a.leading:
			// A request the old leader had accepted before it was frozen
			// or cut off, answered once it could run again: it knows by
			// then that it no longer leads, and says so.
			row.disowned++
		case a.id == old:
			row.lastOld = max(row.lastOld, a.done.Sub(signalled))
			assert.True(t, a.sent.Before(firstNew), "%s: the old leader %s answered a call sent %v after the fault, after the new leader %s had answered (%v)",
				flt, old, a.sent.Sub(signalled), next, firstNew.Sub(signalled))
			// Stepping down, the old leader may still answer a call sent
			// just after the new leader's acquire time (it released the
			// Lease, its listener is not closed yet), never long after.
			if a.sent.After(acquired) {
				row.late++
				row.lateBy = a.sent.Sub(acquired)
				assert.Less(t, row.lateBy, time.Second, "%s: the old leader %s answered a call sent %v after %s took the Lease",
					flt, old, row.lateBy, next)
			}
		case a.id == next:
			assert.True(t, a.done.After(acquired), "%s: %s answered before it took the Lease", flt, next)
		default:
			assert.Fail(t, "an answer names no leader", "%s: %q answered a call sent %v after the fault (old %s, new %s)", flt, a.id, a.sent.Sub(signalled), old, next)
		}
	}
	row.gap = firstNew.Sub(signalled)
	if t.Failed() && h.pubs != nil {
		// What the Service's endpoints were meanwhile, to tell a
		// publication from a path that held an old one.
		for _, p := range h.pubs.Snapshot() {
			if p.At.After(signalled.Add(-time.Second)) {
				t.Logf("%s: the leader's EndpointSlice %v after the fault: %v", flt, p.At.Sub(signalled).Round(time.Millisecond), p.Addrs)
			}
		}
	}
	if h.kp != nil {
		row.syncStart, row.syncDone = h.programmedBy(t, signalled, acquired)
	}
	if row.toSlice == 0 {
		row.toSlice = row.acquired // the watch missed it: the Lease's time is the bound
	}

	h.restart(ctx, t, r, flt)
	return row
}

// successor reads the Lease after a fault on the leader old at signalled:
// its holder, a replica other than old, and when it acquired the Lease,
// after the fault.
func (h *handoverRig) successor(ctx context.Context, t *testing.T, old string, signalled time.Time) (string, time.Time) {
	t.Helper()
	lease, err := h.f.Env.Client.CoordinationV1().Leases(h.f.Namespace).Get(ctx, h.f.Lease, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, lease.Spec.HolderIdentity)
	require.NotNil(t, lease.Spec.AcquireTime)
	next, acquired := *lease.Spec.HolderIdentity, lease.Spec.AcquireTime.Time
	require.NotNil(t, h.f.ByID(next), "the Lease's holder %q is a replica", next)
	require.NotEqual(t, old, next)
	require.True(t, acquired.After(signalled), "the Lease was acquired (%v) after the fault (%v)", acquired, signalled)
	return next, acquired
}

// inject plays flt on the replica r and returns how to heal it (nil for a
// fault that needs none: the process is gone).
func (h *handoverRig) inject(ctx context.Context, t *testing.T, r *fleet.Replica, flt leaderFault) (heal func(context.Context) error) {
	t.Helper()
	switch flt {
	case faultTerm:
		require.NoError(t, r.Proc.Signal(syscall.SIGTERM))
	case faultKill:
		require.NoError(t, r.Proc.Signal(syscall.SIGKILL))
	case faultFreeze:
		require.NoError(t, r.Proc.Signal(syscall.SIGSTOP))
		heal = func(context.Context) error { return r.Proc.Signal(syscall.SIGCONT) }
	case faultCut:
		p := h.proxies[r.ID]
		require.NotNil(t, p, "a cut needs the replicas' fault proxies (useFaultProxies)")
		p.Partition(true)
		cut, err := h.f.Env.Netns().Cut(ctx, netip.MustParseAddr(r.Address()))
		require.NoError(t, err)
		heal = func(ctx context.Context) error {
			p.Partition(false)
			return cut(ctx)
		}
	default:
		t.Fatalf("unknown fault %q", flt)
	}
	return heal
}

// restart brings the old leader r back as a standby after flt (healed), as
// the kubelet would start it: after a planned stop it exited cleanly;
// frozen or cut off, it found its Lease gone and exited to start afresh.
func (h *handoverRig) restart(ctx context.Context, t *testing.T, r *fleet.Replica, flt leaderFault) {
	t.Helper()
	f := h.f
	switch flt {
	case faultTerm:
		exited, err := r.Proc.WaitExit(10 * time.Second)
		require.True(t, exited, "the leader did not exit after SIGTERM")
		require.NoError(t, err, "a planned stop exits cleanly")
	case faultFreeze, faultCut:
		exited, err := r.Proc.WaitExit(15 * time.Second)
		require.True(t, exited, "the old leader did not exit after it lost the Lease (%s)", flt)
		require.Error(t, err, "a lost Lease ends the process with an error, to be restarted")
	}
	r.Proc.Stop(syscall.SIGKILL, 0)
	require.NoError(t, f.Start(r))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		// A standby refuses GET / with its identity first
		// (leader.Only).
		code, body, err := f.Get(r.Address(), "/")
		return err == nil && code == http.StatusServiceUnavailable && strings.HasPrefix(body, r.ID+" "), nil
	}), "%s serves again as a standby", r.ID)
	time.Sleep(h.d.Retry)
}

// calls calls a caller every 10 ms, each call on its own tick whether or
// not the one before has ended (a call to a frozen or cut-off leader hangs
// until its timeout), as a client with many callers does, and records
// every call: an answer from a new leader is seen within 10 ms of when it
// can be had.
type calls struct {
	c       caller
	mu      sync.Mutex
	answers []answer
	running sync.WaitGroup
	stop    chan struct{}
	stopped chan struct{}
}

func startCalls(c caller) *calls {
	cs := &calls{c: c, stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(cs.stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-cs.stop:
				return
			case <-tick.C:
			}
			cs.running.Add(1)
			go func() {
				defer cs.running.Done()
				cs.record(cs.one())
			}()
		}
	}()
	return cs
}

// one makes one call, with what the replica said of itself if the caller
// tells.
func (cs *calls) one() answer {
	a := answer{sent: time.Now()}
	if lc, ok := cs.c.(leadCaller); ok {
		var leading bool
		a.id, leading, a.err = lc.callLeading()
		a.leading = &leading
	} else {
		a.id, a.err = cs.c.call()
	}
	a.done = time.Now()
	return a
}

func (cs *calls) record(a answer) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.answers = append(cs.answers, a)
}

// snapshot returns the calls ended so far.
func (cs *calls) snapshot() []answer {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return slices.Clone(cs.answers)
}

// end stops calling, waits for the calls under way, and returns every
// call in the order sent.
func (cs *calls) end() []answer {
	close(cs.stop)
	<-cs.stopped
	cs.running.Wait()
	a := cs.snapshot()
	slices.SortFunc(a, func(x, y answer) int { return x.sent.Compare(y.sent) })
	return a
}

// httpGet is one call of a test's client: the body of a 200 OK answer,
// else an error (a statusError, with the start of the body, for another
// status).
func httpGet(c *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return httpDo(c, req)
}

// httpDo is httpGet for a request of the caller's (with a context).
func httpDo(c *http.Client, req *http.Request) ([]byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{code: resp.StatusCode, body: string(b[:min(len(b), 200)])}
	}
	return b, nil
}

// programmedBy finds kube-proxy's sync that programmed the new leader: the
// first, begun after the Lease changed hands, with as many endpoints as
// before the fault (a SIGTERM's removal sync has one fewer). It returns
// its start and end from the fault.
func (h *handoverRig) programmedBy(t *testing.T, signalled, acquired time.Time) (start, done time.Duration) {
	t.Helper()
	syncs, err := h.kp.Syncs()
	require.NoError(t, err)
	before := -1
	for _, s := range syncs {
		if s.Family != "IPv4" {
			continue
		}
		if s.Done.Before(signalled) {
			before = s.Endpoints
			continue
		}
		if s.Start.After(acquired) && s.Endpoints == before {
			return s.Start.Sub(signalled), s.Done.Sub(signalled)
		}
	}
	return 0, 0
}

func (r handoverRow) disownedSummary() string {
	var b strings.Builder
	if r.disowned > 0 {
		fmt.Fprintf(&b, "; %d answers from the old leader saying it no longer led", r.disowned)
	}
	if r.staleCheck > 0 {
		fmt.Fprintf(&b, "; %d calls answered 503 service unavailable after the new leader had answered (a stale availability check)", r.staleCheck)
	}
	return b.String()
}

// staleCheckAnswer reports whether a, a failed call, is kube-apiserver's
// 503 "service unavailable" within the rig's staleCheck of the acquire
// time, after an unplanned fault.
func (h *handoverRig) staleCheckAnswer(flt leaderFault, a answer, acquired time.Time) bool {
	var se *statusError
	return h.staleCheck > 0 && flt != faultTerm && a.sent.Before(acquired.Add(h.staleCheck)) &&
		errors.As(a.err, &se) && se.code == http.StatusServiceUnavailable && strings.Contains(se.body, "service unavailable")
}

func (r handoverRow) errSummary() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.errN)) {
		parts = append(parts, fmt.Sprintf("%d %s (longest %v)", r.errN[k], k, r.errs[k].Round(time.Millisecond)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; failed calls: " + strings.Join(parts, ", ")
}

// statusError is an answer that was not 200 OK.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

// errKind names how a call failed: refused, reset, timeout, the HTTP
// status of an answer that was not 200 OK, or other.
func errKind(err error) string {
	var ne net.Error
	var se *statusError
	switch {
	case errors.As(err, &se):
		return "HTTP " + strconv.Itoa(se.code)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "other"
}

// spread is "p50 (min-max) ms" of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) int64 { return d.Round(time.Millisecond).Milliseconds() }
	return fmt.Sprintf("%d (%d-%d) ms", ms(s[len(s)/2]), ms(s[0]), ms(s[len(s)-1]))
}

// handoverTable is the rows' gaps by setting and fault, with kube-proxy's
// share where it was there.
func handoverTable(rows []handoverRow, settings []string, faults []leaderFault) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-8s %4s  %-22s %-22s %-22s %-22s\n", "setting", "fault", "runs", "gap p50 (min-max)", "fault to slice", "slice to sync start", "slice to answer")
	for _, st := range settings {
		for _, flt := range faults {
			var gaps, toSlice, toRules, share []time.Duration
			for _, r := range rows {
				if r.setting == st && r.fault == flt {
					gaps, toSlice, share = append(gaps, r.gap), append(toSlice, r.toSlice), append(share, r.gap-r.toSlice)
					if r.syncStart > 0 {
						toRules = append(toRules, r.syncStart-r.toSlice)
					}
				}
			}
			if len(gaps) == 0 {
				continue
			}
			fmt.Fprintf(&b, "%-8s %-8s %4d  %-22s %-22s %-22s %-22s\n", st, flt, len(gaps), spread(gaps), spread(toSlice), spread(toRules), spread(share))
		}
	}
	return b.String()
}

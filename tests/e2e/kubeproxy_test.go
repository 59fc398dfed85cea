package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/internal/netns"
)

// TestKubeProxyHandover puts kube-proxy (nftables mode) between a client
// and the example's selector-less Service, in a network namespace of the
// test's own (issue 16 §3). The client calls the Service's ClusterIP every
// 10 ms while the leader gets SIGTERM (three times) and SIGKILL (once),
// with kube-proxy's default --iptables-min-sync-period (1s) and with 0s.
// Every answer names the leader of the moment: the old one until the new
// one has taken the Lease (its acquire time), the new one after it. The
// gap from the signal to the first answer from the new leader is logged,
// with its parts: until the new leader's EndpointSlice is published, from
// there until kube-proxy begins the sync that sends the ClusterIP to it
// (its wait for --iptables-min-sync-period), and until the answer.
func TestKubeProxyHandover(t *testing.T) {
	ns := netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	env := cluster.Start(t, cluster.Options{Netns: ns, Nodes: []string{"node-a"}})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	d := shortDurations
	f := newFleet(t, env, "ha", "ctl", d)
	f.BindPublished = true
	require.NoError(t, f.CreateService(ctx, nil))
	require.NoError(t, f.Add(3))
	leader := waitServing(ctx, t, f, "", 30*time.Second)
	pubs := mustWatch(ctx, t, f)

	client := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			return env.DialContext(ctx, network, address)
		},
	}}

	var rows []handoverRow
	for _, sync := range []struct {
		name string
		min  time.Duration
	}{{"1s", 0}, {"0s", kubeproxy.NoMinSync}} {
		kp, err := kubeproxy.Start(env, kubeproxy.Options{Node: "node-a", MinSyncPeriod: sync.min, Name: "kube-proxy-" + sync.name})
		require.NoError(t, err)
		kpStart := time.Now()
		vip, err := kp.WaitService(ctx, "ha", "ctl", 30*time.Second)
		require.NoError(t, err)
		t.Logf("min-sync %s: kube-proxy programmed %s:80 %v after it started", sync.name, vip, time.Since(kpStart).Round(time.Millisecond))
		c := &vipClient{client: client, url: "http://" + vip + ":80/"}
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			id, err := c.call()
			return err == nil && id == leader, nil
		}), "the ClusterIP answers from the leader %s", leader)

		for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM, syscall.SIGTERM, syscall.SIGKILL} {
			row := kpHandover(ctx, t, f, kp, c, pubs, leader, sig)
			row.minSync = sync.name
			rows = append(rows, row)
			t.Logf("min-sync %s, run %d: %s", sync.name, i+1, row)
			bound := 5 * time.Second // planned
			if sig == syscall.SIGKILL {
				bound = d.Lease + 2*d.Retry + 5*time.Second
			}
			assert.Less(t, row.gap, bound, "%s with min-sync %s: the gap through the ClusterIP", sig, sync.name)
			leader = row.next
		}
		require.NoError(t, kp.Stop(ctx))
	}

	var b strings.Builder
	fmt.Fprintf(&b, "through kube-proxy's ClusterIP (nftables), lease %v, client every 10 ms:\n", d)
	fmt.Fprintf(&b, "%-8s %-8s %4s  %-22s %-22s %-22s %-22s\n", "min-sync", "signal", "runs", "gap p50 (min-max)", "signal to slice", "slice to sync start", "slice to answer")
	for _, ms := range []string{"1s", "0s"} {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			var gaps, toSlice, toRules, kpShare []time.Duration
			for _, r := range rows {
				if r.minSync == ms && r.sig == sig {
					gaps, toSlice = append(gaps, r.gap), append(toSlice, r.toSlice)
					toRules, kpShare = append(toRules, r.syncStart-r.toSlice), append(kpShare, r.gap-r.toSlice)
				}
			}
			fmt.Fprintf(&b, "%-8s %-8s %4d  %-22s %-22s %-22s %-22s\n", ms, kpSigName(sig), len(gaps), kpSpread(gaps), kpSpread(toSlice), kpSpread(toRules), kpSpread(kpShare))
		}
	}
	t.Logf("%s(the test took %v)", b.String(), time.Since(start).Round(time.Second))
}

// handoverRow is one handover as the ClusterIP's client saw it.
type handoverRow struct {
	minSync   string
	sig       syscall.Signal
	old, next string
	// From the signal: the last answer from the old leader, the new
	// leader's acquire time (the Lease's), the new leader's slice seen
	// by the test's watch, the start and end of kube-proxy's first sync
	// that programmed it (its log: the rules take effect in between), and
	// the first answer from the new leader.
	lastOld, acquired, toSlice, syncStart, syncDone, gap time.Duration
	calls, failed                                        int
	// late counts the old leader's answers to calls sent after the new
	// leader's acquire time (while it stepped down); lateBy is the
	// latest such call.
	late   int
	lateBy time.Duration
	// errs counts the failed calls by kind (refused, timeout, reset,
	// other), each with the longest such call.
	errs map[string]time.Duration
	errN map[string]int
}

func (r handoverRow) String() string {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("%s %s to %s: last answer from the old leader %v, Lease acquired %v, slice %v, kube-proxy's sync %v to %v, first answer from the new leader %v (slice to answer %v); %d calls, %d without an answer; %d answers from the old leader to calls sent after the acquire time (latest +%v)",
		kpSigName(r.sig), r.old, r.next, ms(r.lastOld), ms(r.acquired), ms(r.toSlice), ms(r.syncStart), ms(r.syncDone), ms(r.gap), ms(r.gap-r.toSlice),
		r.calls, r.failed, r.late, ms(r.lateBy)) + r.errSummary()
}

// vipClient calls the ClusterIP.
type vipClient struct {
	client *http.Client
	url    string
}

func (c *vipClient) call() (string, error) {
	resp, err := c.client.Get(c.url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return strings.TrimSpace(string(b)), nil
}

// kpAnswer is one call: when it was sent, when it ended, who answered.
type kpAnswer struct {
	sent, done time.Time
	id         string
	err        error
}

// kpHandover signals the leader old while a client calls the ClusterIP every
// 10 ms, checks that every answer names the leader of the moment, starts
// the old leader again as a standby, and returns the times.
func kpHandover(ctx context.Context, t *testing.T, f *fleet.Fleet, kp *kubeproxy.Proxy, c *vipClient, pubs *fleet.Log, old string, sig syscall.Signal) handoverRow {
	t.Helper()
	r := f.ByID(old)
	require.NotNil(t, r, "leader %q is a replica", old)

	var mu sync.Mutex
	var answers []kpAnswer
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			a := kpAnswer{sent: time.Now()}
			a.id, a.err = c.call()
			a.done = time.Now()
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
		}
	}()
	newAnswers := func() (n int, first time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range answers {
			if a.err == nil && a.id != old {
				if n == 0 {
					first = a.done
				}
				n++
			}
		}
		return n, first
	}

	time.Sleep(200 * time.Millisecond)
	signalled := time.Now()
	require.NoError(t, r.Proc.Signal(sig))
	// Wait for the new leader's answers, and some more of them.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n, first := newAnswers()
		return n > 0 && time.Since(first) > 300*time.Millisecond, nil
	})
	close(stop)
	<-stopped
	require.NoError(t, err, "no answer from a new leader through the ClusterIP after %s to %s", sig, old)

	lease, err := f.Env.Client.CoordinationV1().Leases(f.Namespace).Get(ctx, f.Lease, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, lease.Spec.HolderIdentity)
	require.NotNil(t, lease.Spec.AcquireTime)
	next := *lease.Spec.HolderIdentity
	acquired := lease.Spec.AcquireTime.Time
	nr := f.ByID(next)
	require.NotNil(t, nr, "the Lease's holder %q is a replica", next)
	require.NotEqual(t, old, next)
	require.True(t, acquired.After(signalled), "the Lease was acquired (%v) after the signal (%v)", acquired, signalled)

	row := handoverRow{sig: sig, old: old, next: next, acquired: acquired.Sub(signalled), calls: len(answers),
		errs: map[string]time.Duration{}, errN: map[string]int{}}
	for _, p := range pubs.Snapshot() {
		if p.At.After(signalled) && slices.Equal(p.Addrs, []string{nr.Address()}) {
			row.toSlice = p.At.Sub(signalled)
			break
		}
	}
	var firstNew time.Time
	for _, a := range answers {
		switch {
		case a.err != nil:
			row.failed++
			kind := kpErrKind(a.err)
			row.errN[kind]++
			row.errs[kind] = max(row.errs[kind], a.done.Sub(a.sent))
			assert.True(t, a.done.After(signalled) && firstNew.IsZero(),
				"%s: the call sent %v after the signal failed outside the handover: %v", sig, a.sent.Sub(signalled), a.err)
		case a.id == old:
			row.lastOld = a.done.Sub(signalled)
			assert.True(t, firstNew.IsZero(), "%s: the old leader %s answered after the new leader %s had answered", sig, old, next)
			// Stepping down, the old leader may still answer a call sent
			// just after the new leader's acquire time (it released the
			// Lease, its listener is not closed yet), never long after.
			if a.sent.After(acquired) {
				row.late++
				row.lateBy = a.sent.Sub(acquired)
				assert.Less(t, row.lateBy, time.Second, "%s: the old leader %s answered a call sent %v after %s took the Lease",
					sig, old, row.lateBy, next)
			}
		case a.id == next:
			if firstNew.IsZero() {
				firstNew = a.done
			}
			assert.True(t, a.done.After(acquired), "%s: %s answered before it took the Lease", sig, next)
		default:
			assert.Fail(t, "an answer names no leader", "%s: %q answered a call sent %v after the signal (old %s, new %s)", sig, a.id, a.sent.Sub(signalled), old, next)
		}
	}
	row.gap = firstNew.Sub(signalled)
	// kube-proxy's sync that programmed the new leader: the first, begun
	// after the Lease changed hands, with as many endpoints as before the
	// signal (a SIGTERM's removal sync has one fewer).
	syncs, err := kp.Syncs()
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
			row.syncStart, row.syncDone = s.Start.Sub(signalled), s.Done.Sub(signalled)
			break
		}
	}
	if row.toSlice == 0 {
		row.toSlice = row.acquired // the watch missed it: the Lease's time is the bound
	}

	// The old leader comes back as a standby, as the kubelet would start it.
	if sig == syscall.SIGTERM {
		exited, err := r.Proc.WaitExit(10 * time.Second)
		require.True(t, exited, "the leader did not exit after SIGTERM")
		require.NoError(t, err, "a planned stop exits cleanly")
	}
	r.Proc.Stop(syscall.SIGKILL, 0)
	require.NoError(t, f.Start(r))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, id, err := f.Get(r.Address(), "/")
		return err == nil && code == http.StatusOK && id == old, nil
	}), "%s serves again as a standby", old)
	time.Sleep(shortDurations.Retry)
	return row
}

func (r handoverRow) errSummary() string {
	var parts []string
	for _, k := range []string{"refused", "timeout", "reset", "other"} {
		if r.errN[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s (longest %v)", r.errN[k], k, r.errs[k].Round(time.Millisecond)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; failed calls: " + strings.Join(parts, ", ")
}

// kpErrKind names how a call failed.
func kpErrKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "other"
}

func kpSigName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// kpSpread is "p50 (min-max)" of ds.
func kpSpread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) int64 { return d.Round(time.Millisecond).Milliseconds() }
	return fmt.Sprintf("%d (%d-%d) ms", ms(s[len(s)/2]), ms(s[0]), ms(s[len(s)-1]))
}

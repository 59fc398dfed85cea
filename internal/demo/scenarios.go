package demo

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"

	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/leader"

	"github.com/fastover/fastover/internal/cluster"
)

// timeline records a scenario's events relative to its fault.
type timeline struct {
	t0     time.Time
	events []Event
}

func (tl *timeline) start() time.Time {
	tl.t0 = time.Now()
	return tl.t0
}

// mark records what happened at, once per text.
func (tl *timeline) mark(at time.Time, what string) time.Duration {
	off := at.Sub(tl.t0)
	for _, e := range tl.events {
		if e.What == what {
			return e.At
		}
	}
	tl.events = append(tl.events, Event{At: off, What: what})
	slices.SortStableFunc(tl.events, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return off
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// cache follows objects with informers for the length of a scenario: the
// scenario polls its listers often, at no cost to the API server.
type cache struct {
	factory informers.SharedInformerFactory
	cancel  context.CancelFunc
}

func (d *demo) newCache(ctx context.Context, opts ...informers.SharedInformerOption) (*cache, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &cache{factory: informers.NewSharedInformerFactoryWithOptions(d.client, 0, opts...), cancel: cancel}, ctx
}

// start starts the informers asked for so far and waits for their caches.
func (c *cache) start(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("the cache of %v did not sync", typ)
		}
	}
	return nil
}

func (c *cache) stop() {
	c.cancel()
	c.factory.Shutdown()
}

// podsOfApp lists the pods of the Deployment named app from a lister.
func podsOfApp(l corelisters.PodLister, ns, app string) []corev1.Pod {
	list, err := l.Pods(ns).List(labels.SelectorFromSet(labels.Set{"app": app}))
	if err != nil {
		return nil
	}
	out := make([]corev1.Pod, 0, len(list))
	for _, p := range list {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return out
}

// nodeLoss: the node under both Deployments' pods vanishes. The injected
// pod is evicted as soon as the node is tainted and runs on another node;
// the control group's pod stays bound to the dead node, for 300 s more.
func (d *demo) nodeLoss(ctx context.Context) (res Result) {
	res = Result{Name: "A node is lost", Measured: "the injected pod runs on another node"}
	fail := func(format string, args ...any) Result {
		res.Error = fmt.Sprintf(format, args...)
		return res
	}
	d.out.Printf("\n==> scenario 1/5: a node is lost. %s vanishes (%s) under the pods of %s/%s (injected) and %s/%s (control group)",
		d.lost.name, d.lost.how, injectedNS, appName, controlNS, appName)

	fast, err := d.waitRunning(ctx, injectedNS, appName, "", time.Minute)
	if err != nil {
		return fail("%v", err)
	}
	slow, err := d.waitRunning(ctx, controlNS, appName, "", time.Minute)
	if err != nil {
		return fail("%v", err)
	}
	if fast.Spec.NodeName != d.lost.name || slow.Spec.NodeName != d.lost.name {
		return fail("the scheduler did not place both pods on %s: %s, %s", d.lost.name, podState(fast), podState(slow))
	}
	if s, ok := tolerationSeconds(fast); !ok || s != 0 {
		return fail("%s/%s was not injected: it tolerates %s for %s", injectedNS, fast.Name, corev1.TaintNodeUnreachable, tolerationString(fast))
	}
	slowSecs, ok := tolerationSeconds(slow)
	if !ok {
		return fail("%s/%s tolerates %s for %s, not the API server's default", controlNS, slow.Name, corev1.TaintNodeUnreachable, tolerationString(slow))
	}
	tolerated := time.Duration(slowSecs) * time.Second

	c, cctx := d.newCache(ctx)
	defer c.stop()
	nodeLister := c.factory.Core().V1().Nodes().Lister()
	podLister := c.factory.Core().V1().Pods().Lister()
	if err := c.start(cctx); err != nil {
		return fail("%v", err)
	}

	var tl timeline
	if err := d.lost.lose(); err != nil {
		return fail("%v", err)
	}
	t0 := tl.start()
	tl.mark(t0, d.lost.name+" lost ("+d.lost.short+")")
	d.out.Reset()

	deadline := t0.Add(d.opts.Grace + 45*time.Second)
	var (
		notReady, tainted, replaced time.Time
		newNode                     string
		fastPods, slowPods          []corev1.Pod
	)
	for {
		now := time.Now()
		if now.After(deadline) {
			return fail("the injected pod did not run on another node within grace + 45 s: %s", describePods(podsOfApp(podLister, injectedNS, appName)))
		}
		nodeState := "Ready, silent"
		if n, err := nodeLister.Get(d.lost.name); err == nil {
			if st := cluster.NodeReady(n); st != corev1.ConditionTrue {
				nodeState = "Ready=" + string(st)
				if notReady.IsZero() {
					notReady = now
				}
				tl.mark(now, fmt.Sprintf("%s not ready (Ready=%s)", d.lost.name, st))
			}
			if cluster.HasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
				nodeState += ", tainted unreachable:NoExecute"
				if tainted.IsZero() {
					tainted = now
				}
				tl.mark(now, d.lost.name+" tainted "+corev1.TaintNodeUnreachable+":NoExecute")
			}
		}
		fastPods = podsOfApp(podLister, injectedNS, appName)
		slowPods = podsOfApp(podLister, controlNS, appName)
		for i := range fastPods {
			p := &fastPods[i]
			switch {
			case p.UID == fast.UID && p.DeletionTimestamp != nil:
				tl.mark(now, "injected pod evicted (0 s toleration)")
			case p.UID != fast.UID && p.Spec.NodeName == "":
				tl.mark(now, "replacement pod created")
			case p.UID != fast.UID && p.Spec.NodeName != d.lost.name:
				tl.mark(now, "replacement pod created")
				tl.mark(now, "replacement scheduled on "+p.Spec.NodeName)
			}
		}
		if p := cluster.RunningPod(fastPods, d.lost.name); p != nil {
			replaced, newNode = now, p.Spec.NodeName
			tl.mark(now, "injected pod runs on "+newNode)
			break
		}
		d.out.Status("%s lost %s: %s %s | injected pod: %s | control pod: %s",
			d.lost.name, secs(now.Sub(t0)), d.lost.name, nodeState, briefPods(fastPods), briefPods(slowPods))
		if !sleep(ctx, 20*time.Millisecond) {
			return res
		}
	}
	if tainted.IsZero() {
		return fail("the injected pod ran on %s before %s was tainted: not the node-loss path", newNode, d.lost.name)
	}

	// The control group's pod, a few seconds later: still bound to the
	// dead node, not evicted, not replaced. Its eviction is not waited
	// for.
	for holdUntil := replaced.Add(d.hold()); time.Now().Before(holdUntil); {
		fastPods = podsOfApp(podLister, injectedNS, appName)
		slowPods = podsOfApp(podLister, controlNS, appName)
		d.out.Status("%s lost %s: injected pod: %s | control pod: %s, to be evicted at %s", d.lost.name, secs(time.Since(t0)),
			briefPods(fastPods), briefPods(slowPods), FormatDuration(tainted.Sub(t0)+tolerated))
		if !sleep(ctx, 200*time.Millisecond) {
			return res
		}
	}
	watched := time.Since(t0)
	if len(slowPods) != 1 || slowPods[0].UID != slow.UID || slowPods[0].Spec.NodeName != d.lost.name || slowPods[0].DeletionTimestamp != nil {
		return fail("the control group's pod should still be bound to %s, not evicted, not replaced: %s", d.lost.name, describePods(slowPods))
	}
	res.Fastover = replaced.Sub(t0)
	// Without fastover the same chain, with the API server's default
	// toleration between the taint and the eviction.
	res.Baseline = Baseline{
		From: res.Fastover + tolerated, Upto: res.Fastover + tolerated,
		Why: fmt.Sprintf("grace period %v, then the %ds unreachable toleration the API server gives every pod, then the same replacement", d.opts.Grace, slowSecs),
	}
	res.Events = tl.events
	if !notReady.IsZero() {
		res.Spans = []Span{{From: 0, To: notReady.Sub(t0), What: fmt.Sprintf("grace period (%v after the last heartbeat): %s silent, still Ready", d.opts.Grace, d.lost.name)}}
	}
	res.Passed = true
	res.Notes = []string{
		fmt.Sprintf("%s was tainted %s after it vanished (grace %v, counted from its last heartbeat); the injected pod ran on %s %s after the taint",
			d.lost.name, FormatDuration(tainted.Sub(t0)), d.opts.Grace, newNode, FormatDuration(replaced.Sub(tainted))),
		fmt.Sprintf("control group: %s/%s still bound to %s %s after it vanished: it tolerates the taint for %ds, so it would be evicted at %s and replaced after that (not waited for)",
			controlNS, slow.Name, d.lost.name, FormatDuration(watched), slowSecs, FormatDuration(tainted.Sub(t0)+tolerated)),
	}
	return res
}

// leaderKilled: SIGKILL to the leading replica. A standby takes the Lease
// when it expires and publishes itself as the Service's only endpoint.
func (d *demo) leaderKilled(ctx context.Context) Result {
	res := Result{Name: "The leader is killed", Measured: "a new leader answers through the Service"}
	d.out.Printf("\n==> scenario 2/5: the leader is killed (SIGKILL). A standby must take the Lease when it expires (lease duration %v) and become the Service's endpoint",
		d.opts.LeaseDuration)
	res = d.leaderFailover(ctx, res, syscall.SIGKILL, d.opts.LeaseDuration+d.opts.RetryPeriod+15*time.Second)
	res.Baseline = d.leaseBaseline(res)
	return res
}

// leaseBaseline is client-go's election after a leader that stopped
// renewing: its standbys see the renewals at their polls, one retry period
// apart, and take the Lease at a poll once it has expired by their count:
// up to two retry periods after it expired.
func (d *demo) leaseBaseline(res Result) Baseline {
	expired := d.opts.LeaseDuration
	if len(res.Spans) > 0 {
		expired = res.Spans[0].To
	}
	return Baseline{
		From: expired, Upto: expired + 2*d.opts.RetryPeriod,
		Why: fmt.Sprintf("client-go leaderelection, same durations: standbys poll every %v, so the Lease is taken up to 2 polls after it expired (%s here; docs/benchmarks.md: p50 17.03 s against fastover's 14.9 s at 15s/10s/2s); behind a selector Service, add a readiness probe",
			d.opts.RetryPeriod, FormatDuration(expired)),
	}
}

// releaseBaseline is client-go's election after a leader that released
// its Lease: its standbys see it at their next poll.
func (d *demo) releaseBaseline() Baseline {
	return Baseline{
		Upto: d.opts.RetryPeriod,
		Why: fmt.Sprintf("client-go leaderelection with ReleaseOnCancel: standbys poll the released Lease every %v (without it, the lease duration)",
			d.opts.RetryPeriod),
	}
}

// heldWait is how long, past the lease, a frozen leader's scenario waits
// for every client: client-go's HTTP/2 health check (30 s without a frame,
// then a 15 s ping) ends a connection held to it, then a reflector's
// back-off and kube-proxy's sync.
const heldWait = 60 * time.Second

// leaderFrozen: SIGSTOP to the leading replica, a long GC pause, a
// throttled container, a paused VM. Its Lease runs out and a standby takes
// it, as after a kill; but the frozen leader's connections stay open, and
// a client that holds one waits until its own health check gives up.
func (d *demo) leaderFrozen(ctx context.Context) Result {
	res := Result{Name: "The leader freezes", Measured: "a new leader answers through the Service"}
	d.out.Printf("\n==> scenario 4/5: the leader freezes (SIGSTOP: a long GC pause, a throttled container, a paused VM). A standby must take the Lease when it expires (%v); clients that hold a connection to the frozen leader wait for it to fail",
		d.opts.LeaseDuration)
	res = d.leaderFailover(ctx, res, syscall.SIGSTOP, d.opts.LeaseDuration+d.opts.RetryPeriod+heldWait)
	res.Baseline = d.leaseBaseline(res)
	if len(res.Clients) > 0 {
		res.Notes = append(res.Notes,
			"held connections: the frozen leader's TCP connections stay open, and kube-proxy's conntrack keeps one opened through the ClusterIP DNATed to it whatever the EndpointSlice says; "+
				"the informer's client-go transport gives up on it after its HTTP/2 health check, 30 s without a frame, then a 15 s ping; "+
				"its reflector then lists again after its back-off (800 ms, doubled after each failure up to 30 s, reset after 2 min without one)",
			"the clients that call: the kube-proxy lane opens a connection per call, the kube-apiserver lane's LISTs give up after 500 ms and kube-apiserver sends the next ones to the new endpoint; "+
				"a watch through kube-apiserver (kubectl get -w) or a request without a timeout waits for kube-apiserver's own health check of its connection to the frozen leader, the same 45 s "+
				"(its HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS; docs/network.md)",
			"leader/follow: it saw the new term in the Service's EndpointSlice, closed the connection it had dialed to the frozen leader, and dialed the new one")
	}
	return res
}

// leaderTerminated: SIGTERM to the leading replica, as a rolling update
// does. It stops its work and releases the Lease, leaving its endpoint to
// its successor; a standby takes over at once.
func (d *demo) leaderTerminated(ctx context.Context) Result {
	res := Result{Name: "The leader gets SIGTERM", Measured: "a new leader answers through the Service"}
	d.out.Printf("\n==> scenario 3/5: the leader gets SIGTERM, as in a rolling update. It must hand over at once")
	res.Baseline = d.releaseBaseline()
	return d.leaderFailover(ctx, res, syscall.SIGTERM, 10*time.Second)
}

// leaderFailover signals the leader and measures until a GET through the
// Service answers from another replica; the killed replica then starts
// again as a standby, as the kubelet would restart it.
func (d *demo) leaderFailover(ctx context.Context, res Result, sig syscall.Signal, timeout time.Duration) Result {
	f := d.ha
	fail := func(format string, args ...any) Result {
		res.Error = fmt.Sprintf(format, args...)
		return res
	}
	old, err := f.WaitServing(ctx, "", time.Minute)
	if err != nil {
		return fail("%v", err)
	}
	r := f.ByID(old)
	if d.kp != nil && d.vip.IsValid() {
		if waited, found, left := d.awaitStaleFlows(ctx, r.Address()); found > 0 {
			why := "a reset one stays 10 s, and a new connection from its source port would follow it; kube-proxy removes the stale flows of UDP Services only (kubernetes/kubernetes#101607)"
			if left > 0 {
				res.Notes = append(res.Notes, fmt.Sprintf("%d conntrack flows of the ClusterIP from the previous handover still led to other replicas than %s after %s (%s)", left, old, FormatDuration(waited), why))
			} else {
				res.Notes = append(res.Notes, fmt.Sprintf("before the %s: waited %s for %d conntrack flows of the ClusterIP from the previous handover, which led to other replicas than %s, to expire (%s)", signalName(sig), FormatDuration(waited), found, old, why))
			}
		}
	}
	// The watches end with the scenario.
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	leases, err := watchLease(wctx, d.client, f.Namespace, f.Lease)
	if err != nil {
		return fail("watch the Lease: %v", err)
	}
	published, err := f.Watch(wctx)
	if err != nil {
		return fail("watch the EndpointSlices: %v", err)
	}
	// The real clients call from before the signal until after the new
	// leader answers them.
	recs := d.recordClients(wctx, old)
	var tl timeline
	_, expires := leases.state()
	if err := r.Proc.Signal(sig); err != nil {
		for _, rec := range recs {
			rec.finish()
		}
		return fail("signal %s: %v", old, err)
	}
	t0 := tl.start()
	switch sig {
	case syscall.SIGKILL:
		res.Spans = []Span{{From: 0, To: expires.Sub(t0), What: "the dead leader's Lease runs out"}}
	case syscall.SIGSTOP:
		res.Spans = []Span{{From: 0, To: expires.Sub(t0), What: "the frozen leader's Lease runs out"}}
	}
	tl.mark(t0, fmt.Sprintf("%s to the leader, %s", signalName(sig), old))
	d.out.Reset()

	var answered time.Time
	var got string
	defer func() {
		for _, rec := range recs {
			rec.finish()
		}
	}()
	for answered.IsZero() {
		now := time.Now()
		if now.Sub(t0) > timeout {
			return fail("no other replica answered through the Service within %v of the %s", timeout, signalName(sig))
		}
		id, callErr := f.Call(ctx)
		if callErr == nil && id != old {
			answered, got = time.Now(), id
			break
		}
		holder, expires := leases.state()
		lease := "released"
		if holder != "" {
			lease = "held by " + holder
			if holder == old {
				lease += ", expires in " + secs(time.Until(expires))
			}
		}
		answer := "answers " + id
		if callErr != nil {
			answer = "does not answer: " + shortErr(callErr)
		}
		d.out.Status("%s %s %s: Lease %s | Service → %s", old, pastTense(sig), secs(now.Sub(t0)), lease, answer)
		if !sleep(ctx, 10*time.Millisecond) {
			return res
		}
	}
	tl.mark(answered, got+" answers GET / through the Service")
	for _, ch := range leases.since(t0) {
		if ch.Holder == "" {
			tl.mark(ch.At, old+" releases the Lease")
		} else {
			tl.mark(ch.At, ch.Holder+" takes the Lease")
		}
	}
	newAddr := f.ByID(got).Address()
	var sliceAt time.Time
	withdrawn := false
	for _, p := range published.Snapshot() {
		if !p.At.After(t0) {
			continue
		}
		switch {
		case len(p.Addrs) == 0:
			withdrawn = true
			tl.mark(p.At, old+" withdraws its endpoint")
		case slices.Equal(p.Addrs, []string{newAddr}):
			tl.mark(p.At, fmt.Sprintf("EndpointSlice → %s (%s)", newAddr, got))
			if sliceAt.IsZero() {
				sliceAt = p.At
			}
		}
	}
	res.Clients = d.finishClients(ctx, recs, &tl, t0.Add(timeout), old, got, sliceAt)
	res.Fastover = answered.Sub(t0)
	res.Events = tl.events
	sl, err := f.Slices(ctx)
	if err != nil {
		return fail("%v", err)
	}
	if addrs := fleet.PublishedAddresses(sl); !slices.Equal(addrs, []string{newAddr}) {
		return fail("the Service publishes %v, want only %s's %s", addrs, got, newAddr)
	}
	switch sig {
	case syscall.SIGTERM:
		exited, exitErr := r.Proc.WaitExit(d.opts.LeaseDuration + 5*time.Second)
		if !exited || exitErr != nil {
			return fail("%s did not exit cleanly after SIGTERM (exited %t: %v)", old, exited, exitErr)
		}
		if withdrawn {
			res.Notes = append(res.Notes, old+" stopped its work, withdrew its endpoint, released the Lease and exited 0")
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("%s stopped its work, released the Lease, left its endpoint to %s, which replaced it with its own (the Service was never without an endpoint), and exited 0", old, got))
		}
	default:
		holder, _ := leases.state()
		res.Notes = append(res.Notes, fmt.Sprintf("%s took the Lease when it expired; the Service's one endpoint is %s, and %s answers", holder, newAddr, got))
	}
	if sig == syscall.SIGSTOP {
		// It wakes up, finds its Lease taken, and exits to be restarted.
		if err := r.Proc.Signal(syscall.SIGCONT); err != nil {
			return fail("SIGCONT %s: %v", old, err)
		}
		exited, exitErr := r.Proc.WaitExit(d.opts.LeaseDuration + 5*time.Second)
		if !exited {
			return fail("%s did not exit after it woke up without its Lease", old)
		}
		res.Notes = append(res.Notes, fmt.Sprintf("%s woke up (SIGCONT), found its Lease taken and exited (%v), to be restarted", old, exitErr))
	}
	// Back as a standby, as the kubelet would restart it.
	r.Proc.Stop(syscall.SIGKILL, 0)
	if err := f.Start(r); err != nil {
		return fail("restart %s: %v", old, err)
	}
	res.Notes = append(res.Notes, old+" restarted as a standby")
	res.Passed = true
	return res
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGSTOP:
		return "SIGSTOP"
	}
	return sig.String()
}

func pastTense(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "killed"
	case syscall.SIGSTOP:
		return "frozen"
	}
	return "got SIGTERM"
}

// shortErr is an error for a status line: its last part.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// migration: a Service with a selector, whose endpoints the endpointslice
// and endpoints controllers keep, moves to fastover: the replicas start
// with --remove-selector, and the leader removes the selector and every
// stale endpoint. A second Service, the control group, loses its selector
// by hand: its stale endpoints stay.
func (d *demo) migration(ctx context.Context) Result {
	res := Result{Name: "A Service migrated from selector mode", Measured: "only the leader's endpoint remains"}
	c := d.client
	fail := func(format string, args ...any) Result {
		res.Error = fmt.Sprintf(format, args...)
		return res
	}
	d.out.Printf("\n==> scenario 5/5: a Service migrated from selector mode. %s/%s and %s/%s select the 3 pods of Deployment %s; fastover-example takes %s over with --remove-selector, %s loses its selector by hand (the control group)",
		migrateNS, haService, migrateNS, controlSvc, oldApp, haService, controlSvc)
	// The example's replicas are done: the migrated ones replace them.
	d.stopClients()
	if d.ha != nil {
		stopFleet(d.ha)
	}
	if d.real != nil {
		d.stopRealExample(ctx)
	}

	f, err := d.newFleet(ctx, migrateNS, haService, "migrated", "--remove-selector")
	if err != nil {
		return fail("%v", err)
	}
	sel := map[string]string{"app": oldApp}
	if err := f.CreateService(ctx, sel); err != nil {
		return fail("%v", err)
	}
	ctl := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: controlSvc},
		Spec: corev1.ServiceSpec{
			Selector: sel,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(f.Port))}},
		},
	}
	if _, err := c.CoreV1().Services(migrateNS).Create(ctx, ctl, metav1.CreateOptions{}); err != nil {
		return fail("%v", err)
	}
	if _, err := c.AppsV1().Deployments(migrateNS).Create(ctx, appDeployment(oldApp, 3, "", d.pauseImage()), metav1.CreateOptions{}); err != nil {
		return fail("%v", err)
	}

	cc, cctx := d.newCache(ctx, informers.WithNamespace(migrateNS))
	defer cc.stop()
	ls := endpointListers{
		services:  cc.factory.Core().V1().Services().Lister().Services(migrateNS),
		slices:    cc.factory.Discovery().V1().EndpointSlices().Lister().EndpointSlices(migrateNS),
		endpoints: cc.factory.Core().V1().Endpoints().Lister().Endpoints(migrateNS),
	}
	if err := cc.start(cctx); err != nil {
		return fail("%v", err)
	}

	// Both Services as kube-controller-manager keeps them: the 3 pods in
	// EndpointSlices and in an Endpoints object.
	d.out.Reset()
	var before serviceEndpoints
	for start := time.Now(); ; {
		before = ls.of(haService)
		ctlBefore := ls.of(controlSvc)
		if len(before.addrs) == 3 && before.endpoints && len(ctlBefore.addrs) == 3 && ctlBefore.endpoints {
			break
		}
		if time.Since(start) > time.Minute {
			return fail("kube-controller-manager did not publish the 3 pods of %s: %s; %s", oldApp, before, ctlBefore)
		}
		d.out.Status("waiting for the endpointslice and endpoints controllers: %s: %s", haService, before)
		if !sleep(ctx, 50*time.Millisecond) {
			return res
		}
	}
	d.out.Printf("    before: each Service has %s", before)

	leases, err := watchLease(cctx, c, migrateNS, f.Lease)
	if err != nil {
		return fail("watch the Lease: %v", err)
	}
	var tl timeline
	if err := f.Add(3); err != nil {
		return fail("%v", err)
	}
	t0 := tl.start()
	tl.mark(t0, "3 replicas start with --remove-selector")
	patch := []byte(`[{"op":"remove","path":"/spec/selector"}]`)
	if _, err := c.CoreV1().Services(migrateNS).Patch(ctx, controlSvc, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fail("remove the selector of %s: %v", controlSvc, err)
	}
	d.out.Reset()

	var (
		clean    time.Time
		id       string
		cur      serviceEndpoints
		ctlNow   serviceEndpoints
		relapses int
	)
	// Clean means clean for good: the mirroring controller may turn the
	// old Endpoints object into a slice a moment after the leader's first
	// clean state (it reacts to the selector's removal within
	// milliseconds); the leader deletes it again. The time reported is
	// the start of the state that then holds.
settle:
	for {
		for {
			now := time.Now()
			if now.Sub(t0) > d.opts.LeaseDuration+30*time.Second {
				return fail("the migrated Service still has %s after %s", cur, FormatDuration(now.Sub(t0)))
			}
			cur = ls.of(haService)
			if !cur.selector {
				tl.mark(now, "the leader removes the selector")
			}
			if cur.leader != "" {
				tl.mark(now, cur.leader+" publishes its EndpointSlice")
			}
			if cur.endpoints && cur.epLeader != "" && cur.epAddrs == 1 {
				tl.mark(now, cur.leader+" takes the Endpoints object over")
			}
			if cur.leader != "" && len(cur.stale) == 0 {
				tl.mark(now, "stale EndpointSlices deleted")
			}
			if cur.clean() {
				if got, err := f.Call(ctx); err == nil && got == cur.leader {
					clean, id = time.Now(), got
					break
				}
			}
			d.out.Status("replicas started %s ago | %s: %s", secs(now.Sub(t0)), haService, cur)
			if !sleep(ctx, 5*time.Millisecond) {
				return res
			}
		}
		// It stays so, while the control Service keeps its stale
		// endpoints.
		for holdUntil := clean.Add(d.hold() + d.opts.RetryPeriod); time.Now().Before(holdUntil); {
			cur = ls.of(haService)
			if !cur.clean() {
				relapses++
				tl.mark(time.Now(), "old endpoints back for a moment")
				if relapses > 3 {
					return fail("the migrated Service does not stay clean: %s", cur)
				}
				continue settle
			}
			ctlNow = ls.of(controlSvc)
			d.out.Status("%s later | %s: %s | %s: %s", secs(time.Since(clean)), haService, cur, controlSvc, ctlNow)
			if !sleep(ctx, 100*time.Millisecond) {
				return res
			}
		}
		break
	}
	tl.mark(clean, id+" answers GET / through the Service")
	for _, ch := range leases.since(t0) {
		if ch.Holder != "" {
			tl.mark(ch.At, ch.Holder+" takes the Lease")
		}
	}
	res.Fastover = clean.Sub(t0)
	res.Events = tl.events

	watched := time.Since(t0)
	res.Baseline = Baseline{Never: true, Upto: watched,
		Why: fmt.Sprintf("the endpointslice and endpoints controllers leave a Service's endpoints when its selector goes: stale until deleted by hand (%s: still there after %s)",
			controlSvc, FormatDuration(watched))}
	res.Passed = true
	res.Notes = []string{
		fmt.Sprintf("%s: no selector, one EndpointSlice and an Endpoints object (for the Endpoints API's readers), both %s's (%s)", haService, id, f.ByID(id).Address()),
		fmt.Sprintf("control group: %s, its selector removed by hand %s ago: %s", controlSvc, FormatDuration(watched), ctlNow),
	}
	if ctlNow.selector || len(ctlNow.addrs) == 0 {
		res.Notes = append(res.Notes, "(the control Service did not keep its stale endpoints: this Kubernetes behaves unlike the baseline)")
	}
	return res
}

// endpointListers read a namespace's Services, EndpointSlices and
// Endpoints from a cache.
type endpointListers struct {
	services  corelisters.ServiceNamespaceLister
	slices    discoverylisters.EndpointSliceNamespaceLister
	endpoints corelisters.EndpointsNamespaceLister
}

// serviceEndpoints is what a Service's endpoints look like.
type serviceEndpoints struct {
	selector  bool
	addrs     []string       // every ready address of its slices
	leader    string         // the identity in the leader's slice, if any
	stale     map[string]int // slices not the leader's: manager → addresses
	endpoints bool           // an Endpoints object exists
	// epLeader and epAddrs: the identity the Endpoints object names (the
	// leader library keeps one for the Endpoints API's readers) and how
	// many addresses it holds.
	epLeader string
	epAddrs  int
}

func (l endpointListers) of(svc string) serviceEndpoints {
	out := serviceEndpoints{stale: map[string]int{}}
	if s, err := l.services.Get(svc); err == nil {
		out.selector = len(s.Spec.Selector) > 0
	}
	list, _ := l.slices.List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc}))
	for _, s := range list {
		addrs := fleet.PublishedAddresses([]discoveryv1.EndpointSlice{*s})
		out.addrs = append(out.addrs, addrs...)
		if s.Labels[discoveryv1.LabelManagedBy] == leader.ManagedBy {
			out.leader = s.Annotations[leader.AnnotationIdentity]
		} else {
			out.stale[s.Labels[discoveryv1.LabelManagedBy]] += len(addrs)
		}
	}
	if ep, err := l.endpoints.Get(svc); err == nil {
		out.endpoints = true
		out.epLeader = ep.Annotations[leader.AnnotationIdentity]
		for _, ss := range ep.Subsets {
			out.epAddrs += len(ss.Addresses)
		}
	}
	return out
}

func (s serviceEndpoints) clean() bool {
	return !s.selector && s.leader != "" && len(s.stale) == 0 && len(s.addrs) == 1 &&
		(!s.endpoints || s.epLeader == s.leader && s.epAddrs == 1)
}

func (s serviceEndpoints) String() string {
	var parts []string
	if s.selector {
		parts = append(parts, "a selector")
	} else {
		parts = append(parts, "no selector")
	}
	if s.leader != "" {
		parts = append(parts, "the leader's EndpointSlice ("+s.leader+")")
	}
	managers := make([]string, 0, len(s.stale))
	for m := range s.stale {
		managers = append(managers, m)
	}
	slices.Sort(managers)
	for _, m := range managers {
		parts = append(parts, fmt.Sprintf("an EndpointSlice of %s with %d pod address(es)", strings.TrimSuffix(m, ".k8s.io"), s.stale[m]))
	}
	switch {
	case s.endpoints && s.epLeader != "":
		parts = append(parts, fmt.Sprintf("the leader's Endpoints object (%s, %d address(es))", s.epLeader, s.epAddrs))
	case s.endpoints:
		parts = append(parts, "an Endpoints object")
	}
	return strings.Join(parts, ", ")
}

package demo

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/toleration"
)

// The example on real nodes: charts/fastover-example installed by helm,
// three replicas in pods, and a client in a pod that calls its ClusterIP
// as an agent calls its controller.

// exampleSelector selects the example chart's pods.
const exampleSelector = "app.kubernetes.io/name=fastover-example"

// podClientEvery is how often the client in a pod calls; podClientTimeout
// how long a call may take.
const (
	podClientEvery   = 20 * time.Millisecond
	podClientTimeout = time.Second
)

// installExample installs charts/fastover-example (ha: true) into its
// labelled namespace, with the run's leader election, and starts the
// client that calls its Service.
func (d *demo) installExample(ctx context.Context) error {
	o := d.opts
	done := d.step("helm install %s charts/fastover-example --namespace %s --wait: 3 replicas on the leader library (%v), in a namespace labelled %s=%s",
		exampleRelease, haNS, d.durations(), toleration.NamespaceLabel, toleration.NamespaceLabelValue)
	labels := map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}
	for k, v := range restrictedLabels {
		labels[k] = v
	}
	if err := d.env.CreateNamespace(ctx, haNS, labels); err != nil {
		return err
	}
	if err := d.helm(ctx, "install", exampleRelease, filepath.Join(o.ChartsDir, "fastover-example"), "--namespace", haNS, "--wait", "--timeout", "3m",
		"--set", "election.leaseDuration="+o.LeaseDuration.String(),
		"--set", "election.renewDeadline="+o.RenewDeadline.String(),
		"--set", "election.retryPeriod="+o.RetryPeriod.String()); err != nil {
		return err
	}
	leader, err := d.waitPublished(ctx, "", time.Minute)
	if err != nil {
		return err
	}
	pods, err := d.examplePods(ctx)
	if err != nil {
		return err
	}
	var on []string
	for _, p := range pods {
		on = append(on, p.Spec.NodeName)
	}
	slices.Sort(on)
	done("%d replicas on %s; %s leads, the Service's one endpoint is its pod IP %s", len(pods), strings.Join(on, ", "), leader.id, leader.pod.Status.PodIP)
	if len(slices.Compact(slices.Clone(on))) < len(on) {
		d.keepLogs = true
		d.out.Printf("    note: the scheduler put two replicas on one node (the chart's anti-affinity is a preference): it found a node not feasible (its log, --v=2: each binding with evaluatedNodes and feasibleNodes: %s, kept)",
			filepath.Join(d.envDir, "logs", string(cluster.Scheduler)+".log"))
	}

	svc, err := d.client.CoreV1().Services(haNS).Get(ctx, exampleRelease, metav1.GetOptions{})
	if err != nil {
		return err
	}
	port := int32(8080)
	if len(svc.Spec.Ports) > 0 {
		port = svc.Spec.Ports[0].Port
	}
	d.real.url = "http://" + net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(port)) + "/"
	node := ""
	for _, n := range realNodeNames[1:] {
		if n != leader.pod.Spec.NodeName {
			node = n
			break
		}
	}
	done = d.step("a client in a pod on %s: `testhost get` calls %s every %v on connections it keeps (Go's default transport, a %v timeout), through its node's kube-proxy",
		node, d.real.url, podClientEvery, podClientTimeout)
	if err := d.env.CreateNamespace(ctx, clientNS, nil); err != nil {
		return err
	}
	c, err := d.startPodClient(ctx, clientNS, clientPod, node, d.real.url)
	if err != nil {
		return err
	}
	d.real.client = c
	if _, err := c.waitAnswer(ctx, time.Now(), func(id string) bool { return id == leader.id }, time.Minute); err != nil {
		return err
	}
	d.sum.RealClients = append(d.sum.RealClients, fmt.Sprintf("%s: testhost in a pod on %s, GET %s every %v, Go's default transport (keep-alive), %v timeout",
		podClientLane, node, d.real.url, podClientEvery, podClientTimeout))
	done("%s answers", leader.id)
	return nil
}

// podClientLane names the client in a pod's lane.
const podClientLane = "in a pod, through kube-proxy"

// examplePods are the example's pods that are not terminating.
func (d *demo) examplePods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := d.client.CoreV1().Pods(haNS).List(ctx, metav1.ListOptions{LabelSelector: exampleSelector})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// waitPublished waits until the Lease's holder is a running example pod
// (not the pod named not) whose pod IP is the only endpoint of the
// Service, and returns it.
func (d *demo) waitPublished(ctx context.Context, not string, timeout time.Duration) (podIdentity, error) {
	p, err := cluster.WaitPublished(ctx, d.client, haNS, exampleRelease, exampleRelease, not, timeout)
	return podIdentity{pod: &p.Pod, id: p.Identity}, err
}

// waitReplicas waits until the example runs n Ready replicas again.
func (d *demo) waitReplicas(ctx context.Context, n int, timeout time.Duration) error {
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = d.examplePods(ctx); err != nil {
			return false, nil
		}
		ready := 0
		for i := range pods {
			if cluster.PodReady(&pods[i]) {
				ready++
			}
		}
		return ready == n && len(pods) == n, nil
	})
	if err != nil {
		return fmt.Errorf("the example does not run %d Ready replicas after %v: %s", n, timeout, describePods(pods))
	}
	return nil
}

// stopRealExample uninstalls the example and its client, before the
// scenarios that do not need them.
func (d *demo) stopRealExample(ctx context.Context) {
	if d.real.client != nil {
		_ = d.client.CoreV1().Pods(clientNS).Delete(ctx, clientPod, metav1.DeleteOptions{})
		d.real.client = nil
	}
	_ = d.helm(ctx, "uninstall", exampleRelease, "--namespace", haNS)
}

// podFault is what a leader scenario does to the leader's pod on a real
// node.
type podFault int

const (
	// podKilled: SIGKILL to its container's process, from the node (a
	// crash, an OOM kill); the kubelet restarts the container.
	podKilled podFault = iota
	// podDeleted: the pod deleted, as a rolling update does; the kubelet
	// sends SIGTERM, and the Deployment replaces the pod.
	podDeleted
	// podFrozen: SIGSTOP to its container's process, SIGCONT once a new
	// leader answers; it finds its Lease taken, exits, and the kubelet
	// restarts the container.
	podFrozen
)

func (f podFault) String() string {
	switch f {
	case podKilled:
		return "SIGKILL"
	case podDeleted:
		return "pod deleted (SIGTERM)"
	}
	return "SIGSTOP"
}

func (d *demo) realLeaderKilled(ctx context.Context) Result {
	res := Result{Name: "The leader is killed", Measured: "a new leader answers through the Service"}
	d.out.Printf("\n==> scenario 2/5: the leader is killed (SIGKILL to its container's process, from its node: a crash, an OOM kill). A standby in another pod must take the Lease as soon as the kubelet reports the container ended (crash takeover), not when it expires (lease duration %v), and become the Service's endpoint",
		d.opts.LeaseDuration)
	res = d.podFailover(ctx, res, podKilled, d.opts.LeaseDuration+d.opts.RetryPeriod+15*time.Second)
	res.Baseline = d.leaseBaseline(res)
	return res
}

func (d *demo) realLeaderTerminated(ctx context.Context) Result {
	res := Result{Name: "The leader gets SIGTERM", Measured: "a new leader answers through the Service"}
	d.out.Printf("\n==> scenario 3/5: the leader's pod is deleted, as in a rolling update: the kubelet sends SIGTERM. It must hand over at once")
	res.Baseline = d.releaseBaseline()
	return d.podFailover(ctx, res, podDeleted, 10*time.Second)
}

func (d *demo) realLeaderFrozen(ctx context.Context) Result {
	res := Result{Name: "The leader freezes", Measured: "a new leader answers through the Service"}
	d.out.Printf("\n==> scenario 4/5: the leader freezes (SIGSTOP to its container's process: a long GC pause, a throttled container). A standby must take the Lease when it expires (%v); the client's calls to the frozen leader time out (%v)",
		d.opts.LeaseDuration, podClientTimeout)
	res = d.podFailover(ctx, res, podFrozen, d.opts.LeaseDuration+d.opts.RetryPeriod+15*time.Second)
	res.Baseline = d.leaseBaseline(res)
	return res
}

// podFailover plays fault on the leader's pod and measures until the
// client in a pod gets an answer from another replica; then it waits
// until the example runs three Ready replicas again.
func (d *demo) podFailover(ctx context.Context, res Result, fault podFault, timeout time.Duration) Result {
	fail := func(format string, args ...any) Result {
		res.Error = fmt.Sprintf(format, args...)
		return res
	}
	old, err := d.waitPublished(ctx, "", time.Minute)
	if err != nil {
		return fail("%v", err)
	}
	c := d.real.client
	if _, err := c.waitAnswer(ctx, time.Now(), func(id string) bool { return id == old.id }, 30*time.Second); err != nil {
		return fail("%v", err)
	}
	container, restarts, err := exampleContainer(old.pod)
	if err != nil {
		return fail("%v", err)
	}
	node := d.real.nodes[old.pod.Spec.NodeName]
	if node == nil {
		return fail("the leader %s runs on %s, not a real node of the demo", old.pod.Name, old.pod.Spec.NodeName)
	}
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	leases, err := watchLease(wctx, d.client, haNS, exampleRelease)
	if err != nil {
		return fail("watch the Lease: %v", err)
	}
	_, expires := leases.state()

	var tl timeline
	before := time.Now().Add(-time.Second)
	switch fault {
	case podKilled:
		err = node.SignalContainer(ctx, container, syscall.SIGKILL)
	case podFrozen:
		err = node.SignalContainer(ctx, container, syscall.SIGSTOP)
	case podDeleted:
		err = d.client.CoreV1().Pods(haNS).Delete(ctx, old.pod.Name, metav1.DeleteOptions{})
	}
	t0 := tl.start()
	if err != nil {
		return fail("%s to %s: %v", fault, old.pod.Name, err)
	}
	switch fault {
	case podKilled:
		res.Spans = []Span{{From: 0, To: expires.Sub(t0), What: "the dead leader's Lease, which a lease-only election waits out"}}
		tl.mark(t0, fmt.Sprintf("SIGKILL to the leader %s on %s", old.pod.Name, node.Name))
	case podFrozen:
		res.Spans = []Span{{From: 0, To: expires.Sub(t0), What: "the frozen leader's Lease runs out"}}
		tl.mark(t0, fmt.Sprintf("SIGSTOP to the leader %s on %s", old.pod.Name, node.Name))
	case podDeleted:
		tl.mark(t0, fmt.Sprintf("the leader's pod %s deleted", old.pod.Name))
	}
	d.out.Reset()

	var first cluster.TestHostCall
	crashSeen := time.Time{}
	for {
		now := time.Now()
		if now.Sub(t0) > timeout {
			return fail("no other replica answered the client within %v of the %s", timeout, fault)
		}
		calls, err := c.calls(ctx, t0)
		if err == nil {
			if i := slices.IndexFunc(calls, func(cl cluster.TestHostCall) bool { return cl.OK() && cl.Answer != old.id }); i >= 0 {
				first = calls[i]
				break
			}
		}
		if fault == podKilled && crashSeen.IsZero() {
			if p, err := d.client.CoreV1().Pods(haNS).Get(ctx, old.pod.Name, metav1.GetOptions{}); err == nil {
				if _, n, err := exampleContainer(p); err == nil && n > restarts {
					crashSeen = time.Now()
					tl.mark(crashSeen, fmt.Sprintf("the kubelet reports %s's container ended and restarts it (restart %d)", old.pod.Name, n))
				}
			}
		}
		holder, exp := leases.state()
		lease := "released"
		if holder != "" {
			lease = "held by " + holder
			if holder == old.id {
				lease += ", expires in " + secs(time.Until(exp))
			}
		}
		answer := "no call yet"
		if n := len(calls); n > 0 {
			l := calls[n-1]
			answer = "answers " + l.Answer
			if !l.OK() {
				answer = "fails: " + truncate(l.Answer, 60)
			}
		}
		d.out.Status("%s %s %s: Lease %s | client → %s", old.pod.Name, fault, secs(now.Sub(t0)), lease, answer)
		if !sleep(ctx, 250*time.Millisecond) {
			return res
		}
	}
	next := first.Answer
	answered := first.Done()
	tl.mark(answered, next+" answers the client through the ClusterIP")
	for _, ch := range leases.since(t0) {
		switch {
		case ch.Holder == "":
			tl.mark(ch.At, old.id+" releases the Lease")
		case fault == podKilled && ch.At.Before(expires):
			tl.mark(ch.At, ch.Holder+" takes the Lease: the kubelet reported the leader's container ended (crash takeover)")
			res.Notes = append(res.Notes, fmt.Sprintf("crash takeover: %s took the Lease %s after the kill, %s before it would have expired, once the kubelet reported the container ended",
				ch.Holder, FormatDuration(ch.At.Sub(t0)), FormatDuration(expires.Sub(ch.At))))
		default:
			tl.mark(ch.At, ch.Holder+" takes the Lease")
		}
	}
	res.Fastover = answered.Sub(t0)

	if fault == podFrozen {
		if err := node.SignalContainer(ctx, container, syscall.SIGCONT); err != nil {
			return fail("SIGCONT to %s: %v", old.pod.Name, err)
		}
		tl.mark(time.Now(), old.pod.Name+" thawed (SIGCONT)")
	}
	// A few more calls (a hundred): the new leader goes on answering,
	// the old one never again.
	if !sleep(ctx, 2*time.Second) {
		return res
	}
	calls, err := c.calls(ctx, before)
	if err != nil {
		return fail("the client's log: %v", err)
	}
	end := time.Now()
	res.Clients = []ClientLane{lane(&realClient{name: podClientLane, via: d.real.url}, hostCalls(calls), t0, end, old.id, next)}

	// The cluster heals as it would: the kubelet restarts the ended
	// container, the Deployment replaces the deleted pod.
	switch fault {
	case podKilled, podFrozen:
		p, err := d.waitRestarted(ctx, old.pod.Name, restarts, time.Minute)
		if err != nil {
			return fail("%v", err)
		}
		_, n, _ := exampleContainer(p)
		if fault == podKilled {
			res.Notes = append(res.Notes, fmt.Sprintf("the kubelet restarted %s's container (restarts %d → %d); it joined as a standby", old.pod.Name, restarts, n))
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("%s woke up, found its Lease taken and exited; the kubelet restarted its container (restarts %d → %d), a standby now", old.pod.Name, restarts, n))
		}
	case podDeleted:
		res.Notes = append(res.Notes, old.pod.Name+" stopped its work, released the Lease and exited; the Deployment made a new pod, a standby")
	}
	if err := d.waitReplicas(ctx, 3, 2*time.Minute); err != nil {
		return fail("%v", err)
	}
	holder, _ := leases.state()
	res.Notes = append(res.Notes, fmt.Sprintf("%s holds the Lease; the Service's one endpoint is its pod's IP", holder))
	res.Events = tl.events
	res.Passed = true
	return res
}

// exampleContainer is the example's container of pod p: its ID and
// restart count.
func exampleContainer(p *corev1.Pod) (id string, restarts int32, err error) {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.ContainerID != "" {
			return cs.ContainerID, cs.RestartCount, nil
		}
	}
	return "", 0, fmt.Errorf("pod %s reports no running container", p.Name)
}

// waitRestarted waits until the pod's container was restarted (more
// restarts than restarts) and is Ready again.
func (d *demo) waitRestarted(ctx context.Context, name string, restarts int32, timeout time.Duration) (*corev1.Pod, error) {
	var p *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if p, err = d.client.CoreV1().Pods(haNS).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		_, n, err := exampleContainer(p)
		return err == nil && n > restarts && cluster.PodReady(p), nil
	})
	if err != nil {
		state := "gone"
		if p != nil {
			state = describePods([]corev1.Pod{*p})
		}
		return nil, fmt.Errorf("the kubelet did not restart %s's container within %v: %s", name, timeout, state)
	}
	return p, nil
}

// hostCalls turns the client's calls into a lane's.
func hostCalls(in []cluster.TestHostCall) []call {
	out := make([]call, 0, len(in))
	for _, c := range in {
		cl := call{sent: c.Sent, done: c.Done(), id: c.Answer}
		switch {
		case c.Status == 0:
			cl.err = fmt.Errorf("%s", c.Answer)
		case !c.OK():
			cl.err = statusError(c.Status)
		}
		out = append(out, cl)
	}
	return out
}

// podClient is `testhost get` in a pod of a real node, calling a URL on
// connections it keeps; its log is read through the API server.
type podClient struct {
	d        *demo
	ns, name string
}

// startPodClient starts the client's pod on node and waits until it runs.
func (d *demo) startPodClient(ctx context.Context, ns, name, node, url string) (*podClient, error) {
	env := d.env
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "client", Image: cluster.TestHostImage,
				Command: []string{"testhost", "get", "-every=" + podClientEvery.String(), "-timeout=" + podClientTimeout.String(), url},
			}},
		},
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var p *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		state := "not created"
		if p != nil {
			state = describePods([]corev1.Pod{*p})
		}
		return nil, fmt.Errorf("the client pod %s/%s does not run on %s: %s", ns, name, node, state)
	}
	return &podClient{d: d, ns: ns, name: name}, nil
}

// calls are the client's calls sent from since on.
func (c *podClient) calls(ctx context.Context, since time.Time) ([]cluster.TestHostCall, error) {
	b, err := c.d.client.CoreV1().Pods(c.ns).GetLogs(c.name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("the client pod %s/%s is gone", c.ns, c.name)
		}
		return nil, err
	}
	all := cluster.ParseTestHostLog(b)
	i, _ := slices.BinarySearchFunc(all, since, func(c cluster.TestHostCall, t time.Time) int { return c.Sent.Compare(t) })
	return all[i:], nil
}

// waitAnswer waits until a call sent from since on got an answer that
// want accepts, and returns it.
func (c *podClient) waitAnswer(ctx context.Context, since time.Time, want func(id string) bool, timeout time.Duration) (cluster.TestHostCall, error) {
	var got cluster.TestHostCall
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		calls, err := c.calls(ctx, since)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, cl := range calls {
			if cl.OK() && want(cl.Answer) {
				got = cl
				return true, nil
			}
		}
		if n := len(calls); n > 0 {
			last = fmt.Sprintf("%d calls, the last: %d %s", n, calls[n-1].Status, calls[n-1].Answer)
		}
		return false, nil
	})
	if err != nil {
		return got, fmt.Errorf("the client in a pod got no expected answer after %v: %s", timeout, last)
	}
	return got, nil
}

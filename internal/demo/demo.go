package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/certmanager"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/install"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/internal/netns"
	"github.com/fastover/fastover/leader"
	"github.com/fastover/fastover/toleration"
	"github.com/fastover/fastover/webhook"
)

// DefaultGrace is the node-monitor grace period of a demo: short, so that
// the demo is short, and realistic (Kubernetes' default is 50s).
const DefaultGrace = 20 * time.Second

// Options configure a demo. The zero value is the full demo.
type Options struct {
	// Grace is kube-controller-manager's --node-monitor-grace-period: how
	// long a lost node stays Ready before it is tainted. Zero means
	// DefaultGrace (10s in Quick mode); 50s is Kubernetes' default.
	Grace time.Duration
	// LeaseDuration, RenewDeadline and RetryPeriod are the example
	// controller's leader election; zero means the leader library's
	// defaults, 15s/10s/2s as client-go's (4s/3s/1s in Quick mode).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Quick shortens what the demo watches beyond the measurements (how
	// long the control group and the migrated Service are observed), for
	// CI.
	Quick bool
	// Keep keeps the cluster running after the summary, until ctx ends,
	// and its files after that: the demo says how to reach it (its API
	// server, the real nodes' containerd), to look around by hand.
	Keep bool
	// Out receives the progress, the live status and the summary; nil
	// means os.Stdout.
	Out io.Writer
	// StatusInterval is how often a live status line is printed when Out
	// is not a terminal; zero means 5s.
	StatusInterval time.Duration
	// SVGPath is where the timeline picture is written; empty: none.
	SVGPath string
	// BinDir holds the control-plane binaries and cert-manager (`make
	// tools`); empty means cluster.BinDir().
	BinDir string
	// WebhookBinary and ExampleBinary are fastover-webhook and
	// fastover-example; empty means BinDir/fastover-webhook and
	// BinDir/fastover-example (`go build -o bin/ ./cmd/... ./examples/...`).
	WebhookBinary, ExampleBinary string
	// ManifestsDir is fastover's manifests/; empty means install.Dir().
	ManifestsDir string
	// Nodes is the kind of nodes: NodesAuto (real nodes when they can
	// run here), NodesKwok or NodesReal.
	Nodes string
	// ChartsDir is fastover's charts/ and HelmBinary the helm CLI, for a
	// run on real nodes; empty means charts/ beside ManifestsDir and
	// BinDir/helm.
	ChartsDir, HelmBinary string
	// KubeProxyMinSync is kube-proxy's --iptables-min-sync-period in the
	// kube-proxy lane: zero means kube-proxy's default, 1s (what a
	// cluster runs); negative means 0s (it syncs at once).
	KubeProxyMinSync time.Duration
}

const (
	kwokLostNode  = "node-a"
	injectedNS    = "demo-injected"
	controlNS     = "demo-control"
	appName       = "app"
	haNS          = "demo-ha"
	haService     = "example"
	migrateNS     = "demo-migrate"
	oldApp        = "old-example"
	exampleSA     = "fastover-example"
	controlSvc    = "control"
	systemNS      = "fastover-system"
	servingCert   = "fastover-webhook"
	servingSecret = "fastover-webhook-tls"
	pauseImage    = "registry.k8s.io/pause:3.10"
)

var kwokNodes = []string{kwokLostNode, "node-b", "node-c"}

// lostNode is the node scenario 1 loses, and how.
type lostNode struct {
	name string
	// how it is lost, for the scenario's heading ("its kwok process is
	// killed"), and short, for its timeline ("its kwok killed").
	how, short string
	lose       func() error
}

// demo is one run.
type demo struct {
	opts Options
	out  *printer
	sum  *Summary

	env     *cluster.Env
	ns      *netns.NS            // the control plane's network namespace; nil without root
	client  kubernetes.Interface // env's, without printing the API server's warnings
	envDir  string
	ha      *fleet.Fleet
	certDir string
	// kp is kube-proxy, in ns; clients are the real clients that call
	// the example's Service during the handovers.
	kp      *kubeproxy.Proxy
	vip     netip.AddrPort // the example Service's ClusterIP and port
	clients []*realClient
	// stopStreams stops the clients that watch (and what they run on).
	stopStreams context.CancelFunc
	// keepLogs keeps the control plane's directory: something failed.
	keepLogs bool
	// lost is scenario 1's node; real what a run on real nodes has (nil
	// on kwok's).
	lost lostNode
	real *realCluster
}

func (o Options) withDefaults() (Options, error) {
	if o.Grace == 0 {
		o.Grace = DefaultGrace
		if o.Quick {
			o.Grace = 10 * time.Second
		}
	}
	if o.LeaseDuration == 0 && o.RenewDeadline == 0 && o.RetryPeriod == 0 {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = leader.DefaultLeaseDuration, leader.DefaultRenewDeadline, leader.DefaultRetryPeriod
		if o.Quick {
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, time.Second
		}
	}
	if o.RetryPeriod <= 0 || o.RenewDeadline <= o.RetryPeriod || o.LeaseDuration <= o.RenewDeadline {
		return o, fmt.Errorf("leader election durations %v/%v/%v: want lease duration > renew deadline > retry period > 0",
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
	}
	if o.Grace < 5*time.Second {
		return o, fmt.Errorf("grace period %v: want at least 5s (kwok renews the node Lease every 2s)", o.Grace)
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.StatusInterval == 0 {
		o.StatusInterval = 5 * time.Second
	}
	if o.BinDir == "" {
		dir, err := cluster.BinDir()
		if err != nil {
			return o, err
		}
		o.BinDir = dir
	}
	if o.WebhookBinary == "" {
		o.WebhookBinary = filepath.Join(o.BinDir, "fastover-webhook")
	}
	if o.ExampleBinary == "" {
		o.ExampleBinary = filepath.Join(o.BinDir, "fastover-example")
	}
	for _, b := range []string{o.WebhookBinary, o.ExampleBinary} {
		if _, err := os.Stat(b); err != nil {
			return o, fmt.Errorf("%s is missing: run `make demo`, or `go build -o bin/ ./cmd/... ./examples/...` at the repository root", b)
		}
	}
	if o.ManifestsDir == "" {
		dir, err := install.Dir()
		if err != nil {
			return o, err
		}
		o.ManifestsDir = dir
	}
	if o.ChartsDir == "" {
		o.ChartsDir = filepath.Join(filepath.Dir(o.ManifestsDir), "charts")
	}
	if o.HelmBinary == "" {
		o.HelmBinary = filepath.Join(o.BinDir, "helm")
	}
	return o, nil
}

// durations are the example controller's.
func (d *demo) durations() fleet.Durations {
	return fleet.Durations{Lease: d.opts.LeaseDuration, Renew: d.opts.RenewDeadline, Retry: d.opts.RetryPeriod}
}

// hold is how long the demo keeps watching after a measurement, to show
// that what it measured stays so.
func (d *demo) hold() time.Duration {
	if d.opts.Quick {
		return 2 * time.Second
	}
	return 5 * time.Second
}

// Run runs the demo: it starts the control plane, installs fastover, plays
// every scenario, prints the summary table and writes the picture. It
// returns the summary, with the scenarios played so far, and an error if
// the demo could not run (a scenario that fails is not an error:
// Summary.Passed says). Every process it started is stopped before it
// returns, also when ctx is cancelled.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &demo{
		opts: opts,
		out:  newPrinter(opts.Out, opts.StatusInterval),
		sum: &Summary{
			Grace: opts.Grace, LeaseDuration: opts.LeaseDuration, RenewDeadline: opts.RenewDeadline, RetryPeriod: opts.RetryPeriod,
			Started: time.Now(),
		},
	}
	if err := d.chooseNodes(); err != nil {
		return nil, err
	}
	defer d.stop()
	// What runs in the background (the Secret mirrored, watches) ends
	// before the processes are stopped.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	plays := []func(context.Context) Result{d.nodeLoss, d.leaderKilled, d.leaderTerminated, d.leaderFrozen, d.migration}
	if d.real != nil {
		d.sum.Nodes = realNodeNames
		d.sum.Platform = fmt.Sprintf("%d real nodes (kubelet, containerd, runc); fastover's images, installed by helm", len(realNodeNames))
		d.lost = d.realLost()
		plays = []func(context.Context) Result{d.nodeLoss, d.realLeaderKilled, d.realLeaderTerminated, d.realLeaderFrozen, d.migration}
		if err := d.makeNetns(); err != nil {
			return d.sum, err
		}
		if d.ns == nil {
			return d.sum, errors.New("real nodes need the control plane in a network namespace of its own, and this run cannot make one")
		}
		if err := d.setupReal(ctx); err != nil {
			return d.sum, d.failed(ctx, err)
		}
	} else {
		d.sum.Nodes = kwokNodes
		d.sum.Platform = fmt.Sprintf("%d kwok nodes", len(kwokNodes))
		d.lost = lostNode{name: kwokLostNode, how: "its kwok process is killed", short: "its kwok killed",
			lose: func() error { return d.env.StopNode(kwokLostNode) }}
		if err := d.setup(ctx); err != nil {
			return d.sum, d.failed(ctx, err)
		}
	}
	for i, play := range plays {
		if d.real != nil && i == 1 {
			// The example goes onto the nodes left.
			if err := d.installExample(ctx); err != nil {
				return d.sum, d.failed(ctx, err)
			}
		}
		res := play(ctx)
		if err := ctx.Err(); err != nil {
			return d.sum, err
		}
		d.sum.Results = append(d.sum.Results, res)
		d.report(res)
	}
	d.sum.Took = time.Since(d.sum.Started)

	d.out.Printf("\n==> summary (grace %v, leader election %v, Kubernetes %s; the demo took %s)\n",
		opts.Grace, d.durations(), d.sum.KubernetesVersion, FormatDuration(d.sum.Took))
	_ = d.sum.WriteTable(opts.Out)
	if opts.SVGPath != "" {
		if err := WriteSVG(opts.SVGPath, d.sum); err != nil {
			return d.sum, fmt.Errorf("write %s: %w", opts.SVGPath, err)
		}
		d.sum.SVGPath = opts.SVGPath
		d.out.Printf("\nthe timeline: %s (open it in a browser)", opts.SVGPath)
	}
	if !d.sum.Passed() {
		d.keepLogs = true
		d.out.Printf("\nat least one scenario FAILED; the logs of every process are kept in %s", filepath.Join(d.envDir, "logs"))
	}
	if d.opts.Keep {
		d.keep(ctx)
	}
	return d.sum, nil
}

// keep says how to reach the cluster, and keeps it running until ctx
// ends; its files stay.
func (d *demo) keep(ctx context.Context) {
	d.keepLogs = true
	kubectl := "kubectl --kubeconfig " + d.env.Kubeconfig
	if d.ns != nil {
		kubectl = "nsenter --net=" + d.ns.Path() + " " + kubectl
	}
	d.out.Printf("\n==> the cluster runs on until Ctrl-C (--keep); its files and logs stay in %s", d.envDir)
	d.out.Printf("    %s get nodes,pods -A -o wide", kubectl)
	if d.real != nil {
		for _, name := range realNodeNames {
			d.out.Printf("    %s: %s/ctr --address %s -n k8s.io containers ls; its logs %s", name, d.opts.BinDir,
				filepath.Join(d.envDir, "nodes", name, "containerd", "containerd.sock"), filepath.Join(d.envDir, "logs", "kubelet-"+name+".log"))
		}
	}
	<-ctx.Done()
}

// failed reports a setup failure with the tail of the logs, and keeps them.
func (d *demo) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	d.keepLogs = true
	if d.env != nil {
		var b strings.Builder
		d.env.DumpLogs(&b, 15)
		d.out.Printf("the demo could not start; the last lines of each process's log:\n%s", b.String())
		d.out.Printf("every log is kept in %s", filepath.Join(d.envDir, "logs"))
	}
	return err
}

// stop stops every process and removes the control plane's files, unless
// something failed (the logs are kept).
func (d *demo) stop() {
	d.stopReal()
	if d.env != nil {
		d.env.Stop()
	}
	if d.ns != nil {
		_ = d.ns.Close()
	}
	if d.envDir != "" && !d.keepLogs {
		_ = os.RemoveAll(d.envDir)
	}
}

// step prints a step and returns a function that prints its end.
func (d *demo) step(format string, args ...any) func(format string, args ...any) {
	start := time.Now()
	d.out.Printf("==> "+format, args...)
	return func(format string, args ...any) {
		d.out.Printf("    "+format+" (%s)", append(args, FormatDuration(time.Since(start)))...)
	}
}

func (d *demo) setup(ctx context.Context) error {
	o := d.opts
	d.out.Printf("fastover demo: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok nodes on this machine")
	d.out.Printf("node-monitor grace period %v (GRACE=50s for Kubernetes' default), leader election %v", o.Grace, d.durations())
	if err := d.makeNetns(); err != nil {
		return err
	}
	d.out.Printf("")

	done := d.step("starting the control plane: etcd, kube-apiserver, kube-controller-manager (--node-monitor-grace-period=%v), kube-scheduler, %d kwok nodes (%s)",
		o.Grace, len(kwokNodes), strings.Join(kwokNodes, ", "))
	if err := d.startEnv(ctx, cluster.Options{Nodes: kwokNodes}); err != nil {
		return err
	}
	done("Kubernetes %s ready, logs in %s", d.sum.KubernetesVersion, filepath.Join(d.envDir, "logs"))
	if d.ns != nil {
		// It starts now and syncs while the rest is set up.
		skipped, err := d.startKubeProxy()
		if err != nil {
			return err
		}
		d.skipClient(skipped)
	}

	if err := d.install(ctx); err != nil {
		return err
	}
	if err := d.deployApps(ctx); err != nil {
		return err
	}
	id, err := d.startExample(ctx)
	if err != nil {
		return err
	}
	return d.startClients(ctx, id)
}

// makeNetns makes the network namespace the control plane runs in, so
// that kube-proxy can program the Services' ClusterIPs there and
// kube-apiserver can reach the replicas at the addresses they publish.
// Without root the demo runs on the host's loopback, without those lanes.
func (d *demo) makeNetns() error {
	ns, err := netns.New(netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})
	switch {
	case errors.Is(err, netns.ErrNotPermitted):
		d.skipClient(fmt.Sprintf("the client lanes (kube-proxy, kube-apiserver, informers) need root, to make a network namespace of the demo's own; this run (uid %d) shows the handovers through the EndpointSlices only", os.Geteuid()))
		return nil
	case err != nil:
		return err
	}
	d.ns = ns
	d.out.Printf("in a network namespace of its own (root): replicas bind the addresses they publish (%s), Services get ClusterIPs in %s", netns.PodNet, netns.ServiceNet)
	return nil
}

// skipClient says why a lane of real clients does not run.
func (d *demo) skipClient(why string) {
	if why == "" {
		return
	}
	d.sum.ClientsSkipped = append(d.sum.ClientsSkipped, why)
	d.out.Printf("note: %s", why)
}

// startClients prepares the real clients of the example's Service, whose
// leader is id.
func (d *demo) startClients(ctx context.Context, id string) error {
	if d.kp != nil {
		done := d.step("kube-proxy (nftables, --iptables-min-sync-period=%v) for %s: a client calls the ClusterIP of %s/%s every %v during the handovers",
			d.kubeProxyMinSync(), kubeProxyNode, haNS, haService, clientEvery)
		c, err := d.kubeProxyClient(ctx, id)
		if err != nil {
			return err
		}
		d.clients = append(d.clients, c)
		d.sum.RealClients = append(d.sum.RealClients, c.via)
		done("%s answers %q", c.target, id)
	}
	if d.ha.APIEnabled() {
		done := d.step("the example's aggregated API: APIService %s on %s/%s; a client lists it through kube-apiserver every %v during the handovers",
			fleet.APIServiceName, haNS, haService, clientEvery)
		c, err := d.apiServerClient(ctx, id)
		if err != nil {
			return err
		}
		d.clients = append(d.clients, c)
		d.sum.RealClients = append(d.sum.RealClients, c.via)
		done("Available; %s through kube-apiserver answers %q", c.target, id)
	}
	if d.kp != nil && d.ha.APIEnabled() {
		vip, err := d.kp.WaitService(ctx, haNS, haService, 30*time.Second)
		if err != nil {
			return err
		}
		done := d.step("two client-go informers of the aggregated API on the ClusterIP %s, as an agent watches its controller: one as client-go makes it, one with leader/follow", vip)
		sctx, cancel := context.WithCancel(ctx)
		d.stopStreams = cancel
		cs, err := d.informerClients(sctx, vip, id)
		if err != nil {
			return err
		}
		for _, c := range cs {
			d.clients = append(d.clients, c)
			d.sum.RealClients = append(d.sum.RealClients, c.name+": "+c.via)
		}
		done("both get an event a second from %q", id)
	}
	return nil
}

// stopClients stops the real clients that run on their own: the
// informers.
func (d *demo) stopClients() {
	if d.stopStreams != nil {
		d.stopStreams()
	}
	d.clients = nil
}

// install installs fastover as a user would: cert-manager first, then the
// manifests (the local overlay, the webhook running here), the webhook
// serving the certificate cert-manager issued.
func (d *demo) install(ctx context.Context) error {
	env := d.env
	done := d.step("starting cert-manager (its controllers and cainjector, bin/%s)", certmanager.Binary)
	if _, err := certmanager.Run(ctx, env, certmanager.Options{BinDir: d.opts.BinDir}); err != nil {
		return err
	}
	done("ready")

	ports, err := cluster.FreePorts(3)
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	done = d.step("installing fastover: manifests/overlays/local applied server-side, the webhook called at https://%s%s", addr, webhook.Path)
	objs, err := install.Render(filepath.Join(d.opts.ManifestsDir, "overlays", "local"))
	if err != nil {
		return err
	}
	mwc := install.Find(objs, "MutatingWebhookConfiguration", "fastover")
	if mwc == nil {
		return errors.New("overlays/local has no MutatingWebhookConfiguration fastover")
	}
	if err := install.SetWebhookURL(mwc, "https://"+addr+webhook.Path); err != nil {
		return err
	}
	applier, err := install.NewApplier(env.Config)
	if err != nil {
		return err
	}
	applied := time.Now()
	res, err := applier.Apply(ctx, objs, install.ApplyOptions{})
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		d.out.Printf("    warning: %s", w)
	}
	kinds := make([]string, 0, len(objs))
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
	}
	d.out.Printf("    applied %s", strings.Join(kinds, ", "))

	if err := certmanager.WaitReady(ctx, env, systemNS, servingCert); err != nil {
		return err
	}
	issued := time.Since(applied)
	if _, err := install.WaitCABundle(ctx, env.Client, "fastover", systemNS, servingSecret, time.Minute); err != nil {
		return err
	}
	injected := time.Since(applied)
	// The kubelet's part for a webhook outside the cluster: the Secret's
	// files in the webhook's --cert-dir, kept up to date.
	d.certDir = filepath.Join(d.envDir, "webhook-tls")
	if err := install.MirrorSecret(ctx, env.Client, systemNS, servingSecret, d.certDir, 200*time.Millisecond); err != nil {
		return err
	}
	p, err := env.StartProcess("fastover-webhook", d.opts.WebhookBinary,
		"--host=127.0.0.1",
		"--port="+strconv.Itoa(ports[0]),
		"--cert-dir="+d.certDir,
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports[1]),
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports[2]),
	)
	if err != nil {
		return err
	}
	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.WaitHTTP(readyCtx, "http://127.0.0.1:"+strconv.Itoa(ports[1])+"/readyz"); err != nil {
		return err
	}
	if err := d.createAppNamespaces(ctx); err != nil {
		return err
	}
	d.out.Printf("    cert-manager issued the Certificate %s/%s %s after the apply, its cainjector set the webhook's caBundle at %s",
		systemNS, servingCert, FormatDuration(issued), FormatDuration(injected))
	d.out.Printf("    fastover-webhook serves the Secret %s, copied into its --cert-dir as the kubelet would mount it", servingSecret)
	done("namespace %s labelled %s=%s; %s, the control group, not", injectedNS, toleration.NamespaceLabel, toleration.NamespaceLabelValue, controlNS)
	return nil
}

// createAppNamespaces makes the labelled namespace and the control
// group's, and waits until the webhook injects the labelled one's pods.
func (d *demo) createAppNamespaces(ctx context.Context) error {
	if err := d.env.CreateNamespace(ctx, injectedNS, map[string]string{toleration.NamespaceLabel: toleration.NamespaceLabelValue}); err != nil {
		return err
	}
	if err := d.env.CreateNamespace(ctx, controlNS, nil); err != nil {
		return err
	}
	return install.WaitInjecting(ctx, d.env.Client, injectedNS, time.Minute)
}

// appDeployment is a Deployment of a pause container (kwok's nodes play
// it, a real node's containerd pulls image),
// preferably on the node the demo will lose (preferred, so that a
// replacement may go elsewhere), with no tolerations of its own.
func appDeployment(name string, replicas int32, preferNode, image string) *appsv1.Deployment {
	lbl := map[string]string{"app": name}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}
	if preferNode != "" {
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{preferNode},
				}}},
			}},
		}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: spec},
		},
	}
}

// deployApps creates the same Deployment in the labelled namespace and in
// the control group's, preferably on the node to be lost, and shows what
// the API server admitted.
func (d *demo) deployApps(ctx context.Context) error {
	done := d.step("deploying %q in %s and in %s: one replica each, preferably on %s, no tolerations of its own", appName, injectedNS, controlNS, d.lost.name)
	for _, ns := range []string{injectedNS, controlNS} {
		if _, err := d.client.AppsV1().Deployments(ns).Create(ctx, appDeployment(appName, 1, d.lost.name, d.pauseImage()), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create deployment %s/%s: %w", ns, appName, err)
		}
	}
	for _, ns := range []string{injectedNS, controlNS} {
		p, err := d.waitRunning(ctx, ns, appName, "", time.Minute)
		if err != nil {
			return err
		}
		mark := p.Annotations[toleration.AnnotationInjected]
		if mark == "" {
			mark = "none"
		}
		d.out.Printf("    %s/%s on %s: tolerates %s:NoExecute for %s (%s: %s)",
			ns, p.Name, p.Spec.NodeName, corev1.TaintNodeUnreachable, tolerationString(p), toleration.AnnotationInjected, mark)
	}
	done("running")
	return nil
}

// startExample runs three replicas of fastover-example behind a
// selector-less Service, with the Role the leader library documents, and
// returns the leader's identity.
func (d *demo) startExample(ctx context.Context) (string, error) {
	done := d.step("running the example controller: 3 replicas of fastover-example on the leader library (%v), behind the selector-less Service %s/%s",
		d.durations(), haNS, haService)
	f, err := d.newFleet(ctx, haNS, haService, "example")
	if err != nil {
		return "", err
	}
	if d.ns != nil {
		// The replicas serve the aggregated API too, for the
		// kube-apiserver lane.
		if err := d.enableAPI(ctx, f, exampleSA); err != nil {
			return "", err
		}
	}
	if err := f.CreateService(ctx, nil); err != nil {
		return "", err
	}
	if err := f.Add(3); err != nil {
		return "", err
	}
	d.ha = f
	id, err := f.WaitServing(ctx, "", time.Minute)
	if err != nil {
		return "", err
	}
	done("%s leads: the Service's one endpoint is %s and GET / through it answers %q; the other two stand by", id, f.ByID(id).Address(), id)
	return id, nil
}

// newFleet prepares replicas of fastover-example in a new namespace, with a
// ServiceAccount bound to the Role the leader library documents (and
// "patch" on Services, for --remove-selector).
func (d *demo) newFleet(ctx context.Context, ns, svc, name string, extra ...string) (*fleet.Fleet, error) {
	if err := d.env.CreateNamespace(ctx, ns, nil); err != nil {
		return nil, err
	}
	f, err := fleet.New(d.env, d.opts.ExampleBinary, ns, svc, d.durations(), extra...)
	if err != nil {
		return nil, err
	}
	f.Name = name
	// In the namespace the addresses are real: replicas bind them, and
	// kube-proxy and kube-apiserver reach them there.
	f.BindPublished = d.ns != nil
	if f.Kubeconfig, err = d.env.KubeconfigFor(ctx, ns, exampleSA, fleet.LeaderRole); err != nil {
		return nil, err
	}
	return f, nil
}

// stopFleet stops every replica of f (SIGTERM, then SIGKILL).
func stopFleet(f *fleet.Fleet) {
	for _, r := range f.Replicas {
		if r.Proc != nil {
			r.Proc.Stop(syscall.SIGTERM, 5*time.Second)
		}
	}
}

// report prints a scenario's result.
func (d *demo) report(r Result) {
	if r.Passed {
		d.out.Printf("    ✔ %s: %s after %s; without fastover: %s", r.Name, r.Measured, FormatDuration(r.Fastover), r.Baseline)
	} else {
		d.out.Printf("    ✘ %s FAILED: %s", r.Name, r.Error)
	}
	for _, n := range r.Notes {
		d.out.Printf("      %s", n)
	}
	for _, c := range r.Clients {
		mark, gap := "✔", formatFine(c.Gap)
		if !c.Passed {
			mark = "✘"
		}
		if c.Gap == 0 {
			gap = "no answer"
		}
		d.out.Printf("    %s client %s: the new leader after %s; %s", mark, c.Name, gap, c.Verdict())
		for _, n := range c.Notes {
			d.out.Printf("      %s", n)
		}
	}
}

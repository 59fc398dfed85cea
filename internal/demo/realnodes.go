package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/fastover/fastover/internal/certmanager"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/toleration"
)

// The kinds of nodes a demo runs on (Options.Nodes).
const (
	// NodesAuto: real nodes when they can run here (root, `make tools`'
	// kubelet, containerd, CNI plugins and helm, runc), else kwok's.
	NodesAuto = ""
	// NodesKwok: kwok's nodes; the webhook and the example run as
	// processes of this machine.
	NodesKwok = "kwok"
	// NodesReal: real nodes (kubelet, containerd, runc); fastover's own
	// images, installed by helm from charts/.
	NodesReal = "real"
)

// The real nodes: real-1 is lost in scenario 1 (the apps prefer it); the
// example is installed after it, onto the other three, one replica each.
var realNodeNames = []string{"real-1", "real-2", "real-3", "real-4"}

const (
	// controlPlaneNode is the control plane's own machine: a kwok Node
	// tainted as kubeadm taints one, so that no pod lands there; the
	// hub's kube-proxy runs for it.
	controlPlaneNode = "control-plane"
	exampleRelease   = "fastover-example"
	clientNS         = "demo-client"
	clientPod        = "client"
)

// restrictedLabels are Pod Security's "restricted" level, which the charts'
// pods meet: the namespaces they are installed into enforce it.
var restrictedLabels = map[string]string{
	"pod-security.kubernetes.io/enforce": "restricted",
	"pod-security.kubernetes.io/warn":    "restricted",
}

// realCluster is what a run on real nodes has beyond the control plane.
type realCluster struct {
	nodes    map[string]*cluster.RealNode
	hubProxy *kubeproxy.Proxy
	// helmEnv is helm's environment: its directories in the run's, the
	// control plane's kubeconfig.
	helmEnv []string
	// tag is the charts' appVersion, the tag fastover's images are
	// pushed as; images their digests.
	tag    string
	images []string
	// client calls the example's ClusterIP from a pod; url is what it
	// calls.
	client *podClient
	url    string
}

// realNodesMissing says why real nodes cannot run here ("" if they can).
func (o Options) realNodesMissing() string {
	if os.Geteuid() != 0 {
		return fmt.Sprintf("they need root (uid %d)", os.Geteuid())
	}
	var missing []string
	for _, b := range []string{"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "cni/bridge", "helm"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			missing = append(missing, "bin/"+b)
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		missing = append(missing, "runc (apt-get install runc)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		missing = append(missing, "nft (apt-get install nftables)")
	}
	if len(missing) > 0 {
		return "missing " + strings.Join(missing, ", ") + " (make demo builds and installs them as root)"
	}
	return ""
}

// pauseImage is the image of the apps' pods.
func (d *demo) pauseImage() string {
	if d.real != nil {
		return cluster.PauseImage
	}
	return pauseImage
}

// setupReal starts the control plane in its network namespace with real
// nodes, pushes fastover's images, installs the webhook's chart and
// deploys the apps of scenario 1. The example is installed after it
// (installExample).
func (d *demo) setupReal(ctx context.Context) error {
	o := d.opts
	d.out.Printf("fastover demo: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler and %d real nodes (kubelet, containerd, runc) on this machine", len(realNodeNames))
	d.out.Printf("node-monitor grace period %v (GRACE=50s for Kubernetes' default), leader election %v", o.Grace, d.durations())
	d.out.Printf("fastover runs as a user installs it: its own images from a registry, installed by helm from charts/")
	d.out.Printf("")
	if err := d.readTag(); err != nil {
		return err
	}
	done := d.step("starting the control plane: etcd, kube-apiserver, kube-controller-manager (--node-monitor-grace-period=%v), kube-scheduler, kube-proxy, in a network namespace of its own",
		o.Grace)
	err := d.startEnv(ctx, cluster.Options{
		Nodes: []string{controlPlaneNode},
		// kube-apiserver calls the webhook through its Service's
		// ClusterIP, as on a cluster (the upstream default).
		APIServerFlags: []string{"--enable-aggregator-routing=false"},
		// Its decisions in its log, with the nodes it found feasible
		// (installExample quotes them when the replicas share a node).
		SchedulerFlags: []string{"--v=2"},
	})
	if err != nil {
		return err
	}
	env := d.env
	taint := `{"spec":{"taints":[{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"}]}}`
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := d.client.CoreV1().Nodes().Patch(ctx, controlPlaneNode, types.StrategicMergePatchType, []byte(taint), metav1.PatchOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("taint the control plane's node %s: %w", controlPlaneNode, err)
	}
	d.real.hubProxy, err = kubeproxy.Start(env, kubeproxy.Options{Node: controlPlaneNode})
	if err != nil {
		return err
	}
	done("Kubernetes %s ready, logs in %s", d.sum.KubernetesVersion, filepath.Join(d.envDir, "logs"))

	done = d.step("starting cert-manager (its controllers and cainjector, bin/%s)", certmanager.Binary)
	if _, err := certmanager.Run(ctx, env, certmanager.Options{BinDir: o.BinDir}); err != nil {
		return err
	}
	done("ready")

	done = d.step("starting %d real nodes (%s): each in a network namespace, with containerd, runc, a CNI bridge, the kubelet and kube-proxy", len(realNodeNames), strings.Join(realNodeNames, ", "))
	d.real.nodes = map[string]*cluster.RealNode{}
	type pushed struct {
		digests map[string]v1.Hash
		err     error
	}
	var images chan pushed
	for i, name := range realNodeNames {
		n, err := env.AddRealNode(ctx, name)
		if err != nil {
			return err
		}
		d.real.nodes[name] = n
		if i == 0 {
			// The first node started the registry: fastover's images
			// are built while the other nodes start.
			images = make(chan pushed, 1)
			go func() {
				digests, err := env.PushImages(ctx, d.real.tag)
				images <- pushed{digests, err}
			}()
		}
	}
	done("Ready")
	done = d.step("fastover's images, built (internal/imagebuild, as `make images` builds them) while the nodes started, pushed as ghcr.io/fastover/<name>:%s to the registry the nodes' containerd pulls from", d.real.tag)
	p := <-images
	if p.err != nil {
		return p.err
	}
	for name, h := range p.digests {
		d.real.images = append(d.real.images, fmt.Sprintf("%s@%s", name, h.String()[:19]))
	}
	slices.Sort(d.real.images)
	done("pushed %s", strings.Join(d.real.images, ", "))
	done = d.step("helm install fastover charts/fastover --namespace %s --wait (cert-manager mode, the chart's defaults)", systemNS)
	if err := env.CreateNamespace(ctx, systemNS, restrictedLabels); err != nil {
		return err
	}
	if err := d.helm(ctx, "install", "fastover", filepath.Join(o.ChartsDir, "fastover"), "--namespace", systemNS, "--wait", "--timeout", "3m"); err != nil {
		return err
	}
	if err := d.createAppNamespaces(ctx); err != nil {
		return err
	}
	pods, err := d.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var on []string
	for _, p := range pods.Items {
		on = append(on, p.Name+" on "+p.Spec.NodeName)
	}
	done("the webhook's pods: %s; kube-apiserver calls them through the Service; namespace %s labelled %s=%s, %s, the control group, not",
		strings.Join(on, ", "), injectedNS, toleration.NamespaceLabel, toleration.NamespaceLabelValue, controlNS)
	return d.deployApps(ctx)
}

// startEnv starts the control plane with opts (the run's grace period,
// binaries, directory and namespace added), stopping what started if ctx
// ends first.
func (d *demo) startEnv(ctx context.Context, opts cluster.Options) error {
	dir, err := os.MkdirTemp("", "fastover-demo-")
	if err != nil {
		return err
	}
	d.envDir = dir
	opts.NodeMonitorGracePeriod, opts.BinDir, opts.Dir, opts.Netns = d.opts.Grace, d.opts.BinDir, dir, d.ns
	type started struct {
		env *cluster.Env
		err error
	}
	ch := make(chan started, 1)
	go func() {
		env, err := cluster.New(opts)
		ch <- started{env, err}
	}()
	var s started
	select {
	case s = <-ch:
	case <-ctx.Done():
		d.out.Printf("    stopping what has started…")
		if s = <-ch; s.env != nil {
			s.env.Stop()
		}
		return ctx.Err()
	}
	if s.err != nil {
		return s.err
	}
	d.env = s.env
	cfg := rest.CopyConfig(d.env.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	if d.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if v, err := d.client.Discovery().ServerVersion(); err == nil {
		d.sum.KubernetesVersion = v.GitVersion
	}
	return nil
}

// readTag reads the charts' appVersion: the tag fastover's images are
// pushed as, the one the charts pull.
func (d *demo) readTag() error {
	b, err := os.ReadFile(filepath.Join(d.opts.ChartsDir, "fastover", "Chart.yaml"))
	if err != nil {
		return err
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		return fmt.Errorf("charts/fastover/Chart.yaml: %w", err)
	}
	if chart.AppVersion == "" {
		return errors.New("charts/fastover/Chart.yaml: no appVersion, the tag of fastover's images")
	}
	d.real.tag = chart.AppVersion
	return nil
}

// helm runs bin/helm with args in the control plane's network namespace,
// against its API server.
func (d *demo) helm(ctx context.Context, args ...string) error {
	if d.real.helmEnv == nil {
		home := filepath.Join(d.envDir, "helm")
		d.real.helmEnv = append(os.Environ(),
			"KUBECONFIG="+d.env.Kubeconfig,
			"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
			"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
			"HELM_DATA_HOME="+filepath.Join(home, "data"))
	}
	cmd := exec.CommandContext(ctx, d.opts.HelmBinary, args...)
	cmd.Env = d.real.helmEnv
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := d.ns.Start(cmd); err != nil {
		return fmt.Errorf("helm %s: %w", strings.Join(args, " "), err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, out.String(), d.describeNamespacePods(ctx, args))
	}
	return nil
}

// describeNamespacePods says, for a helm command that failed, how the
// pods of its --namespace are.
func (d *demo) describeNamespacePods(ctx context.Context, args []string) string {
	ns := ""
	for i, a := range args {
		if a == "--namespace" && i+1 < len(args) {
			ns = args[i+1]
		}
	}
	if ns == "" {
		return ""
	}
	list, err := d.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	return "the pods of " + ns + ":\n" + describePods(list.Items)
}

// stopReal stops what a run on real nodes started beyond the control
// plane (the nodes stop with it).
func (d *demo) stopReal() {
	if d.real != nil && d.real.hubProxy != nil {
		_ = d.real.hubProxy.Stop(context.Background())
	}
}

// realLost is scenario 1's node on real nodes: cut off the network.
func (d *demo) realLost() lostNode {
	name := realNodeNames[0]
	return lostNode{
		name:  name,
		how:   "cut off: its link to the control plane and the other nodes goes down; its kubelet and containers run on, unreachable",
		short: "cut off",
		lose:  func() error { return d.real.nodes[name].Partition(true) },
	}
}

// chooseNodes decides the kind of nodes of the run and says, in one line,
// what it skipped.
func (d *demo) chooseNodes() error {
	switch d.opts.Nodes {
	case NodesKwok:
		return nil
	case NodesReal:
		if why := d.opts.realNodesMissing(); why != "" {
			return fmt.Errorf("real nodes cannot run here: %s", why)
		}
	case NodesAuto:
		if why := d.opts.realNodesMissing(); why != "" {
			line := "real nodes skipped: " + why + "; the scenarios run on kwok nodes, the webhook and the example as processes of this machine"
			d.sum.Skipped = append(d.sum.Skipped, line)
			d.out.Printf("note: %s", line)
			return nil
		}
	default:
		return fmt.Errorf("nodes %q: want %q, %q or empty (real nodes when they can run)", d.opts.Nodes, NodesKwok, NodesReal)
	}
	d.real = &realCluster{}
	return nil
}

// podIdentity is the example's leader as the cluster shows it.
type podIdentity struct {
	pod *corev1.Pod
	// id is its identity in the Lease, and its answer: its pod's name,
	// "_", and a suffix of its process (leader.DefaultIdentity).
	id string
}

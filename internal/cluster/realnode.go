package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	clientcmd "k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/netns"
)

// Real nodes: a kubelet with containerd and runc, beside kwok's nodes. The
// control plane's network namespace is the hub; each real node runs in a
// namespace of its own (containerd, the kubelet, kube-proxy, its pods'
// bridge), joined to the hub's bridge by a veth pair:
//
//	hub (Options.Netns)  fo-hub 198.19.0.254/16, routes to each pod range
//	node N               eth0 198.19.N.1/16, default route via the hub,
//	                     pods in 198.18.(N-1).0/24 on its bridge fo-br0
//
// (198.18.0.0/15 is RFC 2544's benchmarking range, never a private one.)
// Each node has its own directory, cgroup root (/fastover-<pid>-n<seq> in
// every cgroup v1 hierarchy) and client certificate (system:node:<name>, which
// kube-apiserver's Node authorizer knows).

// The real nodes' network.
var (
	hubBridge  = "fo-hub"
	hubAddress = netip.MustParsePrefix("198.19.0.254/16")
	// NodeNet is where the real nodes' addresses are.
	NodeNet = netip.MustParsePrefix("198.19.0.0/16")
	// RealPodNet is where the real nodes' pod ranges are.
	RealPodNet = netip.MustParsePrefix("198.18.0.0/15")
)

// maxRealNodes is how many real nodes an Env runs at most.
const maxRealNodes = 8

// ownerPID names the process the real nodes' cgroup roots belong to
// (fastover-<pid>-n<seq>), so that the roots of a test binary that died
// are found by the next one (sweepLeftovers), and those of Envs running in
// parallel in this one never meet; nodeSeq numbers its nodes.
var (
	ownerPID = os.Getpid()
	nodeSeq  atomic.Int64
)

// RealNode is a node of an Env whose pods run in containers.
type RealNode struct {
	// Name is the Node's name; IP its address (InternalIP); PodCIDR the
	// range its pods get addresses from.
	Name    string
	IP      netip.Addr
	PodCIDR netip.Prefix
	// NS is its network namespace.
	NS *netns.NS

	env        *Env
	index      int // 1, 2, ...
	dir        string
	hubLink    string // its veth's end in the hub
	cgroup     string // its cgroup root's name: fastover-<pid>-n<seq>
	containerd *Process
	kubelet    *Process
	proxy      *Process // kube-proxy
	frozen     bool
}

// AddRealNode starts a real node named name: its network namespace linked
// to the hub, containerd, the kubelet, and once its Node is Ready,
// kube-proxy; it returns when kube-proxy has synced its rules. It needs
// root, Options.Netns, `make tools` (kubelet, kube-proxy, containerd,
// bin/cni), runc and nft; the error says what is missing. The node is stopped
// and everything it changed undone by Env.Stop (or RealNode.Stop).
func (e *Env) AddRealNode(ctx context.Context, name string) (*RealNode, error) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("cluster: real node %q: not a valid Node name: %s", name, strings.Join(errs, "; "))
	}
	if e.opts.Netns == nil {
		return nil, errors.New("cluster: a real node needs the control plane in a network namespace (Options.Netns)")
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, fmt.Errorf("cluster: a real node needs runc (apt-get install runc; tests/tools/podman.sh installs it): %w", err)
	}
	for _, b := range []string{"kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "cni/bridge", "cni/host-local", "cni/loopback"} {
		if _, err := os.Stat(filepath.Join(e.bin, b)); err != nil {
			return nil, fmt.Errorf("cluster: a real node needs %s: run `make tools` (tests/tools/build.sh kubelet kubeproxy containerd cni)", filepath.Join(e.bin, b))
		}
	}
	if err := e.prepareRealNodes(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	index := len(e.realNodes) + 1
	_, dup := e.nodes[name]
	for _, rn := range e.realNodes {
		dup = dup || rn.Name == name
	}
	if dup || index > maxRealNodes {
		e.mu.Unlock()
		if dup {
			return nil, fmt.Errorf("cluster: real node %q: a node of that name runs already", name)
		}
		return nil, fmt.Errorf("cluster: real node %q: %d real nodes run already, the most an Env runs", name, maxRealNodes)
	}
	n := &RealNode{
		Name:    name,
		IP:      netip.AddrFrom4([4]byte{198, 19, byte(index), 1}),
		PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(index - 1), 0}), 24),
		env:     e,
		index:   index,
		dir:     filepath.Join(e.Dir, "nodes", name),
		hubLink: "fo-n" + strconv.Itoa(index),
		cgroup:  fmt.Sprintf("fastover-%d-n%d", ownerPID, nodeSeq.Add(1)),
	}
	e.realNodes = append(e.realNodes, n)
	e.mu.Unlock()
	if err := n.start(ctx, runc); err != nil {
		return nil, fmt.Errorf("cluster: real node %s: %w", name, err)
	}
	return n, nil
}

func (n *RealNode) start(ctx context.Context, runc string) error {
	e := n.env
	var err error
	if n.NS, err = netns.New(netns.Options{}); err != nil {
		return err
	}
	if err := e.opts.Netns.AddVeth(n.NS, netns.Veth{
		Name: n.hubLink, Bridge: hubBridge,
		PeerName: "eth0", PeerAddress: netip.PrefixFrom(n.IP, NodeNet.Bits()), Gateway: hubAddress.Addr(),
	}); err != nil {
		return err
	}
	if err := e.opts.Netns.AddRouteVia(n.PodCIDR, n.IP, hubBridge); err != nil {
		return err
	}
	sweepLeftovers()
	if err := makeCgroupRoot(n.cgroupName()); err != nil {
		return err
	}
	kp, err := issueNodeCert(e.pki, n.Name)
	if err != nil {
		return err
	}
	if err := e.writeClientKubeconfig(filepath.Join(n.dir, "kubelet"), "system:node:"+n.Name, kp); err != nil {
		return err
	}
	if err := n.writeConfigs(e, runc); err != nil {
		return err
	}

	n.containerd = NewProcess("containerd-"+n.Name, filepath.Join(e.bin, "containerd"), e.logDir,
		"--config", filepath.Join(n.dir, "containerd", "config.toml"))
	n.containerd.ns = n.NS
	// The shim is found in $PATH.
	n.containerd.Env = []string{"PATH=" + e.bin + ":" + os.Getenv("PATH")}
	if err := n.containerd.Start(); err != nil {
		return err
	}
	sock := filepath.Join(n.dir, "containerd", "containerd.sock")
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(sock)
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("containerd did not open %s: %w\n%s", sock, err, n.containerd.Tail(20))
	}

	started := time.Now()
	n.kubelet = NewProcess("kubelet-"+n.Name, filepath.Join(e.bin, "kubelet"), e.logDir,
		"--config="+filepath.Join(n.dir, "kubelet", "config.yaml"),
		"--kubeconfig="+filepath.Join(n.dir, "kubelet", "kubeconfig"),
		"--root-dir="+filepath.Join(n.dir, "kubelet", "root"),
		"--cert-dir="+filepath.Join(n.dir, "kubelet", "pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP.String(),
		"--v=1",
	)
	n.kubelet.ns = n.NS
	if err := n.kubelet.Start(); err != nil {
		return err
	}
	if err := n.waitReady(ctx, started, 2*time.Minute); err != nil {
		return err
	}
	if err := n.startProxy(); err != nil {
		return err
	}
	return n.waitProxy(ctx, time.Minute)
}

// waitReady waits until the Node is Ready with a heartbeat after since,
// and schedulable: without the not-ready taint.
func (n *RealNode) waitReady(ctx context.Context, since time.Time, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := n.env.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		// The scheduler skips a node until the node lifecycle controller
		// has seen it Ready and lifted the not-ready taint it registers
		// with.
		if HasTaint(node, corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule) {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the Node did not get Ready within %v: %w\nkubelet:\n%s\ncontainerd:\n%s", timeout, err, n.kubelet.Tail(25), n.containerd.Tail(10))
	}
	return nil
}

// Stop stops the node: its pods' containers and sandboxes, the kubelet,
// containerd and its shims; it unmounts what they mounted, removes its
// cgroups and its namespace. The Node object stays (NotReady, in time).
func (n *RealNode) Stop() {
	n.thaw()
	if n.kubelet != nil {
		n.kubelet.Stop(syscall.SIGTERM, 5*time.Second)
	}
	n.killContainers()
	if n.proxy != nil {
		n.proxy.Stop(syscall.SIGTERM, 5*time.Second)
	}
	if n.containerd != nil {
		n.containerd.Stop(syscall.SIGTERM, 5*time.Second)
	}
	n.killShims()
	unmountUnder(n.dir)
	removeCgroupRoot(n.cgroupName())
	if n.NS != nil {
		_ = n.NS.Close()
	}
}

// writeClientKubeconfig writes into dir the client certificate kp of
// user (client.crt, client.key) and a kubeconfig for the API server that
// authenticates with it (kubeconfig).
func (e *Env) writeClientKubeconfig(dir, user string, kp *certs.KeyPair) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(certFile, kp.CertPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthority: e.pki.caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, filepath.Join(dir, "kubeconfig"))
}

// Partition cuts the node off the hub (cut true) or joins it again: its
// link's end in the hub goes down, and nothing passes between the node and
// the control plane, or the other nodes. The kubelet, containerd and the
// pods run on, unreachable: a partition, or a node whose network is lost.
func (n *RealNode) Partition(cut bool) error {
	return n.env.opts.Netns.SetLinkUp(n.hubLink, !cut)
}

// Freeze stops the node as a machine that halts: its kubelet is killed,
// its pods' processes are frozen (the freezer cgroup of its cgroup root),
// kube-proxy, containerd and its shims are stopped (SIGSTOP). Thaw undoes
// it and starts the kubelet again.
func (n *RealNode) Freeze() error {
	n.kubelet.Stop(syscall.SIGKILL, 0)
	if err := os.WriteFile(n.freezerState(), []byte("FROZEN"), 0o644); err != nil {
		return fmt.Errorf("cluster: freeze %s's pods: %w", n.Name, err)
	}
	_ = n.containerd.Signal(syscall.SIGSTOP)
	_ = n.proxy.Signal(syscall.SIGSTOP)
	for _, pid := range n.shims() {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	n.frozen = true
	return nil
}

// Thaw lets a frozen node run again: its pods, containerd and its shims go
// on, and its kubelet starts again.
func (n *RealNode) Thaw() error {
	n.thaw()
	return n.kubelet.Start()
}

func (n *RealNode) thaw() {
	if !n.frozen {
		return
	}
	_ = os.WriteFile(n.freezerState(), []byte("THAWED"), 0o644)
	_ = n.containerd.Signal(syscall.SIGCONT)
	_ = n.proxy.Signal(syscall.SIGCONT)
	for _, pid := range n.shims() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	n.frozen = false
}

func (n *RealNode) freezerState() string {
	return filepath.Join("/sys/fs/cgroup/freezer", n.cgroupName(), "freezer.state")
}

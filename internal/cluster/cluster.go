package cluster

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fastover/fastover/internal/netns"
)

// Options configure a control plane. The zero value is a working control
// plane with Kubernetes' own defaults.
type Options struct {
	// NodeMonitorGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period: how long a node may be silent before it
	// is marked Unknown and tainted node.kubernetes.io/unreachable. Zero
	// keeps Kubernetes' default (50s).
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod is --node-monitor-period. Zero means 1s, so that a
	// silent node is noticed as soon as its grace period ends.
	NodeMonitorPeriod time.Duration

	// Nodes are kwok nodes added before Start returns.
	Nodes []string

	// APIServerFlags, ControllerManagerFlags and SchedulerFlags are
	// appended to each component's flags; a flag given here overrides the
	// package's value of the same flag.
	APIServerFlags         []string
	ControllerManagerFlags []string
	SchedulerFlags         []string
	// APIServerEnv is added to kube-apiserver's environment (NAME=value):
	// HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS, for
	// one, set the health check of its connections to aggregated API
	// servers and webhooks (client-go's transport).
	APIServerEnv []string

	// BinDir holds the binaries; empty means BinDir().
	BinDir string
	// Dir holds the data, certificates, kubeconfig and logs; empty means
	// a new temporary directory, removed by Stop.
	Dir string
	// Timeout bounds the start of each component; zero means 90s.
	Timeout time.Duration

	// Netns, if set, runs the control plane inside that network namespace
	// (package internal/netns) instead of on the host's loopback: every
	// process (components, kwok nodes, StartProcess) starts inside it,
	// and the Env's own connections (Config, Client, DialContext) go
	// through it. kube-apiserver then binds and advertises
	// APIServerAddress, which is added to the namespace's loopback and
	// named by its certificate; the Service range is netns.ServiceNet
	// (198.51.100.0/24), and kube-apiserver publishes itself as the
	// endpoint of the kubernetes Service. The caller closes the namespace
	// after Stop. Nil, the default, changes nothing.
	Netns *netns.NS
	// APIServerAddress is the address kube-apiserver binds and
	// advertises in a network namespace; empty means
	// DefaultNetnsAPIServerAddress. Without Netns it must be empty
	// (kube-apiserver binds 127.0.0.1).
	APIServerAddress string
}

// DefaultNetnsAPIServerAddress is where kube-apiserver listens in a
// network namespace: the last address of the pod range (192.0.2.0/24),
// away from the replicas, which count up from 192.0.2.1.
const DefaultNetnsAPIServerAddress = "192.0.2.254"

// Component names a process of the control plane, for StopComponent and
// StartComponent.
type Component string

// The components of the control plane.
const (
	Etcd              Component = binEtcd
	APIServer         Component = binAPIServer
	ControllerManager Component = binController
	Scheduler         Component = binScheduler
)

// Env is a running control plane.
type Env struct {
	// Config reaches kube-apiserver as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file with the same access.
	Kubeconfig string
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// Dir is the directory of the control plane's files; logs are in
	// Dir/logs.
	Dir string

	opts       Options
	bin        string
	ownDir     bool
	logDir     string
	pki        *pki
	etcdURL    string
	apiAddr    string // the address kube-apiserver binds
	components map[Component]*Process
	stopOnce   sync.Once

	mu    sync.Mutex
	nodes map[string]*Process
	order []string // node names, in the order they were added
	// groups are AddNodeGroup's, by name: one kwok process each.
	groups map[string]*nodeGroup
	extra  []*Process // started by the tests with StartProcess
	// realNodes, in the order they were added; registry serves their
	// images; holdsHost: this Env counts among the users of the
	// machine's state (machineHost).
	realNodes []*RealNode
	registry  *Registry
	holdsHost bool
}

// Start starts a control plane for the test and stops it when the test
// ends. If the test failed, the tail of each component's log is logged.
// Start fails the test at once if the control plane cannot start.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	env, err := New(opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			env.DumpLogs(&b, 40)
			t.Log("control-plane logs:\n" + b.String())
		}
		env.Stop()
	})
	return env
}

// New starts a control plane. The caller must call Stop. On error, every
// process already started is stopped, and the error includes the tail of
// the failing component's log.
func New(opts Options) (env *Env, err error) {
	bin := opts.BinDir
	if bin == "" {
		if bin, err = BinDir(); err != nil {
			return nil, err
		}
	}
	apiAddr, err := apiServerAddress(opts)
	if err != nil {
		return nil, err
	}
	if err := checkBinaries(bin); err != nil {
		return nil, err
	}
	if opts.Timeout == 0 {
		opts.Timeout = 90 * time.Second
	}
	if opts.NodeMonitorPeriod == 0 {
		opts.NodeMonitorPeriod = time.Second
	}
	env = &Env{opts: opts, bin: bin, apiAddr: apiAddr, components: map[Component]*Process{}, nodes: map[string]*Process{}}
	if opts.Dir == "" {
		if env.Dir, err = os.MkdirTemp("", "fastover-cluster-"); err != nil {
			return nil, err
		}
		env.ownDir = true
	} else {
		env.Dir = opts.Dir
	}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()
	env.logDir = filepath.Join(env.Dir, "logs")
	if err := os.MkdirAll(env.logDir, 0o755); err != nil {
		return nil, err
	}
	if opts.Netns != nil {
		if err := opts.Netns.AddAddress(netip.PrefixFrom(netip.MustParseAddr(apiAddr), 32)); err != nil {
			return nil, err
		}
	}
	if env.pki, err = newPKI(env.Dir, apiAddr, env.serviceRange().Addr().Next()); err != nil {
		return nil, fmt.Errorf("make certificates: %w", err)
	}

	etcdURL, err := env.startEtcd()
	if err != nil {
		return nil, err
	}
	if err := env.startAPIServer(etcdURL); err != nil {
		return nil, err
	}
	if err := env.startControllerManager(); err != nil {
		return nil, err
	}
	if err := env.startScheduler(); err != nil {
		return nil, err
	}
	for _, name := range opts.Nodes {
		if err := env.AddNode(name); err != nil {
			return nil, err
		}
	}
	return env, nil
}

// apiServerAddress validates the address options and returns the address
// kube-apiserver binds.
func apiServerAddress(opts Options) (string, error) {
	if opts.Netns == nil {
		if opts.APIServerAddress != "" {
			return "", fmt.Errorf("cluster: APIServerAddress %q needs Netns: on the host kube-apiserver binds 127.0.0.1", opts.APIServerAddress)
		}
		return "127.0.0.1", nil
	}
	if opts.APIServerAddress == "" {
		return DefaultNetnsAPIServerAddress, nil
	}
	a, err := netip.ParseAddr(opts.APIServerAddress)
	if err != nil || !a.Is4() || a.IsUnspecified() {
		return "", fmt.Errorf("cluster: APIServerAddress %q: want an IPv4 address such as %s", opts.APIServerAddress, DefaultNetnsAPIServerAddress)
	}
	return a.String(), nil
}

// DialContext connects as the Env's own clients do: inside the control
// plane's network namespace if it runs in one (Options.Netns), else on the
// host.
func (e *Env) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if e.opts.Netns != nil {
		return e.opts.Netns.DialContext(ctx, network, address)
	}
	return (&net.Dialer{}).DialContext(ctx, network, address)
}

// FrontProxyCA returns the aggregation layer's CA (PEM): the one
// kube-apiserver's client certificate for aggregated API servers chains to,
// as published in kube-system/extension-apiserver-authentication.
func (e *Env) FrontProxyCA() []byte { return e.pki.frontProxyCA }

// FrontProxyClientFiles returns the files of the client certificate
// kube-apiserver presents to aggregated API servers (common name
// FrontProxyClientCN): a test may call such a server directly as
// kube-apiserver does.
func (e *Env) FrontProxyClientFiles() (certFile, keyFile string) {
	return e.pki.proxyCert, e.pki.proxyKey
}

// serviceRange is kube-apiserver's --service-cluster-ip-range: in a
// network namespace the documentation range the namespace routes
// (netns.ServiceNet), else 10.96.0.0/16. Its first address is the
// kubernetes Service's ClusterIP.
func (e *Env) serviceRange() netip.Prefix {
	if e.opts.Netns != nil {
		return netns.ServiceNet
	}
	return netip.MustParsePrefix("10.96.0.0/16")
}

// Netns returns the network namespace the control plane runs in, or nil.
func (e *Env) Netns() *netns.NS { return e.opts.Netns }

func (e *Env) startEtcd() (string, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return "", err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	p := e.add(Etcd, filepath.Join(e.bin, binEtcd),
		"--name=default",
		"--data-dir="+filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		// Test data need not survive a power cut.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err := p.Start(); err != nil {
		return "", err
	}
	e.etcdURL = clientURL
	err = e.waitFor(p, e.etcdHealthy)
	return clientURL, err
}

func (e *Env) etcdHealthy(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.etcdURL+"/health", nil)
	if err != nil {
		return false, err
	}
	client := http.DefaultClient
	if e.opts.Netns != nil {
		client = &http.Client{Transport: &http.Transport{DialContext: e.DialContext}}
		defer client.CloseIdleConnections()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, nil
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`), nil
}

func (e *Env) startAPIServer(etcdURL string) error {
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	host := "https://" + e.apiAddr + ":" + strconv.Itoa(ports[0])
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + e.apiAddr,
		"--advertise-address=" + e.apiAddr,
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--tls-cert-file=" + e.pki.serveCert,
		"--tls-private-key-file=" + e.pki.serveKey,
		"--client-ca-file=" + e.pki.caFile,
		"--token-auth-file=" + e.pki.tokenFile,
		// The Node authorizer and NodeRestriction, as a real cluster has
		// them: a real node's kubelet is system:node:<name>.
		"--authorization-mode=Node,RBAC",
		"--kubelet-client-certificate=" + e.pki.kubeletClientCert,
		"--kubelet-client-key=" + e.pki.kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + e.pki.saPub,
		"--service-account-signing-key-file=" + e.pki.saKey,
		"--service-cluster-ip-range=" + e.serviceRange().String(),
		// The default reconciler refuses to publish a loopback address
		// for the kubernetes Service.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		// On top of the default plugins, as OpenShift has it: setting
		// blockOwnerDeletion on an owner reference needs update on the
		// owner's finalizers.
		"--enable-admission-plugins=OwnerReferencesPermissionEnforcement,NodeRestriction",
		// The aggregation layer as a real control plane has it: a
		// front-proxy CA of its own, the client certificate
		// kube-apiserver presents to aggregated API servers, the headers
		// that name the user; and the endpoint of an APIService's Service
		// resolved by kube-apiserver itself, from its EndpointSlices,
		// instead of its ClusterIP.
		"--requestheader-client-ca-file=" + e.pki.frontProxyFile,
		"--requestheader-allowed-names=" + FrontProxyClientCN,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + e.pki.proxyCert,
		"--proxy-client-key-file=" + e.pki.proxyKey,
		"--enable-aggregator-routing=true",
	}
	if e.opts.Netns != nil {
		// In the namespace, the address is a real one of the pod range:
		// the kubernetes Service gets it as its endpoint.
		args = append(args, "--endpoint-reconciler-type=lease")
	}
	p := e.add(APIServer, filepath.Join(e.bin, binAPIServer), append(args, e.opts.APIServerFlags...)...)
	p.Env = e.opts.APIServerEnv
	if err := p.Start(); err != nil {
		return err
	}

	e.Config = &rest.Config{
		Host:            host,
		BearerToken:     e.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.pki.caCert},
		QPS:             200,
		Burst:           400,
	}
	if e.opts.Netns != nil {
		e.Config.Dial = e.opts.Netns.DialContext
	}
	if e.Client, err = kubernetes.NewForConfig(e.Config); err != nil {
		return err
	}
	if err := e.writeKubeconfig(); err != nil {
		return err
	}
	return e.waitAPIServer(p)
}

// waitAPIServer waits until kube-apiserver is ready, bootstrap included.
func (e *Env) waitAPIServer(p *Process) error {
	return e.waitFor(p, func(ctx context.Context) (bool, error) {
		body, err := e.Client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

func (e *Env) writeKubeconfig() error {
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	return e.writeKubeconfigFile(e.Kubeconfig, "admin", e.pki.adminToken, "")
}

// writeKubeconfigFile writes a kubeconfig for the API server that
// authenticates with the bearer token.
func (e *Env) writeKubeconfigFile(path, user, token, namespace string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.pki.caCert}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

func (e *Env) startControllerManager() error {
	args := []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file=" + e.pki.saKey,
		"--root-ca-file=" + e.pki.caFile,
		"--node-monitor-period=" + e.opts.NodeMonitorPeriod.String(),
	}
	if e.opts.NodeMonitorGracePeriod > 0 {
		args = append(args, "--node-monitor-grace-period="+e.opts.NodeMonitorGracePeriod.String())
	}
	p := e.add(ControllerManager, filepath.Join(e.bin, binController), append(args, e.opts.ControllerManagerFlags...)...)
	if err := p.Start(); err != nil {
		return err
	}
	// The service-account controller creates "default" in every
	// namespace; once it has, the controllers are running and pods can be
	// created.
	return e.waitFor(p, func(ctx context.Context) (bool, error) {
		_, err := e.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func (e *Env) startScheduler() error {
	args := []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}
	p := e.add(Scheduler, filepath.Join(e.bin, binScheduler), append(args, e.opts.SchedulerFlags...)...)
	if err := p.Start(); err != nil {
		return err
	}
	// The scheduler has nothing to wait for: an early exit is caught here,
	// anything later by the tests whose pods stay pending.
	select {
	case <-p.Exited():
		return fmt.Errorf("%s exited at start:\n%s", p.name, p.Tail(20))
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}

func (e *Env) add(c Component, path string, args ...string) *Process {
	p := e.newProcess(string(c), path, args...)
	e.components[c] = p
	return p
}

// newProcess prepares a process of the control plane, inside its network
// namespace if it has one.
func (e *Env) newProcess(name, path string, args ...string) *Process {
	p := NewProcess(name, path, e.logDir, args...)
	p.ns = e.opts.Netns
	return p
}

// waitFor waits, as Process.WaitUntil, for at most the start timeout.
func (e *Env) waitFor(p *Process, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Timeout)
	defer cancel()
	return p.WaitUntil(ctx, cond)
}

// StopComponent kills a component of the control plane with SIGKILL.
func (e *Env) StopComponent(c Component) error {
	p, ok := e.components[c]
	if !ok {
		return fmt.Errorf("no component %q", c)
	}
	p.Stop(syscall.SIGKILL, 0)
	return nil
}

// StartComponent starts a stopped component again, with the same flags,
// and waits until it is ready (for etcd and kube-apiserver) or running.
func (e *Env) StartComponent(c Component) error {
	p, ok := e.components[c]
	if !ok {
		return fmt.Errorf("no component %q", c)
	}
	if err := p.Start(); err != nil {
		return err
	}
	switch c {
	case APIServer:
		return e.waitAPIServer(p)
	case Etcd:
		return e.waitFor(p, e.etcdHealthy)
	}
	return nil
}

// StartProcess starts a process of the test's own (a webhook, a
// controller) beside the control plane: its log is in Dir/logs with the
// others and in DumpLogs, and Stop kills it first. The test may stop,
// signal and restart it.
func (e *Env) StartProcess(name, path string, args ...string) (*Process, error) {
	return e.StartProcessWithEnv(name, path, nil, args...)
}

// StartProcessWithEnv is StartProcess with environ (NAME=value) added to
// the process's environment.
func (e *Env) StartProcessWithEnv(name, path string, environ []string, args ...string) (*Process, error) {
	p := e.newProcess(name, path, args...)
	p.Env = environ
	e.mu.Lock()
	e.extra = append(e.extra, p)
	e.mu.Unlock()
	return p, p.Start()
}

// Stop kills every process of the control plane, nodes included, and
// removes its directory if New made it. It is safe to call more than once.
func (e *Env) Stop() {
	e.stopOnce.Do(func() {
		e.stopRealNodes()
		e.mu.Lock()
		procs := append([]*Process(nil), e.extra...)
		for _, p := range e.nodes {
			procs = append(procs, p)
		}
		for _, g := range e.groups {
			procs = append(procs, g.proc)
		}
		e.mu.Unlock()
		for _, p := range procs {
			p.Stop(syscall.SIGKILL, 0)
		}
		// Users of the store first: no component logs errors about a
		// vanished dependency while the others are still running.
		for _, c := range []Component{Scheduler, ControllerManager, APIServer, Etcd} {
			if p, ok := e.components[c]; ok {
				p.Stop(syscall.SIGTERM, 5*time.Second)
			}
		}
		if e.ownDir {
			_ = os.RemoveAll(e.Dir)
		}
	})
}

// DumpLogs writes the last lines of each component's log, kwok nodes
// included, to w.
func (e *Env) DumpLogs(w io.Writer, lines int) {
	for _, c := range []Component{Etcd, APIServer, ControllerManager, Scheduler} {
		if p, ok := e.components[c]; ok {
			p.writeTail(w, lines)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, name := range e.order {
		e.nodes[name].writeTail(w, lines)
	}
	groups := slices.Sorted(maps.Keys(e.groups))
	for _, name := range groups {
		e.groups[name].proc.writeTail(w, lines)
	}
	for _, p := range e.extra {
		p.writeTail(w, lines)
	}
}

// CreateNamespace creates a namespace with the given labels and waits until
// pods can be created in it (its default ServiceAccount exists).
func (e *Env) CreateNamespace(ctx context.Context, name string, labels map[string]string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := e.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("namespace %s: no default ServiceAccount: %w", name, err)
	}
	return nil
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Package kubeproxy runs kube-proxy (bin/kube-proxy, built by `make tools`)
// beside an internal/cluster control plane that runs in a network namespace
// of the test's own (cluster.Options.Netns), so that the Services'
// ClusterIPs (198.51.100.0/24 there) lead to their endpoints as they do in
// a cluster: a client in the namespace calls a ClusterIP and kube-proxy's
// rules send the connection to an address the Service's EndpointSlices
// publish. Nothing runs unless a test starts it.
package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/netns"
)

// Mode is kube-proxy's --proxy-mode.
type Mode string

// The modes this package runs.
const (
	NFTables Mode = "nftables"
	IPTables Mode = "iptables"
)

// DefaultMinSyncPeriod is kube-proxy's own default for
// --iptables-min-sync-period, the shortest time between two syncs of its
// rules (the flag sets it in nftables mode too).
const DefaultMinSyncPeriod = time.Second

// NoMinSync is the Options.MinSyncPeriod that runs kube-proxy with
// --iptables-min-sync-period=0s: it syncs as soon as a change arrives.
const NoMinSync time.Duration = -1

// Options configure one kube-proxy.
type Options struct {
	// Node is the name of the node kube-proxy runs for
	// (--hostname-override), a node of the control plane (cluster.Options.Nodes).
	// Required.
	Node string
	// Mode is the proxy mode; empty means NFTables.
	Mode Mode
	// MinSyncPeriod is --iptables-min-sync-period. Zero means
	// DefaultMinSyncPeriod; NoMinSync (any negative value) means 0s.
	MinSyncPeriod time.Duration
	// Name names the process and its log (Dir/logs/NAME.log of the
	// control plane); empty means "kube-proxy".
	Name string
	// Binary is the kube-proxy binary; empty means cluster.BinDir()/kube-proxy.
	Binary string
	// Flags are appended to the command line; a flag given here
	// overrides the package's value of the same flag.
	Flags []string
}

// Ports kube-proxy listens on, on the namespace's loopback.
const (
	HealthzPort = 10256
	MetricsPort = 10249
)

// Proxy is a running kube-proxy.
type Proxy struct {
	// Proc is its process; a test may signal it.
	Proc *cluster.Process
	// LogPath is its log file.
	LogPath string
	// Flags is its command line, without the binary.
	Flags []string

	env     *cluster.Env
	mode    Mode
	started time.Time
}

// ErrNoNetns is returned by Start for a control plane on the host: there,
// kube-proxy would rewrite the host's own rules.
var ErrNoNetns = errors.New("kubeproxy: kube-proxy needs a control plane in a network namespace (cluster.Options.Netns); on the host it would rewrite the host's rules")

// Start starts kube-proxy in the control plane's network namespace, with
// the flags that suit a namespace of the test's own: the pod range
// netns.PodNet as the cluster CIDR, the conntrack sysctls left alone, and
// its health and metrics ports on the namespace's loopback. It returns
// once the process runs; WaitService waits for a Service's rules.
func Start(env *cluster.Env, opts Options) (*Proxy, error) {
	if env == nil || env.Netns() == nil {
		return nil, ErrNoNetns
	}
	if opts.Node == "" {
		return nil, errors.New("kubeproxy: Options.Node is empty: name a node of the control plane (cluster.Options.Nodes) for --hostname-override")
	}
	mode := opts.Mode
	if mode == "" {
		mode = NFTables
	}
	if mode != NFTables && mode != IPTables {
		return nil, fmt.Errorf("kubeproxy: mode %q: want %q or %q", mode, NFTables, IPTables)
	}
	bin := opts.Binary
	if bin == "" {
		dir, err := cluster.BinDir()
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(dir, "kube-proxy")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("kubeproxy: no kube-proxy binary at %s: run `make tools` (or tests/tools/build.sh kubeproxy) at the repository root: %w", bin, err)
	}
	name := opts.Name
	if name == "" {
		name = "kube-proxy"
	}
	flags := Flags(env.Kubeconfig, opts.Node, mode, opts.MinSyncPeriod, opts.Flags...)
	started := time.Now()
	p, err := env.StartProcess(name, bin, flags...)
	if err != nil {
		return nil, fmt.Errorf("kubeproxy: start %s: %w", bin, err)
	}
	return &Proxy{Proc: p, LogPath: filepath.Join(env.Dir, "logs", name+".log"), Flags: flags, env: env, mode: mode, started: started}, nil
}

// Flags returns kube-proxy's command line as Start gives it.
func Flags(kubeconfig, node string, mode Mode, minSync time.Duration, extra ...string) []string {
	switch {
	case minSync == 0:
		minSync = DefaultMinSyncPeriod
	case minSync < 0:
		minSync = 0
	}
	base := []string{
		"--kubeconfig=" + kubeconfig,
		"--proxy-mode=" + string(mode),
		"--hostname-override=" + node,
		"--cluster-cidr=" + netns.PodNet.String(),
		// 0 leaves the conntrack sysctls as they are.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--healthz-bind-address=127.0.0.1:" + strconv.Itoa(HealthzPort),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(MetricsPort),
		"--iptables-min-sync-period=" + minSync.String(),
		"--v=2",
	}
	return override(base, extra)
}

// override replaces the flags of base that extra gives again, and appends
// the rest of extra.
func override(base, extra []string) []string {
	key := func(f string) string { k, _, _ := strings.Cut(f, "="); return k }
	given := map[string]bool{}
	for _, f := range extra {
		given[key(f)] = true
	}
	var out []string
	for _, f := range base {
		if !given[key(f)] {
			out = append(out, f)
		}
	}
	return append(out, extra...)
}

// Stop stops kube-proxy (SIGTERM, then SIGKILL after 5 s). In nftables
// mode it then deletes kube-proxy's tables, so that the namespace sends no
// ClusterIP anywhere until another kube-proxy has synced; in iptables mode
// the rules stay until another kube-proxy replaces them.
func (p *Proxy) Stop(ctx context.Context) error {
	p.Proc.Stop(syscall.SIGTERM, 5*time.Second)
	if p.mode != NFTables {
		return nil
	}
	var errs []error
	for _, family := range []string{"ip", "ip6"} {
		if _, err := p.env.Netns().Command(ctx, "nft", "delete", "table", family, "kube-proxy"); err != nil &&
			!strings.Contains(err.Error(), "No such file or directory") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Synced reports whether this kube-proxy has completed a sync of its
// rules since Start (its log says so).
func (p *Proxy) Synced() (bool, error) {
	syncs, err := p.Syncs()
	if err != nil {
		return false, err
	}
	for _, s := range syncs {
		if !s.Start.Before(p.started.Truncate(time.Millisecond)) {
			return true, nil
		}
	}
	return false, nil
}

// Rules returns kube-proxy's rules in the namespace: its nftables table
// (nftables mode) or the nat table (iptables mode).
func (p *Proxy) Rules(ctx context.Context) (string, error) {
	var out []byte
	var err error
	if p.mode == IPTables {
		out, err = p.env.Netns().Command(ctx, "iptables-save", "-t", "nat")
	} else {
		out, err = p.env.Netns().Command(ctx, "nft", "list", "table", "ip", "kube-proxy")
	}
	return string(out), err
}

// Programmed reports whether kube-proxy's rules send ip:port (TCP) to at
// least one endpoint. A Service without endpoints has rules too (they
// reject), which do not count.
func (p *Proxy) Programmed(ctx context.Context, ip string, port int32) (bool, error) {
	rules, err := p.Rules(ctx)
	if err != nil {
		return false, err
	}
	return programmed(p.mode, rules, ip, port), nil
}

// programmed looks for ip:port in a rule dump: in nftables mode an element
// of the service-ips map (a Service without endpoints is in
// no-endpoint-services instead); in iptables mode a jump from
// KUBE-SERVICES to the Service's chain (one without endpoints is rejected
// in the filter table instead).
func programmed(mode Mode, rules, ip string, port int32) bool {
	ps := strconv.Itoa(int(port))
	if mode == IPTables {
		for _, l := range strings.Split(rules, "\n") {
			if strings.HasPrefix(l, "-A KUBE-SERVICES ") && strings.Contains(l, "-d "+ip+"/32 ") &&
				strings.Contains(l, "--dport "+ps+" ") && strings.Contains(l, "-j KUBE-SVC-") {
				return true
			}
		}
		return false
	}
	inMap := false
	for _, l := range strings.Split(rules, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "map ") {
			inMap = strings.HasPrefix(t, "map service-ips ")
			continue
		}
		if inMap && strings.Contains(t, ip+" . tcp . "+ps+" : goto service-") {
			return true
		}
	}
	return false
}

// WaitService waits up to timeout until this kube-proxy has synced its
// rules and they send every
// TCP port of the Service namespace/name to an endpoint, and returns its
// ClusterIP. It fails early, with the tail of its log, if kube-proxy
// exits.
func (p *Proxy) WaitService(ctx context.Context, namespace, name string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ip string
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !p.Proc.Running() {
			return false, fmt.Errorf("kube-proxy exited:\n%s", p.Proc.Tail(20))
		}
		// Rules an earlier kube-proxy left do not count: this one must
		// have synced.
		synced, err := p.Synced()
		if err != nil {
			last = err
			return false, nil
		}
		if !synced {
			last = errors.New("kube-proxy has not synced its rules yet")
			return false, nil
		}
		svc, err := p.env.Client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		ip = svc.Spec.ClusterIP
		if ip == "" || ip == "None" {
			return false, fmt.Errorf("kubeproxy: Service %s/%s has no ClusterIP (%q)", namespace, name, ip)
		}
		rules, err := p.Rules(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		for _, sp := range svc.Spec.Ports {
			if sp.Protocol != "" && sp.Protocol != "TCP" {
				continue
			}
			if !programmed(p.mode, rules, ip, sp.Port) {
				last = fmt.Errorf("%s:%d has no rule to an endpoint yet", ip, sp.Port)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("kubeproxy: Service %s/%s not programmed after %v: %w", namespace, name, timeout, errors.Join(err, last))
	}
	return ip, nil
}

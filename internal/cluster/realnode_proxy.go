package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Every real node runs kube-proxy in its namespace, as a cluster's
// DaemonSet does: its pods reach Services (the API server's `kubernetes`
// Service first of all) through its rules. It runs as system:kube-proxy,
// the user Kubernetes' bootstrap policy binds to system:node-proxier.

// realProxyHealthz is where a node's kube-proxy serves /healthz, on the
// loopback of the node's namespace.
const realProxyHealthz = "127.0.0.1:10256"

// realProxyFlags is the command line of node n's kube-proxy: nftables
// mode, the real nodes' pod range as the cluster's (traffic from outside it
// to a ClusterIP is masqueraded), the machine's conntrack sysctls left
// alone, its ports on the namespace's loopback.
func (n *RealNode) realProxyFlags() []string {
	return []string{
		"--kubeconfig=" + filepath.Join(n.dir, "kube-proxy", "kubeconfig"),
		"--proxy-mode=nftables",
		"--hostname-override=" + n.Name,
		"--cluster-cidr=" + RealPodNet.String(),
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--healthz-bind-address=" + realProxyHealthz,
		"--metrics-bind-address=127.0.0.1:10249",
		"--v=1",
	}
}

// startProxy writes kube-proxy's credentials and starts it in the node's
// namespace; waitProxy waits until it has synced.
func (n *RealNode) startProxy() error {
	e := n.env
	kp, err := e.pki.ca.IssueClient("system:kube-proxy", nil, 24*time.Hour)
	if err != nil {
		return err
	}
	if err := e.writeClientKubeconfig(filepath.Join(n.dir, "kube-proxy"), "system:kube-proxy", kp); err != nil {
		return err
	}
	n.proxy = NewProcess("kube-proxy-"+n.Name, filepath.Join(e.bin, "kube-proxy"), e.logDir, n.realProxyFlags()...)
	n.proxy.ns = n.NS
	return n.proxy.Start()
}

// waitProxy waits until the node's kube-proxy answers /healthz with 200:
// it has synced its rules once.
func (n *RealNode) waitProxy(ctx context.Context, timeout time.Duration) error {
	tr := &http.Transport{DialContext: n.NS.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Second}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if !n.proxy.Running() {
			return false, fmt.Errorf("kube-proxy exited:\n%s", n.proxy.Tail(20))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+realProxyHealthz+"/healthz", nil)
		resp, err := c.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		_ = resp.Body.Close()
		last = fmt.Errorf("/healthz: %s", resp.Status)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("kube-proxy did not sync within %v: %w\n%s", timeout, errors.Join(err, last), n.proxy.Tail(15))
	}
	return nil
}

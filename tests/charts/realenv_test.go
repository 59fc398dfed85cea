package charts_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/certmanager"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/kubeproxy"
	"github.com/fastover/fastover/internal/netns"
)

// controlPlaneNode is the Node of the control plane's own machine (a kwok
// node, tainted as kubeadm taints a control-plane node, so no pod of the
// charts lands there): the hub's kube-proxy runs for it.
const controlPlaneNode = "control-plane"

// realEnv is a control plane with real nodes of the given names, as a
// cluster has it: kube-apiserver reaches webhooks and APIServices through
// their Services' ClusterIPs (--enable-aggregator-routing=false, the
// upstream default) by the kube-proxy of its own machine, the hub; every
// real node runs one of its own. cert-manager runs beside it.
func realEnv(ctx context.Context, t *testing.T, opts cluster.Options, nodes ...string) (*cluster.Env, map[string]*cluster.RealNode) {
	t.Helper()
	opts.Netns = netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})
	opts.Nodes = []string{controlPlaneNode}
	opts.APIServerFlags = append(opts.APIServerFlags, "--enable-aggregator-routing=false")
	// Its decisions in its log ("Successfully bound pod to node", with
	// the nodes it found feasible).
	opts.SchedulerFlags = append(opts.SchedulerFlags, "--v=2")
	env := cluster.Start(t, opts)
	taint := `{"spec":{"taints":[{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"}]}}`
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Nodes().Patch(ctx, controlPlaneNode, types.StrategicMergePatchType, []byte(taint), metav1.PatchOptions{})
		return err == nil, nil
	}), "taint the control plane's node")
	proxy, err := kubeproxy.Start(env, kubeproxy.Options{Node: controlPlaneNode})
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Stop(context.Background()) })
	certmanager.Start(t, env)
	real := map[string]*cluster.RealNode{}
	for _, name := range nodes {
		n, err := env.AddRealNode(ctx, name)
		require.NoError(t, err)
		real[name] = n
	}
	_, err = proxy.WaitService(ctx, metav1.NamespaceDefault, "kubernetes", time.Minute)
	require.NoError(t, err, "the hub's kube-proxy")
	return env, real
}

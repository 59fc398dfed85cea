package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/netns"
)

// TestRealNodeRunsAPod starts a real node (kubelet, containerd, runc) beside
// the control plane, in a network namespace of its own joined to the
// control plane's: its Node gets Ready, and a pod of the pause image (built
// here, pulled through the test's registry as registry.k8s.io/pause) runs
// on it with an address of the node's pod range, and is deleted (the
// kubelet confirms its containers ended). A pod of the testhost image
// reaches the API server through the `kubernetes` Service's ClusterIP (the
// node's kube-proxy's rules) and its log is read through the API server
// (the kubelet's).
func TestRealNodeRunsAPod(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{Netns: netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})})
	start := time.Now()
	node, err := env.AddRealNode(ctx, "real-1")
	require.NoError(t, err)
	t.Logf("real node %s (%s, pods in %s) Ready %v after it was asked for", node.Name, node.IP, node.PodCIDR, time.Since(start).Round(time.Millisecond))

	n, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://")
	assert.Equal(t, "v1.37.2", n.Status.NodeInfo.KubeletVersion)
	var internal string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	assert.Equal(t, node.IP.String(), internal)

	require.NoError(t, env.CreateNamespace(ctx, "real", nil))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{
			NodeName:                      node.Name,
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []corev1.Container{{
				Name: "pause", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
	created := time.Now()
	_, err = env.Client.CoreV1().Pods("real").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var running *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods("real").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		running = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	require.NoError(t, err, "the pod did not run: %s", describePod(running))
	t.Logf("pod Running %v after it was created, at %s", time.Since(created).Round(time.Millisecond), running.Status.PodIP)
	ip, err := netip.ParseAddr(running.Status.PodIP)
	require.NoError(t, err)
	assert.True(t, node.PodCIDR.Contains(ip), "pod IP %s in %s", ip, node.PodCIDR)

	require.NoError(t, env.Client.CoreV1().Pods("real").Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods("real").Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil, nil
	}), "the pod was not deleted")

	svc, err := env.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	target := net.JoinHostPort(svc.Spec.ClusterIP, "443")
	logs := runToEnd(ctx, t, env, "real", node.Name, "connect", "testhost", "connect", target)
	assert.Contains(t, logs, "connected to "+target, "the pod's connection to the kubernetes Service")
}

// runToEnd runs a pod of one container of the testhost image with args
// on node, waits until it succeeds and returns its log.
func runToEnd(ctx context.Context, t *testing.T, env *cluster.Env, ns, node, name string, args ...string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "testhost", Image: cluster.TestHostImage, Command: args}},
		},
	}
	_, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var last *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	b, logErr := env.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err, "pod %s did not end: %s", name, describePod(last))
	require.NoError(t, logErr, "pod %s's log", name)
	require.Equal(t, corev1.PodSucceeded, last.Status.Phase, "pod %s: %s\n%s", name, describePod(last), b)
	return string(b)
}

// describePod is a pod's phase and its containers' states, for a failure.
func describePod(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	s := fmt.Sprintf("%s on %s: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf("; %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf("; %s terminated: %s", c.Name, c.State.Terminated.Reason)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf("; %s: %s", c.Type, c.Message)
		}
	}
	return s
}

// TestRealNodeLoss is the webhook's story on real nodes: the same
// one-replica Deployment in a labelled namespace (the webhook, a process of
// the test, gives its pod the 0 s unreachable toleration) and in an
// unlabelled one, both on the real node real-1, which is then lost, cut off
// (its link to the hub down) in one subtest and frozen (kubelet killed,
// pods, containerd and its shims stopped) in the other. The injected pod
// runs again on real-2 within the grace period + 15 s (it takes 2 s here,
// idle, and up to 4 s with two packages running beside it: the bound is
// generous, the measured time is logged); the control group's is still
// bound to the lost node at grace + 30 s. The two run at once, each on a
// control plane of its own.
func TestRealNodeLoss(t *testing.T) {
	for _, how := range []string{"cut", "frozen"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			const grace = 10 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			env := cluster.Start(t, cluster.Options{
				NodeMonitorGracePeriod: grace,
				Netns:                  netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}}),
			})
			lost, err := env.AddRealNode(ctx, "real-1")
			require.NoError(t, err)
			injectedAndControl(ctx, t, env)
			_, err = env.AddRealNode(ctx, "real-2")
			require.NoError(t, err)

			lose := func() error {
				t.Logf("%s %s; grace period %v", lost.Name, map[string]string{"cut": "cut off", "frozen": "frozen"}[how], grace)
				if how == "cut" {
					return lost.Partition(true)
				}
				return lost.Freeze()
			}
			nodeLossBy(ctx, t, env, lost.Name, lose, grace, 15*time.Second, 30*time.Second, app{"labelled", "app"}, app{"unlabelled", "app"})
		})
	}
}

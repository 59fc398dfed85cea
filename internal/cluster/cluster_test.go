package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestMissingBinariesNameMakeTools(t *testing.T) {
	_, err := New(Options{BinDir: t.TempDir()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "make tools")
	assert.Contains(t, err.Error(), "kube-apiserver")
}

func TestTailLines(t *testing.T) {
	assert.Equal(t, "c\nd", tailLines([]byte("a\nb\nc\nd\n"), 2))
	assert.Equal(t, "a\nb", tailLines([]byte("a\nb"), 5))
	assert.Empty(t, tailLines(nil, 3))
}

func TestControlPlane(t *testing.T) {
	env := Start(t, Options{NodeMonitorGracePeriod: 5 * time.Second, Nodes: []string{"n1", "n2"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	v, err := env.Client.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, "v1.37.2", v.GitVersion)

	// The kubeconfig file reaches the same server.
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	require.NoError(t, err)
	c, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, nodes.Items, 2)

	t.Run("node vanishes and comes back", func(t *testing.T) {
		require.NoError(t, env.StopNode("n1"))
		assert.False(t, env.NodeRunning("n1"))
		require.NoError(t, env.WaitNodeCondition(ctx, "n1", corev1.ConditionUnknown, 30*time.Second))
		require.NoError(t, env.StartNode("n1"))
		require.NoError(t, env.WaitNodeCondition(ctx, "n1", corev1.ConditionTrue, 30*time.Second))
	})

	t.Run("kube-apiserver restarts", func(t *testing.T) {
		require.NoError(t, env.StopComponent(APIServer))
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		require.Error(t, err)
		require.NoError(t, env.StartComponent(APIServer))
		_, err = env.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		require.NoError(t, err)
	})

	t.Run("namespace is ready for pods", func(t *testing.T) {
		require.NoError(t, env.CreateNamespace(ctx, "ns1", map[string]string{"a": "b"}))
		_, err := env.Client.CoreV1().ServiceAccounts("ns1").Get(ctx, "default", metav1.GetOptions{})
		require.NoError(t, err)
	})
}

// helperEnv makes the test binary, run again by TestNoProcessOutlivesItsTestBinary,
// start a control plane, print the PIDs of its processes and wait to be
// killed.
const helperEnv = "FASTOVER_CLUSTER_HELPER"

func TestHelperControlPlane(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestNoProcessOutlivesItsTestBinary")
	}
	env := Start(t, Options{Nodes: []string{"n1"}})
	var pids []string
	for _, p := range env.components {
		pids = append(pids, strconv.Itoa(p.cmd.Process.Pid))
	}
	for _, p := range env.nodes {
		pids = append(pids, strconv.Itoa(p.cmd.Process.Pid))
	}
	fmt.Printf("PIDS %s\n", strings.Join(pids, " "))
	time.Sleep(time.Minute)
}

// TestNoProcessOutlivesItsTestBinary kills a test binary that runs a
// control plane with SIGKILL, which runs no cleanup, as a `go test -timeout`
// expiry or a killed CI job would: every process it started must die too.
func TestNoProcessOutlivesItsTestBinary(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperControlPlane$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PIDS "); ok {
			for _, f := range strings.Fields(rest) {
				pid, err := strconv.Atoi(f)
				require.NoError(t, err)
				pids = append(pids, pid)
			}
			break
		}
	}
	require.Len(t, pids, 5, "etcd, kube-apiserver, kube-controller-manager, kube-scheduler and one kwok")
	for _, pid := range pids {
		require.NoError(t, syscall.Kill(pid, 0), "process %d should run before the kill", pid)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d outlived its test binary", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// gone reports whether pid no longer runs: it does not exist, or it is a
// zombie left for its dead parent's reaper.
func gone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(s[i+1:], " Z")
}

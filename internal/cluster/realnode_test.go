package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastover/fastover/internal/netns"
)

// TestLeftoversOfAKilledTestAreSwept plays a test binary that dies with a
// real node running a pod: its kubelet and containerd die with it (their
// parent-death signal), its shims and the pod's processes do not (they are
// no children of the test). The next real node finds them and kills them
// before it starts: nothing is left in the dead binary's cgroup root, which
// is removed, no shim of the dead containerd survives, and the new node
// runs a pod of its own.
func TestLeftoversOfAKilledTestAreSwept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The first node's cgroup root names another process, the test binary
	// that will die: alive until then, so that no sweep takes the node
	// before (every test binary that starts a real node sweeps, at any
	// moment: make test runs several side by side).
	owner := exec.Command("sleep", "600")
	require.NoError(t, owner.Start())
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	ownerPID = owner.Process.Pid
	first := Start(t, Options{Netns: netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})})
	dead, err := first.AddRealNode(ctx, "real-1")
	ownerPID = os.Getpid()
	require.NoError(t, err)
	runPause(ctx, t, first, dead.Name)
	sweepLeftovers() // another binary's, while the owner lives
	require.NotEmpty(t, cgroupProcs(dead.cgroupName()), "a sweep took the pod of a node whose binary lives")
	// The test binary dies: no Stop, no cleanup.
	first.mu.Lock()
	first.realNodes = nil
	first.mu.Unlock()
	dead.kubelet.Stop(syscall.SIGKILL, 0)
	dead.containerd.Stop(syscall.SIGKILL, 0)
	shims := dead.shims()
	require.NotEmpty(t, shims, "the shims outlive containerd")
	require.NotEmpty(t, cgroupProcs(dead.cgroupName()), "the pod's processes outlive the kubelet")
	require.NoError(t, owner.Process.Kill())
	_ = owner.Wait()
	first.Stop()

	second := Start(t, Options{Netns: netns.ForTest(t, netns.Options{Routes: []netip.Prefix{netns.ServiceNet}})})
	n, err := second.AddRealNode(ctx, "real-1")
	require.NoError(t, err)
	for _, pid := range shims {
		assert.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return !processAlive(pid), nil
		}), "the dead containerd's shim %d", pid)
	}
	assert.Empty(t, cgroupProcs(dead.cgroupName()), "the dead node's containers")
	assert.NoDirExists(t, filepath.Join("/sys/fs/cgroup/memory", dead.cgroupName()))
	runPause(ctx, t, second, n.Name)
}

// runPause runs a pod of the pause image on the node and waits until it
// runs.
func runPause(ctx context.Context, t *testing.T, e *Env, node string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause-" + node, Namespace: metav1.NamespaceDefault},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "pause", Image: PauseImage}}},
	}
	_, err := e.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	}), "the pod did not run on %s", node)
}

// cgroupProcs are the processes in the cgroup root, in the memory
// hierarchy.
func cgroupProcs(cgroup string) []int {
	var pids []int
	_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/memory", cgroup), func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What real nodes change outside their directories, and how it is undone:
// the hub's bridge and forwarding, the kernel settings the kubelet sets,
// the host directories it and containerd use whatever their configs say,
// the cgroups runc makes, the mounts under each node's directory.

// kubeletSysctls are the global settings the kubelet sets at start.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// hostDirs are used by every kubelet, containerd or CNI plugin of the
// machine whatever their configs say; removed when the last real node of
// the machine stops if they were made after the first started
// (hostHolders).
var hostDirs = []string{"/var/lib/kubelet", "/var/log/containers", "/run/containerd", "/var/lib/cni"}

// cgroupHierarchies are the cgroup v1 hierarchies a node's cgroup root is
// made in, and "unified", where runc also makes the pods' cgroups on a
// hybrid host.
var cgroupHierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd", "unified"}

// prepareRealNodes does, once per Env, what the real nodes share: the
// hub's bridge and forwarding, the registry with the test images, a record
// of the host's settings.
func (e *Env) prepareRealNodes(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.registry != nil {
		return nil
	}
	if err := e.opts.Netns.AddBridge(hubBridge, hubAddress); err != nil {
		return err
	}
	// Pods of one node reach another's through the hub.
	if err := e.opts.Netns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		return fmt.Errorf("cluster: forwarding in the hub: %w", err)
	}
	if err := machineHost.acquire(); err != nil {
		return err
	}
	e.holdsHost = true
	reg, err := e.startRegistry(hubAddress.Addr())
	if err != nil {
		return err
	}
	e.registry = reg
	return e.pushTestImages(ctx)
}

// stopRealNodes stops every real node and puts the host back.
func (e *Env) stopRealNodes() {
	e.mu.Lock()
	nodes := slices.Clone(e.realNodes)
	reg, holds := e.registry, e.holdsHost
	e.holdsHost = false
	e.mu.Unlock()
	for i := len(nodes) - 1; i >= 0; i-- {
		nodes[i].Stop()
	}
	reg.stop()
	if holds {
		machineHost.release()
	}
}

// makeCgroupRoot makes /name in every cgroup v1 hierarchy (cpuset with
// the root's CPUs and memory nodes, which a new cpuset lacks).
func makeCgroupRoot(name string) error {
	for _, h := range cgroupHierarchies {
		base := filepath.Join("/sys/fs/cgroup", h)
		if h == "unified" {
			continue // runc makes what it needs there
		}
		if _, err := os.Stat(base); err != nil {
			continue
		}
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		if h == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(base, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroupRoot removes /name and every cgroup under it, deepest
// first, in every hierarchy (what is still in use stays).
func removeCgroupRoot(name string) {
	for _, h := range cgroupHierarchies {
		root := filepath.Join("/sys/fs/cgroup", h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(dirs[i])
		}
	}
}

// unmountUnder unmounts, deepest first and lazily, every mount under dir:
// the containers' root file systems, the pods' shm and network namespaces.
func unmountUnder(dir string) {
	prefix := filepath.Clean(dir) + "/"
	unmountWhere(func(point string) bool { return strings.HasPrefix(point, prefix) })
}

// unmountWhere unmounts, deepest first and lazily, every mount point the
// filter takes.
func unmountWhere(take func(point string) bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && take(fields[4]) {
			points = append(points, fields[4])
		}
	}
	_ = f.Close()
	slices.Sort(points)
	for i := len(points) - 1; i >= 0; i-- {
		_ = unix.Unmount(points[i], unix.MNT_DETACH)
	}
}

// sweepLeftovers removes what test binaries that were killed left of
// their real nodes: the processes in their cgroup roots (the pods'
// containers, which are no children of a test and outlive it; the freezer
// thawed first), those cgroups, and runc shims whose containerd is gone.
// A root is a dead binary's when the process its name says is gone.
func sweepLeftovers() {
	entries, _ := os.ReadDir("/sys/fs/cgroup/memory")
	for _, en := range entries {
		var pid, seq int
		if _, err := fmt.Sscanf(en.Name(), "fastover-%d-n%d", &pid, &seq); err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		sweepCgroupRoot(en.Name())
	}
	for _, pid := range orphanedShims() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	unmountOrphans()
}

// unmountOrphans unmounts what a dead real node's containerd and kubelet
// mounted under its directory (the containers' root file systems, the
// pods' shm, network namespaces and volumes), found by the node's
// containerd socket, which nothing answers on.
func unmountOrphans() {
	dead := map[string]bool{}
	unmountWhere(func(point string) bool {
		// <Env.Dir>/nodes/<name>/...
		i := strings.Index(point, "/nodes/")
		if i < 0 {
			return false
		}
		j := strings.IndexByte(point[i+len("/nodes/"):], '/')
		if j < 0 {
			return false
		}
		sock := point[:i+len("/nodes/")+j] + "/containerd/containerd.sock"
		gone, seen := dead[sock]
		if !seen {
			c, err := net.DialTimeout("unix", sock, time.Second)
			if gone = err != nil; !gone {
				_ = c.Close()
			}
			dead[sock] = gone
		}
		return gone
	})
}

// sweepCgroupRoot kills every process in the cgroup root, in every
// hierarchy, and removes its cgroups once they have left.
func sweepCgroupRoot(cgroup string) {
	freezer := filepath.Join("/sys/fs/cgroup/freezer", cgroup, "freezer.state")
	if _, err := os.Stat(freezer); err == nil {
		_ = os.WriteFile(freezer, []byte("THAWED"), 0o644)
	}
	for _, h := range cgroupHierarchies {
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup", h, cgroup), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				var pid int
				if _, err := fmt.Sscanf(f, "%d", &pid); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	// The killed processes leave their cgroups a moment later.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		removeCgroupRoot(cgroup)
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", cgroup)); errors.Is(err, os.ErrNotExist) {
			return
		}
	}
}

// processAlive reports whether the process runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// orphanedShims are the runc shims of this machine whose containerd is
// gone: nothing answers on their socket (their -address).
func orphanedShims() []int {
	var pids []int
	for pid, args := range shimProcesses() {
		for i, a := range args {
			if a != "-address" || i+1 >= len(args) {
				continue
			}
			c, err := net.DialTimeout("unix", args[i+1], time.Second)
			if err != nil {
				pids = append(pids, pid)
				continue
			}
			_ = c.Close()
		}
	}
	return pids
}

// shimProcesses are the runc shims of the machine, with their command
// lines.
func shimProcesses() map[int][]string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := map[int][]string{}
	for _, en := range entries {
		var pid int
		if _, err := fmt.Sscanf(en.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 0 && strings.HasSuffix(args[0], "containerd-shim-runc-v2") {
			out[pid] = args
		}
	}
	return out
}

// ctr runs ctr against the node's containerd, in the CRI's namespace.
func (n *RealNode) ctr(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.env.bin, "ctr"),
		append([]string{"--address", filepath.Join(n.dir, "containerd", "containerd.sock"), "-n", "k8s.io"}, args...)...)
	return cmd.Output()
}

// killContainers kills and deletes every task and container of the node.
func (n *RealNode) killContainers() {
	if n.containerd == nil || !n.containerd.Running() {
		return
	}
	ctx := context.Background()
	out, err := n.ctr(ctx, "tasks", "ls", "-q")
	if err != nil {
		return
	}
	tasks := strings.Fields(string(out))
	for _, t := range tasks {
		_, _ = n.ctr(ctx, "tasks", "kill", "-s", "KILL", t)
	}
	for _, t := range tasks {
		_, _ = n.ctr(ctx, "tasks", "delete", "-f", t)
	}
	if out, err := n.ctr(ctx, "containers", "ls", "-q"); err == nil {
		for _, c := range strings.Fields(string(out)) {
			_, _ = n.ctr(ctx, "containers", "delete", c)
		}
	}
}

// shims returns the PIDs of the runc shims of the node's containerd,
// found by the socket on their command line: they outlive containerd.
func (n *RealNode) shims() []int {
	sock := filepath.Join(n.dir, "containerd", "containerd.sock")
	var pids []int
	for pid, args := range shimProcesses() {
		if slices.Contains(args, sock) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killShims kills the node's shims.
func (n *RealNode) killShims() {
	for _, pid := range n.shims() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

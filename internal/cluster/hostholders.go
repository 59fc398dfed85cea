package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// hostHolders counts who uses the machine's shared state (the kernel
// settings the kubelet sets, the host directories every kubelet and
// containerd use, hostDirs) across the processes of the machine, so that
// the state is recorded by the first holder and put back by the last one
// to leave, whichever process each is: two test binaries with real nodes
// (make test runs tests/e2e beside tests/charts) must not remove
// /run/containerd, where each containerd keeps its shims' sockets, under
// the other's running pods.
//
// Within a process, Envs are counted in memory; across processes, each
// process with a holding Env has a file in dir/holders, named by its pid
// and start time, and dir/state.json is what the first holder found. Both
// change under an exclusive flock of dir/lock. A holder whose process has
// died (a killed test binary) no longer counts; the state it recorded is
// kept for the next last holder, since it is the machine's as it was
// before any real node.
type hostHolders struct {
	dir     string   // /run/fastover-host; /run is emptied at boot
	sysctls []string // under /proc/sys
	dirs    []string

	mu    sync.Mutex
	users int // this process's Envs with real nodes
}

// machineHost is the machine's: what real nodes acquire.
var machineHost = &hostHolders{dir: "/run/fastover-host", sysctls: kubeletSysctls, dirs: hostDirs}

// hostState is what the first holder found, to put back when the last one
// leaves.
type hostState struct {
	Sysctls map[string]string `json:"sysctls"`
	Made    []string          `json:"made"` // directories that did not exist
}

// acquire counts one more Env of this process; the first registers the
// process, and records the machine's state if no other process holds it.
func (h *hostHolders) acquire() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users++; h.users > 1 {
		return nil
	}
	err := h.locked(func() error {
		if _, err := os.Stat(h.statePath()); errors.Is(err, os.ErrNotExist) {
			if err := h.record(); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(h.dir, "holders", selfHolder()), nil, 0o644)
	})
	if err != nil {
		h.users--
		return fmt.Errorf("cluster: holding the machine's state (%s): %w", h.dir, err)
	}
	return nil
}

// release counts one Env less; the last of the process unregisters it,
// and if no live process holds the machine any more, puts its state back.
func (h *hostHolders) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users == 0 {
		return
	}
	if h.users--; h.users > 0 {
		return
	}
	_ = h.locked(func() error {
		_ = os.Remove(filepath.Join(h.dir, "holders", selfHolder()))
		if h.liveHolders() > 0 {
			return nil
		}
		h.restore()
		return nil
	})
}

// locked runs f with dir/lock held exclusively.
func (h *hostHolders) locked(f func() error) error {
	if err := os.MkdirAll(filepath.Join(h.dir, "holders"), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(h.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = lock.Close() }() // closing the file releases the lock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	return f()
}

// liveHolders counts the holders whose process runs, removing the files
// of the others.
func (h *hostHolders) liveHolders() int {
	entries, _ := os.ReadDir(filepath.Join(h.dir, "holders"))
	n := 0
	for _, en := range entries {
		pid, start, ok := parseHolder(en.Name())
		if ok && processAlive(pid) && processStart(pid) == start {
			n++
			continue
		}
		_ = os.Remove(filepath.Join(h.dir, "holders", en.Name()))
	}
	return n
}

func (h *hostHolders) statePath() string { return filepath.Join(h.dir, "state.json") }

// record writes the machine's state as it is now.
func (h *hostHolders) record() error {
	s := hostState{Sysctls: map[string]string{}}
	for _, k := range h.sysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			s.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	for _, d := range h.dirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			s.Made = append(s.Made, d)
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(h.statePath(), b, 0o644)
}

// restore puts the recorded state back and forgets it.
func (h *hostHolders) restore() {
	b, err := os.ReadFile(h.statePath())
	if err != nil {
		return
	}
	var s hostState
	if json.Unmarshal(b, &s) == nil {
		for k, v := range s.Sysctls {
			_ = os.WriteFile("/proc/sys/"+k, []byte(v), 0o644)
		}
		for _, d := range s.Made {
			_ = os.RemoveAll(d)
		}
	}
	_ = os.Remove(h.statePath())
}

// selfHolder names this process's holder file: its pid and start time,
// so that a later process with the same pid is not taken for it.
func selfHolder() string {
	pid := os.Getpid()
	return fmt.Sprintf("%d-%d", pid, processStart(pid))
}

// parseHolder reads a holder file's name.
func parseHolder(name string) (pid int, start uint64, ok bool) {
	p, s, found := strings.Cut(name, "-")
	if !found {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(s, 10, 64)
	return pid, start, err1 == nil && err2 == nil && pid > 0
}

// processStart is the process's start time in clock ticks after boot
// (field 22 of /proc/PID/stat), 0 if it cannot be read.
func processStart(pid int) uint64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	// After "pid (comm) ", the fields from state (3) on.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// memoryLimitRatio is the share of the container's memory limit given to
// the Go runtime as its soft limit (GOMEMLIMIT): the rest is for what the
// runtime does not count (thread stacks outside the heap, the binary's
// text) and for the garbage collector to catch up before the kernel's OOM
// killer acts. 128 MiB gives 115 MiB.
const memoryLimitRatio = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit to
// memoryLimitRatio of the memory limit of the process's cgroup (the
// container's limits.memory), unless GOMEMLIMIT is set (the runtime then
// has it already) or no limit is found. root is "/" but in tests.
func setMemoryLimit(log logr.Logger, root string) {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return
	}
	limit, ok := cgroupMemoryLimit(root)
	if !ok {
		log.Info("no memory limit found in the cgroup; GOMEMLIMIT not set")
		return
	}
	soft := int64(float64(limit) * memoryLimitRatio)
	debug.SetMemoryLimit(soft)
	log.Info("memory limit from the cgroup", "cgroupLimitBytes", limit, "goMemLimitBytes", soft)
}

// noLimit: cgroup v1 reports "no limit" as a huge number (the largest
// multiple of the page size).
const noLimit = 1 << 60

// cgroupMemoryLimit reads the memory limit of the process's cgroup, v2
// (memory.max) or v1 (memory.limit_in_bytes), under root. Inside a
// container the cgroup file system shows the container's own cgroup at
// its top; otherwise the path comes from /proc/self/cgroup.
func cgroupMemoryLimit(root string) (int64, bool) {
	var candidates []string
	if data, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			// hierarchy-ID:controller-list:cgroup-path
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup", parts[2], "memory.max"))
			case hasController(parts[1], "memory"):
				candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"))
			}
		}
	}
	candidates = append(candidates,
		filepath.Join(root, "sys/fs/cgroup/memory.max"),
		filepath.Join(root, "sys/fs/cgroup/memory/memory.limit_in_bytes"))
	for _, f := range candidates {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(data))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= noLimit {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

package procstat

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ),
// 100 on every Linux architecture the project runs on.
const ClockTicks = 100

// stat returns the fields of /proc/<pid>/stat after the command's name
// (field 3, the state, first).
func stat(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	return parseStat(pid, string(data))
}

func parseStat(pid int, s string) ([]string, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return f, nil
}

// ParentPid returns the process's parent (field 4 of its stat).
func ParentPid(pid int) (int, error) {
	f, err := stat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[1])
}

// CPUTicks returns utime+stime of the process (fields 14 and 15 of its
// stat), in ClockTicks.
func CPUTicks(pid int) (int64, error) {
	f, err := stat(pid)
	if err != nil {
		return 0, err
	}
	return cpuTicks(pid, f)
}

func cpuTicks(pid int, f []string) (int64, error) {
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return u + s, nil
}

// CPU returns the process's CPU time so far, user and system.
func CPU(pid int) (time.Duration, error) {
	t, err := CPUTicks(pid)
	return time.Duration(t) * time.Second / ClockTicks, err
}

// PeakRSS returns the process's peak resident set size (VmHWM), in bytes.
func PeakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseHWM(pid, string(data))
}

func parseHWM(pid int, status string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

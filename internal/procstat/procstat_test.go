package procstat

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSelf(t *testing.T) {
	pid := os.Getpid()
	ppid, err := ParentPid(pid)
	require.NoError(t, err)
	assert.Equal(t, os.Getppid(), ppid)
	_, err = CPU(pid)
	require.NoError(t, err)
	rss, err := PeakRSS(pid)
	require.NoError(t, err)
	assert.Greater(t, rss, int64(1<<20), "a Go test binary's peak RSS is over 1 MiB")
	_, err = CPU(-1)
	assert.Error(t, err)
}

func TestParse(t *testing.T) {
	// A command name with spaces and parentheses is skipped whole.
	f, err := parseStat(7, "7 (a) b (c) S 1 7 7 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 1 0 5 1000 10")
	require.NoError(t, err)
	ticks, err := cpuTicks(7, f)
	require.NoError(t, err)
	assert.Equal(t, int64(280), ticks)
	_, err = parseStat(7, "7 (a S 1")
	assert.ErrorContains(t, err, "no command name")
	_, err = parseStat(7, "7 (a) S 1 2")
	assert.ErrorContains(t, err, "5 fields", "pid, name and the three after it")

	b, err := parseHWM(7, "Name:\ta\nVmHWM:\t  2048 kB\nVmRSS:\t 1 kB\n")
	require.NoError(t, err)
	assert.Equal(t, int64(2<<20), b)
	_, err = parseHWM(7, "Name:\ta\n")
	assert.ErrorContains(t, err, "no VmHWM")
	_, err = parseHWM(7, "VmHWM: lots kB\n")
	assert.ErrorContains(t, err, "VmHWM")
}

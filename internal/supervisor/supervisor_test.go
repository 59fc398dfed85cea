//go:build linux

package supervisor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func newSupervisor(cmd []string) *Supervisor {
	return &Supervisor{Command: cmd, Grace: 5 * time.Second, LostGrace: 200 * time.Millisecond, Log: logr.Discard()}
}

// The command's status is a shell's: its exit code, 128+N for signal N.
func TestStatusIsAShells(t *testing.T) {
	for _, tc := range []struct {
		script string
		code   int
	}{{"exit 0", 0}, {"exit 3", 3}, {"kill -KILL $$", 137}, {"kill -SEGV $$", 139}} {
		s := newSupervisor(sh(tc.script))
		err := s.Work(context.Background())
		code, ended := s.Status()
		require.True(t, ended, tc.script)
		assert.Equal(t, tc.code, code, tc.script)
		if tc.code == 0 {
			assert.NoError(t, err)
			continue
		}
		var ee *ExitError
		require.ErrorAs(t, err, &ee, tc.script)
		assert.Equal(t, tc.code, ee.Code)
	}
}

// A command that cannot start: 127 not found, 126 not executable, with
// the command's name in the error; Ready then fails at once.
func TestCommandThatCannotStart(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	for path, code := range map[string]int{"no-such-command-here": 127, filepath.Join(dir, "missing"): 127, notExec: 126} {
		s := newSupervisor([]string{path})
		err := s.Work(context.Background())
		var ee *ExitError
		require.ErrorAs(t, err, &ee, path)
		assert.Equal(t, code, ee.Code, path)
		assert.Contains(t, err.Error(), path)
		assert.Error(t, s.Ready(context.Background()))
		assert.False(t, s.Ran())
	}
}

// When the term ends, the command gets SIGTERM; one that ignores it is
// killed after LostGrace (the Lease lost) or Grace (a planned stop), and
// its process group with it.
func TestStopTermThenKill(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	// It ignores SIGTERM, and leaves a grandchild in its group.
	cmd := sh(`trap '' TERM; sleep 60 & echo $! > ` + pidFile + `; while :; do sleep 0.05; done`)
	for _, planned := range []bool{false, true} {
		s := newSupervisor(cmd)
		s.Grace = 600 * time.Millisecond
		s.Stopping = func() bool { return planned }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Work(ctx) }()
		require.NoError(t, s.Ready(ctx), "no check: ready at once")
		// The shell creates the file before it writes the pid: wait for
		// a whole number, not for the file.
		var grandchild int
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(pidFile)
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false
			}
			grandchild, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		}, 5*time.Second, 10*time.Millisecond, "the command wrote no pid")
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err, "a stopped command is no error")
		case <-time.After(10 * time.Second):
			t.Fatal("Work did not return")
		}
		took := time.Since(start)
		want := s.LostGrace
		if planned {
			want = s.Grace
		}
		assert.GreaterOrEqual(t, took, want, "planned=%v", planned)
		assert.Less(t, took, want+3*time.Second, "planned=%v", planned)
		code, _ := s.Status()
		assert.Equal(t, 137, code)
		assert.Eventually(t, func() bool { return syscall.Kill(grandchild, 0) != nil }, 5*time.Second, 10*time.Millisecond,
			"the command's grandchild outlived it")
		require.NoError(t, os.Remove(pidFile))
	}
}

// A command that ends on SIGTERM is not waited for.
func TestStopEndsOnTerm(t *testing.T) {
	s := newSupervisor(sh(`trap 'exit 0' TERM; while :; do sleep 0.05; done`))
	s.LostGrace = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Work(ctx) }()
	require.NoError(t, s.Ready(ctx))
	time.Sleep(100 * time.Millisecond) // the trap is set
	start := time.Now()
	cancel()
	require.NoError(t, <-done)
	assert.Less(t, time.Since(start), 5*time.Second)
	code, _ := s.Status()
	assert.Equal(t, 0, code)
}

// Ready waits for the check: an HTTP server that answers 503, then 200;
// a TCP port that opens later; and fails if the command ends first.
func TestReadyWaitsForTheCheck(t *testing.T) {
	var ok atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ok.Load() {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	s := newSupervisor(sh("sleep 30"))
	s.Check = Check{HTTP: srv.URL + "/readyz", Period: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Work(ctx) }()
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	assert.ErrorIs(t, s.Ready(short), context.DeadlineExceeded, "ready while the check answers 503")
	cancelShort()
	ok.Store(true)
	require.NoError(t, s.Ready(ctx))
	cancel()
	require.NoError(t, <-done)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	s = newSupervisor(sh("sleep 30"))
	s.Check = Check{TCP: addr, Period: 10 * time.Millisecond}
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- s.Work(ctx) }()
	short, cancelShort = context.WithTimeout(ctx, 200*time.Millisecond)
	assert.Error(t, s.Ready(short), "ready before the port opened")
	cancelShort()
	l, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	require.NoError(t, s.Ready(ctx))
	cancel()
	require.NoError(t, <-done)

	s = newSupervisor(sh("exit 2"))
	s.Check = Check{TCP: addr + "0", Period: 10 * time.Millisecond}
	go func() { done <- s.Work(context.Background()) }()
	err = s.Ready(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ended before it was ready")
	var ee *ExitError
	require.True(t, errors.As(<-done, &ee))
	assert.Equal(t, 2, ee.Code)
}

// SIGHUP, SIGUSR1 and SIGUSR2 to the process reach the command.
func TestSignalsArePassedOn(t *testing.T) {
	s := newSupervisor(sh(`trap 'exit 42' USR1; while :; do sleep 0.05; done`))
	done := make(chan error, 1)
	go func() { done <- s.Work(context.Background()) }()
	require.NoError(t, s.Ready(context.Background()))
	time.Sleep(200 * time.Millisecond) // the trap is set
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	var ee *ExitError
	select {
	case err := <-done:
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 42, ee.Code)
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not get SIGUSR1")
	}
}

func TestCheckValidate(t *testing.T) {
	assert.NoError(t, Check{}.Validate())
	assert.NoError(t, Check{HTTP: "http://127.0.0.1:8080/readyz"}.Validate())
	assert.NoError(t, Check{TCP: "127.0.0.1:8080"}.Validate())
	for _, c := range []Check{
		{HTTP: "http://a", TCP: "a:1"},
		{HTTP: "127.0.0.1:8080/readyz"},
		{HTTP: "ftp://host/x"},
		{HTTP: "http://"},
		{TCP: "8080"},
	} {
		assert.Error(t, c.Validate(), "%+v", c)
	}
}

// As PID 1 of a container, the process inherits the orphans of the
// command's processes; the reaper reaps them, so none stays a zombie.
// The test process becomes a child subreaper to inherit them as PID 1
// would.
func TestOrphansAreReaped(t *testing.T) {
	require.NoError(t, unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
	defer func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) }()
	pidFile := filepath.Join(t.TempDir(), "orphan")
	s := newSupervisor(sh(`sleep 0.3 & echo $! > ` + pidFile + `; exit 0`))
	require.NoError(t, s.Work(context.Background()))
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	orphan := strings.TrimSpace(string(b))
	// While it runs its parent is this process; once it has ended, it is
	// gone from /proc (a zombie would stay, in state Z).
	assert.Eventually(t, func() bool {
		_, err := os.Stat("/proc/" + orphan)
		return os.IsNotExist(err)
	}, 10*time.Second, 20*time.Millisecond, "the orphan %s was not reaped", orphan)
}

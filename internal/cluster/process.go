package cluster

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fastover/fastover/internal/netns"
)

// Process is a child process of the test with its output in a log file:
// a component of the control plane, a kwok node, or a process a test runs
// itself (Env.StartProcess). It runs in its own process group and is
// killed when the test binary dies, however it dies.
type Process struct {
	name    string
	path    string
	args    []string
	logPath string
	ns      *netns.NS // the network namespace it runs in; nil: the host's
	// Env is added to the test binary's environment (NAME=value).
	Env []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the running cmd has exited
	waitErr error         // how the last run ended
}

// NewProcess prepares a process; its log is logDir/NAME.log. Start runs it.
func NewProcess(name, path, logDir string, args ...string) *Process {
	return &Process{name: name, path: path, args: args, logPath: filepath.Join(logDir, name+".log")}
}

// Start runs the process. Its output is appended to its log file, so a
// restarted process keeps the earlier log.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done: // exited by itself: may run again
		default:
			return fmt.Errorf("%s is already running", p.name)
		}
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(logFile, "### %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: Ctrl-C on the terminal reaches the test
		// binary only, and kill can take the whole group.
		Setpgid: true,
		// Killed by the kernel as soon as the test binary dies, however it
		// dies (a test timeout panics and exits without cleanups).
		Pdeathsig: syscall.SIGKILL,
	}
	// Forked from the host thread, which never ends (hostthread.go).
	start := func() error { return startOnHostThread(cmd) }
	if p.ns != nil {
		// Forked from the namespace's thread: born inside it, and its
		// Pdeathsig also fires when the namespace is closed.
		start = func() error { return p.ns.Start(cmd) }
	}
	if err := start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		_ = logFile.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// Running reports whether the process has been started and not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited returns a channel closed when the current run of the process
// ends, or nil if it is not running.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Stop sends sig to the process group, waits up to grace for the process
// to exit, then kills the group with SIGKILL. Stopping a process that is
// not running does nothing.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	// Anything left in the group (nothing, for these binaries) goes too.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	p.mu.Lock()
	if p.cmd == cmd {
		p.cmd, p.done = nil, nil
	}
	p.mu.Unlock()
}

// ExitErr is how the last run of the process ended: nil for exit code 0,
// an *exec.ExitError otherwise. It is meaningful once Exited is closed.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// WaitExit waits up to timeout for the current run to end, and returns
// whether it did and how (ExitErr).
func (p *Process) WaitExit(timeout time.Duration) (exited bool, exitErr error) {
	done := p.Exited()
	if done == nil {
		return true, p.ExitErr()
	}
	select {
	case <-done:
		return true, p.ExitErr()
	case <-time.After(timeout):
		return false, nil
	}
}

// Signal sends sig to the running process (SIGSTOP and SIGCONT freeze and
// thaw it).
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// Pid returns the process ID of the running process, or 0.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return tailLines(data, n)
}

func tailLines(data []byte, n int) string {
	data = bytes.TrimRight(data, "\n")
	i := len(data)
	for ; n > 0 && i > 0; n-- {
		j := bytes.LastIndexByte(data[:i], '\n')
		if j < 0 {
			i = 0
			break
		}
		i = j
	}
	if i > 0 {
		i++ // skip the newline
	}
	return string(data[i:])
}

// writeTail writes the tail of the log with a header.
func (p *Process) writeTail(w io.Writer, n int) {
	_, _ = fmt.Fprintf(w, "----- %s (last %d lines of %s) -----\n%s\n", p.name, n, p.logPath, p.Tail(n))
}

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
)

// process is one component of the control plane, running as a child
// process with its output in a log file.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the running cmd has exited
}

func newProcess(name, path, logDir string, args ...string) *process {
	return &process{name: name, path: path, args: args, logPath: filepath.Join(logDir, name+".log")}
}

// start runs the process. Its output is appended to its log file, so a
// restarted process keeps the earlier log.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.name)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(logFile, "### %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
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
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// running reports whether the process has been started and not exited.
func (p *process) running() bool {
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

// exited returns a channel closed when the current run of the process
// ends, or nil if it is not running.
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// stop kills the process group with sig, waits up to grace for it to exit,
// then kills it with SIGKILL. Stopping a process that is not running is a
// no-op.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
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

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
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
func (p *process) writeTail(w io.Writer, n int) {
	_, _ = fmt.Fprintf(w, "----- %s (last %d lines of %s) -----\n%s\n", p.name, n, p.logPath, p.tail(n))
}

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// child is one run of the command, in a process group of its own.
type child struct {
	pid   int
	ended chan struct{} // closed once the status is in ws
	ws    unix.WaitStatus
}

// startChild starts argv with the process's environment and standard
// streams, in a process group of its own. A command that cannot start
// returns an *ExitError with a shell's status: 127 not found, 126 not
// executable.
func startChild(argv []string) (*child, error) {
	path, err := Find(argv[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = procAttr()
	status, err := processReaper().start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		return nil, startError(argv[0], err)
	}
	// The reaper waits for it: the handle is not needed (and Release
	// clears its Pid, so it is read first).
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	if pid <= 1 {
		return nil, startError(argv[0], fmt.Errorf("started as pid %d", pid))
	}
	c := &child{pid: pid, ended: make(chan struct{})}
	go func() {
		c.ws = <-status
		close(c.ended)
	}()
	return c, nil
}

// Find returns the path the command name runs, as a shell finds it (in
// $PATH unless it has a slash); an *ExitError with status 127 or 126 if
// there is none.
func Find(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", startError(name, err)
	}
	return path, nil
}

// StatusOf returns the exit status err carries: an *ExitError's Code, 1
// for any other error, 0 for nil.
func StatusOf(err error) int {
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.Code
	}
	return 1
}

// startError is the error of a command that could not start.
func startError(name string, err error) error {
	code := 127
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) {
		code = 126
	}
	return &ExitError{Code: code, Err: fmt.Errorf("%s: %w", name, err)}
}

// signal sends sig to the command (not its group).
func (c *child) signal(sig syscall.Signal) {
	_ = unix.Kill(c.pid, sig)
}

// killGroup kills what is left of the command's process group.
func (c *child) killGroup() {
	_ = unix.Kill(-c.pid, unix.SIGKILL)
}

// stop ends the command: SIGTERM, then, if it has not ended within grace,
// SIGKILL. Either way what is left of its process group is killed, as a
// container's end kills every process in it: nothing the command started
// runs on. It returns once the command has ended, and whether it had to be
// killed.
func (c *child) stop(grace time.Duration) (killed bool) {
	c.signal(unix.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.ended:
	case <-t.C:
		killed = true
	}
	c.killGroup()
	<-c.ended
	return killed
}

// ExitError is the end of a command that did not exit with status 0, or
// could not start.
type ExitError struct {
	// Code is the status a shell reports: the exit code, 128+N for a
	// command ended by signal N, 126 or 127 for one that could not start.
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// exitCode is a shell's status for ws.
func exitCode(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// describe says how the command ended.
func describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ws.ExitStatus())
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// Supervisor runs Command as one leader's work: Work is the work function
// of leader.Elector.Run, Ready the endpoint's gate
// (leader.EndpointConfig.Ready). A process runs one term at most, so a
// Supervisor runs its command once.
type Supervisor struct {
	// Command is the program and its arguments.
	Command []string
	// Check is when the command is ready to serve.
	Check Check
	// Grace is how long a command has to end after SIGTERM on a planned
	// stop (Stopping true), before SIGKILL: the pod's grace period less
	// the release.
	Grace time.Duration
	// LostGrace is the same when the term ends otherwise (the Lease
	// lost): short enough that the command has ended before another
	// replica can lead.
	LostGrace time.Duration
	// Stopping says whether a planned stop is under way (the process got
	// SIGTERM).
	Stopping func() bool
	Log      logr.Logger

	once   sync.Once
	ready  chan struct{} // closed when the check passes
	ended  chan struct{} // closed when the command has ended
	status int           // its status, once ended
	ran    bool
}

func (s *Supervisor) init() {
	s.once.Do(func() {
		s.ready = make(chan struct{})
		s.ended = make(chan struct{})
	})
}

// Work starts the command and returns when it ends: nil if it exited with
// status 0 or was stopped because ctx ended, an *ExitError otherwise (and
// if it could not start). When ctx ends, it stops the command (SIGTERM,
// SIGKILL after Grace or LostGrace) and returns once it has ended.
// SIGHUP, SIGUSR1 and SIGUSR2 to the process are passed on to the command.
func (s *Supervisor) Work(ctx context.Context) error {
	s.init()
	if len(s.Command) == 0 {
		return errors.New("supervisor: no command")
	}
	started := time.Now()
	c, err := startChild(s.Command)
	if err != nil {
		s.status = StatusOf(err)
		close(s.ended)
		return err
	}
	s.ran = true
	s.Log.Info("started the command", "pid", c.pid, "command", s.Command)

	fwd := make(chan os.Signal, 4)
	signal.Notify(fwd, unix.SIGHUP, unix.SIGUSR1, unix.SIGUSR2)
	defer signal.Stop(fwd)
	checkCtx, stopCheck := context.WithCancel(ctx)
	defer stopCheck()
	go func() {
		if s.Check.wait(checkCtx) == nil {
			s.Log.Info("the command is ready", "check", s.Check.String(), "after", time.Since(started).Round(time.Millisecond))
			close(s.ready)
		}
	}()

wait:
	for {
		select {
		case sig := <-fwd:
			c.signal(sig.(syscall.Signal))
		case <-c.ended:
			c.killGroup() // what it left behind
			return s.end(c.ws, false)
		case <-ctx.Done():
			break wait
		}
	}
	grace, why := s.LostGrace, "the term ended"
	if s.Stopping != nil && s.Stopping() {
		grace, why = s.Grace, "stopping"
	}
	s.Log.Info(why+": stopping the command", "pid", c.pid, "grace", grace)
	killed := c.stop(grace)
	if killed {
		s.Log.Info("the command did not end within its grace period: killed", "grace", grace)
	}
	_ = s.end(c.ws, true)
	return nil
}

// end records how the command ended and returns Work's error for it.
func (s *Supervisor) end(ws unix.WaitStatus, stopped bool) error {
	s.status = exitCode(ws)
	close(s.ended)
	s.Log.Info("the command "+describe(ws), "stopped", stopped)
	if s.status == 0 {
		return nil
	}
	return &ExitError{Code: s.status, Err: fmt.Errorf("the command %s", describe(ws))}
}

// Ready returns nil once the command is ready, an error if it ended
// before, or ctx's error.
func (s *Supervisor) Ready(ctx context.Context) error {
	s.init()
	select {
	case <-s.ready:
		return nil
	case <-s.ended:
		return errors.New("the command ended before it was ready")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status returns the command's status as a shell reports it, and whether
// it ran and ended (or could not start).
func (s *Supervisor) Status() (int, bool) {
	s.init()
	select {
	case <-s.ended:
		return s.status, true
	default:
		return 0, false
	}
}

// Ran says whether the command was started.
func (s *Supervisor) Ran() bool { return s.ran }

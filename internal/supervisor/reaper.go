package supervisor

import (
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// reaper waits for every child of the process on SIGCHLD and hands the
// status of each one a caller started to that caller. Started once per
// process: it reaps children that no one registered (the orphans PID 1
// inherits) too, so nothing else in the process may wait for a child.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
}

var (
	theReaper     *reaper
	theReaperOnce sync.Once
)

// processReaper returns the process's reaper, started on first use.
func processReaper() *reaper {
	theReaperOnce.Do(func() {
		theReaper = &reaper{waiting: map[int]chan unix.WaitStatus{}}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, unix.SIGCHLD)
		go func() {
			for range sigs {
				theReaper.reap()
			}
		}()
	})
	return theReaper
}

// start runs start (which starts a child and returns its pid) with the
// reaper held: a status reaped meanwhile waits for the lock, and finds the
// child registered. The channel delivers the child's status.
func (r *reaper) start(start func() (int, error)) (<-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[pid] = ch
	return ch, nil
}

// reap collects every child that has ended.
func (r *reaper) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		// A pid no one registered is an orphan PID 1 inherited: reaped,
		// and nothing more.
		r.mu.Lock()
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws
		}
		r.mu.Unlock()
	}
}

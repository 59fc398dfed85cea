package cluster

import (
	"os/exec"
	"runtime"
	"sync"
)

// The kernel's parent-death signal follows the thread that forked a child,
// not the process: when that thread ends, the child gets its Pdeathsig
// (SIGKILL here). Go ends a thread when a goroutine locked to it returns,
// and internal/netns does exactly that after every dial or listen inside a
// namespace. A host process forked by an ordinary goroutine could
// therefore be killed by the next dial into a real node's namespace, on
// whichever thread the runtime picked. Host processes are forked by one
// thread that never ends instead.
var hostThread struct {
	once sync.Once
	jobs chan func()
}

// startOnHostThread starts cmd from the host thread.
func startOnHostThread(cmd *exec.Cmd) error {
	hostThread.once.Do(func() {
		hostThread.jobs = make(chan func())
		go func() {
			// Locked and never returning: the runtime never ends this
			// thread, and no other goroutine ever runs on it (so none can
			// move it into a namespace).
			runtime.LockOSThread()
			for job := range hostThread.jobs {
				job()
			}
		}()
	})
	errc := make(chan error, 1)
	hostThread.jobs <- func() { errc <- cmd.Start() }
	return <-errc
}

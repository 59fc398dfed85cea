package supervisor

import "syscall"

// procAttr puts the command in a process group of its own, and has the
// kernel kill it if fastover-run dies (SIGKILL, an OOM kill): a command
// whose supervisor is gone must not run on, beside the next leader's.
// (Pdeathsig follows the thread that forked; Go ends a thread only when a
// goroutine locked to it returns, which the supervisor never does.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

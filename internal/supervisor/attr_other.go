//go:build !linux

package supervisor

import "syscall"

// procAttr puts the command in a process group of its own. Outside Linux
// there is no parent-death signal: a command outlives a killed supervisor.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// Command pause is the sandbox image of the tests' real nodes: the first
// process of every pod, which holds its namespaces. It waits for SIGTERM
// or SIGINT and reaps the children it inherits meanwhile (it is PID 1 when
// the pod shares its PID namespace). internal/cluster builds it and serves
// it from the tests' registry as registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}

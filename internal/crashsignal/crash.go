package crashsignal

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Handle makes the process crash on SIGUSR1 (a panic: exit code 2) and on
// SIGUSR2 (memory allocated until the process is killed, or the runtime
// gives up); name is the program's, for the panic's message and the line
// logged to stderr before allocating.
func Handle(name string) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		switch <-ch {
		case syscall.SIGUSR1:
			panic(name + ": SIGUSR1: a panic, as a controller's bug would cause")
		case syscall.SIGUSR2:
			fmt.Fprintln(os.Stderr, name+": SIGUSR2: allocating memory until the OOM killer ends the process")
			allocateForever()
		}
	}()
}

// ballast holds what allocateForever allocates, out of the collector's
// reach.
var ballast [][]byte

// allocateForever allocates 8 MiB at a time and writes every page, so the
// memory is resident and counts against the container's limit.
func allocateForever() {
	for {
		b := make([]byte, 8<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		ballast = append(ballast, b)
	}
}

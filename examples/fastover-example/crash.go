package main

import (
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

// crashOnSignals makes the process crash as controllers do, on demand
// (--crash-signals, for tests and demos): SIGUSR1 panics (exit code 2),
// SIGUSR2 allocates memory until the container's memory limit has the
// kernel kill it (the kubelet reports OOMKilled).
func crashOnSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		switch <-ch {
		case syscall.SIGUSR1:
			panic("fastover-example: SIGUSR1 (--crash-signals): a panic, as a controller's bug would cause")
		case syscall.SIGUSR2:
			klog.InfoS("SIGUSR2 (--crash-signals): allocating memory until the OOM killer ends the process")
			klog.Flush()
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

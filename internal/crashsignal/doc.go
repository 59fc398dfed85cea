// Package crashsignal makes a program crash on demand, as controllers
// crash, for the tests and demos that measure what happens then:
// SIGUSR1 panics, SIGUSR2 allocates memory until the container's memory
// limit has the kernel kill the process (the kubelet reports OOMKilled).
package crashsignal

// Package benchrun is how every command under tests/bench begins and ends:
// Main prints its error and exits 1; Parse refuses stray arguments; Start
// finds the binaries it runs in its -bin directory and brings up the local
// control plane (internal/cluster) it measures on.
package benchrun

// Package supervisor runs a command as a leader's work, for fastover-run:
// the command starts when the replica leads, is ready when a check the
// user names passes (an HTTP GET, a TCP connect, or at once), and stops
// when the term ends: on a planned stop with SIGTERM and the pod's grace
// period, when the Lease is lost with a grace short enough that it has
// ended before another replica can lead. Its exit status is the
// process's, as a shell reports it (N, or 128+signal).
//
// The supervisor reaps every child of the process, not only the command:
// as PID 1 of a container it also reaps the orphans the kernel gives it,
// so that none stays a zombie. SIGTERM goes to the command alone, as the
// kubelet sends it to a container's first process; SIGKILL goes to the
// command's whole process group, as a container's end kills every
// process in it.
package supervisor

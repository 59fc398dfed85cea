// Package procstat reads what the benchmarks and tests measure of a
// process from Linux's /proc: its parent, its CPU time (utime + stime) and
// its peak resident set size (VmHWM).
package procstat

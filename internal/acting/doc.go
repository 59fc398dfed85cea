// Package acting reads the acting log of fastover-example (--acting-log):
// one line each time a leader acts, dated by the machine's wall clock, from
// every replica of a test (processes, or pods of real nodes sharing a
// hostPath), so that a test checks from outside that no two replicas ever
// acted at once.
package acting

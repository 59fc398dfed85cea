// Package testtime tells where the time of `make test` goes: it reads the
// events of `go test -json` (test2json's format), echoes their output as
// `go test -v` prints it while keeping the events, and summarises the
// events of a run, with the wall time of make's phases, as a table: the
// phases, every package, and the slowest tests.
//
// `make test` writes the events to bin/test-times and prints the table at
// its end (see docs/development.md, "Where the time goes").
package testtime

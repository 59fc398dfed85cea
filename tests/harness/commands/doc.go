// Package commands builds fastover's commands for a test binary: once, in
// the repository's workspace as `make` builds them, into a temporary
// directory that the suite's TestMain removes.
package commands

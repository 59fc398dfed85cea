// Package commands builds fastover's commands for a test binary: once, in
// the repository's workspace as `make` builds them, into a temporary
// directory that the suite's TestMain removes; or finds them built already
// in the directory that FASTOVER_TEST_COMMANDS names (make test builds them
// once there for all its go test processes).
package commands

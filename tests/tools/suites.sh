#!/usr/bin/env bash
# suites.sh runs fastover's end-to-end suites: the packages under tests/ and
# internal/cluster (make e2e), the Helm charts' module tests/charts (make
# charts-test), or both as make test runs them (make suites).
#
#   tests/tools/suites.sh e2e|charts|both
#
# both runs the work in two phases, paired by what it needs of the two
# cores:
#   - heavy: the builders (the packages other than tests/e2e, which build
#     images and modules) beside tests/e2e's parallel tests (those that
#     call t.Parallel first and time nothing, tests/e2e/doc.go);
#   - light: two streams, each a part of tests/e2e's serial tests (whose
#     timed checks need cores that are not saturated; testtime -shard)
#     and a part of tests/charts' (real nodes, a third of one core each),
#     in opposite orders: the two charts' parts side by side kept the
#     cores 85% busy and took a minute longer than beside timed tests.
#     Three such streams saturated the cores: a timed check failed.
#     The two streams are balanced as wholes (both packages' tests in one
#     balance) by the tests' times in the last run's events (TIMES, else
#     TIMES.last, which make test keeps); with none, every other test by
#     name.
# fastover's commands are built once, before both, for every go test
# process (FASTOVER_TEST_COMMANDS, tests/harness/commands).
# The lines of all but one stream are prefixed with their package. Each go
# test's events go to $TIMES (make test-times); the exit status is 1 if any
# failed.
#
# Environment (the Makefile sets it): TIMES, TESTTIME (internal/testtime's
# command, built), E2E_TIMEOUT, E2E_PARALLEL, GOTEST_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${TIMES:?TIMES: the directory of the events}" "${TESTTIME:?TESTTIME: the testtime command}"
E2E_TIMEOUT=${E2E_TIMEOUT:-35m}
E2E_PARALLEL=${E2E_PARALLEL:-3}
read -r -a flags <<<"${GOTEST_FLAGS:-}"
e2e=github.com/fastover/fastover/tests/e2e

gotest() { go test "${flags[@]}" -count=1 -timeout "$E2E_TIMEOUT" -json "$@"; }

# fastover's commands, built once for every go test process of the run
# (tests/harness/commands: FASTOVER_TEST_COMMANDS) rather than once in each.
commands=$(mktemp -d "${TMPDIR:-/tmp}/fastover-test-commands-XXXXXX")
side=
cleanup() {
	[[ -z $side ]] || kill $side 2>/dev/null || true
	rm -rf "$commands"
}
trap cleanup EXIT
echo "==> fastover's commands for the tests: go build -o $commands/ ./cmd/... ./examples/..."
GOWORK= go build -o "$commands/" ./cmd/... ./examples/...
export FASTOVER_TEST_COMMANDS=$commands

# builders: every package of E2E_PKGS but tests/e2e, two at a time.
builders() {
	local pkgs
	pkgs=$(go list ./tests/... ./internal/cluster/... | grep -v -x "$e2e") || return 1
	# shellcheck disable=SC2086 # one package per word
	gotest $pkgs | "$TESTTIME" tee "$TIMES/e2e.json"
}

# e2etests RUN FILE [TESTTIME FLAGS]: tests/e2e's tests matching RUN.
e2etests() {
	local run=$1 file=$2
	shift 2
	gotest -parallel "$E2E_PARALLEL" -run "$run" ./tests/e2e | "$TESTTIME" "$@" tee "$TIMES/$file"
}

# charts RUN FILE [TESTTIME FLAGS]: the module tests/charts' tests matching
# RUN.
charts() {
	local run=$1 file=$2
	shift 2
	(cd tests/charts && GOWORK=off gotest -run "$run" ./...) | "$TESTTIME" "$@" tee "$TIMES/$file"
}

case ${1:-} in
e2e)
	rm -f "$TIMES"/e2e*.json
	builders
	e2etests . e2e.json
	;;
charts)
	rm -f "$TIMES"/charts*.json
	charts . charts.json
	;;
both)
	last=$TIMES
	[[ -e $last/e2e.json ]] || last=$TIMES.last
	if [[ -e $last/e2e.json ]]; then
		echo "==> the light phase's halves, balanced by the times of the run in $last"
	else
		echo "==> the light phase's halves, every other test by name (no earlier run's times)"
	fi
	parallel=$("$TESTTIME" -parallel tests tests/e2e)
	# Each stream's half of the timed tests and of the charts' tests,
	# balanced together: the two streams take about the same time.
	{
		read -r timed1
		read -r charts1
	} < <("$TESTTIME" -shard 1/2 -times "$last" tests tests/e2e:serial tests/charts)
	{
		read -r timed2
		read -r charts2
	} < <("$TESTTIME" -shard 2/2 -times "$last" tests tests/e2e:serial tests/charts)
	[[ -n $timed1 && -n $charts1 && -n $timed2 && -n $charts2 ]] || {
		echo "suites.sh: testtime gave no halves" >&2
		exit 1
	}
	rm -f "$TIMES"/e2e*.json "$TIMES"/charts*.json
	rc=0
	# The heavy phase: what builds, beside what times nothing.
	e2etests "$parallel" e2e-parallel.json -prefix &
	side=$!
	builders || rc=1
	wait $side || rc=1
	# The light phase: two streams, one half of the timed tests then half
	# of the charts' tests, the other the other way round, so that the
	# charts' real nodes run beside timed tests, not beside each other.
	(
		r=0
		charts "$charts2" charts2.json -prefix || r=1
		e2etests "$timed2" e2e-timed2.json -prefix || r=1
		exit $r
	) &
	side=$!
	e2etests "$timed1" e2e.json || rc=1
	charts "$charts1" charts.json || rc=1
	wait $side || rc=1
	side=
	exit $rc
	;;
*)
	echo "usage: $0 e2e|charts|both" >&2
	exit 2
	;;
esac

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
#   - light: tests/e2e's serial tests, whose timed checks need cores that
#     are not saturated, in two halves (testtime -shard) beside each other
#     and beside tests/charts (whose real nodes use a third of one core).
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

# charts [TESTTIME FLAGS]: the module tests/charts.
charts() {
	(cd tests/charts && GOWORK=off gotest ./...) | "$TESTTIME" "$@" tee "$TIMES/charts.json"
}

case ${1:-} in
e2e)
	rm -f "$TIMES"/e2e*.json
	builders
	e2etests . e2e.json
	;;
charts)
	rm -f "$TIMES/charts.json"
	charts
	;;
both)
	rm -f "$TIMES"/e2e*.json "$TIMES/charts.json"
	parallel=$("$TESTTIME" -parallel tests tests/e2e)
	timed1=$("$TESTTIME" -serial -shard 1/2 tests tests/e2e)
	timed2=$("$TESTTIME" -serial -shard 2/2 tests tests/e2e)
	pids=()
	trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
	rc=0
	# The heavy phase: what builds, beside what times nothing.
	e2etests "$parallel" e2e-parallel.json -prefix &
	pids=($!)
	builders || rc=1
	wait "${pids[@]}" || rc=1
	# The light phase: the timed tests in two halves, beside the charts.
	e2etests "$timed2" e2e-timed2.json -prefix &
	pids=($!)
	charts -prefix &
	pids+=($!)
	e2etests "$timed1" e2e.json || rc=1
	for p in "${pids[@]}"; do
		wait "$p" || rc=1
	done
	trap - EXIT
	exit $rc
	;;
*)
	echo "usage: $0 e2e|charts|both" >&2
	exit 2
	;;
esac

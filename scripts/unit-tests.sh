#!/usr/bin/env bash
# `make unit-tests`: swift test, its whole log kept in .build/unit-tests.log, and on a
# failure the failed tests and their recorded issues printed again at the end, where a CI
# log's tail shows them (swift-testing prints each failure where it happens, often
# thousands of lines before the summary).
set -uo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
log=.build/unit-tests.log
mkdir -p .build
"$SWIFT" test "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
    echo
    echo "== unit tests failed (exit $status); the failures, from $log:"
    grep -E '✘|recorded an issue|Expectation failed|error:|Fatal error|Caught error' "$log" | head -n 80
fi
exit "$status"

#!/usr/bin/env bash
# Builds the libFuzzer targets under Fuzz/ with AddressSanitizer and runs each for
# FUZZ_SECONDS (default 600) seconds; docs/fuzzing.md says what each covers.
#
#   scripts/fuzz.sh                      every target, 10 minutes each (`make fuzz`)
#   FUZZ_SECONDS=30 scripts/fuzz.sh      the smoke form CI runs (`make fuzz-smoke`)
#   scripts/fuzz.sh protocol time        some targets only
#
# A build failure, a crash, a leak, a timeout or a broken invariant fails the script, with
# the input that did it in .build/fuzz/artifacts/<target>/ (replay: the binary with that
# file as its argument). Inputs that reached new code accumulate in .build/fuzz/corpus/;
# the seeds in Fuzz/corpus/ are read, never written; Fuzz/dict/<target>.dict, when there is
# one, is the target's libFuzzer dictionary.
set -euo pipefail
cd "$(dirname "$0")/.."

SWIFT=${SWIFT:-swift}
SECONDS_EACH=${FUZZ_SECONDS:-600}
ALL=(protocol policy gpsd-reports time gpsd-session uevent)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")
BUILD=.build/fuzz
mkdir -p "$BUILD"

for target in "${TARGETS[@]}"; do
    [ -d "Fuzz/Targets/fuzz-$target" ] || { echo "fuzz.sh: no target '$target' (have: ${ALL[*]})" >&2; exit 2; }
done

# Debug configuration: the targets use @testable import. The manifest lists them only with
# DEVACCESS_FUZZ=1; a separate build path keeps the instrumented objects away from .build/debug.
for target in "${TARGETS[@]}"; do
    echo "fuzz.sh: building fuzz-$target" >&2
    if ! DEVACCESS_FUZZ=1 "$SWIFT" build --build-path "$BUILD" -c debug \
            -Xswiftc -sanitize=fuzzer,address --product "fuzz-$target" > "$BUILD/build-$target.log" 2>&1; then
        grep -E "error:" "$BUILD/build-$target.log" | sort -u | head -20 >&2 || true
        echo "fuzz.sh: FAILED to build fuzz-$target (full log: $BUILD/build-$target.log)" >&2
        exit 1
    fi
done

# Crashes go to libFuzzer's handler (which saves the input), not Swift's interactive backtracer.
export SWIFT_BACKTRACE=enable=no
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}

failed=()
for target in "${TARGETS[@]}"; do
    corpus=$BUILD/corpus/$target artifacts=$BUILD/artifacts/$target log=$BUILD/fuzz-$target.log
    mkdir -p "$corpus" "$artifacts"
    echo "fuzz.sh: fuzz-$target for ${SECONDS_EACH}s" >&2
    # A target's dictionary (libFuzzer's -dict: words it splices into inputs), when it has one.
    dict=()
    [ ! -f "Fuzz/dict/$target.dict" ] || dict=(-dict="Fuzz/dict/$target.dict")
    status=0
    "$BUILD/debug/fuzz-$target" "$corpus" "Fuzz/corpus/$target" -max_total_time="$SECONDS_EACH" \
        -timeout=30 -rss_limit_mb=4096 -max_len=8192 -print_final_stats=1 "${dict[@]}" \
        -artifact_prefix="$artifacts/" > "$log" 2>&1 || status=$?
    done_line=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -1 || true)
    runs=$(grep -E "^stat::number_of_executed_units:" "$log" | awk '{print $2}' || true)
    if [ $status -ne 0 ]; then
        grep -E "ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|fuzz invariant broken|Fatal error|SUMMARY:|Test unit written" \
            "$log" | head -10 | cut -c1-300 >&2 || true
        echo "fuzz-$target: FAILED (exit $status); log $log, input in $artifacts/" >&2
        failed+=("$target")
    else
        echo "fuzz-$target: ${SECONDS_EACH}s, ${runs:-?} executions, ${done_line#*DONE }"
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
    exit 1
fi

#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (AddressSanitizer and
# UBSan, CPU-only) and runs each for a bounded time on its committed corpus.
# CI runs it from scripts/test.sh with the defaults.
#
#   scripts/fuzz.sh [--time S] [--parallel N] [--build DIR] [TARGET...] [-- FLAGS...]
#   scripts/fuzz.sh --seeds     regenerate fuzz/corpus/ (make_corpus) and exit
#
#   --time S      seconds per target (default 20)
#   --parallel N  targets that run at once (default 2, one per core of CI)
#   --build DIR   the build folder (default build-fuzz)
#   TARGET        request reply config snapshot png pose depth (default: all)
#   FLAGS         passed on to every libFuzzer run (e.g. -runs=100000)
#
# New inputs go to DIR/fuzz-work/TARGET, never into the repository; a crash,
# a leak, undefined behaviour or a broken invariant leaves its input in
# DIR/fuzz-artifacts/ and makes the script fail with the target's log.
# Nothing is downloaded: clang and libFuzzer come from Debian's clang and
# libclang-rt-14-dev (scripts/install-deps.sh --test).
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(request reply config snapshot png pose depth)
time_s=20
parallel=2
build=build-fuzz
seeds=0
targets=()
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
    --time) time_s=$2; shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --seeds) seeds=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

cc=${TSDF_FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null; then
    echo "fuzz: $cc not found (Debian: clang libclang-rt-14-dev)" >&2
    exit 1
fi
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTSDF_FUZZ=ON -DTSDF_ASAN=ON -DTSDF_CUDA=OFF -DTSDF_TESTS=OFF -DTSDF_BENCH=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzzers >/dev/null

if [ $seeds = 1 ]; then
    # Overwrites the generated seeds only: inputs added by hand or merged
    # from long runs (regression cases) stay.
    "$build/fuzz/make_corpus" fuzz/corpus config/tsdfd.conf
    echo "fuzz: seeds written to fuzz/corpus ($(find fuzz/corpus -type f | wc -l) files)"
    exit 0
fi

mkdir -p "$build/fuzz-artifacts"
# A sanitizer report must fail the run; leaks count (libFuzzer checks them).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

run_one() {
    local t=$1 work="$build/fuzz-work/$1" log="$build/fuzz-work/$1.log"
    mkdir -p "$work"
    if ! "$build/fuzz/fuzz_$t" -max_total_time="$time_s" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" \
        ${extra[@]+"${extra[@]}"} "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
        echo "fuzz: $t FAILED; its log ($log) ends:" >&2
        tail -n 60 "$log" >&2
        return 1
    fi
    # The last status line: executions, coverage, features, corpus.
    local done_line stats
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 | tr -s '[:space:]' ' ' || true)
    echo "fuzz: $t ok in ${time_s}s: ${done_line#\#}"
}

pids=()
failed=0
for t in "${targets[@]}"; do
    [ -f "fuzz/fuzz_$t.c" ] || { echo "fuzz: no target $t" >&2; exit 2; }
    run_one "$t" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$parallel" ]; then
        wait "${pids[0]}" || failed=1
        pids=("${pids[@]:1}")
    fi
done
for p in ${pids[@]+"${pids[@]}"}; do
    wait "$p" || failed=1
done
exit $failed

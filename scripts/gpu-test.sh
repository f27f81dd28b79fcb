#!/usr/bin/env bash
# gpu-test.sh - the GPU test run, in one command, on a machine with a CUDA
# GPU (built for sm_90, the H100/H200; set CUDA_ARCH to change):
#   1. configure into build-gpu (BUILD_DIR overrides) with
#      -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH,
#   2. build the whole project (DEPS_PREFIX: dependencies unpacked off /usr,
#      e.g. /opt/deps from .device-deps/env.sh on the lent GPU machine),
#   3. run `ctest -L gpu --output-on-failure`,
#   4. run every GPU test program under compute-sanitizer --tool memcheck,
#      initcheck and racecheck (SANITIZER_TOOLS, a space-separated list,
#      overrides) with --error-exitcode (7-Scenes cut to
#      SANITIZER_7SCENES_FRAMES frames, default 10, to keep it short),
#   5. print a summary; the exit status is non-zero if any step failed.
# Logs go to $BUILD_DIR/gpu-test-logs/ (GPU_TEST_LOGS overrides). Set
# SKIP_SANITIZERS=1 to skip 4; SANITIZER_TIMEOUT (s, default 300) bounds each
# sanitizer run (one that runs past it gets the threads' backtraces, or
# their states, appended to its log: stall_report). The 7-Scenes data is read from $TSDF_DATA_DIR (see
# tests/testutil.h); without it that case is skipped with a message.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
LOGS=${GPU_TEST_LOGS:-$BUILD_DIR/gpu-test-logs}
SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-300}
SANITIZER_7SCENES_FRAMES=${SANITIZER_7SCENES_FRAMES:-10}

declare -a SUMMARY=()
FAILED=0

step() { # name status
    SUMMARY+=("$(printf '%-44s %s' "$1" "$2")")
    case "$2" in PASS* | SKIP) ;; *) FAILED=1 ;; esac
}

finish() {
    echo
    echo "==================== gpu-test summary ===================="
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
            sed 's/^/GPU: /'
    fi
    for line in "${SUMMARY[@]}"; do
        echo "$line"
    done
    if [ "$FAILED" -eq 0 ]; then
        echo "RESULT: PASS"
    else
        echo "RESULT: FAIL (logs in $LOGS)"
    fi
    exit "$FAILED"
}

# Where the threads of process $1 and of its descendants are: gdb's
# backtraces where gdb exists, else each thread's state and kernel wait
# channel. For a run past its time limit: a stall (threads blocked, or
# one spinning) tells itself apart from a slow run, and where.
stall_report() {
    local pids=$1 p t
    local todo=$1
    while [ -n "$todo" ]; do
        local next=""
        for p in $todo; do
            for t in $(pgrep -P "$p" 2>/dev/null); do
                pids="$pids $t"
                next="$next $t"
            done
        done
        todo=$next
    done
    # Whether the GPU is still running its kernels (a kernel that does not
    # finish) or idle (the host waits on something else).
    if command -v nvidia-smi >/dev/null 2>&1; then
        echo "== stall report: GPU use by process (nvidia-smi pmon, 3 samples)"
        timeout 20 nvidia-smi pmon -c 3 -s u 2>&1 | head -20
    fi
    for p in $pids; do
        [ -r "/proc/$p/cmdline" ] || continue
        echo "== stall report: pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-200)"
        # Our test programs print their main thread's backtrace on
        # SIGUSR1 (tests/trace_signal.c), into this log.
        case "$(readlink "/proc/$p/exe" 2>/dev/null)" in
        "$BUILD_DIR"/tests/test_*)
            kill -USR1 "$p" 2>/dev/null && sleep 3
            ;;
        esac
        if command -v gdb >/dev/null 2>&1; then
            timeout 60 gdb -batch -nx -p "$p" -ex "thread apply all bt 30" 2>&1 |
                grep -E "^Thread|^#" | head -200
        else
            for t in /proc/"$p"/task/*; do
                echo "   thread ${t##*/}: state $(awk '{print $3}' "$t/stat" 2>/dev/null)," \
                    "wchan $(cat "$t/wchan" 2>/dev/null)," \
                    "utime+stime $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null) ticks"
            done
        fi
    done
}

# Runs a command (in a process group of its own) with its output in log
# $1, for at most SANITIZER_TIMEOUT seconds; past that, appends
# stall_report to the log, kills the group and returns 124, as timeout(1).
run_bounded() {
    local log=$1 waited=0
    shift
    # Appending, so that what the program writes after stall_report has
    # started (its backtrace) goes after the report, not over it.
    : >"$log"
    setsid "$@" >>"$log" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$waited" -ge "$SANITIZER_TIMEOUT" ]; then
            stall_report "$pid" >>"$log" 2>&1
            kill -TERM -- "-$pid" 2>/dev/null
            sleep 5
            kill -KILL -- "-$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            return 124
        fi
        sleep 1
        waited=$((waited + 1))
    done
    wait "$pid"
}

mkdir -p "$LOGS"

# Dependencies unpacked outside /usr (DEPS_PREFIX): CMAKE_EXTRA.
# shellcheck source=scripts/deps-prefix.sh
. "$ROOT/scripts/deps-prefix.sh"

# The GPU test programs are the files tests/test_cuda_*.c.
TARGETS=()
for f in "$ROOT"/tests/test_cuda_*.c; do
    [ -e "$f" ] || continue
    TARGETS+=("$(basename "${f%.c}")")
done

# The whole project: GPU tests such as the daemon overlap test need tsdfd
# and the client, and bench_engine is built too.
if ! cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" "${CMAKE_EXTRA[@]}" \
    >"$LOGS/configure.log" 2>&1; then
    grep -E "Error" -A5 "$LOGS/configure.log" | head -30
    step "configure (sm_$CUDA_ARCH)" FAIL
    finish
fi
if ! cmake --build "$BUILD_DIR" -j"$JOBS" >"$LOGS/build.log" 2>&1; then
    grep -E "error|Error" "$LOGS/build.log" | head -40
    step "build (sm_$CUDA_ARCH)" FAIL
    finish
fi
step "configure + build (sm_$CUDA_ARCH)" PASS

(cd "$BUILD_DIR" && ctest -L gpu --output-on-failure -V) >"$LOGS/ctest.log" 2>&1
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
    step "ctest -L gpu" FAIL
elif grep -qE "\(Skipped\)|Not Run" "$LOGS/ctest.log"; then
    step "ctest -L gpu" "SKIP (no usable GPU?)"
    FAILED=1
else
    step "ctest -L gpu" PASS
fi
# The figures the test programs print, without CTest's prefixes.
grep -E "\[[a-z0-9 ]+\]|^[0-9]+: (collisions|growth|leak check|uploads of|last frame|memory cap|frame +[0-9]+:)|Test +#|tests passed|FAILED|ERROR" \
    "$LOGS/ctest.log" | sed -E 's/^[0-9]+: //' | tee "$LOGS/figures.log"

if [ "${SKIP_SANITIZERS:-0}" = 1 ]; then
    step "compute-sanitizer" SKIP
    finish
fi
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$SAN" ]; then
    step "compute-sanitizer (not found)" FAIL
    finish
fi
read -r -a TOOLS <<<"${SANITIZER_TOOLS:-memcheck initcheck racecheck}"
for tool in "${TOOLS[@]}"; do
    for t in "${TARGETS[@]}"; do
        log="$LOGS/$tool-$t.log"
        extra=()
        [ "$tool" = memcheck ] && extra=(--leak-check full)
        exe=$(find "$BUILD_DIR" -name "$t" -type f -perm -u+x | head -1)
        if [ -z "$exe" ]; then
            step "$tool $t" "FAIL (program not found)"
            continue
        fi
        run_bounded "$log" env -C "$(dirname "$exe")" TSDF_SOURCE_DIR="$ROOT" \
            TSDF_7SCENES_FRAMES="$SANITIZER_7SCENES_FRAMES" TSDF_UNDER_SANITIZER=1 \
            TSDF_SANITIZER_TOOL="$tool" \
            "$SAN" --tool "$tool" "${extra[@]}" --error-exitcode 99 "./$t"
        rc=$?
        summary_line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$log" | tail -1)
        if [ "$rc" -eq 0 ]; then
            step "$tool $t" "PASS  ${summary_line#========= }"
        elif [ "$rc" -eq 124 ]; then
            step "$tool $t" "FAIL (timed out after ${SANITIZER_TIMEOUT}s)"
        elif [ "$rc" -eq 77 ]; then
            step "$tool $t" SKIP
        else
            tail -30 "$log"
            step "$tool $t" "FAIL (exit $rc) ${summary_line#========= }"
        fi
    done
done
finish

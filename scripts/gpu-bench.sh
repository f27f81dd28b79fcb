#!/usr/bin/env bash
# gpu-bench.sh - every benchmark behind bench/RESULTS.md's table "Issue #10:
# where every target stands", in one command, on a machine with a CUDA GPU:
#   1. configure and build into build-gpu (BUILD_DIR overrides; the same
#      tree scripts/gpu-test.sh builds, DEPS_PREFIX as there:
#      scripts/deps-prefix.sh),
#   2. bench_engine on 7-Scenes at 1 cm and at 5 mm (the data folder from
#      $TSDF_DATA_DIR, default ../shared/data/7scenes-redkitchen; skipped,
#      saying so, when it is absent),
#   3. bench_transport's floors (a frame's request, a raycast image's reply,
#      in the message and through a ring),
#   4. bench_daemon against a spawned tsdfd on CUDA: 32 clients for 30 s
#      through rings with raycasts (with normals, and depth alone), 12 s
#      without rings; 1 client's round trip
#      through a ring and without; idle raycasts of depth alone and with
#      normals through a ring, copied into the client's arrays and read in
#      place (--raycast-view on),
#   5. a summary of the lines RESULTS.md quotes.
# Each benchmark checks its own result and prints no time for a wrong one
# (its exit status is then non-zero, and the summary says FAIL). Outputs go
# to $BENCH_LOGS (default $BUILD_DIR/bench-logs), one file each. About
# two and a half minutes after the build on the H200 host (2026-12-04).
# QUICK=1 shortens every run (for checking the script, not for figures).
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
LOGS=${BENCH_LOGS:-$BUILD_DIR/bench-logs}
DATA=${TSDF_DATA_DIR:-$ROOT/../shared/data/7scenes-redkitchen}
BACKEND=${BENCH_BACKEND:-cuda}
QUICK=${QUICK:-0}

mkdir -p "$LOGS"
declare -a SUMMARY=()
FAILED=0

# Runs a benchmark with its output in $LOGS/$1.log; records its status.
run() { # name command...
    local name=$1
    shift
    echo "== $name: $*" | tee "$LOGS/$name.log" >&2
    "$@" >>"$LOGS/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -eq 0 ]; then
        SUMMARY+=("$(printf '%-28s PASS' "$name")")
    else
        SUMMARY+=("$(printf '%-28s FAIL (exit %d, see %s)' "$name" "$rc" "$LOGS/$name.log")")
        FAILED=1
    fi
}

# Dependencies unpacked outside /usr (DEPS_PREFIX): CMAKE_EXTRA.
# shellcheck source=scripts/deps-prefix.sh
. "$ROOT/scripts/deps-prefix.sh"
rm -f "$LOGS/configure.log" "$LOGS/build.log"
if ! cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" ${CMAKE_EXTRA[@]+"${CMAKE_EXTRA[@]}"} \
    >"$LOGS/configure.log" 2>&1; then
    tail -30 "$LOGS/configure.log"
    echo "gpu-bench: configure failed (logs in $LOGS)" >&2
    exit 1
fi
if ! cmake --build "$BUILD_DIR" -j"$JOBS" --target bench_engine bench_daemon bench_transport tsdfd \
    >"$LOGS/build.log" 2>&1; then
    grep -E "error|Error" "$LOGS/build.log" | head -30
    echo "gpu-bench: the build failed (logs in $LOGS)" >&2
    exit 1
fi
B=$BUILD_DIR/bench
TSDFD=$BUILD_DIR/daemon/tsdfd

if [ "$QUICK" = 1 ]; then
    ENGINE_QUICK=(--frames 40 --check-frames 5)
    LONG=4 SHORT=2 MID=2 REPS=200
else
    ENGINE_QUICK=()
    LONG=30 SHORT=8 MID=12 REPS=1000
fi

# 2. The engine.
if [ -d "$DATA" ]; then
    run engine-1cm "$B/bench_engine" --backend "$BACKEND" --data "$DATA" --layout s16 \
        --raycast-reps 20 --mesh-reps 5 --inc-mesh-step 10 ${ENGINE_QUICK[@]+"${ENGINE_QUICK[@]}"}
    run engine-5mm "$B/bench_engine" --backend "$BACKEND" --data "$DATA" --layout s16 \
        --voxel 0.005 --raycast-reps 10 --mesh-reps 3 --inc-mesh-step 10 ${ENGINE_QUICK[@]+"${ENGINE_QUICK[@]}"}
else
    echo "gpu-bench: no 7-Scenes data at $DATA (set TSDF_DATA_DIR): engine runs skipped" >&2
    SUMMARY+=("$(printf '%-28s SKIP (no data at %s)' engine "$DATA")")
fi

# 3. The transport's floors.
run transport-frame "$B/bench_transport" --reps "$REPS"
run transport-frame-ring "$B/bench_transport" --reps "$REPS" --shm
run transport-image "$B/bench_transport" --reps "$REPS" --reply --bytes 4915200
run transport-image-ring "$B/bench_transport" --reps "$REPS" --reply --bytes 4915200 --shm

# 4. The daemon.
D=("$B/bench_daemon" --spawn "$TSDFD" --backend "$BACKEND")
run daemon-32-ring "${D[@]}" --clients 32 --seconds "$LONG" --mode acked --mesh off --ring
run daemon-32-ring-depth "${D[@]}" --clients 32 --seconds "$LONG" --mode acked --mesh off --ring \
    --raycast-reply depth
run daemon-32 "${D[@]}" --clients 32 --seconds "$MID" --mode acked --mesh off
run daemon-1-ring "${D[@]}" --clients 1 --seconds "$SHORT" --mode acked --mesh off --raycast off \
    --ring
run daemon-1 "${D[@]}" --clients 1 --seconds "$SHORT" --mode acked --mesh off --raycast off
run daemon-idle-normals "${D[@]}" --clients 0 --seconds 6 --mesh off --ring
run daemon-idle-normals-view "${D[@]}" --clients 0 --seconds 6 --mesh off --ring \
    --raycast-view on
run daemon-idle-depth "${D[@]}" --clients 0 --seconds 6 --mesh off --ring --raycast-reply depth
run daemon-idle-depth-view "${D[@]}" --clients 0 --seconds 6 --mesh off --ring \
    --raycast-reply depth --raycast-view on

# 5. What RESULTS.md quotes, from the logs.
{
    echo "==================== gpu-bench summary ===================="
    date -u '+%Y-%m-%d %H:%M UTC'
    (cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null && git status --short | head -5)
    command -v nvidia-smi >/dev/null 2>&1 &&
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
    for line in "${SUMMARY[@]}"; do
        echo "$line"
    done
    for f in engine-1cm engine-5mm; do
        [ -f "$LOGS/$f.log" ] || continue
        echo "-- $f"
        grep -E "^ +(allocate|update|raycast \(engine\)|mesh \(engine\)|mesh \(wall\)|inc\. mesh \(engine\)|integrate\+sync \(wall\))|back to back|-> FAIL" \
            "$LOGS/$f.log"
    done
    for f in "$LOGS"/transport-*.log "$LOGS"/daemon-*.log; do
        [ -f "$f" ] || continue
        echo "-- $(basename "$f" .log)"
        grep -E "\(ms\) +p50|round trip|client's copy|frames/s sustained|send-to-ack|raycast [0-9]+x|request\.(integrate|raycast)|did not|FAIL|error" \
            "$f" | head -10
    done
    if [ "$FAILED" -eq 0 ]; then
        echo "RESULT: PASS (logs in $LOGS)"
    else
        echo "RESULT: FAIL (logs in $LOGS)"
    fi
} | tee "$LOGS/summary.txt"
exit "$FAILED"

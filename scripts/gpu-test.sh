#!/usr/bin/env bash
# gpu-test.sh - the GPU test run, in one command, on a machine with a CUDA
# GPU (built for sm_90, the H100/H200; set CUDA_ARCH to change):
#   1. configure into build-gpu (BUILD_DIR overrides) with
#      -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH,
#   2. build the engine and the GPU test programs (tests/test_cuda_*.c),
#   3. run `ctest -L gpu --output-on-failure`,
#   4. run every GPU test program under compute-sanitizer --tool memcheck
#      and --tool racecheck with --error-exitcode (7-Scenes cut to
#      SANITIZER_7SCENES_FRAMES frames, default 10, to keep it short),
#   5. print a summary; the exit status is non-zero if any step failed.
# If the full project does not configure or build (another module mid-change,
# or dependencies unpacked off /usr, as .device-deps on the lent GPU machine,
# whose cmocka.pc points at /usr/include), it falls back to a GPU-only
# standalone project (common + engine + scenes + tests/gpu.cmake) in
# $BUILD_DIR-standalone; GPU_TEST_STANDALONE=1 goes there directly.
# Logs go to $BUILD_DIR/gpu-test-logs/ (GPU_TEST_LOGS overrides). Set
# SKIP_SANITIZERS=1 to skip 4; SANITIZER_TIMEOUT (s, default 300) bounds each
# sanitizer run. The 7-Scenes data is read from $TSDF_DATA_DIR (see
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

mkdir -p "$LOGS"

# The GPU test programs are the files tests/test_cuda_*.c.
TARGETS=()
for f in "$ROOT"/tests/test_cuda_*.c; do
    [ -e "$f" ] || continue
    TARGETS+=("$(basename "${f%.c}")")
done

# A project of only what the GPU tests need (common, engine, scenes, the
# test harness and tests/gpu.cmake), for when another part of the tree
# (daemon, client, ...) does not configure yet: the GPU run still happens,
# and the summary says it was standalone.
write_standalone() {
    local dir=$1
    mkdir -p "$dir"
    cat >"$dir/CMakeLists.txt" <<EOF_CMAKE
cmake_minimum_required(VERSION 3.22)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
project(tsdfd_gpu_tests LANGUAGES C CUDA)
set(PROJECT_SOURCE_DIR "$ROOT")
set(CMAKE_C_STANDARD 11)
set(CMAKE_C_STANDARD_REQUIRED ON)
set(CMAKE_C_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
endif()
find_package(CUDAToolkit REQUIRED)
set(TSDF_HAVE_CUDA ON)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PNG REQUIRED IMPORTED_TARGET libpng)
add_library(tsdf_warnings INTERFACE)
target_compile_options(tsdf_warnings INTERFACE
  \$<\$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter>)
add_subdirectory("$ROOT/common" common)
add_subdirectory("$ROOT/gpu" gpu)
add_subdirectory("$ROOT/scenes" scenes)
include(CTest)
enable_testing()
# cmocka's CMake package knows where it was unpacked (a prefix other than
# /usr, e.g. through CMAKE_PREFIX_PATH); its pkg-config file does not.
add_library(tsdf_cmocka INTERFACE)
find_package(cmocka CONFIG QUIET)
if(cmocka_FOUND AND CMOCKA_INCLUDE_DIR)
  target_include_directories(tsdf_cmocka INTERFACE \${CMOCKA_INCLUDE_DIR})
  target_link_libraries(tsdf_cmocka INTERFACE \${CMOCKA_LIBRARIES})
else()
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
  target_link_libraries(tsdf_cmocka INTERFACE PkgConfig::CMOCKA)
endif()
add_library(tsdf_testutil STATIC "$ROOT/tests/testutil.c")
target_include_directories(tsdf_testutil PUBLIC "$ROOT/tests")
target_link_libraries(tsdf_testutil PUBLIC tsdf_cmocka tsdf_common PRIVATE tsdf_warnings)
target_compile_definitions(tsdf_testutil PRIVATE TSDF_SOURCE_DIR="$ROOT")
function(tsdf_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" \${ARGN})
  add_executable(test_\${T_NAME} \${T_SOURCES})
  target_link_libraries(test_\${T_NAME} PRIVATE tsdf_testutil \${T_LIBS} tsdf_warnings m)
  add_test(NAME \${T_NAME} COMMAND test_\${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(\${T_NAME} PROPERTIES TIMEOUT \${T_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "TSDF_SOURCE_DIR=$ROOT")
  if(T_LABELS)
    set_tests_properties(\${T_NAME} PROPERTIES LABELS "\${T_LABELS}")
  endif()
endfunction()
# Test sources are given as \${CMAKE_CURRENT_LIST_DIR}/..., which include()
# sets to tests/.
include("$ROOT/tests/gpu.cmake")
EOF_CMAKE
}

build_targets() { # log [all]
    # The full project builds everything: GPU tests such as the daemon
    # overlap test need tsdfd and the client, and bench_engine is run next.
    if [ "${2:-}" = all ]; then
        cmake --build "$BUILD_DIR" -j"$JOBS" >"$1" 2>&1
    else
        cmake --build "$BUILD_DIR" --target tsdf_engine "${TARGETS[@]}" -j"$JOBS" >"$1" 2>&1
    fi
}

# The full project first; if it does not configure or build (another part
# of the tree mid-change, a dependency unpacked off /usr whose pkg-config
# file points to /usr), the GPU-only standalone project.
MODE=full
if [ "${GPU_TEST_STANDALONE:-0}" = 1 ] ||
    ! cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
        >"$LOGS/configure.log" 2>&1 ||
    ! build_targets "$LOGS/build.log" all; then
    [ -s "$LOGS/build.log" ] && grep -E "error|Error" "$LOGS/build.log" | head -10
    [ -s "$LOGS/configure.log" ] && grep -E "Error" "$LOGS/configure.log" | head -5
    echo "gpu-test: the full project did not configure or build; using the GPU-only standalone project"
    MODE=standalone
    BUILD_DIR=$BUILD_DIR-standalone
    write_standalone "$BUILD_DIR-src"
    if ! cmake -S "$BUILD_DIR-src" -B "$BUILD_DIR" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
        >"$LOGS/configure-standalone.log" 2>&1; then
        tail -40 "$LOGS/configure-standalone.log"
        step "configure (sm_$CUDA_ARCH, standalone)" FAIL
        finish
    fi
    if ! build_targets "$LOGS/build-standalone.log"; then
        grep -E "error|Error" "$LOGS/build-standalone.log" | head -40
        step "build ${TARGETS[*]} (standalone)" FAIL
        finish
    fi
fi
step "configure + build (sm_$CUDA_ARCH, $MODE project, ${#TARGETS[@]} programs)" PASS

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
for tool in memcheck racecheck; do
    for t in "${TARGETS[@]}"; do
        log="$LOGS/$tool-$t.log"
        extra=()
        [ "$tool" = memcheck ] && extra=(--leak-check full)
        exe=$(find "$BUILD_DIR" -name "$t" -type f -perm -u+x | head -1)
        if [ -z "$exe" ]; then
            step "$tool $t" "FAIL (program not found)"
            continue
        fi
        (cd "$(dirname "$exe")" &&
            TSDF_SOURCE_DIR="$ROOT" TSDF_7SCENES_FRAMES="$SANITIZER_7SCENES_FRAMES" \
                timeout "$SANITIZER_TIMEOUT" "$SAN" --tool "$tool" "${extra[@]}" --error-exitcode 99 "./$t") >"$log" 2>&1
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

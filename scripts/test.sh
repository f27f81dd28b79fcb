#!/usr/bin/env bash
# Installs the test dependencies (Debian 12 packages), builds everything
# (with the CUDA backend when nvcc is present) and runs every test through
# CTest. GPU tests report themselves as skipped on machines without a GPU.
# Then the CPU suite again in an AddressSanitizer + UBSan build, and each
# libFuzzer target for 20 s on its committed corpus (scripts/fuzz.sh).
# This is exactly what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
build=${TSDF_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"
(cd "$build" && ctest --output-on-failure -j2 --timeout 600)

# The tests that start tsdfd take it from their own build tree, so here
# they run the sanitized daemon.
asan=${TSDF_ASAN_BUILD_DIR:-build-asan}
cmake -S . -B "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSDF_CUDA=OFF -DTSDF_ASAN=ON \
    -DTSDF_BENCH=OFF >/dev/null
cmake --build "$asan" -j"$(nproc)"
(cd "$asan" && ctest --output-on-failure -j2 --timeout 600)

bash scripts/fuzz.sh --time 20

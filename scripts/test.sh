#!/usr/bin/env bash
# Installs the test dependencies (Debian 12 packages), builds everything
# (with the CUDA backend when nvcc is present) and runs every test through
# CTest. GPU tests report themselves as skipped on machines without a GPU.
# This is exactly what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
build=${TSDF_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure -j2 --timeout 600

#!/usr/bin/env bash
# Installs the test dependencies (Debian 12 packages), checks that every
# tracked C, header and CUDA file is clang-formatted, builds everything with
# warnings as errors (with the CUDA backend when nvcc is present) and runs
# every test through CTest. GPU tests report themselves as skipped on
# machines without a GPU.
# Then the CPU suite again in an AddressSanitizer + UBSan build, and each
# libFuzzer target for 20 s on its committed corpus (scripts/fuzz.sh).
# This is exactly what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test

# Formatting first: it takes seconds, and a build is not worth waiting for
# when the change is refused anyway.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t sources < <(git ls-files '*.c' '*.h' '*.cu')
else
    mapfile -t sources < <(find . -path ./build\* -prune -o -type f \
        \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print)
fi
command -v clang-format >/dev/null || { echo "test.sh: clang-format not found" >&2; exit 1; }
unformatted=()
for f in "${sources[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if [ ${#unformatted[@]} -gt 0 ]; then
    echo "test.sh: ${#unformatted[@]} file(s) not formatted as .clang-format says:" >&2
    printf '    %s\n' "${unformatted[@]}" >&2
    echo "test.sh: run clang-format -i on them (clang-format $(clang-format --version |
        grep -o '[0-9][0-9.]*' | head -n 1)) and commit the result" >&2
    exit 1
fi
echo "test.sh: ${#sources[@]} files clang-formatted"

build=${TSDF_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSDF_WERROR=ON >/dev/null
cmake --build "$build" -j"$(nproc)"
(cd "$build" && ctest --output-on-failure -j2 --timeout 600)

# The tests that start tsdfd take it from their own build tree, so here
# they run the sanitized daemon.
asan=${TSDF_ASAN_BUILD_DIR:-build-asan}
cmake -S . -B "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSDF_CUDA=OFF -DTSDF_ASAN=ON \
    -DTSDF_BENCH=OFF -DTSDF_WERROR=ON >/dev/null
cmake --build "$asan" -j"$(nproc)"
(cd "$asan" && ctest --output-on-failure -j2 --timeout 600)

bash scripts/fuzz.sh --time 20

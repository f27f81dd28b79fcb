#!/usr/bin/env bash
# Installs the test dependencies (Debian 12 packages), checks that every
# tracked C, header and CUDA file is clang-formatted, builds everything with
# warnings as errors (with the CUDA backend when nvcc is present) and runs
# every test through CTest. GPU tests report themselves as skipped on
# machines without a GPU.
# Then the CPU suite again in an AddressSanitizer + UBSan build, and each
# libFuzzer target for 20 s on its committed corpus (scripts/fuzz.sh).
# This is exactly what .ci/run runs.
#
#   scripts/test.sh --stress [ROUNDS]
# builds the same two trees, then runs both CPU suites (the plain one and
# the ASan one) ROUNDS times (default 5) under load: ctest with twice as
# many jobs as cores while as many busy loops as cores burn CPU beside it.
# It stops at the first failing round. A test that passes only on a quiet
# machine fails here: no test may depend on the machine's speed.
set -euo pipefail
cd "$(dirname "$0")/.."
stress_rounds=0
if [ "${1:-}" = "--stress" ]; then
    stress_rounds=${2:-5}
    case "$stress_rounds" in ''|*[!0-9]*) echo "test.sh: --stress takes a number of rounds" >&2; exit 2 ;; esac
elif [ $# -gt 0 ]; then
    echo "usage: scripts/test.sh [--stress [ROUNDS]]" >&2
    exit 2
fi
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
asan=${TSDF_ASAN_BUILD_DIR:-build-asan}
configure_and_build() {
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSDF_WERROR=ON >/dev/null
    cmake --build "$build" -j"$(nproc)"
}
# The tests that start tsdfd take it from their own build tree, so there
# they run the sanitized daemon.
configure_and_build_asan() {
    cmake -S . -B "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSDF_CUDA=OFF -DTSDF_ASAN=ON \
        -DTSDF_BENCH=OFF -DTSDF_WERROR=ON >/dev/null
    cmake --build "$asan" -j"$(nproc)"
}

if [ "$stress_rounds" -gt 0 ]; then
    configure_and_build
    configure_and_build_asan
    jobs=$((2 * $(nproc)))
    burners=()
    stop_burners() {
        [ ${#burners[@]} -gt 0 ] && kill "${burners[@]}" 2>/dev/null
        wait "${burners[@]}" 2>/dev/null || true
        burners=()
    }
    trap stop_burners EXIT
    for round in $(seq 1 "$stress_rounds"); do
        for _ in $(seq 1 "$(nproc)"); do
            bash -c 'while :; do :; done' &
            burners+=($!)
        done
        t0=$(date +%s)
        for tree in "$build" "$asan"; do
            if ! (cd "$tree" && ctest --output-on-failure -j"$jobs" --timeout 900); then
                echo "test.sh: stress round $round of $stress_rounds failed in $tree" >&2
                exit 1
            fi
        done
        stop_burners
        echo "test.sh: stress round $round of $stress_rounds passed in $(($(date +%s) - t0)) s" \
            "(ctest -j$jobs, $(nproc) busy loops beside it)"
    done
    echo "test.sh: $stress_rounds stress rounds passed"
    exit 0
fi

configure_and_build
(cd "$build" && ctest --output-on-failure -j2 --timeout 900)
configure_and_build_asan
(cd "$asan" && ctest --output-on-failure -j2 --timeout 900)

bash scripts/fuzz.sh --time 20

#!/usr/bin/env bash
# Installs, from Debian 12's archive, every package tsdfd builds, tests and
# demonstrates with. Run as root. Idempotent: packages already present are
# left alone, and the archive is only contacted when something is missing.
#
#   scripts/install-deps.sh            build + run dependencies (libjs-three:
#                                      three.js for the live view's page)
#   scripts/install-deps.sh --test     also what the tests use (promtool,
#                                      systemd-analyze, Open3D, curl, Python,
#                                      clang and libFuzzer for scripts/fuzz.sh,
#                                      clang-format for the format check,
#                                      chromium for the live view's test)
#
# The CUDA toolkit is not a Debian 12 package: when /usr/local/cuda/bin/nvcc
# exists the build uses it, otherwise it builds the CPU-only daemon.
set -euo pipefail

build_pkgs=(build-essential cmake pkg-config git
            libuv1-dev libnng-dev libmbedtls-dev libmsgpack-dev libinih-dev libpng-dev
            libzstd-dev libsystemd-dev
            zlib1g-dev libjs-three)
test_pkgs=(libcmocka-dev python3 python3-venv python3-numpy python3-msgpack python3-open3d
           prometheus systemd curl openssl clang libclang-rt-14-dev clang-format chromium)

pkgs=("${build_pkgs[@]}")
if [ "${1:-}" = "--test" ]; then
    pkgs+=("${test_pkgs[@]}")
else
    # The demo runs the tests' helpers too little to need them, but cmocka is
    # tiny and lets a plain build include the test programs.
    pkgs+=(libcmocka-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#pkgs[@]} packages present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing ${missing[*]}; run as root (or install them) first" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"

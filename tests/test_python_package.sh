#!/bin/sh
# Installs the Python package (python/) into a virtual environment and runs
# its pytest suite, which starts a real tsdfd from the build tree on private
# ipc:// addresses (python/tests/conftest.py).
#
#   test_python_package.sh TSDFD SOURCE_DIR PYTHON [DEPTH_CODEC_TOOL]
#
# DEPTH_CODEC_TOOL (tests/depth_codec_tool.c) is the C depth codec, which
# the depth encoding tests check the package's against, both ways.
#
# The virtual environment is kept beside this test's build files
# ($TSDF_PY_PKG_VENV overrides the place). The package's dependencies and
# pytest come from PyPI: when they cannot be installed (no network) the test
# is skipped, exit 77 with "SKIPPED: ...". Everything after that must pass:
# the package itself is built and installed without the network, and a run
# that collects no tests (pytest's exit 5) is a failure.
set -u

TSDFD=${1:?tsdfd binary}
SRC=${2:?source directory}
PYTHON=${3:-python3}
CODEC_TOOL=${4:-}

skip() {
    echo "SKIPPED: $*"
    exit 77
}

fail() {
    echo "FAIL: $*"
    exit 1
}

[ -x "$TSDFD" ] || fail "$TSDFD is not an executable (build the tsdfd target)"

VENV=${TSDF_PY_PKG_VENV:-$(dirname "$TSDFD")/../tests/pyvenv-pkg}
LOG=$VENV.pip.log
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV" >/dev/null 2>&1 || skip "python venv module unavailable"
fi
# Already satisfied requirements are not looked up again, so this needs
# the network only the first time. hatchling is the package's build
# backend: having it here lets the package build without the network.
# zstandard is the package's optional dependency for depth_encoding="zstd"
# (the extra tsdf-client[zstd]); the tests use it, and pillow, which
# examples/depth_pngs.py reads depth PNGs with.
if ! timeout 600 $PIP install --quiet "pynng>=0.7" "msgpack>=1.0" "numpy>=1.21" "pytest>=7" \
    "hatchling>=1.10" "zstandard>=0.18" "pillow>=9" >"$LOG" 2>&1; then
    tail -n 5 "$LOG"
    skip "cannot install pynng, msgpack, numpy, pytest, hatchling, zstandard, pillow from PyPI (no network?); see $LOG"
fi
# Always reinstalled: the source may have changed since the last run.
if ! $PIP install --quiet --no-build-isolation --force-reinstall --no-deps "$SRC/python" \
    >>"$LOG" 2>&1; then
    tail -n 30 "$LOG"
    fail "pip install $SRC/python failed; see $LOG"
fi

# From an empty folder, so that the installed package is imported rather
# than the source tree's, and nothing is written into the source tree.
RUN=$(mktemp -d "${TMPDIR:-/tmp}/tsdf-pkgtest.XXXXXX") || fail "mktemp"
trap 'rm -rf "$RUN"' EXIT
cd "$RUN" || fail "cd $RUN"
TSDFD_BIN=$TSDFD TSDF_SOURCE_DIR=$SRC TSDF_DEPTH_CODEC_TOOL=$CODEC_TOOL PYTHONDONTWRITEBYTECODE=1 \
    "$VENV/bin/python" -m pytest -p no:cacheprovider -q -rs "$SRC/python/tests"
rc=$?
case $rc in
0) echo "OK" ;;
5) fail "pytest collected no tests from $SRC/python/tests" ;;
*) fail "pytest exited with $rc" ;;
esac

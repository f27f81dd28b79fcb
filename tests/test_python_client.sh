#!/bin/sh
# Runs client/python/tsdf_example_client.py against a real tsdfd started from
# the build tree on private ipc:// addresses.
#
#   test_python_client.sh TSDFD EXAMPLE_CLIENT PYTHON
#
# The example needs pynng, msgpack and numpy from PyPI; they are installed
# into a virtual environment kept beside this test's build files
# ($TSDF_PY_VENV overrides the place). Without them (no network, no venv
# module) the test is skipped: exit 77 with "SKIPPED: ...".
set -u

TSDFD=${1:?tsdfd binary}
CLIENT=${2:?example client}
PYTHON=${3:-python3}

skip() {
    echo "SKIPPED: $*"
    exit 77
}

[ -x "$TSDFD" ] || { echo "FAIL: $TSDFD is not an executable (build the tsdfd target)"; exit 1; }

VENV=${TSDF_PY_VENV:-$(dirname "$TSDFD")/../tests/pyvenv}
if ! "$VENV/bin/python" -c "import pynng, msgpack, numpy" 2>/dev/null; then
    "$PYTHON" -m venv "$VENV" >/dev/null 2>&1 || skip "python venv module unavailable"
    timeout 600 "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        pynng msgpack numpy >"$VENV.pip.log" 2>&1 ||
        skip "cannot install pynng/msgpack/numpy from PyPI (no network?); see $VENV.pip.log"
    "$VENV/bin/python" -c "import pynng, msgpack, numpy" 2>/dev/null ||
        skip "pynng/msgpack/numpy installed but not importable"
fi

fail() {
    echo "FAIL: $*"
    [ -f "$WORK/tsdfd.log" ] && cat "$WORK/tsdfd.log"
    exit 1
}

# shellcheck source=tests/daemon_env.sh
. "$(dirname "$0")/daemon_env.sh"
daemon_env_init tsdf-pytest
daemon_start

"$VENV/bin/python" "$CLIENT" --url "$REQ" --push-url "$PUSH" --map pysphere \
    --out "$WORK/sphere.ply"
rc=$?
if [ $rc -ne 0 ]; then
    echo "FAIL: the example client exited with $rc; daemon log:"
    tail -n 50 "$WORK/tsdfd.log"
    exit 1
fi
[ -s "$WORK/sphere.ply" ] || { echo "FAIL: no mesh written"; exit 1; }
echo "OK"

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

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tsdf-pytest.XXXXXX")
DAEMON_PID=""
cleanup() {
    if [ -n "$DAEMON_PID" ]; then
        kill "$DAEMON_PID" 2>/dev/null
        wait "$DAEMON_PID" 2>/dev/null
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

REQ="ipc://$WORK/tsdfd.sock"
PUSH="ipc://$WORK/frames.sock"
mkdir -p "$WORK/state"
# An empty configuration file: the built-in defaults, whatever /etc holds.
: >"$WORK/tsdfd.conf"
"$TSDFD" --config "$WORK/tsdfd.conf" --foreground --backend cpu --listen "$REQ" \
    --frames-listen "$PUSH" --state-dir "$WORK/state" --metrics off \
    >"$WORK/tsdfd.log" 2>&1 &
DAEMON_PID=$!

# Wait for both sockets (at most 20 s).
i=0
while [ ! -S "$WORK/tsdfd.sock" ] || [ ! -S "$WORK/frames.sock" ]; do
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
        echo "FAIL: tsdfd exited at start:"
        cat "$WORK/tsdfd.log"
        DAEMON_PID=""
        exit 1
    fi
    i=$((i + 1))
    [ $i -le 200 ] || { echo "FAIL: tsdfd did not listen within 20 s"; cat "$WORK/tsdfd.log"; exit 1; }
    sleep 0.1
done

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

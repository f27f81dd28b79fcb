# Sourced (not run) by the shell tests that drive a real tsdfd from the build
# tree on private ipc:// addresses: test_tsdfctl.sh.
#
# The sourcing script sets $TSDFD (the daemon binary) and defines fail(),
# which prints "FAIL: $*" with what it wants of the daemon log and exits 1.
#
# daemon_env_init PREFIX   makes the private work folder $WORK (removed, with
#                          the daemon stopped, when the script exits), the
#                          addresses $REQ and $PUSH, an empty state folder and
#                          an empty configuration file (the built-in defaults,
#                          whatever /etc holds).
# daemon_start             starts tsdfd (CPU backend, /metrics off so that
#                          parallel tests never fight over its port; the log
#                          goes to $WORK/tsdfd.log) as $DAEMON_PID, and waits
#                          at most 20 s for both sockets. It may be called
#                          again after the daemon has stopped.

daemon_env_cleanup() {
    if [ -n "$DAEMON_PID" ]; then
        kill "$DAEMON_PID" 2>/dev/null
        wait "$DAEMON_PID" 2>/dev/null
    fi
    rm -rf "$WORK"
}

daemon_env_init() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    DAEMON_PID=""
    trap daemon_env_cleanup EXIT INT TERM
    REQ="ipc://$WORK/tsdfd.sock"
    PUSH="ipc://$WORK/frames.sock"
    mkdir -p "$WORK/state"
    : >"$WORK/tsdfd.conf"
}

daemon_start() {
    rm -f "$WORK/tsdfd.sock" "$WORK/frames.sock"
    "$TSDFD" --config "$WORK/tsdfd.conf" --foreground --backend cpu --listen "$REQ" \
        --frames-listen "$PUSH" --state-dir "$WORK/state" --metrics off \
        >>"$WORK/tsdfd.log" 2>&1 &
    DAEMON_PID=$!
    daemon_wait_i=0
    while [ ! -S "$WORK/tsdfd.sock" ] || [ ! -S "$WORK/frames.sock" ]; do
        kill -0 "$DAEMON_PID" 2>/dev/null || { DAEMON_PID=""; fail "tsdfd exited at start"; }
        daemon_wait_i=$((daemon_wait_i + 1))
        [ $daemon_wait_i -le 1200 ] || fail "tsdfd did not listen within 120 s"
        sleep 0.1
    done
}

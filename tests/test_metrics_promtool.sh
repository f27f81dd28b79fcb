#!/usr/bin/env bash
# test_metrics_promtool.sh - the /metrics text must pass `promtool check
# metrics` (the Prometheus project's own parser and linter), served over a
# real loopback HTTP connection with the right status codes and headers.
#
#   tests/test_metrics_promtool.sh path/to/test_metrics_http
#   tests/test_metrics_promtool.sh --daemon path/to/tsdfd
#
# The first form checks the sample render of test_metrics_http (--print /
# --serve FILE: every documented metric family) and the HTTP behaviour
# with curl. The second starts the daemon (CPU backend, loopback, scratch
# state directory) and checks its own /metrics: promtool must accept it and
# every family documented in docs/OPERATIONS.md must be there.
# Exit 0 pass, 1 fail, 77 skipped (no promtool, or no daemon binary).
set -u

bin=""
tsdfd=""
if [ "${1:-}" = "--daemon" ]; then
    tsdfd=${2:-${TSDFD:-}}
    if [ -z "$tsdfd" ] || [ ! -x "$tsdfd" ]; then
        echo "SKIPPED: no tsdfd binary ('${tsdfd}')"
        exit 77
    fi
else
    bin=${1:?usage: $0 path/to/test_metrics_http | --daemon path/to/tsdfd}
fi

if ! command -v promtool >/dev/null 2>&1; then
    echo "SKIPPED: promtool not installed (Debian package prometheus)"
    exit 77
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

check_text() { # name file
    if out=$(promtool check metrics < "$2" 2>&1); then
        echo "ok: promtool accepts $1 ($(grep -c '^# TYPE' "$2") families)"
    else
        fail "promtool rejects $1:"
        printf '%s\n' "$out"
    fi
}

# The families docs/OPERATIONS.md documents, with their types.
families="tsdfd_build_info:gauge tsdfd_uptime_seconds:gauge
    tsdfd_frames_received_total:counter tsdfd_frames_integrated_total:counter
    tsdfd_frames_dropped_total:counter tsdfd_frames_rejected_total:counter
    tsdfd_queue_depth:gauge tsdfd_hash_load_factor:gauge tsdfd_hash_blocks:gauge
    tsdfd_hash_capacity_slots:gauge tsdfd_hash_probe_length:histogram
    tsdfd_hash_growth_events_total:counter tsdfd_hash_insert_failures_total:counter
    tsdfd_stage_latency_seconds:summary tsdfd_gpu_memory_bytes:gauge
    tsdfd_host_memory_bytes:gauge"
check_families() { # what file
    for f in $families; do
        grep -q "^# TYPE ${f%%:*} ${f##*:}\$" "$2" || fail "$1 lacks ${f%%:*} (${f##*:})"
    done
}

wait_port_file() { # file -> port on stdout
    for _ in $(seq 1 100); do
        [ -s "$1" ] && { cat "$1"; return 0; }
        sleep 0.05
    done
    return 1
}

if [ -n "$bin" ]; then
"$bin" --print > "$tmp/sample.txt" || fail "$bin --print failed"
check_text "the sample render" "$tmp/sample.txt"
check_families "the sample render" "$tmp/sample.txt"

if ! command -v curl >/dev/null 2>&1; then
    echo "note: curl not installed; the HTTP checks are left to test_metrics_http (C client)"
else
    "$bin" --serve "$tmp/port" > "$tmp/serve.log" 2>&1 &
    pids+=($!)
    if ! port=$(wait_port_file "$tmp/port"); then
        fail "the sample server did not start"; cat "$tmp/serve.log"
    else
        url="http://127.0.0.1:$port"
        code=$(curl -sS -o "$tmp/scrape.txt" -D "$tmp/headers.txt" -w '%{http_code}' "$url/metrics")
        [ "$code" = 200 ] && echo "ok: GET /metrics -> 200" || fail "GET /metrics -> $code"
        grep -qi '^Content-Type: text/plain; version=0.0.4' "$tmp/headers.txt" &&
            echo "ok: Content-Type text/plain; version=0.0.4" || fail "wrong Content-Type"
        cmp -s "$tmp/scrape.txt" "$tmp/sample.txt" && echo "ok: body is the render" ||
            fail "served body differs from the render"
        check_text "the served text" "$tmp/scrape.txt"
        code=$(curl -sS -o /dev/null -w '%{http_code}' "$url/")
        [ "$code" = 404 ] && echo "ok: GET / -> 404" || fail "GET / -> $code"
        code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST --data x "$url/metrics")
        [ "$code" = 405 ] && echo "ok: POST /metrics -> 405" || fail "POST /metrics -> $code"
        code=$(curl -sS -o /dev/null -w '%{http_code}' -H "X-Big: $(head -c 9000 /dev/zero | tr '\0' a)" "$url/metrics")
        [ "$code" = 431 ] && echo "ok: 9000-byte header -> 431" || fail "oversized request -> $code"
    fi
fi

fi

# The daemon's own render.
if [ -n "$tsdfd" ]; then
    if ! command -v curl >/dev/null 2>&1; then
        echo "SKIPPED: curl not installed"
        exit 77
    fi
    mport=$(( 20000 + RANDOM % 20000 ))
    rport=$(( mport + 1 )); fport=$(( mport + 2 ))
    "$tsdfd" --backend cpu --state-dir "$tmp/state" --metrics "127.0.0.1:$mport" \
        --listen "tcp://127.0.0.1:$rport" --frames-listen "tcp://127.0.0.1:$fport" \
        > "$tmp/tsdfd.log" 2>&1 &
    pids+=($!)
    ok=0
    for _ in $(seq 1 100); do
        if curl -sS -o "$tmp/daemon.txt" "http://127.0.0.1:$mport/metrics" 2>/dev/null; then ok=1; break; fi
        sleep 0.1
    done
    if [ $ok = 1 ]; then
        check_text "tsdfd's /metrics" "$tmp/daemon.txt"
        check_families "tsdfd's /metrics" "$tmp/daemon.txt"
    else
        fail "tsdfd did not serve /metrics on port $mport"; tail -20 "$tmp/tsdfd.log"
    fi
fi

if [ $fails -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "PASS"

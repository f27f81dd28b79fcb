#!/usr/bin/env bash
# test_metrics_promtool.sh - the /metrics text must pass `promtool check
# metrics` (the Prometheus project's own parser and linter), served over a
# real loopback HTTP connection with the right status codes and headers.
#
#   tests/test_metrics_promtool.sh path/to/test_metrics_http
#   tests/test_metrics_promtool.sh --daemon path/to/tsdfd path/to/tsdfctl
#
# The first form checks the sample render of test_metrics_http (--print /
# --serve FILE: the daemon's own render over sample counters, so every
# documented metric family) and the HTTP behaviour with curl. The second
# starts the daemon (CPU backend, ipc:// sockets and a state directory in a
# scratch dir, /metrics on a random loopback port) and checks its own
# /metrics: promtool must accept it, every family documented in
# docs/OPERATIONS.md must be there, and none that is not; then it
# integrates acknowledged synthetic frames with tsdfctl and checks that the
# numbers moved (frames integrated, per sensor and in all; the map's hash
# blocks) and that promtool still accepts the text.
# Exit 0 pass, 1 fail, 77 skipped (no promtool, or no daemon binary).
set -u

bin=""
tsdfd=""
if [ "${1:-}" = "--daemon" ]; then
    tsdfd=${2:-${TSDFD:-}}
    tsdfctl=${3:-${TSDFCTL:-}}
    if [ -z "$tsdfd" ] || [ ! -x "$tsdfd" ]; then
        echo "SKIPPED: no tsdfd binary ('${tsdfd}')"
        exit 77
    fi
    if [ -z "$tsdfctl" ] || [ ! -x "$tsdfctl" ]; then
        echo "FAIL: no tsdfctl binary ('${tsdfctl}') to integrate frames with"
        exit 1
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
# Families only the daemon renders (documented in docs/OPERATIONS.md too).
daemon_families="tsdfd_map_version:gauge tsdfd_queue_wait_seconds:summary
    tsdfd_request_seconds:summary tsdfd_queue_bytes:gauge
    tsdfd_volume_memory_bytes:gauge tsdfd_volume_memory_budget_bytes:gauge
    tsdfd_volume_budget_refused_frames_total:counter
    tsdfd_queries_abandoned_total:counter tsdfd_queries_cancelled_total:counter
    tsdfd_workers_stalled:gauge tsdfd_frames_unsaved:gauge tsdfd_queries_busy_total:counter tsdfd_snapshot_age_seconds:gauge
    tsdfd_connections:gauge tsdfd_connections_refused_total:counter
    tsdfd_frames_in_flight:gauge tsdfd_sensor_dropped_total:counter
    tsdfd_sensor_rejected_total:counter tsdfd_queue_depth_max:gauge tsdfd_queue_capacity:gauge
    tsdfd_queue_dropped_oldest_total:counter tsdfd_queue_push_timeouts_total:counter
    tsdfd_queue_map_bytes:gauge tsdfd_queue_dropped_memory_total:counter
    tsdfd_queue_refused_memory_total:counter tsdfd_map_frames_integrated_total:counter
    tsdfd_queue_max_bytes:gauge tsdfd_maps:gauge tsdfd_requests_total:counter
    tsdfd_requests_errors_total:counter tsdfd_integrate_seconds:summary tsdfd_sensors:gauge
    tsdfd_sensors_overflow_frames_total:counter"
# The list of docs/OPERATIONS.md ("Metrics"), as name:type, one a line.
doc="$(dirname "$0")/../docs/OPERATIONS.md"
documented=$(sed -n 's/^| `\(tsdfd_[a-z_]*\)` | \([a-z]*\) |.*/\1:\2/p' "$doc")
check_families() { # what file [extra families]
    for f in $families ${3:-}; do
        grep -q "^# TYPE ${f%%:*} ${f##*:}\$" "$2" || fail "$1 lacks ${f%%:*} (${f##*:})"
    done
    # Nothing undocumented: every family in the text is in the list, with its type.
    for f in $(sed -n 's/^# TYPE \([^ ]*\) \(.*\)/\1:\2/p' "$2"); do
        printf '%s\n' "$documented" | grep -qx "$f" ||
            fail "$1 has ${f%%:*} (${f##*:}), which docs/OPERATIONS.md does not list so"
    done
}

wait_port_file() { # file -> port on stdout (a minute at most)
    for _ in $(seq 1 1200); do
        [ -s "$1" ] && { cat "$1"; return 0; }
        sleep 0.05
    done
    return 1
}

if [ -n "$bin" ]; then
"$bin" --print > "$tmp/sample.txt" || fail "$bin --print failed"
check_text "the sample render" "$tmp/sample.txt"
check_families "the sample render" "$tmp/sample.txt" "$daemon_families"

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
    req="ipc://$tmp/req.sock"
    push="ipc://$tmp/frames.sock"
    # A random port, tried again (up to 5 times) when the daemon cannot
    # bind it: parallel tests must not depend on a fixed one. Snapshots off:
    # this test looks at the metrics only.
    ok=0
    for attempt in 1 2 3 4 5; do
        mport=$(( 20000 + RANDOM % 30000 ))
        "$tsdfd" --backend cpu --state-dir "$tmp/state" --metrics "127.0.0.1:$mport" \
            --listen "$req" --frames-listen "$push" --set snapshot.autosave_period_s=0 \
            --set snapshot.save_on_stop=false --set snapshot.load_on_start=false \
            --set log.stats_period_s=0 >> "$tmp/tsdfd.log" 2>&1 &
        dpid=$!
        pids+=($dpid)
        for _ in $(seq 1 1200); do
            if curl -sS -o "$tmp/daemon.txt" "http://127.0.0.1:$mport/metrics" 2>/dev/null; then
                ok=1; break
            fi
            kill -0 "$dpid" 2>/dev/null || break # exited: port taken, try another
            sleep 0.1
        done
        [ $ok = 1 ] && break
        kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null
        echo "note: tsdfd did not serve on port $mport (attempt $attempt)"
    done
    # sample NAME{LABELS} from a scrape file: the value, or 0 when absent.
    sample() { awk -v k="$2" '$1 == k { v = $NF } END { print (v == "" ? 0 : v) }' "$1"; }
    # The sum of a family's samples over every label set.
    family_sum() { awk -v n="$2" 'index($1, n "{") == 1 || $1 == n { s += $NF } END { print s + 0 }' "$1"; }
    if [ $ok = 1 ]; then
        check_text "tsdfd's /metrics" "$tmp/daemon.txt"
        check_families "tsdfd's /metrics" "$tmp/daemon.txt" "$daemon_families"
        # An idle daemon has the per-sensor families, but no always-zero
        # series of a bucket that received nothing.
        grep -q 'sensor="(no sensor)"' "$tmp/daemon.txt" &&
            fail "an idle daemon shows a sensor=\"(no sensor)\" series"

        # The numbers must move as frames are integrated.
        nframes=6
        int0=$(family_sum "$tmp/daemon.txt" tsdfd_frames_integrated_total)
        cam0=$(sample "$tmp/daemon.txt" 'tsdfd_frames_integrated_total{sensor="cam0"}')
        blocks0=$(sample "$tmp/daemon.txt" 'tsdfd_hash_blocks{map="default"}')
        if "$tsdfctl" --url "$req" --push-url "$push" --timeout-ms 60000 replay \
            --synthetic sphere --ack --sensor cam0 --size 160 120 --max-frames $nframes \
            > "$tmp/replay.txt" 2>&1; then
            echo "ok: tsdfctl integrated $nframes acknowledged frames"
        else
            fail "tsdfctl replay failed:"; cat "$tmp/replay.txt"
        fi
        curl -sS -o "$tmp/daemon2.txt" "http://127.0.0.1:$mport/metrics" ||
            fail "second scrape failed"
        check_text "tsdfd's /metrics after integrating" "$tmp/daemon2.txt"
        check_families "tsdfd's /metrics after integrating" "$tmp/daemon2.txt" "$daemon_families"
        # The labels docs/OPERATIONS.md gives: sensor only on the frame
        # counters, reason on drops and rejects, map on the per-map families.
        grep -q '^tsdfd_frames_integrated_total{sensor="cam0"} ' "$tmp/daemon2.txt" ||
            fail "tsdfd_frames_integrated_total has no {sensor=\"cam0\"} series"
        grep -q 'sensor="(no sensor)"' "$tmp/daemon2.txt" &&
            fail "good frames alone made a sensor=\"(no sensor)\" series"
        for r in queue_full shutdown memory; do
            grep -q "^tsdfd_frames_dropped_total{reason=\"$r\"} " "$tmp/daemon2.txt" ||
                fail "tsdfd_frames_dropped_total lacks reason=\"$r\""
        done
        for r in decode_error invalid_frame capacity no_map engine_error forbidden depth_decode; do
            grep -q "^tsdfd_frames_rejected_total{reason=\"$r\"} " "$tmp/daemon2.txt" ||
                fail "tsdfd_frames_rejected_total lacks reason=\"$r\""
        done
        int1=$(family_sum "$tmp/daemon2.txt" tsdfd_frames_integrated_total)
        cam1=$(sample "$tmp/daemon2.txt" 'tsdfd_frames_integrated_total{sensor="cam0"}')
        blocks1=$(sample "$tmp/daemon2.txt" 'tsdfd_hash_blocks{map="default"}')
        recv1=$(sample "$tmp/daemon2.txt" 'tsdfd_frames_received_total{sensor="cam0"}')
        echo "frames integrated: $int0 -> $int1 (sensor cam0: $cam0 -> $cam1, received $recv1);" \
             "hash blocks of map default: $blocks0 -> $blocks1"
        awk -v a="$int0" -v b="$int1" -v n=$nframes 'BEGIN { exit !(b - a == n) }' ||
            fail "tsdfd_frames_integrated_total grew by $(awk -v a="$int0" -v b="$int1" 'BEGIN{print b-a}'), not $nframes"
        awk -v a="$cam0" -v b="$cam1" -v n=$nframes 'BEGIN { exit !(b - a == n) }' ||
            fail "tsdfd_frames_integrated_total{sensor=\"cam0\"}: $cam0 -> $cam1, not +$nframes"
        awk -v r="$recv1" -v n=$nframes 'BEGIN { exit !(r == n) }' ||
            fail "tsdfd_frames_received_total{sensor=\"cam0\"} is $recv1, not $nframes"
        awk -v a="$blocks0" -v b="$blocks1" 'BEGIN { exit !(b > a) }' ||
            fail "tsdfd_hash_blocks{map=\"default\"} did not grow ($blocks0 -> $blocks1)"
    else
        fail "tsdfd did not serve /metrics"; tail -20 "$tmp/tsdfd.log"
    fi
fi

if [ $fails -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "PASS"

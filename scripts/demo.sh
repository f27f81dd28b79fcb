#!/usr/bin/env bash
# The main job, end to end: installs what is missing (Debian 12 packages),
# builds tsdfd and tsdfctl (with the CUDA backend when nvcc is present; the
# daemon picks CUDA when a GPU is usable, else the CPU backend), starts the
# daemon on the shipped config (config/tsdfd.conf) with its sockets, state
# and metrics moved into out/demo so that it needs no system directories,
# streams a synthetic room through tsdfctl (and the 7-Scenes kitchen into a
# second map when ../shared/data/7scenes-redkitchen is present), writes
# meshes and a raycast image, prints the stats and stops the daemon cleanly.
# /metrics and the live view go to $TSDF_DEMO_METRICS_PORT, else the first
# free port from 9464 on; TSDF_DEMO_KEEP=1 leaves the daemon running at the
# end (until Ctrl-C), so that the view can be looked at.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

bash scripts/install-deps.sh
build=${TSDF_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target tsdfd tsdfctl

out=$root/out/demo
rm -rf "$out" && mkdir -p "$out/state"
tsdfd=$root/$build/daemon/tsdfd
tsdfctl=$root/$build/client/tsdfctl
export TSDF_URL=ipc://$out/tsdfd.sock TSDF_PUSH_URL=ipc://$out/frames.sock

# The metrics port: $TSDF_DEMO_METRICS_PORT, else the first free one from
# 9464 (the default) on, so that a daemon already running there, or any
# other server, does not stop the demo.
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
metrics_port=${TSDF_DEMO_METRICS_PORT:-}
if [ -z "$metrics_port" ]; then
    metrics_port=9464
    while port_taken "$metrics_port"; do
        metrics_port=$((metrics_port + 1))
        [ "$metrics_port" -lt 9564 ] || { echo "demo: no free port in 9464..9563 for /metrics (set TSDF_DEMO_METRICS_PORT)" >&2; exit 1; }
    done
elif port_taken "$metrics_port"; then
    echo "demo: TSDF_DEMO_METRICS_PORT=$metrics_port is taken" >&2
    exit 1
fi
echo "== metrics on http://127.0.0.1:$metrics_port/metrics =="
echo "== live view on http://127.0.0.1:$metrics_port/ (open it in a browser) =="

"$tsdfd" --check-config config/tsdfd.conf
"$tsdfd" --config config/tsdfd.conf --listen "$TSDF_URL" --frames-listen "$TSDF_PUSH_URL" \
    --state-dir "$out/state" --metrics "127.0.0.1:$metrics_port" \
    --set metrics.web_dir="$root/web" 2>"$out/tsdfd.log" &
pid=$!
stop_daemon() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        wait "$pid"
    fi
}
trap 'stop_daemon || true' EXIT

for _ in $(seq 100); do
    "$tsdfctl" --timeout-ms 200 ping >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$out/tsdfd.log"; echo "demo: tsdfd did not start" >&2; exit 1; }
    sleep 0.1
done
grep -m1 -i "backend" "$out/tsdfd.log" || true

echo "== streaming the synthetic 'demo' room (a table, two balls, a pillar) =="
"$tsdfctl" replay --synthetic demo --size 320 240
"$tsdfctl" mesh "$out/mesh.ply"
# A view from a corner of the room, looking at the table.
cat >"$out/view.pose.txt" <<'POSE'
0.607450108 0.388507299 -0.692868274 1.700000000
0.794357833 -0.297093817 0.529840445 -1.300000000
0.000000000 -0.872236976 -0.489083488 1.700000000
0 0 0 1
POSE
"$tsdfctl" raycast --pose "$out/view.pose.txt" "$out/raycast.png"
"$tsdfctl" raycast --pose "$out/view.pose.txt" --color "$out/raycast-color.png"

data=${TSDF_DATA_DIR:-$root/../shared/data/7scenes-redkitchen}
if [ -d "$data/frames" ]; then
    echo "== streaming the 7-Scenes kitchen ($data) into map 'kitchen' =="
    "$tsdfctl" replay "$data/frames" --map kitchen --max-depth 4.0
    "$tsdfctl" mesh --map kitchen "$out/kitchen.ply"
    intrinsics=$data/camera-intrinsics.txt
    [ -f "$intrinsics" ] || { printf '585 0 320\n0 585 240\n0 0 1\n' >"$out/K.txt"; intrinsics=$out/K.txt; }
    "$tsdfctl" raycast --map kitchen --pose "$data/frames/frame-000200.pose.txt" \
        --intrinsics "$intrinsics" "$out/kitchen-raycast.png"
else
    echo "== 7-Scenes data not found at $data: skipping the kitchen =="
fi

echo "== stats =="
"$tsdfctl" stats
if command -v curl >/dev/null; then
    curl -fsS "http://127.0.0.1:$metrics_port/metrics" | grep -E '^tsdfd_(frames_integrated_total|hash_load_factor)' || true
fi

if [ "${TSDF_DEMO_KEEP:-0}" = 1 ]; then
    echo "== the daemon keeps running: live view on http://127.0.0.1:$metrics_port/ (Ctrl-C stops it) =="
    trap 'stop_daemon; exit 0' INT TERM
    while kill -0 "$pid" 2>/dev/null; do sleep 1; done
fi
stop_daemon
trap - EXIT
echo "== done: daemon stopped cleanly =="
ls -l "$out"/*.ply "$out"/*.png

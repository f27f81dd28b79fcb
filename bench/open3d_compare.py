#!/usr/bin/python3
"""open3d_compare.py - tsdfd's CPU backend side by side with Open3D's
VoxelBlockGrid on the same 7-Scenes frames, and the ratios.

    bench/open3d_compare.py [--bench PATH] [--data DIR] [--frames N]
                            [--threads N] [--voxel M] [--trunc-vox V]
                            [--raycast-reps R] [--mesh-reps R]

Both engines get the same frames, voxel size, truncation (trunc_vox voxels:
Open3D's trunc_voxel_multiplier), depth range (0.1 .. 4 m) and pose for the
raycast (the middle frame's, at the camera's resolution, depth and
normals). Open3D runs on its CPU device; tsdfd runs as bench_engine
--backend cpu with --threads N (default 0: every online core; Open3D uses
every core too). Per stage, the medians:

    integrate  Open3D: compute_unique_block_coordinates + integrate, per
               frame; tsdfd: its allocate + update (the engine's times)
    raycast    Open3D: ray_cast of depth and normal over the middle frame's
               frustum blocks; tsdfd: tsdf_volume_raycast with normals
    mesh       Open3D: extract_triangle_mesh; tsdfd: tsdf_volume_mesh

A comparison of wrong results is meaningless, so the results are checked
first, and no time is printed unless they agree: the block counts and mesh
vertex counts within a factor of 2 (the engines allocate with different
bands and mesh with different rules, so they are not equal), and the two
raycast depth images hitting the same pixels (90 % of either's hits are
hits of both) at about the same depth (median difference below one voxel,
90th percentile below three). The engines differ in the details of fusion
(tsdfd skips samples on depth edges, their bands and raycast refinements
differ): on a fronto-parallel plane both raycast the exact depth, on
7-Scenes Open3D's surface lies a median of about half a voxel farther.
Exit status: 0 when both ran and agree, 1 when the results disagree, 2 on
a setup error (no Open3D, no data, no bench_engine).

Open3D: Debian's python3-open3d (apt-get install python3-open3d), run
with /usr/bin/python3.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import open3d as o3d
    import open3d.core as o3c
except ImportError as e:  # pragma: no cover - a setup error, said plainly
    sys.exit(f"open3d_compare: needs numpy and Open3D ({e}); "
             "apt-get install python3-open3d and run with /usr/bin/python3")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def load_frames(data_dir, n):
    frames_dir = os.path.join(data_dir, "frames")
    K = np.loadtxt(os.path.join(data_dir, "camera-intrinsics.txt"))
    frames = []
    for i in range(n):
        stem = os.path.join(frames_dir, f"frame-{i:06d}")
        if not os.path.exists(stem + ".depth.png"):
            break
        depth = np.asarray(o3d.io.read_image(stem + ".depth.png")).copy()
        # The Kinect driver of 7-Scenes writes 65535 for "no reading", as
        # tsdfd's dataset reader knows.
        depth[depth == 65535] = 0
        T_world_cam = np.loadtxt(stem + ".pose.txt")
        frames.append((o3d.t.geometry.Image(o3c.Tensor(depth)), T_world_cam))
    return K, frames


def run_open3d(args, K, frames):
    dev = o3c.Device("CPU:0")
    intr = o3c.Tensor(K, o3c.float64)
    vbg = o3d.t.geometry.VoxelBlockGrid(
        attr_names=("tsdf", "weight"), attr_dtypes=(o3c.float32, o3c.float32),
        attr_channels=((1), (1)), voxel_size=args.voxel, block_resolution=8,
        block_count=100000, device=dev)
    common = dict(depth_scale=1000.0, depth_max=args.max_depth)
    integrate_ms = []
    for depth, T in frames:
        extr = o3c.Tensor(np.linalg.inv(T), o3c.float64)
        t0 = time.perf_counter()
        blocks = vbg.compute_unique_block_coordinates(
            depth, intr, extr, trunc_voxel_multiplier=args.trunc_vox, **common)
        vbg.integrate(blocks, depth, intr, extr, trunc_voxel_multiplier=args.trunc_vox, **common)
        integrate_ms.append(1e3 * (time.perf_counter() - t0))
    nblocks = vbg.hashmap().size()

    mid_depth, mid_T = frames[len(frames) // 2]
    extr = o3c.Tensor(np.linalg.inv(mid_T), o3c.float64)
    h, w = np.asarray(mid_depth).shape[:2]
    frustum = vbg.compute_unique_block_coordinates(
        mid_depth, intr, extr, trunc_voxel_multiplier=args.trunc_vox, **common)
    ray_ms = []
    result = None
    for _ in range(args.raycast_reps):
        t0 = time.perf_counter()
        result = vbg.ray_cast(block_coords=frustum, intrinsic=intr, extrinsic=extr, width=w,
                              height=h, render_attributes=["depth", "normal"],
                              depth_scale=1000.0, depth_min=args.min_depth,
                              depth_max=args.max_depth, weight_threshold=1,
                              trunc_voxel_multiplier=args.trunc_vox)
        ray_ms.append(1e3 * (time.perf_counter() - t0))
    # Open3D's depth image is in depth_scale units, 0 where no surface.
    o3d_depth = result["depth"].numpy().reshape(h, w).astype(np.float64) / 1000.0

    mesh_ms = []
    mesh = None
    for _ in range(args.mesh_reps):
        t0 = time.perf_counter()
        mesh = vbg.extract_triangle_mesh(weight_threshold=1.0)
        mesh_ms.append(1e3 * (time.perf_counter() - t0))
    return dict(integrate=integrate_ms, raycast=ray_ms, mesh=mesh_ms, blocks=nblocks,
                vertices=len(mesh.vertex.positions), depth=o3d_depth)


def run_tsdfd(args, n, w, h):
    with tempfile.TemporaryDirectory() as tmp:
        ray_path = os.path.join(tmp, "raycast.f32")
        cmd = [args.bench, "--backend", "cpu", "--data", args.data, "--frames", str(n),
               "--voxel", str(args.voxel), "--trunc-vox", str(args.trunc_vox),
               "--max-depth", str(args.max_depth), "--threads", str(args.threads),
               "--raycast-reps", str(args.raycast_reps), "--mesh-reps", str(args.mesh_reps),
               "--raycast-out", ray_path]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.stderr.write(out.stdout + out.stderr)
            sys.exit(f"open3d_compare: {' '.join(cmd)} failed ({out.returncode})")
        depth = np.fromfile(ray_path, dtype=np.float32).reshape(h, w).astype(np.float64)
    text = out.stdout

    def series(name):
        m = re.search(r"^\s+" + re.escape(name) + r"\s+([\d.]+)\s+([\d.]+)", text, re.M)
        if not m:
            sys.exit(f"open3d_compare: no '{name}' line in bench_engine's output:\n{text}")
        return float(m.group(2))  # the median

    def number(pattern):
        m = re.search(pattern, text, re.M)
        if not m:
            sys.exit(f"open3d_compare: no match for {pattern!r} in:\n{text}")
        return int(m.group(1))

    return dict(integrate=series("allocate") + series("update"),
                raycast=series("raycast (engine)"), mesh=series("mesh (engine)"),
                blocks=number(r"^volume: (\d+) blocks"),
                vertices=number(r"^mesh \(all blocks\): (\d+) vertices"),
                threads=number(r"threads (\d+)"), depth=depth, text=text)


def check(o, t, voxel):
    """The reasons the two results disagree; empty when they agree."""
    bad = []
    for what in ("blocks", "vertices"):
        r = t[what] / max(o[what], 1)
        print(f"check: {what}: tsdfd {t[what]}, Open3D {o[what]} (ratio {r:.2f})")
        if not 0.5 <= r <= 2.0:
            bad.append(f"{what} differ by more than 2x")
    hit_o = o["depth"] > 0
    hit_t = np.isfinite(t["depth"])
    both = hit_o & hit_t
    cover_o = both.sum() / max(hit_o.sum(), 1)
    cover_t = both.sum() / max(hit_t.sum(), 1)
    diff = np.abs(o["depth"][both] - t["depth"][both])
    med = float(np.median(diff)) if diff.size else float("inf")
    print(f"check: raycast hits: tsdfd {hit_t.sum()}, Open3D {hit_o.sum()}, both {both.sum()} "
          f"({100 * cover_t:.1f} % / {100 * cover_o:.1f} %); depth difference median "
          f"{1e3 * med:.3f} mm, p90 {1e3 * float(np.percentile(diff, 90)) if diff.size else 0.0:.3f} mm")
    if cover_o < 0.9 or cover_t < 0.9:
        bad.append("the raycasts hit different pixels")
    p90 = float(np.percentile(diff, 90)) if diff.size else float("inf")
    if not (med < voxel and p90 < 3.0 * voxel):
        bad.append("the raycast depths differ by more than a voxel (median) or three (p90)")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=None, help="bench_engine (default: $TSDF_BENCH_ENGINE, "
                    "else build/bench/bench_engine)")
    ap.add_argument("--data", default=None)
    ap.add_argument("--frames", type=int, default=450)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--voxel", type=float, default=0.01)
    ap.add_argument("--trunc-vox", type=float, default=4.0)
    ap.add_argument("--min-depth", type=float, default=0.1)
    ap.add_argument("--max-depth", type=float, default=4.0)
    ap.add_argument("--raycast-reps", type=int, default=10)
    ap.add_argument("--mesh-reps", type=int, default=3)
    args = ap.parse_args()
    if args.data is None:
        args.data = os.environ.get("TSDF_DATA_DIR") or os.path.join(
            ROOT, "..", "shared", "data", "7scenes-redkitchen")
    if args.bench is None:
        args.bench = os.environ.get("TSDF_BENCH_ENGINE") or os.path.join(
            ROOT, "build", "bench", "bench_engine")
    if not os.path.isdir(os.path.join(args.data, "frames")):
        print(f"open3d_compare: no 7-Scenes data in {args.data}", file=sys.stderr)
        return 2
    if not os.access(args.bench, os.X_OK):
        print(f"open3d_compare: no bench_engine at {args.bench} (--bench)", file=sys.stderr)
        return 2
    if args.raycast_reps < 1 or args.mesh_reps < 1 or args.frames < 1:
        print("open3d_compare: --frames, --raycast-reps and --mesh-reps must be >= 1",
              file=sys.stderr)
        return 2

    K, frames = load_frames(args.data, args.frames)
    if not frames:
        print(f"open3d_compare: no frames in {args.data}", file=sys.stderr)
        return 2
    h, w = np.asarray(frames[0][0]).shape[:2]
    print(f"open3d_compare: {len(frames)} frames {w}x{h} of {args.data}; voxel {args.voxel} m, "
          f"truncation {args.trunc_vox} voxels, depth {args.min_depth}..{args.max_depth} m")
    o = run_open3d(args, K, frames)
    t = run_tsdfd(args, len(frames), w, h)
    print(f"engines: Open3D {o3d.__version__} VoxelBlockGrid (CPU:0); "
          f"tsdfd CPU backend, {t['threads']} threads")
    bad = check(o, t, args.voxel)
    if bad:
        print("open3d_compare: the results disagree (" + "; ".join(bad) + "): no times printed",
              file=sys.stderr)
        return 1
    print(f"{'stage (median ms)':<28}{'tsdfd':>10}{'Open3D':>10}{'tsdfd/Open3D':>14}")
    for stage, name in (("integrate", "integrate per frame"), ("raycast", "raycast depth+normals"),
                        ("mesh", "mesh, whole map")):
        ot = median(o[stage])
        print(f"{name:<28}{t[stage]:>10.2f}{ot:>10.2f}{t[stage] / ot:>14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The examples run against the test daemon: examples/depth_pngs.py reads
16-bit depth PNGs from a folder, streams them, waits for the daemon to have
received them all and meshes with after="queued", so its mesh shows every
frame (PROTOCOL.md 6.9); the PLY it writes holds that mesh."""

import pathlib
import subprocess
import sys

import numpy as np

from tsdf import _depth

from scenes import FX, FY, CX, CY, orbit_poses, render_sphere

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def ply_counts(path):
    """(vertices, faces) of a binary PLY's header."""
    counts = {}
    with open(path, "rb") as f:
        for line in f:
            words = line.split()
            if words[:1] == [b"element"]:
                counts[words[1].decode()] = int(words[2])
            if line.strip() == b"end_header":
                break
    return counts["vertex"], counts["face"]


def test_depth_pngs_example_meshes_every_frame(daemon, client, tmp_path):
    frames = list(orbit_poses(rings=(-30, 0, 30), per_ring=4))[:10]
    folder = tmp_path / "seq"
    folder.mkdir()
    for i, T in enumerate(frames):
        mm = np.round(render_sphere(T) * 1000.0).astype(np.uint16)
        (folder / f"frame-{i:06d}.depth.png").write_bytes(_depth.png_u16(mm))
        np.savetxt(folder / f"frame-{i:06d}.pose.txt", T)
    out = tmp_path / "mesh.ply"
    r = subprocess.run([sys.executable, str(EXAMPLES / "depth_pngs.py"), str(folder),
                        "--url", daemon.req_url, "--push-url", daemon.push_url,
                        "--map", "example-pngs", "--sensor", "pngs", "--out", str(out),
                        "--fx", str(FX), "--fy", str(FY), "--cx", str(CX), "--cy", str(CY)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    # The mesh the example wrote is the map's after all ten frames.
    stats = client.stats("example-pngs")
    assert stats["engine"]["frames_integrated"] == len(frames)
    assert f"map version {stats['engine']['version']}" in r.stdout, r.stdout
    whole = client.mesh("example-pngs")
    assert ply_counts(out) == (len(whole.vertices), len(whole.faces))
    assert len(whole.faces) > 1000

#!/usr/bin/env python3
"""Streams a folder of 16-bit depth PNGs with their poses to tsdfd and
writes the mesh as PLY.

The folder is laid out as 7-Scenes is: frame-000000.depth.png (16-bit
grayscale, millimetres, 0 where there is no measurement) beside
frame-000000.pose.txt (the 4x4 camera-to-world matrix, row-major). The
frames go fire-and-forget over the PUSH socket; then the mesh is asked for.

Pushed frames and requests travel on two sockets, which are not ordered
with each other (PROTOCOL.md 6.9): a mesh asked for right after the last
send may not show the last frames, even with after="queued" (which waits
only for the frames already in the map's queue). So the script waits until
the daemon has *received* every frame it sent (its per-sensor counter),
and only then asks for the mesh with after="queued": that mesh shows every
frame.

    python3 depth_pngs.py DIR [--url URL] [--push-url URL] [--map NAME]
                          [--every N] [--out mesh.ply] [--fx F --fy F --cx C --cy C]

Needs: pip install ./python pillow (the tsdf package, and Pillow to read
the PNGs; Debian: python3-pil). The intrinsics default to 7-Scenes'
Kinect (585, 585, 320, 240).
"""

import argparse
import pathlib
import sys
import time

import numpy as np
from PIL import Image

import tsdf


def read_depth_png(path):
    """A 16-bit grayscale PNG as a (H, W) uint16 array."""
    with Image.open(path) as im:
        if im.mode not in ("I;16", "I;16B", "I"):
            raise ValueError(f"{path}: mode {im.mode}, not a 16-bit depth image")
        return np.asarray(im, dtype=np.uint32).astype(np.uint16)


def received(client, map_name, sensor):
    """The frames the daemon has received from sensor."""
    return client.stats(map_name)["daemon"].get(f"sensor.{sensor}.received", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--url", default=tsdf.DEFAULT_REQ_URL)
    ap.add_argument("--push-url", default=tsdf.DEFAULT_PUSH_URL)
    ap.add_argument("--map", default="kitchen")
    ap.add_argument("--sensor", default="kinect")
    ap.add_argument("--every", type=int, default=1, help="send every Nth frame")
    ap.add_argument("--out", default="mesh.ply")
    ap.add_argument("--fx", type=float, default=585.0)
    ap.add_argument("--fy", type=float, default=585.0)
    ap.add_argument("--cx", type=float, default=320.0)
    ap.add_argument("--cy", type=float, default=240.0)
    ap.add_argument("--timeout-s", type=float, default=60.0,
                    help="give up when the daemon receives nothing new this long")
    args = ap.parse_args()

    depths = sorted(pathlib.Path(args.dir).glob("frame-*.depth.png"))[::args.every]
    if not depths:
        print(f"{args.dir}: no frame-*.depth.png", file=sys.stderr)
        return 1
    K = (args.fx, args.fy, args.cx, args.cy)
    with tsdf.Client(args.url, args.push_url) as c:
        before = received(c, args.map, args.sensor)
        for seq, png in enumerate(depths):
            depth = read_depth_png(png)
            T = np.loadtxt(str(png).replace(".depth.png", ".pose.txt")).reshape(4, 4)
            c.send_frame(args.map, depth, K, T, sensor=args.sensor, seq=seq,
                         depth_encoding="png")
        # Wait on the daemon's own count of what it received, not a guess.
        last, last_change = before, time.monotonic()
        while (now := received(c, args.map, args.sensor)) - before < len(depths):
            if now != last:
                last, last_change = now, time.monotonic()
            elif time.monotonic() - last_change > args.timeout_s:
                print(f"the daemon received {now - before} of {len(depths)} frames: is "
                      f"--push-url its frames socket?", file=sys.stderr)
                return 1
            time.sleep(0.05)
        # Every frame is received, so it is queued or integrated: "queued"
        # waits for the rest, and the mesh shows all of them.
        mesh = c.mesh(args.map, after="queued")
        mesh.write_ply(args.out)
        print(f"{len(depths)} frames; {args.out}: {len(mesh.vertices)} vertices, "
              f"{len(mesh.faces)} triangles, map version {mesh.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

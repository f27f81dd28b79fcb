#!/usr/bin/env python3
"""Streams a synthetic sphere to tsdfd and checks what comes back.

It renders a sphere with numpy (exact ray-sphere depth), sends the frames
-- half fire-and-forget on the PUSH socket, half as acknowledged integrate
requests, alternately as u16 and f32 depth -- waits until the daemon has
integrated them all, then asks for a raycast and a mesh and checks that
the mesh is the sphere it rendered.

    python3 sphere.py [--url URL] [--push-url URL] [--map NAME]
                      [--out mesh.ply] [--timeout-ms MS]
                      [--tls-ca FILE --tls-cert FILE --tls-key FILE
                       [--tls-server-name NAME]]

For tls+tcp:// URLs the daemon requires a client certificate: --tls-ca is
the CA of the daemon's certificate, --tls-cert/--tls-key this client's.

Needs: pip install ./python (the tsdf package, from the repository root).
Exit status: 0 when the mesh is plausible, 1 otherwise (with a message).
"""

import argparse
import math
import sys
import time

import numpy as np

import tsdf

# The scene: a sphere of this radius at the world origin.
SPHERE_RADIUS_M = 0.3
WIDTH, HEIGHT = 160, 120
FX = FY = 150.0
CX, CY = (WIDTH - 1) / 2.0, (HEIGHT - 1) / 2.0
K = np.array([[FX, 0.0, CX], [0.0, FY, CY], [0.0, 0.0, 1.0]])
U16_SCALE = 0.0001  # u16 depth in 0.1 mm units


def look_at(eye, target, up=(0.0, 0.0, 1.0)):
    """Row-major 4x4 T_world_cam of a camera at eye looking at target.

    Camera axes (PROTOCOL.md section 5): x right, y down, z forward."""
    eye = np.asarray(eye, dtype=np.float64)
    forward = np.asarray(target, dtype=np.float64) - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = right, down, forward, eye
    return T


def render_sphere(T_world_cam):
    """Exact z-depth (metres, 0 = no hit) of the sphere seen from T_world_cam."""
    u, v = np.meshgrid(np.arange(WIDTH), np.arange(HEIGHT))
    rays_cam = np.stack([(u - CX) / FX, (v - CY) / FY, np.ones_like(u, dtype=np.float64)], -1)
    R, t = T_world_cam[:3, :3], T_world_cam[:3, 3]
    d = rays_cam @ R.T  # ray directions in the world (z component 1 in the camera)
    # |t + s d|^2 = r^2  ->  a s^2 + 2 b s + c = 0; s is the camera z-depth.
    a = np.sum(d * d, -1)
    b = d @ t
    c = t @ t - SPHERE_RADIUS_M**2
    disc = b * b - a * c
    s = np.where(disc >= 0, (-b - np.sqrt(np.maximum(disc, 0))) / a, 0.0)
    return np.where(s > 0, s, 0.0)


def orbit_poses():
    """4 rings x 12 views around the sphere, so that all of it is seen."""
    for elev_deg in (-60, -20, 20, 60):
        for k in range(12):
            az = 2 * math.pi * (k + (0.5 if elev_deg in (-20, 60) else 0.0)) / 12
            el = math.radians(elev_deg)
            eye = 1.0 * np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az),
                                  math.sin(el)])
            yield look_at(eye, (0.0, 0.0, 0.0))


def frames_integrated(client, map_name):
    return client.stats(map_name).get("engine", {}).get("frames_integrated", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=tsdf.DEFAULT_REQ_URL)
    ap.add_argument("--push-url", default=tsdf.DEFAULT_PUSH_URL)
    ap.add_argument("--map", default="pysphere")
    ap.add_argument("--timeout-ms", type=int, default=20000)
    ap.add_argument("--out", help="write the mesh as PLY here")
    ap.add_argument("--tls-ca", help="CA file of the daemon's certificate (tls+tcp://)")
    ap.add_argument("--tls-cert", help="this client's certificate file")
    ap.add_argument("--tls-key", help="this client's private key file")
    ap.add_argument("--tls-server-name", help="name to verify the daemon's certificate against")
    args = ap.parse_args()

    with tsdf.Client(args.url, args.push_url, timeout_ms=args.timeout_ms, tls_ca=args.tls_ca,
                     tls_cert=args.tls_cert, tls_key=args.tls_key,
                     tls_server_name=args.tls_server_name) as client:
        pong = client.ping()
        print(f"connected: {pong.server}, up {pong.uptime_ms / 1000:.1f} s")

        # A bad pose must come back as BAD_POSE, not break anything.
        try:
            client.integrate(args.map, np.zeros((HEIGHT, WIDTH), np.float32), K,
                             np.diag([2.0, 2.0, 2.0, 1.0]))
            print("FAIL: a scaled pose was accepted")
            return 1
        except tsdf.TsdfError as e:
            if e.code != tsdf.ErrorCode.BAD_POSE:
                print(f"FAIL: expected BAD_POSE, got {e}")
                return 1

        poses = list(orbit_poses())
        t0 = time.time()
        before = frames_integrated(client, args.map)  # 0: the first frame makes the map
        for seq, T in enumerate(poses):
            depth = render_sphere(T)
            if seq % 2 == 0:
                depth = np.round(depth / U16_SCALE).astype(np.uint16)
            else:
                depth = depth.astype(np.float32)
            frame = dict(sensor="py-sphere", seq=seq, stamp_ns=time.time_ns(),
                         depth_scale=U16_SCALE)
            if seq < len(poses) // 2:
                client.send_frame(args.map, depth, K, T, **frame)
            else:
                assert client.integrate(args.map, depth, K, T, **frame).seq == seq
        # The pushed frames are integrated asynchronously: wait for all.
        deadline = time.time() + 60
        while True:
            done = frames_integrated(client, args.map) - before
            if done >= len(poses) or time.time() > deadline:
                break
            time.sleep(0.1)
        engine = client.stats(args.map)["engine"]
        print(f"integrated {done}/{len(poses)} frames in {time.time() - t0:.2f} s "
              f"({engine.get('blocks_allocated')} blocks, backend {engine.get('backend')})")
        if done < len(poses):
            print("FAIL: not every frame was integrated")
            return 1

        # Raycast from a new pose: the centre pixel sees the sphere at 1.0 - r.
        view = client.raycast(args.map, WIDTH, HEIGHT, K, look_at((0.0, -1.0, 0.0), (0, 0, 0)))
        centre = float(view.depth[HEIGHT // 2, WIDTH // 2])
        print(f"raycast: centre depth {centre:.4f} m (expected {1.0 - SPHERE_RADIUS_M:.4f})")
        if not abs(centre - (1.0 - SPHERE_RADIUS_M)) < 0.02:
            print("FAIL: raycast depth is off")
            return 1

        mesh = client.mesh(args.map)
        pos, idx, nrm = mesh.vertices, mesh.faces, mesh.normals
        radii = np.linalg.norm(pos, axis=1) if len(pos) else np.zeros(0)
        print(f"mesh: version {mesh.version}, {len(pos)} vertices, {len(idx)} triangles, "
              f"radius {radii.mean() if len(radii) else 0:.4f} +- "
              f"{radii.std() if len(radii) else 0:.4f} m")
        if args.out:
            mesh.write_ply(args.out)
            print(f"wrote {args.out}")
        checks = [
            (len(pos) > 1000, "fewer than 1000 vertices"),
            (len(idx) > 1000, "fewer than 1000 triangles"),
            (len(idx) == 0 or int(idx.max()) < len(pos), "an index out of range"),
            (len(radii) > 0 and abs(float(radii.mean()) - SPHERE_RADIUS_M) < 0.01,
             "vertices are not on the sphere"),
            (len(radii) > 0 and float(np.abs(radii - SPHERE_RADIUS_M).max()) < 0.03,
             "a vertex lies far from the sphere"),
            (len(pos) > 0 and float(np.mean(np.sum(nrm * pos, 1) / np.maximum(radii, 1e-9)))
             > 0.9, "normals do not point outwards"),
            (len(pos) > 0 and np.all(np.abs(pos).max(0) < SPHERE_RADIUS_M + 0.03)
             and np.all(pos.max(0) - pos.min(0) > 2 * SPHERE_RADIUS_M - 0.05),
             "the bounding box is not the sphere's"),
        ]
        failed = [msg for ok, msg in checks if not ok]
        for msg in failed:
            print(f"FAIL: {msg}")

        # Incremental meshing: nothing changed since that version.
        again = client.mesh(args.map, since=mesh.version)
        print(f"mesh since {mesh.version}: {len(again.vertices)} vertices "
              f"(version {again.version})")
        maps = client.maps()
        if args.map not in maps:
            failed.append(f"map {args.map} missing from {maps}")
            print(f"FAIL: {failed[-1]}")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

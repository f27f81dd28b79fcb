#!/usr/bin/env python3
"""Example tsdfd client in Python, written from proto/PROTOCOL.md alone.

It renders a synthetic sphere with numpy (exact ray-sphere depth), sends the
frames to tsdfd -- half of them fire-and-forget on the PUSH socket ("frame"),
half as acknowledged "integrate" requests -- waits until the daemon has
integrated them all, then asks for a raycast and a mesh and checks that the
mesh is the sphere it rendered.

    python3 tsdf_example_client.py [--url URL] [--push-url URL] [--map NAME]
                                   [--out mesh.ply] [--timeout-ms MS]
                                   [--tls-ca FILE --tls-cert FILE --tls-key FILE
                                    [--tls-server-name NAME]]

For tls+tcp:// URLs the daemon requires a client certificate: --tls-ca is the
CA of the daemon's certificate, --tls-cert/--tls-key this client's (pynng's
TLSConfig; the pynng wheels build nng with TLS).

Needs: pip install pynng msgpack numpy
Exit status: 0 when the mesh is plausible, 1 otherwise (with a message).
"""

import argparse
import itertools
import math
import struct
import sys
import time

import msgpack
import numpy as np
import pynng

PROTOCOL_VERSION = 1
DEFAULT_REQ_URL = "ipc:///run/tsdfd/tsdfd.sock"
DEFAULT_PUSH_URL = "ipc:///run/tsdfd/frames.sock"

# The scene: a sphere of this radius at the world origin.
SPHERE_RADIUS_M = 0.3
WIDTH, HEIGHT = 160, 120
FX = FY = 150.0
CX, CY = (WIDTH - 1) / 2.0, (HEIGHT - 1) / 2.0


class TsdfError(Exception):
    """An error reply: status is the negative code of PROTOCOL.md section 4."""

    def __init__(self, status, name, message):
        super().__init__(f"{name} ({status}): {message}")
        self.status = status
        self.name = name


class TsdfClient:
    """One REQ socket for requests, one PUSH socket for frames."""

    def __init__(self, req_url, push_url=None, timeout_ms=10000, tls=None):
        self._ids = itertools.count(1)
        self.req = pynng.Req0(recv_timeout=timeout_ms, send_timeout=timeout_ms)
        # tls: a dict of ca, cert, key, server_name (files); one TLSConfig
        # per URL, as the server name defaults to the URL's host.
        self._tls = tls
        # A resent "integrate" would integrate its frame twice (PROTOCOL.md
        # section 1): turn nng's automatic resend off.
        try:
            self.req.resend_time = -1
        except Exception:  # older pynng without the option: keep the default
            pass
        self._dial(self.req, req_url)
        self.push = None
        if push_url:
            self.push = pynng.Push0(send_timeout=timeout_ms)
            self._dial(self.push, push_url)

    def _dial(self, sock, url):
        if not url.startswith("tls+tcp"):
            if self._tls and any(self._tls.values()):
                raise ValueError(f"{url}: TLS options given, but the URL is not tls+tcp://")
            sock.dial(url, block=True)
            return
        if not self._tls or not self._tls.get("ca"):
            raise ValueError(f"{url}: TLS needs --tls-ca")
        host = url.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
        kw = {"ca_files": [self._tls["ca"]],
              "server_name": self._tls.get("server_name") or host,
              "auth_mode": pynng.TLSConfig.AUTH_MODE_REQUIRED}
        if self._tls.get("cert"):
            with open(self._tls["cert"]) as f:
                kw["own_cert_string"] = f.read()
            with open(self._tls["key"]) as f:
                kw["own_key_string"] = f.read()
        sock.tls_config = pynng.TLSConfig(pynng.TLSConfig.MODE_CLIENT, **kw)
        try:
            sock.dial(url, block=True)
        except pynng.exceptions.NNGException as e:
            # nng says CryptoError / AuthenticationError for a certificate
            # refused here, and "connection shutdown" (errno 31) or a reset
            # when the daemon refuses ours.
            if not (isinstance(e, (pynng.exceptions.CryptoError,
                                   pynng.exceptions.AuthenticationError,
                                   pynng.exceptions.ConnectionReset))
                    or getattr(e, "errno", None) == 31):
                raise
            raise SystemExit(f"{url}: TLS handshake failed ({e}): check --tls-ca, "
                             "--tls-cert/--tls-key and the server name") from None

    def close(self):
        self.req.close()
        if self.push is not None:
            self.push.close()

    def request(self, msg_type, **fields):
        """Sends one request and returns the reply map (status 0) or raises."""
        request_id = next(self._ids)
        msg = {"v": PROTOCOL_VERSION, "type": msg_type, "id": request_id}
        msg.update(fields)
        self.req.send(msgpack.packb(msg, use_bin_type=True))
        reply = msgpack.unpackb(self.req.recv(), raw=False)
        if not isinstance(reply, dict) or reply.get("v") != PROTOCOL_VERSION:
            raise RuntimeError(f"malformed reply: {reply!r:.200}")
        if reply.get("id") != request_id:
            raise RuntimeError(f"reply id {reply.get('id')} != request id {request_id}")
        if reply["status"] != 0:
            raise TsdfError(reply["status"], reply.get("error", "?"), reply.get("message", ""))
        return reply

    def send_frame(self, **fields):
        """A fire-and-forget "frame" message on the PUSH socket."""
        msg = {"v": PROTOCOL_VERSION, "type": "frame"}
        msg.update(fields)
        self.push.send(msgpack.packb(msg, use_bin_type=True))

    def mesh(self, map_name, box=None, since_version=None):
        fields = {"map": map_name}
        if box is not None:
            fields["box"] = [float(x) for x in box]
        if since_version is not None:
            fields["since_version"] = int(since_version)
        r = self.request("mesh", **fields)
        nv, nt = r["vertex_count"], r["triangle_count"]
        positions = np.frombuffer(r["positions"], dtype="<f4").reshape(nv, 3)
        normals = np.frombuffer(r["normals"], dtype="<f4").reshape(nv, 3)
        indices = np.frombuffer(r["indices"], dtype="<u4").reshape(nt, 3)
        colors = None
        if r.get("colors") is not None:
            colors = np.frombuffer(r["colors"], dtype=np.uint8).reshape(nv, 3)
        return r["version"], positions, normals, indices, colors


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


def frame_fields(map_name, seq, T, depth_m, as_u16):
    fields = {
        "map": map_name, "sensor": "py-sphere", "seq": seq, "stamp_ns": time.time_ns(),
        "width": WIDTH, "height": HEIGHT, "fx": FX, "fy": FY, "cx": CX, "cy": CY,
        "min_depth": 0.1, "max_depth": 5.0,
        "T_world_cam": [float(x) for x in T.reshape(-1)],
    }
    if as_u16:
        fields["depth_format"] = "u16"
        fields["depth_scale"] = 0.0001  # 0.1 mm units
        fields["depth"] = np.round(depth_m / 0.0001).astype("<u2").tobytes()
    else:
        fields["depth_format"] = "f32"
        fields["depth"] = depth_m.astype("<f4").tobytes()
    return fields


def write_ply(path, positions, indices):
    with open(path, "wb") as f:
        f.write(b"ply\nformat binary_little_endian 1.0\n")
        f.write(b"element vertex %d\nproperty float x\nproperty float y\nproperty float z\n"
                % len(positions))
        f.write(b"element face %d\nproperty list uchar int vertex_indices\nend_header\n"
                % len(indices))
        f.write(positions.astype("<f4").tobytes())
        for tri in indices:
            f.write(struct.pack("<Biii", 3, *map(int, tri)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=DEFAULT_REQ_URL)
    ap.add_argument("--push-url", default=DEFAULT_PUSH_URL)
    ap.add_argument("--map", default="pysphere")
    ap.add_argument("--timeout-ms", type=int, default=20000)
    ap.add_argument("--out", help="write the mesh as PLY here")
    ap.add_argument("--tls-ca", help="tls+tcp://: the CA of the daemon's certificate")
    ap.add_argument("--tls-cert", help="tls+tcp://: this client's certificate")
    ap.add_argument("--tls-key", help="tls+tcp://: its private key")
    ap.add_argument("--tls-server-name", help="the name the daemon's certificate carries "
                    "(default: the URL's host)")
    args = ap.parse_args()
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    tls = {"ca": args.tls_ca, "cert": args.tls_cert, "key": args.tls_key,
           "server_name": args.tls_server_name}

    client = TsdfClient(args.url, args.push_url, args.timeout_ms, tls)
    try:
        pong = client.request("ping")
        print(f"connected: {pong['server']}, up {pong['uptime_ms'] / 1000:.1f} s")

        # A bad pose must come back as BAD_POSE (-4), not break anything.
        bad = frame_fields(args.map, 0, np.diag([2.0, 2.0, 2.0, 1.0]),
                           np.zeros((HEIGHT, WIDTH)), False)
        try:
            client.request("integrate", **bad)
            print("FAIL: a scaled pose was accepted")
            return 1
        except TsdfError as e:
            if e.status != -4:
                print(f"FAIL: expected BAD_POSE, got {e}")
                return 1

        poses = list(orbit_poses())
        t0 = time.time()
        try:
            before = client.request("stats", map=args.map).get("engine", {}).get(
                "frames_integrated", 0)
        except TsdfError as e:
            if e.status != -20:  # NOT_FOUND: the map is made by its first frame
                raise
            before = 0
        for seq, T in enumerate(poses):
            depth = render_sphere(T)
            fields = frame_fields(args.map, seq, T, depth, as_u16=(seq % 2 == 0))
            if seq < len(poses) // 2:
                client.send_frame(**fields)
            else:
                r = client.request("integrate", **fields)
                assert r["seq"] == seq
        # The pushed frames are integrated asynchronously: wait for all.
        deadline = time.time() + 60
        while True:
            engine = client.request("stats", map=args.map).get("engine", {})
            done = engine.get("frames_integrated", 0) - before
            if done >= len(poses) or time.time() > deadline:
                break
            time.sleep(0.1)
        print(f"integrated {done}/{len(poses)} frames in {time.time() - t0:.2f} s "
              f"({engine.get('blocks_allocated')} blocks, backend {engine.get('backend')})")
        if done < len(poses):
            print("FAIL: not every frame was integrated")
            return 1

        # Raycast from a new pose: the centre pixel sees the sphere at 1.0 - r.
        T = look_at((0.0, -1.0, 0.0), (0.0, 0.0, 0.0))
        r = client.request("raycast", map=args.map, width=WIDTH, height=HEIGHT, fx=FX, fy=FY,
                           cx=CX, cy=CY, T_world_cam=[float(x) for x in T.reshape(-1)])
        depth = np.frombuffer(r["depth"], dtype="<f4").reshape(HEIGHT, WIDTH)
        centre = float(depth[HEIGHT // 2, WIDTH // 2])
        print(f"raycast: centre depth {centre:.4f} m (expected {1.0 - SPHERE_RADIUS_M:.4f})")
        if not abs(centre - (1.0 - SPHERE_RADIUS_M)) < 0.02:
            print("FAIL: raycast depth is off")
            return 1

        version, pos, nrm, idx, _ = client.mesh(args.map)
        radii = np.linalg.norm(pos, axis=1) if len(pos) else np.zeros(0)
        print(f"mesh: version {version}, {len(pos)} vertices, {len(idx)} triangles, "
              f"radius {radii.mean() if len(radii) else 0:.4f} +- "
              f"{radii.std() if len(radii) else 0:.4f} m")
        if args.out:
            write_ply(args.out, pos, idx)
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
        v2, pos2, _, _, _ = client.mesh(args.map, since_version=version)
        print(f"mesh since {version}: {len(pos2)} vertices (version {v2})")
        maps = client.request("maps")["maps"]
        if args.map not in maps:
            failed.append(f"map {args.map} missing from {maps}")
            print(f"FAIL: {failed[-1]}")
        return 1 if failed else 0
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())

"""The client against a real tsdfd (the daemon fixture of conftest.py).

Each test works on its own map, so that the tests share one daemon and
still do not depend on each other's order.
"""

import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import tsdf
from tsdf import ArgumentError, ErrorCode, TsdfError

from conftest import SOURCE_DIR
from scenes import (FX, HEIGHT, K, PLANE_K, SPHERE_RADIUS_M, WIDTH, look_at, orbit_poses,
                    plane_depth, render_sphere)

IDENTITY = np.eye(4)
EXAMPLES = SOURCE_DIR / "python" / "examples"


def engine(client, map_name):
    return client.stats(map_name).get("engine", {})


def wait_integrated(client, map_name, count, timeout_s=120.0):
    """frames_integrated of map_name once it reaches count (or the deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done = engine(client, map_name).get("frames_integrated", 0)
        except TsdfError:
            done = 0
        if done >= count or time.monotonic() > deadline:
            return done
        time.sleep(0.05)


@pytest.fixture(scope="module")
def sphere(daemon):
    """A map holding the sphere of scenes.py seen from 32 views, half sent
    as frames, half integrated, half of them as u16 millimetres."""
    name = "sphere"
    with tsdf.Client(daemon.req_url, daemon.push_url, timeout_ms=20000) as c:
        poses = list(orbit_poses())
        for seq, T in enumerate(poses):
            depth = render_sphere(T)
            if seq % 2:
                depth = np.round(depth / 0.0001).astype(np.uint16)
            args = dict(sensor="py-sphere", seq=seq, depth_scale=0.0001)
            if seq < len(poses) // 2:
                c.send_frame(name, depth, K, T, **args)
            else:
                assert c.integrate(name, depth, K, T, **args).seq == seq
        assert wait_integrated(c, name, len(poses)) == len(poses)
    return name


def test_ping(client):
    pong = client.ping()
    assert pong.server.startswith("tsdfd ") and pong.uptime_ms >= 0


def test_integrate_counts_frames(client):
    name = "counts"
    versions = []
    for seq in range(3):
        r = client.integrate(name, plane_depth(1.0), PLANE_K, IDENTITY, seq=seq, sensor=7)
        assert r.seq == seq and r.integrate_ms >= 0
        versions.append(r.version)
    assert versions == sorted(versions) and versions[0] > 0
    stats = client.stats(name)
    assert stats["engine"]["frames_integrated"] == 3
    assert stats["engine"]["version"] == versions[-1]
    assert stats["engine"]["backend"] == "cpu"
    assert stats["daemon"]["frames.integrated"] >= 3
    assert name in client.maps()


def test_send_frame_is_integrated_later(client):
    name = "pushed"
    for seq in range(5):
        depth = np.full((48, 64), 1200, dtype=np.uint16)  # 1.2 m as millimetres
        client.send_frame(name, depth, PLANE_K, IDENTITY, seq=seq, stamp_ns=time.time_ns())
    assert wait_integrated(client, name, 5) == 5


def test_stats_of_a_missing_map_has_no_engine(client):
    stats = client.stats("never-made")
    assert "engine" not in stats and "frames.received" in stats["daemon"]
    assert "params" not in stats


def test_stats_report_the_map_params(client):
    client.integrate("params", plane_depth(1.0), PLANE_K, IDENTITY)
    params = client.stats("params")["params"]
    # The daemon's defaults (conftest starts it without [volume] settings).
    assert abs(params["voxel_size_m"] - 0.01) < 1e-6
    assert params["trunc_vox"] == 4.0 and params["max_weight"] == 64.0
    assert params["memory_cap_bytes"] == 4096 << 20
    assert params["layout"] == "s16"
    # The storage keys of the engine: the same layout, a pool with room for
    # every block, and nothing erased by a plain integration.
    engine_stats = client.stats("params")["engine"]
    assert engine_stats["layout"] == "s16"
    assert engine_stats["pool_capacity_blocks"] >= engine_stats["blocks_allocated"] > 0
    assert engine_stats["blocks_erased"] == 0


def test_raycast_of_a_plane(client):
    name = "plane"
    rgb = np.zeros((48, 64, 3), dtype=np.uint8)
    rgb[...] = (200, 100, 50)
    for seq in range(3):
        client.integrate(name, plane_depth(1.0), PLANE_K, IDENTITY, rgb=rgb, seq=seq)
    r = client.raycast(name, 64, 48, PLANE_K, IDENTITY, rgb=True)
    assert r.depth.shape == (48, 64) and r.depth.dtype == np.float32
    assert r.normals.shape == (48, 64, 3) and r.normals.dtype == np.float32
    assert r.has_rgb and r.rgb.shape == (48, 64, 3) and r.rgb.dtype == np.uint8
    inner = (slice(8, -8), slice(8, -8))
    assert np.all(np.isfinite(r.depth[inner]))
    assert np.abs(r.depth[inner] - 1.0).max() < 0.01
    # The wall faces the camera: its normal points back along -z.
    assert np.all(r.normals[inner] @ np.array([0.0, 0.0, -1.0]) > 0.98)
    assert np.abs(r.rgb[inner].astype(int) - (200, 100, 50)).max() <= 8
    # The arrays are the caller's to change.
    r.depth[0, 0] = 0.0


def test_raycast_sizes(client):
    """Depth alone, a fraction of the size, and the version the image
    shows (PROTOCOL.md 6.2); bad values refused before sending."""
    name = "plane-sizes"
    for seq in range(3):
        done = client.integrate(name, plane_depth(1.0), PLANE_K, IDENTITY, seq=seq)
    full = client.raycast(name, 64, 48, PLANE_K, IDENTITY)
    assert full.version == done.version
    d = client.raycast(name, 64, 48, PLANE_K, IDENTITY, normals=False)
    assert d.normals is None and d.version == done.version
    np.testing.assert_array_equal(d.depth, full.depth)
    half = client.raycast(name, 64, 48, PLANE_K, IDENTITY, scale=2)
    assert half.depth.shape == (24, 32) and half.normals.shape == (24, 32, 3)
    inner = (slice(4, -4), slice(4, -4))
    assert np.abs(half.depth[inner] - 1.0).max() < 0.01
    q = client.raycast(name, 65, 49, PLANE_K, IDENTITY, normals=False, scale=3, after="queued")
    assert q.depth.shape == (16, 21) and q.normals is None
    for bad in (dict(scale=0), dict(scale=9), dict(scale=65), dict(normals=1),
                dict(after="soon")):
        with pytest.raises(ArgumentError) as e:
            client.raycast(name, 64, 48, PLANE_K, IDENTITY, **bad)
        assert e.value.code == ErrorCode.INVAL
    with pytest.raises(ArgumentError):
        client.mesh(name, after="later")
    assert client.mesh(name, after="queued").version == done.version


def test_raycast_of_the_sphere(client, sphere):
    T = look_at((0.0, -1.0, 0.3), (0.0, 0.0, 0.0))
    expected = render_sphere(T)
    r = client.raycast(sphere, WIDTH, HEIGHT, K, T)
    assert r.rgb is None and not r.has_rgb
    # Asked for, from a map without colour: none is sent (PROTOCOL.md 6.2).
    assert not client.raycast(sphere, 16, 12, (FX / 8, FX / 8, 7.5, 5.5), T, rgb=True).has_rgb
    hit = expected > 0
    # Away from the silhouette, where rays graze the surface: the pixels
    # that still hit with a 10 % wider field of view.
    core = hit & (render_sphere(T, fx=FX * 0.9, fy=FX * 0.9) > 0)
    assert core.sum() > 1000
    assert np.all(np.isfinite(r.depth[core]))
    assert np.abs(r.depth[core] - expected[core]).max() < 0.01  # one voxel
    # And the pixels that miss even with a 10 % narrower one see nothing.
    assert np.all(np.isnan(r.depth[~hit & (render_sphere(T, fx=FX * 1.1, fy=FX * 1.1) == 0)]))
    # Normals are radial: the unit vector from the centre to the hit point.
    u, v = np.meshgrid(np.arange(WIDTH), np.arange(HEIGHT))
    p_cam = np.stack([(u - K[0, 2]) / FX, (v - K[1, 2]) / FX, np.ones(u.shape)], -1)
    p_world = (p_cam * r.depth[..., None]) @ T[:3, :3].T + T[:3, 3]
    radial = p_world / np.linalg.norm(p_world, axis=-1, keepdims=True)
    assert np.mean(np.sum(r.normals[core] * radial[core], -1)) > 0.97


def test_mesh_of_the_sphere(client, sphere):
    mesh = client.mesh(sphere)
    v, f = mesh.vertices, mesh.faces
    assert v.dtype == np.float32 and v.ndim == 2 and v.shape[1] == 3 and len(v) > 1000
    assert f.dtype == np.uint32 and f.ndim == 2 and f.shape[1] == 3 and len(f) > 1000
    assert mesh.normals.shape == v.shape and mesh.colors is None
    assert int(f.max()) < len(v)
    radii = np.linalg.norm(v, axis=1)
    assert abs(float(radii.mean()) - SPHERE_RADIUS_M) < 0.01
    assert float(np.abs(radii - SPHERE_RADIUS_M).max()) < 0.03
    assert float(np.mean(np.sum(mesh.normals * v, 1) / radii)) > 0.9
    assert mesh.version == engine(client, sphere)["version"]

    # Nothing changed since that version: an incremental mesh is empty.
    again = client.mesh(sphere, since=mesh.version)
    assert len(again.vertices) == 0 and len(again.faces) == 0
    assert again.vertices.shape == (0, 3) and again.faces.shape == (0, 3)

    # A box keeps the blocks (8 voxels of 1 cm) that intersect it.
    part = client.mesh(sphere, box=(0.0, 0.0, 0.0, 1.0, 1.0, 1.0))
    assert 0 < len(part.vertices) < len(v)
    assert np.all(part.vertices.min(0) > -0.08 - 1e-6)


def test_mesh_by_block_of_the_sphere(client, sphere):
    whole = client.mesh(sphere)
    assert whole.block_coords is None and whole.removed is None and not whole.full
    assert list(whole.parts()) == []

    mesh = client.mesh(sphere, by_block=True)
    assert mesh.version == whole.version
    coords, vs, ts = mesh.block_coords, mesh.block_vertex_start, mesh.block_triangle_start
    assert coords.dtype == np.int32 and coords.ndim == 2 and coords.shape[1] == 3
    blocks = len(coords)
    assert 1 < blocks <= engine(client, sphere)["blocks_allocated"]
    assert vs.dtype == np.uint32 and vs.shape == (blocks + 1,)
    assert ts.dtype == np.uint32 and ts.shape == (blocks + 1,)
    # The parts are the whole mesh's triangles, each block once.
    assert len(mesh.faces) == len(whole.faces) and int(ts[-1]) == len(mesh.faces)
    assert int(vs[0]) == 0 and int(vs[-1]) == len(mesh.vertices)
    assert len({tuple(b) for b in coords.tolist()}) == blocks
    voxel_m = client.stats(sphere)["params"]["voxel_size_m"]
    edge_m = 8 * voxel_m
    parts = list(mesh.parts())
    assert len(parts) == blocks
    assert sum(len(p.faces) for p in parts) == len(mesh.faces)
    for part in parts:
        assert part.colors is None and part.normals.shape == part.vertices.shape
        if len(part.faces):
            assert int(part.faces.max()) < len(part.vertices)
        # A part's vertices lie in its block's cells: from the centre of
        # its first voxel (8 b + 0.5 voxels) one block edge on.
        lo = np.array(part.block) * edge_m + 0.5 * voxel_m
        assert np.all(part.vertices >= lo - 1e-4) and np.all(part.vertices <= lo + edge_m + 1e-4)

    # Nothing changed since: no parts, nothing removed, not full.
    again = client.mesh(sphere, since=mesh.version, by_block=True)
    assert len(again.faces) == 0 and again.block_coords.shape == (0, 3)
    assert again.block_vertex_start.tolist() == [0] == again.block_triangle_start.tolist()
    assert again.removed.shape == (0, 3) and again.removed.dtype == np.int32
    assert again.full is False


def test_keeping_a_mesh_current_by_block(client):
    """PROTOCOL.md 6.3's procedure: parts held from a first mesh, updated
    with an incremental one, are the parts of a fresh mesh, block for
    block. Positions and faces depend only on a part's own cells; normals
    also on the voxels around them, which is why they are not compared."""
    name = "current"
    poses = list(orbit_poses())
    for T in poses[:12]:
        client.integrate(name, render_sphere(T), K, T)
    first = client.mesh(name, by_block=True)
    held = {p.block: p for p in first.parts()}
    # One more view: about half of the parts change, the rest are kept.
    client.integrate(name, render_sphere(poses[12]), K, poses[12])
    update = client.mesh(name, since=first.version, by_block=True)
    assert not update.full and 0 < len(update.block_coords) < len(held)
    for b in map(tuple, update.removed.tolist()):
        held.pop(b, None)
    for p in update.parts():
        held[p.block] = p

    fresh = {p.block: p for p in client.mesh(name, by_block=True).parts()}
    assert update.version == client.mesh(name).version
    assert held.keys() == fresh.keys()
    for b, p in fresh.items():
        assert np.array_equal(held[b].vertices, p.vertices), b
        assert np.array_equal(held[b].faces, p.faces), b
    # The daemon's maps are few (volume.max_maps): leave the slot to others.
    client.delete(name)


def test_mesh_since_a_reset_is_full(client):
    name = "since-reset"
    client.integrate(name, plane_depth(1.0), PLANE_K, IDENTITY)
    before = client.mesh(name, by_block=True)
    assert len(before.faces) > 0 and len(before.block_coords) > 0
    client.integrate(name, plane_depth(1.0), PLANE_K, IDENTITY)
    later = client.mesh(name, since=before.version, by_block=True)
    assert not later.full and len(later.removed) == 0 and len(later.faces) > 0
    # After a reset the daemon cannot say which blocks went: the mesh (of
    # the empty map) replaces what the caller holds.
    client.reset(name)
    after = client.mesh(name, since=before.version)
    assert after.full is True and len(after.faces) == 0
    assert after.removed is not None and after.block_coords is None
    client.delete(name)


def test_bad_intrinsics_is_named(client):
    with pytest.raises(TsdfError) as e:
        client.integrate("errors", plane_depth(1.0, 16, 16), (0.05, 0.05, 7.5, 7.5), IDENTITY)
    assert e.value.code is ErrorCode.BAD_INTRINSICS and e.value.name == "BAD_INTRINSICS"
    assert e.value.message


def test_bad_pose_is_named(client):
    with pytest.raises(TsdfError) as e:
        client.integrate("errors", plane_depth(1.0), PLANE_K, np.diag([2.0, 2.0, 2.0, 1.0]))
    assert e.value.code is ErrorCode.BAD_POSE and e.value.name == "BAD_POSE"


def test_missing_map_is_not_found(client):
    for call in (lambda: client.reset("no-such-map"),
                 lambda: client.raycast("no-such-map", 8, 8, (8, 8, 3.5, 3.5), IDENTITY),
                 lambda: client.mesh("no-such-map")):
        with pytest.raises(TsdfError) as e:
            call()
        assert e.value.code is ErrorCode.NOT_FOUND and e.value.name == "NOT_FOUND"


def test_daemon_side_codes(client):
    with pytest.raises(TsdfError) as e:
        client.request("no-such-type")
    assert e.value.code is ErrorCode.PROTO_TYPE
    with pytest.raises(TsdfError) as e:
        client.integrate("bad name!", plane_depth(1.0), PLANE_K, IDENTITY)
    assert e.value.code is ErrorCode.INVAL
    with pytest.raises(TsdfError) as e:
        client.integrate("errors", plane_depth(1.0), PLANE_K, IDENTITY, min_depth=2, max_depth=1)
    assert e.value.code is ErrorCode.BAD_DEPTH_RANGE


def test_longest_map_name(client):
    """63 bytes, the protocol's one limit on map names, is a map; 64 is
    refused before it is sent."""
    header = (SOURCE_DIR / "proto" / "tsdf_proto_types.h").read_text()
    assert f"#define TSDF_PROTO_MAX_NAME_LEN {tsdf._messages.MAX_MAP_NAME_LEN}u" in header
    name = "m" * tsdf._messages.MAX_MAP_NAME_LEN
    client.integrate(name, plane_depth(1.0), PLANE_K, IDENTITY)
    assert name in client.maps()
    with pytest.raises(ArgumentError) as e:
        client.integrate(name + "m", plane_depth(1.0), PLANE_K, IDENTITY)
    assert e.value.code is ErrorCode.TOO_LARGE


@pytest.mark.parametrize("kwargs, code", [
    (dict(depth=np.zeros((4, 4, 1), np.float32)), ErrorCode.BAD_SIZE),
    (dict(depth=np.zeros((4, 4), np.int32)), ErrorCode.INVAL),
    (dict(rgb=np.zeros((48, 64, 3), np.float32)), ErrorCode.INVAL),
    (dict(rgb=np.zeros((48, 63, 3), np.uint8)), ErrorCode.BAD_SIZE),
    (dict(K=np.eye(2)), ErrorCode.INVAL),
    (dict(K=[[50, 1, 31.5], [0, 50, 23.5], [0, 0, 1]]), ErrorCode.BAD_INTRINSICS),
    (dict(T_world_cam=np.eye(3)), ErrorCode.INVAL),
    (dict(seq=-1), ErrorCode.INVAL),
    (dict(seq=1.0), ErrorCode.INVAL),
    (dict(sensor=b"cam"), ErrorCode.INVAL),
])
def test_arguments_are_checked_before_sending(client, kwargs, code):
    args = dict(map="args", depth=plane_depth(1.0), K=PLANE_K, T_world_cam=IDENTITY)
    args.update(kwargs)
    with pytest.raises(ArgumentError) as e:
        client.integrate(**args)
    assert e.value.code is code
    with pytest.raises(ArgumentError):
        client.send_frame(**args)
    # Nothing reached the daemon.
    assert "args" not in client.maps()


def test_mesh_arguments_are_checked_before_sending(client):
    with pytest.raises(ArgumentError) as e:
        client.mesh("args", by_block="yes")
    assert e.value.code is ErrorCode.INVAL
    with pytest.raises(ArgumentError):
        client.mesh("args", since=-1, by_block=True)


def test_send_frame_needs_a_push_socket(daemon):
    with tsdf.Client(daemon.req_url) as c:
        with pytest.raises(ArgumentError):
            c.send_frame("x", plane_depth(1.0), PLANE_K, IDENTITY)


def test_save_load_round_trip(client, daemon):
    name = "snap"
    for seq in range(3):
        client.integrate(name, plane_depth(0.8), PLANE_K, IDENTITY, seq=seq)
    before = client.mesh(name)
    assert len(before.faces) > 0
    saved = client.save(name, "roundtrip.tsdfsnap")
    assert saved.version == before.version
    assert (daemon.state_dir / "roundtrip.tsdfsnap").is_file()

    client.reset(name)
    assert len(client.mesh(name).faces) == 0

    loaded = client.load(name, "roundtrip.tsdfsnap")
    assert loaded.path.endswith("roundtrip.tsdfsnap") and loaded.version > before.version
    after = client.mesh(name)
    assert len(after.faces) == len(before.faces)
    np.testing.assert_array_equal(np.sort(after.vertices, axis=0), np.sort(before.vertices, axis=0))

    # Without a path: a new snapshot of the daemon's own, and back.
    default = client.save(name)
    assert default.path and daemon.state_dir.samefile(pathlib.Path(default.path).parent)
    client.reset(name)
    assert len(client.load(name).path) > 0 and len(client.mesh(name).faces) == len(before.faces)

    with pytest.raises(TsdfError) as e:
        client.load(name, "../outside.tsdfsnap")
    assert e.value.code is ErrorCode.INVAL


def test_delete(client):
    client.integrate("doomed", plane_depth(0.8), PLANE_K, IDENTITY)
    assert "doomed" in client.maps()
    client.delete("doomed")
    assert "doomed" not in client.maps()
    with pytest.raises(TsdfError) as e:
        client.delete("doomed")
    assert e.value.code is ErrorCode.NOT_FOUND


def test_connection_refused(tmp_path):
    with pytest.raises(TsdfError) as e:
        tsdf.Client(f"ipc://{tmp_path}/nobody.sock")
    assert e.value.code is ErrorCode.CONNREFUSED


def test_closed_client(daemon):
    c = tsdf.Client(daemon.req_url)
    with c:
        c.ping()
    for call in (c.ping, lambda: c.send_frame("x", plane_depth(1.0), PLANE_K, IDENTITY)):
        with pytest.raises(TsdfError) as e:
            call()
        assert e.value.code is ErrorCode.CLOSED
    c.close()  # idempotent


def test_example_sphere(daemon, tmp_path):
    """examples/sphere.py runs against the daemon and finds its sphere."""
    ply = tmp_path / "sphere.ply"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "sphere.py"), "--url", daemon.req_url,
         "--push-url", daemon.push_url, "--map", "example", "--out", str(ply)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ply.stat().st_size > 0

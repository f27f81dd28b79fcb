"""Frames and raycast images through a shared-memory ring (PROTOCOL.md
6.10): the same map as frames in the request, every one counted as read
from the ring, the slot reused; the same images as in the reply; and the
refusals of attach_ring."""

import concurrent.futures
import os
import shutil
import tempfile

import numpy as np
import pytest

import tsdf
from tsdf import ErrorCode, TsdfError

from conftest import Daemon, _tsdfd_bin
from scenes import K, orbit_poses, render_sphere


@pytest.fixture(scope="module")
def daemon():
    """A daemon of this module's own: the session's has few map slots left
    by now (volume.max_maps)."""
    workdir = tempfile.mkdtemp(prefix="tsdf-ring.")
    d = Daemon(_tsdfd_bin(), workdir)
    d.start()
    yield d
    rc = d.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    assert rc == 0, f"tsdfd exited with {rc} after SIGTERM"


@pytest.fixture
def client(daemon):
    with tsdf.Client(daemon.req_url, timeout_ms=20000) as c:
        yield c


def rings_frames(client):
    return client.stats("no-such-map")["daemon"]["rings.frames"]


def test_ring_frames_build_the_same_map(daemon, client):
    frames = [(np.round(render_sphere(T) * 1000.0).astype(np.uint16), T)
              for T in list(orbit_poses(rings=(-30, 30), per_ring=4))[:6]]
    before = rings_frames(client)
    with tsdf.Client(daemon.req_url, timeout_ms=20000) as rc:
        # One slot, room for float depth: every frame reuses it once the
        # daemon has answered.
        rc.attach_ring(daemon.ring_path, 2 * frames[0][0].nbytes, slots=1)
        with pytest.raises(TsdfError) as e:
            rc.attach_ring(daemon.ring_path, frames[0][0].nbytes)
        assert e.value.code == ErrorCode.BUSY
        for seq, (depth, T) in enumerate(frames):
            rc.integrate("ring-py", depth, K, T, seq=seq)
            client.integrate("ring-py-raw", depth, K, T, seq=seq)
        # Float depth, and compressed depth, which goes in the request.
        rc.integrate("ring-py-f32", frames[0][0].astype(np.float32) / 1000.0, K, frames[0][1])
        rc.integrate("ring-py-png", frames[0][0], K, frames[0][1], depth_encoding="png")
    assert rings_frames(client) - before == len(frames) + 1
    a, b = client.mesh("ring-py"), client.mesh("ring-py-raw")
    assert len(a.faces) > 500
    assert np.array_equal(a.vertices, b.vertices)
    assert np.array_equal(a.faces, b.faces)
    assert np.array_equal(a.normals, b.normals)


def test_ring_raycasts_match_the_reply(daemon, client, monkeypatch):
    T = list(orbit_poses(rings=(0,), per_ring=4))[0]
    depth = np.round(render_sphere(T) * 1000.0).astype(np.uint16)
    h, w = depth.shape
    colour = (np.arange(h * w * 3) % 251).astype(np.uint8).reshape(h, w, 3)
    client.integrate("ring-py-ray", depth, K, T)
    client.integrate("ring-py-ray-rgb", depth, K, T, rgb=colour)
    # Every image that came through the ring, as read out of it.
    reads = []
    read = tsdf._ring.Ring.read
    monkeypatch.setattr(tsdf._ring.Ring, "read",
                        lambda self, at, n: reads.append(n) or read(self, at, n))
    with tsdf.Client(daemon.req_url, timeout_ms=20000) as rc:
        # Slots of a depth image: depth and normals take four of the six.
        rc.attach_ring(daemon.ring_path, w * h * 4, slots=6)
        cases = [("ring-py-ray", True, 1, False), ("ring-py-ray", False, 1, False),
                 ("ring-py-ray", True, 2, False), ("ring-py-ray", True, 1, True),
                 ("ring-py-ray-rgb", True, 1, True), ("ring-py-ray-rgb", False, 2, True)]
        for name, normals, scale, rgb in cases:
            a = client.raycast(name, w, h, K, T, normals=normals, scale=scale, rgb=rgb)
            b = rc.raycast(name, w, h, K, T, normals=normals, scale=scale, rgb=rgb)
            assert np.count_nonzero(np.isfinite(a.depth)) > a.depth.size // 10
            assert a.depth.tobytes() == b.depth.tobytes()
            # The arrays are the caller's: writable, as from the reply.
            assert b.depth.flags.writeable
            assert b.normals is None or b.normals.flags.writeable
            assert (b.normals is None) == (not normals)
            if normals:
                assert a.normals.tobytes() == b.normals.tobytes()
            assert (b.rgb is None) == (a.rgb is None) == (not rgb or name == "ring-py-ray")
            if a.rgb is not None:
                assert a.rgb.tobytes() == b.rgb.tobytes()
            assert a.version == b.version
        px = [(w // s) * (h // s) for _, _, s, _ in cases]
        assert reads == [p * (4 + 12 * n + 3 * (c and name.endswith("rgb")))
                         for p, (name, n, _, c) in zip(px, cases)]
        # Several at once share the ring's slots, or go through the socket
        # when none is free: the same images either way.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: rc.raycast("ring-py-ray", w, h, K, T), range(8)))
        want = client.raycast("ring-py-ray", w, h, K, T)
        for g in got:
            assert g.depth.tobytes() == want.depth.tobytes()
            assert g.normals.tobytes() == want.normals.tobytes()


def test_attach_ring_refusals(daemon):
    with tsdf.Client(daemon.req_url, timeout_ms=20000) as c:
        with pytest.raises(TsdfError) as e:
            c.attach_ring(daemon.workdir / "no-such.sock", 4096)
        assert e.value.code == ErrorCode.CONNREFUSED
        for slots in (0, 65):
            with pytest.raises(TsdfError) as e:
                c.attach_ring(daemon.ring_path, 4096, slots=slots)
            assert e.value.code == ErrorCode.INVAL
        # Beyond [server] ring_max_mb (256 MiB): the daemon refuses it.
        with pytest.raises(TsdfError) as e:
            c.attach_ring(daemon.ring_path, 300 << 20, slots=1)
        assert e.value.code == ErrorCode.TOO_LARGE
        assert "ring_max_mb" in e.value.message


def test_attach_ring_where_the_daemon_says(daemon):
    """attach_ring(None, ...) takes the ring socket the ping reply names;
    a daemon without one says so."""
    depth = np.round(render_sphere(next(iter(orbit_poses()))) * 1000.0).astype(np.uint16)
    with tsdf.Client(daemon.req_url, timeout_ms=20000) as c:
        assert c.ping().ring_socket == str(daemon.ring_path)
        before = rings_frames(c)
        c.attach_ring(None, depth.nbytes)
        c.integrate("ring-py-advertised", depth, K, next(iter(orbit_poses())))
        assert rings_frames(c) - before == 1
    workdir = tempfile.mkdtemp(prefix="tsdf-noring.")
    d = Daemon(_tsdfd_bin(), workdir, ring=False)
    d.start()
    try:
        with tsdf.Client(d.req_url, timeout_ms=20000) as c:
            assert c.ping().ring_socket == ""
            with pytest.raises(TsdfError) as e:
                c.attach_ring(None, depth.nbytes)
            assert e.value.code == ErrorCode.NOT_FOUND
            assert "ring_socket" in e.value.message
    finally:
        rc = d.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    assert rc == 0


class _FakeRingSocket:
    """A stand-in for the daemon's ring socket: answers one attach with
    token 42, then each fence with `status`, recording the fences."""

    def __init__(self, path, status):
        import socket
        import struct
        import threading
        self.fences = []
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._srv.bind(str(path))
        self._srv.listen(1)
        reply = struct.Struct("=IiQ64s")

        def serve():
            conn, _ = self._srv.accept()
            with conn:
                _, fds, _, _ = socket.recv_fds(conn, 16, 1)
                for fd in fds:
                    os.close(fd)
                conn.send(reply.pack(0x47525354, 0, 42, b""))
                while True:
                    data = conn.recv(16)
                    if len(data) != 16:
                        return
                    magic, _, fence = struct.unpack("=IIQ", data)
                    if magic == 0x46525354:
                        self.fences.append(fence)
                    conn.send(reply.pack(0x47525354, status, 42 if status == 0 else 0, b""))

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()

    def close(self):
        self._srv.close()
        self._thread.join(5)


def test_fences_free_retired_slots(tmp_path):
    """Slots of requests that got no answer come back through a fence at
    the lowest seq still in flight (PROTOCOL.md 6.10, item 5); a daemon
    that refuses fences (one from before them) keeps them retired and is
    asked once."""
    from tsdf._ring import Ring
    fake = _FakeRingSocket(tmp_path / "r.sock", 0)
    ring = Ring(tmp_path / "r.sock", 64, 2, 5000)
    a, b = ring.take(1), ring.take(1)
    assert (a, b) == (([0], 0, 1), ([1], 64, 2))
    ring.release(a[0], False)  # seq 1 timed out; seq 2 still waits
    assert ring.take(1) == ([0], 0, 3)
    assert fake.fences == [2]
    ring.release(b[0], False)  # seq 2 timed out; seq 3 waits
    assert ring.take(1) == ([1], 64, 4)
    assert fake.fences == [2, 3]
    # Retired above the lowest seq in flight: no fence, nothing freed.
    ring.release([1], False)  # seq 4 timed out while seq 3 waits
    assert ring.take(1) is None
    assert fake.fences == [2, 3]
    ring.close()
    fake.close()

    old = _FakeRingSocket(tmp_path / "old.sock", int(ErrorCode.INVAL))
    ring = Ring(tmp_path / "old.sock", 64, 1, 5000)
    ring.release(ring.take(1)[0], False)
    assert ring.take(1) is None
    assert ring.take(1) is None
    assert old.fences == [2]
    ring.close()
    old.close()


def test_interrupted_ring_request_retires_its_slot(daemon, monkeypatch):
    """A ring request cut short by anything but the client's own errors
    (an interrupt, say) may or may not have reached the daemon: its slot
    is retired, and the next frame fences and takes it back."""
    depth = np.round(render_sphere(list(orbit_poses(rings=(0,), per_ring=4))[0]) * 1000.0)
    depth = depth.astype(np.uint16)
    T = list(orbit_poses(rings=(0,), per_ring=4))[0]
    with tsdf.Client(daemon.req_url, timeout_ms=20000) as rc:
        rc.attach_ring(daemon.ring_path, depth.nbytes, slots=1)
        before = rings_frames(rc)
        real = rc.request

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(rc, "request", interrupted)
        with pytest.raises(KeyboardInterrupt):
            rc.integrate("ring-py-int", depth, K, T, seq=0)
        assert rc._ring._retired == {0}
        monkeypatch.setattr(rc, "request", real)
        rc.integrate("ring-py-int", depth, K, T, seq=1)
        assert rc._ring._retired == set()
        assert rings_frames(rc) - before == 1

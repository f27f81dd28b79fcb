"""depth_encoding="raw" | "png" | "zstd": lossless, so the same frames
build the same map whichever way their depth travels (PROTOCOL.md 6.1)."""

import struct
import sys
import time
import zlib

import numpy as np
import pytest

from tsdf import ArgumentError, ErrorCode, _depth

from scenes import K, orbit_poses, render_sphere

# zstandard is the package's optional dependency: tests/test_python_package.sh
# installs it, and a run without it must not pass for one with it.
import zstandard


def sphere_frames_mm(count=8):
    """Depth images of the sphere in millimetres (uint16), with their poses."""
    frames = []
    for T in list(orbit_poses(rings=(-30, 30), per_ring=4))[:count]:
        frames.append((np.round(render_sphere(T) * 1000.0).astype(np.uint16), T))
    return frames


def png_chunks(data):
    """(type, data) of every chunk, each CRC checked."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, f"bad CRC of {kind}"
        chunks.append((kind, body))
        pos += 12 + n
    assert pos == len(data)
    return chunks


def test_png_is_a_16_bit_grayscale_png_of_the_samples():
    depth = np.arange(12 * 5, dtype=np.uint16).reshape(5, 12) * 1000
    chunks = png_chunks(_depth.png_u16(depth))
    assert [k for k, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    assert chunks[0][1] == struct.pack(">IIBBBBB", 12, 5, 16, 0, 0, 0, 0)
    rows = np.frombuffer(zlib.decompress(chunks[1][1]), np.uint8).reshape(5, 1 + 24)
    assert np.all(rows[:, 0] == 0)
    assert np.array_equal(rows[:, 1:].copy().view(">u2").astype(np.uint16), depth)


def test_zstd_states_its_content_size():
    depth = np.full((4, 6), 1234, dtype=np.uint16)
    frame = _depth.zstd(depth.astype("<u2").tobytes())
    assert zstandard.frame_content_size(frame) == depth.nbytes
    assert zstandard.ZstdDecompressor().decompress(frame) == depth.astype("<u2").tobytes()


def test_the_three_encodings_build_the_same_map(client):
    frames = sphere_frames_mm()
    maps = {enc: f"enc-{enc}" for enc in _depth.ENCODINGS}
    for enc, name in maps.items():
        for seq, (depth, T) in enumerate(frames):
            client.integrate(name, depth, K, T, seq=seq, depth_encoding=enc)
    meshes = {enc: client.mesh(name) for enc, name in maps.items()}
    raw = meshes["raw"]
    assert len(raw.faces) > 500
    for enc in ("png", "zstd"):
        m = meshes[enc]
        assert np.array_equal(m.vertices, raw.vertices), enc
        assert np.array_equal(m.faces, raw.faces), enc
        assert np.array_equal(m.normals, raw.normals), enc
    # Streamed frames take the same path through the daemon.
    for seq, (depth, T) in enumerate(frames):
        client.send_frame("enc-push", depth, K, T, seq=seq, depth_encoding="png",
                          compress_level=6)
    for _ in range(200):
        engine = client.stats("enc-push").get("engine", {})
        if engine.get("frames_integrated") == len(frames):
            break
        time.sleep(0.05)
    assert np.array_equal(client.mesh("enc-push").faces, raw.faces)


def test_float_depth_travels_as_zstd_not_png(client):
    depth_m = render_sphere(next(orbit_poses())).astype(np.float32)
    T = next(orbit_poses())
    client.integrate("enc-f32", depth_m, K, T, depth_encoding="zstd")
    with pytest.raises(ArgumentError) as e:
        client.integrate("enc-f32", depth_m, K, T, depth_encoding="png")
    assert "uint16" in str(e.value)


@pytest.mark.parametrize("kwargs", [
    dict(depth_encoding="lz4"),
    dict(depth_encoding="png", compress_level=10),
    dict(depth_encoding="zstd", compress_level=0),
    dict(depth_encoding="raw", compress_level=3),
    dict(depth_encoding="png", compress_level=True),
])
def test_bad_encodings_are_refused_before_sending(client, kwargs):
    depth = np.full((48, 64), 1000, dtype=np.uint16)
    with pytest.raises(ArgumentError) as e:
        client.integrate("enc-bad", depth, K, np.eye(4), **kwargs)
    assert e.value.code is ErrorCode.INVAL


def test_zstd_without_zstandard_says_what_to_install(client, monkeypatch):
    # A None entry in sys.modules makes `import zstandard` raise ImportError.
    monkeypatch.setitem(sys.modules, "zstandard", None)
    depth = np.full((48, 64), 1000, dtype=np.uint16)
    with pytest.raises(ArgumentError) as e:
        client.integrate("enc-nozstd", depth, K, np.eye(4), depth_encoding="zstd")
    assert e.value.code is ErrorCode.NOT_BUILT
    assert "tsdf-client[zstd]" in str(e.value)
    # png needs nothing beyond the standard library.
    client.integrate("enc-nozstd", depth, K, np.eye(4), depth_encoding="png")

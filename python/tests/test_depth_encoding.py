"""depth_encoding="raw" | "png" | "zstd" | "rvl": lossless, so the same
frames build the same map whichever way their depth travels (PROTOCOL.md
6.1); the package follows libtsdf's one table of encodings and levels
(TSDF_DEPTH_ENCODINGS), and what either side encodes the other decodes to
the same samples."""

import os
import pathlib
import re
import struct
import subprocess
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


def test_the_encodings_build_the_same_map(client):
    frames = sphere_frames_mm()
    maps = {enc: f"enc-{enc}" for enc in _depth.ENCODINGS}
    for enc, name in maps.items():
        for seq, (depth, T) in enumerate(frames):
            client.integrate(name, depth, K, T, seq=seq, depth_encoding=enc)
    meshes = {enc: client.mesh(name) for enc, name in maps.items()}
    raw = meshes["raw"]
    assert len(raw.faces) > 500
    assert set(meshes) == {"raw", "png", "zstd", "rvl"}
    for enc in ("png", "zstd", "rvl"):
        m = meshes[enc]
        assert np.array_equal(m.vertices, raw.vertices), enc
        assert np.array_equal(m.faces, raw.faces), enc
        assert np.array_equal(m.normals, raw.normals), enc
    # Streamed frames take the same path through the daemon.
    for seq, (depth, T) in enumerate(frames):
        client.send_frame("enc-push", depth, K, T, seq=seq, depth_encoding="png",
                          compress_level=6)
    deadline = time.monotonic() + 120.0  # a deadline for a daemon that never gets there
    while time.monotonic() < deadline:
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
    dict(depth_encoding="png", compress_level=0),
    dict(depth_encoding="zstd", compress_level=0),
    dict(depth_encoding="zstd", compress_level=20),
    dict(depth_encoding="raw", compress_level=3),
    dict(depth_encoding="rvl", compress_level=1),
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


# ---- one table, and both ways against the C codec -------------------------

SOURCE_DIR = pathlib.Path(os.environ.get("TSDF_SOURCE_DIR",
                                         pathlib.Path(__file__).resolve().parents[2]))


def c_table():
    """The rows of TSDF_DEPTH_ENCODINGS in proto/tsdf_proto_types.h."""
    text = (SOURCE_DIR / "proto" / "tsdf_proto_types.h").read_text()
    rows = re.findall(r'X\((\w+), (\d+), "(\w+)", (\d), (\d), (\d+), (\d+), (\d+)\)', text)
    assert len(rows) >= 4, "no TSDF_DEPTH_ENCODINGS rows found"
    return {wire: (u16 == "1", f32 == "1", int(lo), int(hi), int(d))
            for _, _, wire, u16, f32, lo, hi, d in rows}


def test_the_package_follows_libtsdfs_table():
    assert _depth.TABLE == c_table()
    assert _depth.ENCODINGS == tuple(c_table())


def codec_tool():
    tool = os.environ.get("TSDF_DEPTH_CODEC_TOOL")
    if not tool:
        for build in ("build", "build-cpu"):
            candidate = SOURCE_DIR / build / "tests" / "depth_codec_tool"
            if candidate.exists():
                tool = str(candidate)
    assert tool and os.access(tool, os.X_OK), \
        "no tests/depth_codec_tool (set TSDF_DEPTH_CODEC_TOOL): the C side is missing"
    return tool


def c_codec(verb, enc, data, w, h, fmt="u16", level=0):
    args = [codec_tool(), verb, enc, fmt, str(w), str(h)] + ([str(level)] if verb == "encode" else [])
    r = subprocess.run(args, input=data, capture_output=True, check=False)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def images():
    rng = np.random.default_rng(7)
    sphere = sphere_frames_mm(1)[0][0]
    for shape in [(1, 1), (3, 5), (48, 64)]:
        yield rng.integers(0, 65536, shape, dtype=np.uint16)
        yield np.where(rng.random(shape) < 0.3, 0, rng.integers(500, 4000, shape)).astype(np.uint16)
        yield np.zeros(shape, np.uint16)
        yield np.full(shape, 65535, np.uint16)
    yield sphere


@pytest.mark.parametrize("enc", ["png", "zstd", "rvl"])
def test_python_and_c_decode_each_others_encodings(enc):
    levels = [None] if enc == "rvl" else sorted({_depth.LEVELS[enc].start, _depth.DEFAULT_LEVEL[enc],
                                                 _depth.LEVELS[enc].stop - 1})
    for depth in images():
        h, w = depth.shape
        raw = depth.astype("<u2").tobytes()
        for level in levels:
            fields = {"depth": raw, "depth_format": "u16"}
            py = _depth.encode(fields, depth, enc, level)["depth"]
            # Python encodes, C decodes.
            assert c_codec("decode", enc, py, w, h) == raw, (enc, level, depth.shape)
            # C encodes, Python decodes.
            c = c_codec("encode", enc, raw, w, h, level=level or 0)
            assert np.array_equal(_depth.decode(enc, c, w, h), depth), (enc, level, depth.shape)
    if enc == "zstd":
        depth_m = render_sphere(next(orbit_poses())).astype(np.float32)
        h, w = depth_m.shape
        raw = depth_m.astype("<f4").tobytes()
        assert c_codec("decode", "zstd", _depth.zstd(raw), w, h, "f32") == raw
        back = _depth.decode("zstd", c_codec("encode", "zstd", raw, w, h, "f32"), w, h, "f32")
        assert np.array_equal(back, depth_m, equal_nan=True)


def test_python_decoders_refuse_what_is_not_the_frame():
    depth = np.arange(48 * 64, dtype=np.uint16).reshape(48, 64)
    for enc in ("png", "zstd", "rvl"):
        payload = _depth.encode({"depth": depth.astype("<u2").tobytes(), "depth_format": "u16"},
                                depth, enc, None)["depth"]
        for bad in (payload[:len(payload) // 2], payload + b"\0\0\0\0"):
            with pytest.raises(ArgumentError) as e:
                _depth.decode(enc, bad, 64, 48)
            assert e.value.code is ErrorCode.DEPTH_DECODE, enc
        with pytest.raises(ArgumentError):
            _depth.decode(enc, payload, 64, 47)
    # A PNG whose stream goes on past its rows is refused, never inflated whole.
    rows = np.zeros((48, 1 + 128), np.uint8).tobytes() + bytes(64 << 20)
    bomb = (_depth._PNG_SIGNATURE + _depth._chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 48, 16, 0, 0, 0, 0)) +
            _depth._chunk(b"IDAT", zlib.compress(rows, 9)) + _depth._chunk(b"IEND", b""))
    with pytest.raises(ArgumentError) as e:
        _depth.decode("png", bomb, 64, 48)
    assert e.value.code is ErrorCode.DEPTH_DECODE

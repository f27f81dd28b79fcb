"""Lossless depth encodings of a frame's "depth" (PROTOCOL.md 6.1,
"depth_encoding"): "raw", "png" (16-bit grayscale, written here with the
standard library's zlib) and "zstd" (through the optional zstandard
package: pip install 'tsdf-client[zstd]').

Every encoding is lossless: the daemon decodes exactly the samples that
were sent, so a compressed frame integrates exactly as its raw one.
"""

import struct
import zlib

import numpy as np

from .errors import ArgumentError, ErrorCode

ENCODINGS = ("raw", "png", "zstd")
# libtsdf's defaults: zlib level 1 (fast, most of the gain on depth) and
# zstd level 3 (PROTOCOL.md's benchmark table).
DEFAULT_LEVEL = {"png": 1, "zstd": 3}
LEVELS = {"png": range(0, 10), "zstd": range(1, 23)}

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind, data):
    """One PNG chunk: length, type, data, and the CRC-32 of type and data."""
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png_u16(depth, level=DEFAULT_LEVEL["png"]):
    """A PNG datastream of a (H, W) uint16 image: 16-bit grayscale (colour
    type 0), not interlaced, filter 0 (none) on every row; PNG's samples are
    big-endian."""
    d = np.asarray(depth)
    height, width = d.shape
    rows = np.empty((height, 1 + 2 * width), dtype=np.uint8)
    rows[:, 0] = 0  # filter type "none"
    rows[:, 1:] = d.astype(">u2", copy=False).view(np.uint8).reshape(height, 2 * width)
    ihdr = struct.pack(">IIBBBBB", width, height, 16, 0, 0, 0, 0)
    return (_PNG_SIGNATURE + _chunk(b"IHDR", ihdr) +
            _chunk(b"IDAT", zlib.compress(rows.tobytes(), level)) + _chunk(b"IEND", b""))


def _zstandard():
    try:
        import zstandard
    except ImportError:
        raise ArgumentError(ErrorCode.NOT_BUILT,
                            'depth_encoding="zstd" needs the zstandard package: '
                            "pip install 'tsdf-client[zstd]' (or zstandard)") from None
    return zstandard


def zstd(raw, level=DEFAULT_LEVEL["zstd"]):
    """One zstd frame of the raw little-endian samples, its content size
    stated (the daemon checks it against width x height before it
    decompresses)."""
    return _zstandard().ZstdCompressor(level=level, write_content_size=True).compress(raw)


def encode(fields, depth, encoding, level):
    """Replaces fields["depth"] (the raw samples depth_fields made) by its
    encoding and adds "depth_encoding"; "raw" leaves the fields as they are
    (no key, so daemons from before it read them too)."""
    if encoding not in ENCODINGS:
        raise ArgumentError(ErrorCode.INVAL,
                            f"depth_encoding must be one of {', '.join(ENCODINGS)}, "
                            f"not {encoding!r}")
    if encoding == "raw":
        if level is not None:
            raise ArgumentError(ErrorCode.INVAL, "compress_level needs depth_encoding png or zstd")
        return fields
    if level is None:
        level = DEFAULT_LEVEL[encoding]
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS[encoding]:
        r = LEVELS[encoding]
        raise ArgumentError(ErrorCode.INVAL,
                            f"compress_level for {encoding} must be an int {r.start}..{r.stop - 1}")
    if encoding == "png":
        if fields["depth_format"] != "u16":
            raise ArgumentError(ErrorCode.INVAL,
                                'depth_encoding="png" carries uint16 depth only; '
                                'use "zstd" for float depth')
        payload = png_u16(depth, level)
    else:
        payload = zstd(fields["depth"], level)
    return {**fields, "depth": payload, "depth_encoding": encoding}

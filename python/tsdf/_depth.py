"""Lossless depth encodings of a frame's "depth" (PROTOCOL.md 6.1,
"depth_encoding"): "raw", "png" (16-bit grayscale, written here with the
standard library's zlib), "zstd" (through the optional zstandard package:
pip install 'tsdf-client[zstd]') and "rvl" (Wilson's run-length and
variable-length code, written here with numpy).

Every encoding is lossless: the daemon decodes exactly the samples that
were sent, so a compressed frame integrates exactly as its raw one. The
decoders here read what libtsdf and the daemon write (for a depth PNG from
disk, a ring's contents, a test), bounded by the frame's own size.
"""

import struct
import zlib

import numpy as np

from .errors import ArgumentError, ErrorCode

# The rows of TSDF_DEPTH_ENCODINGS (proto/tsdf_proto_types.h), the one
# table of the encodings, which libtsdf and tsdfctl read: name -> (carries
# u16, carries f32, lowest level, highest level, default level); a range of
# 0..0 for an encoding that takes no level. The package's tests check these
# rows against that table.
TABLE = {
    "raw": (True, True, 0, 0, 0),
    "png": (True, False, 1, 9, 1),
    "zstd": (True, True, 1, 19, 3),
    "rvl": (True, False, 0, 0, 0),
}
ENCODINGS = tuple(TABLE)
DEFAULT_LEVEL = {e: row[4] for e, row in TABLE.items() if row[3] > 0}
LEVELS = {e: range(row[2], row[3] + 1) for e, row in TABLE.items() if row[3] > 0}

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


# ---- rvl ---------------------------------------------------------------------
#
# The layout PROTOCOL.md 6.1 pins down: runs of (count of zeros, count of
# non-zeros, then each non-zero sample as the zigzag code of its difference
# to the previous non-zero sample, the first against 0); each number in
# 3-bit groups, least significant first, one nibble each with bit 3 set
# when more follow; nibbles fill 32-bit little-endian words from the most
# significant nibble down, the last word padded with zero nibbles.

def _rvl_numbers(flat):
    """The numbers RVL writes for a flat uint16 image, in order."""
    nonzero = flat != 0
    # Runs of zero and non-zero samples, as the encoder walks them: a zero
    # run (perhaps empty) first, then a non-zero run (perhaps empty), ...
    edges = np.flatnonzero(np.diff(nonzero.view(np.int8))) + 1
    starts = np.concatenate(([0], edges))
    lengths = np.diff(np.concatenate((starts, [flat.size])))
    kinds = nonzero[starts]
    if kinds[0]:
        lengths, kinds = np.concatenate(([0], lengths)), np.concatenate(([False], kinds))
    if not kinds[-1]:
        lengths, kinds = np.concatenate((lengths, [0])), np.concatenate((kinds, [True]))
    zeros, counts = lengths[0::2], lengths[1::2]
    samples = flat[nonzero].astype(np.int64)
    deltas = np.diff(np.concatenate(([0], samples)))
    zigzag = np.where(deltas >= 0, 2 * deltas, -2 * deltas - 1)
    # Each pair writes its two counts, then its samples' codes.
    sizes = 2 + counts
    out = np.empty(int(sizes.sum()), dtype=np.int64)
    at = np.cumsum(sizes) - sizes
    out[at] = zeros
    out[at + 1] = counts
    code_at = np.repeat(at + 2, counts) + (np.arange(samples.size) -
                                           np.repeat(np.cumsum(counts) - counts, counts))
    out[code_at] = zigzag
    return out


def _rvl_nibbles(numbers):
    """The nibbles of numbers (each < 2^30), in order."""
    v = numbers.astype(np.uint64)
    groups = np.ones(v.size, dtype=np.int64)
    for bits in range(3, 30, 3):
        groups += v >= (1 << bits)
    owner = np.repeat(np.arange(v.size), groups)
    k = np.arange(int(groups.sum())) - np.repeat(np.cumsum(groups) - groups, groups)
    nib = (v[owner] >> (3 * k).astype(np.uint64)) & 7
    nib |= (k < groups[owner] - 1).astype(np.uint64) << 3
    return nib.astype(np.uint32)


def rvl_u16(depth):
    """The RVL code of a (H, W) uint16 image."""
    flat = np.ascontiguousarray(depth, dtype=np.uint16).ravel()
    nib = _rvl_nibbles(_rvl_numbers(flat))
    nib = np.concatenate((nib, np.zeros((-nib.size) % 8, dtype=np.uint32))).reshape(-1, 8)
    words = np.zeros(nib.shape[0], dtype=np.uint32)
    for i in range(8):
        words |= nib[:, i] << np.uint32(4 * (7 - i))
    return words.astype("<u4").tobytes()


# ---- encode -------------------------------------------------------------------

def encode(fields, depth, encoding, level):
    """Replaces fields["depth"] (the raw samples depth_fields made) by its
    encoding and adds "depth_encoding"; "raw" leaves the fields as they are
    (no key, so daemons from before it read them too)."""
    if encoding not in TABLE:
        raise ArgumentError(ErrorCode.INVAL,
                            f"depth_encoding must be one of {', '.join(ENCODINGS)}, "
                            f"not {encoding!r}")
    if encoding not in LEVELS:
        if level is not None:
            raise ArgumentError(ErrorCode.INVAL,
                                f"depth_encoding={encoding!r} takes no compress_level "
                                f"(png and zstd do)")
    else:
        if level is None:
            level = DEFAULT_LEVEL[encoding]
        r = LEVELS[encoding]
        if isinstance(level, bool) or not isinstance(level, int) or level not in r:
            raise ArgumentError(ErrorCode.INVAL,
                                f"compress_level for {encoding} must be an int "
                                f"{r.start}..{r.stop - 1}")
    if encoding == "raw":
        return fields
    u16, f32 = TABLE[encoding][:2]
    if not (u16 if fields["depth_format"] == "u16" else f32):
        raise ArgumentError(ErrorCode.INVAL,
                            f'depth_encoding="{encoding}" carries uint16 depth only; '
                            'use "zstd" for float depth')
    if encoding == "png":
        payload = png_u16(depth, level)
    elif encoding == "rvl":
        payload = rvl_u16(depth)
    else:
        payload = zstd(fields["depth"], level)
    return {**fields, "depth": payload, "depth_encoding": encoding}


# ---- decode -------------------------------------------------------------------

def _refuse(why):
    raise ArgumentError(ErrorCode.DEPTH_DECODE, f"depth: {why}")


def _png_rows(data, width, height):
    """The unfiltered rows (H, 2W) uint8 of a 16-bit grayscale PNG of
    width x height, not interlaced."""
    if data[:8] != _PNG_SIGNATURE:
        _refuse("not a PNG (no signature)")
    pos, idat, header = 8, [], None
    while pos + 12 <= len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if len(body) != n or pos + 12 + n > len(data):
            _refuse("png: truncated")
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if crc != zlib.crc32(kind + body) & 0xFFFFFFFF:
            _refuse(f"png: bad CRC of {kind!r}")
        pos += 12 + n
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if pos != len(data):
        _refuse("png: bytes after IEND, or no IEND")
    if header is None or header[:2] != (width, height):
        _refuse(f"png is not {width}x{height}")
    if header[2:4] != (16, 0) or header[6] != 0:
        _refuse("png is not 16-bit grayscale without interlace")
    # Bounded by the frame, not by the stream: at most the image's bytes.
    stride = 1 + 2 * width
    z = zlib.decompressobj()
    raw = z.decompress(b"".join(idat), height * stride)
    if len(raw) != height * stride or z.unconsumed_tail:
        _refuse("png image data is not the frame's rows")
    rows = np.frombuffer(raw, np.uint8).reshape(height, stride).astype(np.int32)
    out = np.zeros((height, 2 * width), dtype=np.int32)
    prev = np.zeros(2 * width, dtype=np.int32)
    bpp = 2
    for y in range(height):
        f, line = rows[y, 0], rows[y, 1:]
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 0xFF
        elif f in (1, 3, 4):
            cur = np.zeros_like(line)
            for x in range(line.size):
                a = cur[x - bpp] if x >= bpp else 0
                b = prev[x]
                if f == 1:
                    p = a
                elif f == 3:
                    p = (a + b) // 2
                else:
                    c = prev[x - bpp] if x >= bpp else 0
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[x] = (line[x] + p) & 0xFF
        else:
            _refuse(f"png row {y}: filter type {f}")
        out[y] = cur
        prev = cur
    return out.astype(np.uint8)


def _rvl_decode(data, count):
    """count uint16 samples from an RVL code."""
    if len(data) % 4:
        _refuse("rvl is not whole 32-bit words")
    words = np.frombuffer(data, dtype="<u4")
    nib = np.empty((words.size, 8), dtype=np.uint32)
    for i in range(8):
        nib[:, i] = (words >> np.uint32(4 * (7 - i))) & 0xF
    nib = nib.ravel()
    ends = np.flatnonzero((nib & 8) == 0)
    if ends.size == 0:
        _refuse("rvl holds no whole number")
    starts = np.concatenate(([0], ends[:-1] + 1))
    groups = ends - starts + 1
    if np.any(groups > 10):
        _refuse("rvl number of more than 10 groups")
    k = np.arange(int(ends[-1]) + 1) - np.repeat(starts, groups)
    values = np.zeros(ends.size, dtype=np.int64)
    np.add.at(values, np.repeat(np.arange(ends.size), groups),
              (nib[:ends[-1] + 1] & 7).astype(np.int64) << (3 * k))
    out = np.zeros(count, dtype=np.int64)
    i = p = 0
    codes = []
    while i < count:
        if p + 2 > values.size:
            _refuse("rvl ends before the image")
        zeros, n = int(values[p]), int(values[p + 1])
        if zeros == 0 and n == 0:
            _refuse("rvl has an empty run")
        if i + zeros + n > count or p + 2 + n > values.size:
            _refuse("rvl run goes past the image")
        i += zeros
        codes.append((i, values[p + 2:p + 2 + n]))
        i += n
        p += 2 + n
    # Exactly the words the image needs, padded with zero nibbles.
    last = int(ends[p - 1]) if p > 0 else -1
    if words.size != last // 8 + 1 or np.any(nib[last + 1:]):
        _refuse("rvl has data after the image")
    if codes:
        at = np.concatenate([np.arange(s, s + c.size) for s, c in codes])
        z = np.concatenate([c for _, c in codes])
        deltas = np.where(z % 2 == 0, z // 2, -(z + 1) // 2)
        samples = np.cumsum(deltas)
        if samples.size and (samples.min() < 1 or samples.max() > 65535):
            _refuse("rvl sample outside 1..65535")
        out[at] = samples
    return out.astype(np.uint16)


def decode(encoding, payload, width, height, depth_format="u16"):
    """The (height, width) samples of payload, encoded as encoding
    ("raw", "png", "zstd", "rvl"): uint16 for depth_format "u16", float32
    metres for "f32". Never inflates beyond the frame's own size; raises
    ArgumentError DEPTH_DECODE when the payload is not exactly that frame's
    samples, INVAL for an encoding that does not carry depth_format."""
    if encoding not in TABLE or depth_format not in ("u16", "f32"):
        raise ArgumentError(ErrorCode.INVAL, f"cannot decode {encoding!r} {depth_format!r}")
    u16, f32 = TABLE[encoding][:2]
    if not (u16 if depth_format == "u16" else f32):
        raise ArgumentError(ErrorCode.INVAL, f"{encoding} carries uint16 depth only")
    dtype = np.dtype("<u2") if depth_format == "u16" else np.dtype("<f4")
    size = width * height * dtype.itemsize
    payload = bytes(payload)
    if encoding == "raw":
        raw = payload
    elif encoding == "zstd":
        zs = _zstandard()
        try:
            stated = zs.frame_content_size(payload)
            if stated not in (-1, size):
                _refuse(f"the zstd frame holds {stated} bytes, the frame needs {size}")
            if stated == size:
                # Stated, so bounded: one frame, and nothing after it.
                d = zs.ZstdDecompressor().decompressobj()
                raw = d.decompress(payload)
                if d.unused_data or not d.eof:
                    _refuse("zstd: bytes after the frame, or a frame cut short")
            else:
                raw = zs.ZstdDecompressor().decompress(payload, max_output_size=size)
        except zs.ZstdError as e:
            _refuse(f"zstd: {e}")
    elif encoding == "png":
        rows = _png_rows(payload, width, height)
        return rows.reshape(height, width, 2).copy().view(">u2")[..., 0].astype(np.uint16)
    else:
        return _rvl_decode(payload, width * height).reshape(height, width)
    if len(raw) != size:
        _refuse(f"{encoding}: {len(raw)} bytes, the frame needs {size}")
    return np.frombuffer(raw, dtype=dtype).reshape(height, width).astype(dtype.newbyteorder("="))

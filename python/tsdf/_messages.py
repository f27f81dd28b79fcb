"""Request fields from Python values and numpy arrays, and numpy arrays from
replies, as proto/PROTOCOL.md sections 5 and 6 define them.

Only what the wire cannot express, or what is surely a caller's mistake
(a wrong type, shape or dtype), is refused here, with ArgumentError. Value
checks (a pose that is not rigid, intrinsics of no real camera, a bad depth
range) are the daemon's, so that its codes (BAD_POSE, BAD_INTRINSICS, ...)
reach the caller exactly as documented and cannot drift from a copy here.
"""

import numbers
import operator

import numpy as np

from . import _depth
from .errors import ArgumentError, ErrorCode, TsdfError
from .results import Mesh, Raycast


# The longest map name, in bytes (TSDF_PROTO_MAX_NAME_LEN, PROTOCOL.md
# section 2): a snapshot file keeps a name with its NUL in 64 bytes.
MAX_MAP_NAME_LEN = 63


def check_map(name):
    """A map name as a str; its characters are the daemon's to check, but a
    name too long for any map is refused here, as libtsdf refuses it."""
    if not isinstance(name, str):
        raise ArgumentError(ErrorCode.INVAL, f"map must be a str, not {type(name).__name__}")
    if len(name.encode("utf-8")) > MAX_MAP_NAME_LEN:
        raise ArgumentError(ErrorCode.TOO_LARGE,
                            f"map name of {len(name.encode('utf-8'))} bytes: at most "
                            f"{MAX_MAP_NAME_LEN}")
    return name


def uint(value, what):
    """A non-negative int (numpy integers too; bool and float are refused,
    as the daemon refuses a float where it wants an integer)."""
    if isinstance(value, bool):
        raise ArgumentError(ErrorCode.INVAL, f"{what} must be an int, not bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise ArgumentError(ErrorCode.INVAL,
                            f"{what} must be an int, not {type(value).__name__}") from None
    if value < 0:
        raise ArgumentError(ErrorCode.INVAL, f"{what} must be >= 0, not {value}")
    return value


def num(value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(ErrorCode.INVAL,
                            f"{what} must be a number, not {type(value).__name__}")
    return float(value)


def intrinsics(K):
    """fx, fy, cx, cy from a 3x3 pinhole matrix or a sequence (fx, fy, cx, cy)."""
    try:
        k = np.asarray(K, dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentError(ErrorCode.INVAL,
                            "K must be a 3x3 matrix or (fx, fy, cx, cy) numbers") from None
    if k.shape == (4,):
        fx, fy, cx, cy = (float(x) for x in k)
    elif k.shape == (3, 3):
        # The protocol's camera is a pinhole without skew: a matrix with
        # skew or a last row other than 0 0 1 would be silently misread.
        if k[0, 1] != 0 or k[1, 0] != 0 or not np.array_equal(k[2], [0.0, 0.0, 1.0]):
            raise ArgumentError(ErrorCode.BAD_INTRINSICS,
                                "K must be [[fx, 0, cx], [0, fy, cy], [0, 0, 1]] (no skew)")
        fx, fy, cx, cy = float(k[0, 0]), float(k[1, 1]), float(k[0, 2]), float(k[1, 2])
    else:
        raise ArgumentError(ErrorCode.INVAL,
                            f"K must have shape (3, 3) or (4,), not {k.shape}")
    return {"fx": fx, "fy": fy, "cx": cx, "cy": cy}


def pose(T_world_cam):
    """The 16 row-major numbers of a 4x4 camera-to-world matrix."""
    try:
        t = np.asarray(T_world_cam, dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentError(ErrorCode.INVAL,
                            "T_world_cam must be a 4x4 matrix of numbers") from None
    if t.shape not in ((4, 4), (16,)):
        raise ArgumentError(ErrorCode.INVAL,
                            f"T_world_cam must have shape (4, 4) or (16,), not {t.shape}")
    return [float(x) for x in t.reshape(16)]


def depth_fields(depth, depth_scale):
    """width, height, depth_format, depth (and depth_scale) from a 2-D array:
    uint16 is sent as "u16" (metres = value x depth_scale), any float dtype
    as "f32" metres."""
    d = np.asarray(depth)
    if d.ndim != 2:
        raise ArgumentError(ErrorCode.BAD_SIZE,
                            f"depth must be a 2-D (height, width) array, not shape {d.shape}")
    height, width = d.shape
    fields = {"width": width, "height": height}
    if d.dtype == np.uint16:
        fields["depth_format"] = "u16"
        fields["depth"] = d.astype("<u2", copy=False).tobytes()
        fields["depth_scale"] = num(depth_scale, "depth_scale")
    elif np.issubdtype(d.dtype, np.floating):
        fields["depth_format"] = "f32"
        fields["depth"] = d.astype("<f4", copy=False).tobytes()
    else:
        raise ArgumentError(ErrorCode.INVAL,
                            f"depth must be uint16 (scaled by depth_scale) or float metres, "
                            f"not {d.dtype}")
    return fields


def rgb_bytes(rgb, width, height):
    c = np.asarray(rgb)
    if c.shape != (height, width, 3):
        raise ArgumentError(ErrorCode.BAD_SIZE,
                            f"rgb must have shape ({height}, {width}, 3) like the depth image, "
                            f"not {c.shape}")
    if c.dtype != np.uint8:
        raise ArgumentError(ErrorCode.INVAL, f"rgb must be uint8, not {c.dtype}")
    return c.tobytes()


def frame_fields(map_name, depth, K, T_world_cam, rgb, sensor, seq, stamp_ns, depth_scale,
                 min_depth, max_depth, depth_encoding="raw", compress_level=None):
    """The keys of a "frame" or "integrate" request (section 6.1), the
    depth encoded as depth_encoding asks (tsdf._depth)."""
    fields = {"map": check_map(map_name)}
    if sensor is not None:
        if isinstance(sensor, str):
            fields["sensor"] = sensor
        else:
            fields["sensor"] = uint(sensor, "sensor")
    fields["seq"] = uint(seq, "seq")
    if stamp_ns is not None:
        fields["stamp_ns"] = uint(stamp_ns, "stamp_ns")
    fields.update(depth_fields(depth, depth_scale))
    fields = _depth.encode(fields, depth, depth_encoding, compress_level)
    fields.update(intrinsics(K))
    fields["min_depth"] = num(min_depth, "min_depth")
    fields["max_depth"] = num(max_depth, "max_depth")
    fields["T_world_cam"] = pose(T_world_cam)
    if rgb is not None:
        fields["rgb"] = rgb_bytes(rgb, fields["width"], fields["height"])
    return fields


def _array(reply, key, dtype, shape):
    """A writable native-order array from a reply's bin, its length checked.
    A writable uint8 array in its place (an image copied out of a shared
    ring) becomes the array without another copy where its order is
    native."""
    data = reply.get(key)
    owned = isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1 and \
        data.flags.writeable
    if not isinstance(data, bytes) and not owned:
        raise TsdfError(ErrorCode.FORMAT, f"the reply has no bin '{key}'")
    wire = np.dtype(dtype)
    expect = wire.itemsize * int(np.prod(shape))
    if len(data) != expect:
        raise TsdfError(ErrorCode.FORMAT,
                        f"the reply's '{key}' holds {len(data)} bytes, not {expect}")
    native = wire.newbyteorder("=")
    if owned and wire == native and data.ctypes.data % wire.alignment == 0:
        return data.view(native).reshape(shape)
    return np.frombuffer(data, dtype=wire).astype(native, copy=True).reshape(shape)


def _count(reply, key):
    value = reply.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TsdfError(ErrorCode.FORMAT, f"the reply has no uint '{key}'")
    return value


def after(value):
    """The "after" key of a query: None for the default ("integrated",
    left off the wire as libtsdf leaves it), "queued" as is."""
    if value == "integrated":
        return None
    if value == "queued":
        return value
    raise ArgumentError(ErrorCode.INVAL,
                        f"after must be \"integrated\" or \"queued\", not {value!r}")


def raycast_result(reply, width, height, normals=True):
    """width x height: the size rendered (the request's divided by its
    scale); normals: whether they were asked for (a daemon from before
    "normals" sends them anyway, and they are kept)."""
    if reply.get("width") != width or reply.get("height") != height:
        raise TsdfError(ErrorCode.FORMAT,
                        f"raycast reply is {reply.get('width')}x{reply.get('height')}, "
                        f"not the {width}x{height} asked for")
    rgb = None
    if reply.get("rgb") is not None:
        rgb = _array(reply, "rgb", np.uint8, (height, width, 3))
    nrm = None
    if normals or reply.get("normals") is not None:
        nrm = _array(reply, "normals", "<f4", (height, width, 3))
    version = reply.get("version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise TsdfError(ErrorCode.FORMAT, "the reply's 'version' is not a uint")
    return Raycast(depth=_array(reply, "depth", "<f4", (height, width)), normals=nrm, rgb=rgb,
                   version=version)


def _coords(reply, key):
    """An (N, 3) int32 array of block coordinates from a bin of N x 12 bytes."""
    data = reply.get(key)
    if not isinstance(data, bytes) or len(data) % 12:
        raise TsdfError(ErrorCode.FORMAT, f"the reply's '{key}' is no bin of 3 int32 a block")
    return _array(reply, key, "<i4", (len(data) // 12, 3))


def _part_starts(reply, key, blocks, count):
    """block_vertex_start or block_triangle_start: blocks + 1 uint32 from 0
    to count, never decreasing, so that the parts cover every item once."""
    starts = _array(reply, key, "<u4", (blocks + 1,))
    if starts[0] != 0 or int(starts[-1]) != count or np.any(np.diff(starts.astype(np.int64)) < 0):
        raise TsdfError(ErrorCode.FORMAT,
                        f"the reply's '{key}' does not run from 0 up to {count}")
    return starts


def _mesh_parts(reply, nv, nt, faces):
    """The parts of a by_block mesh (PROTOCOL.md 6.3), checked as libtsdf
    checks them: every triangle's indices inside its own part's vertices."""
    coords = _coords(reply, "block_coords")
    vstart = _part_starts(reply, "block_vertex_start", len(coords), nv)
    tstart = _part_starts(reply, "block_triangle_start", len(coords), nt)
    if nt:
        part = np.repeat(np.arange(len(coords)), np.diff(tstart.astype(np.int64)))
        lo, hi = vstart[part][:, None], vstart[part + 1][:, None]
        if np.any(faces < lo) or np.any(faces >= hi):
            raise TsdfError(ErrorCode.FORMAT, "a mesh index lies outside its block's part")
    return coords, vstart, tstart


def mesh_result(reply, by_block=False):
    nv = _count(reply, "vertex_count")
    nt = _count(reply, "triangle_count")
    faces = _array(reply, "indices", "<u4", (nt, 3))
    if nt and int(faces.max()) >= nv:
        raise TsdfError(ErrorCode.FORMAT, "a mesh index is out of range")
    colors = None
    if reply.get("colors") is not None:
        colors = _array(reply, "colors", np.uint8, (nv, 3))
    parts = {}
    if by_block:
        # Asked for parts and got none: a daemon from before by_block. Its
        # whole mesh would read as no change to a caller that replaces parts.
        if reply.get("block_coords") is None:
            raise TsdfError(ErrorCode.FORMAT,
                            "the mesh reply has no parts (block_coords): the daemon is older "
                            "than by_block")
        coords, vstart, tstart = _mesh_parts(reply, nv, nt, faces)
        parts = dict(block_coords=coords, block_vertex_start=vstart, block_triangle_start=tstart)
    removed, full = None, False
    if reply.get("removed") is not None or reply.get("full") is not None:
        # The answer to since: both keys, as libtsdf requires them.
        removed = _coords(reply, "removed")
        full = reply.get("full")
        if not isinstance(full, bool):
            raise TsdfError(ErrorCode.FORMAT, "the reply has 'removed' but no bool 'full'")
    return Mesh(version=_count(reply, "version"),
                vertices=_array(reply, "positions", "<f4", (nv, 3)), faces=faces,
                normals=_array(reply, "normals", "<f4", (nv, 3)), colors=colors,
                removed=removed, full=full, **parts)

"""Mesh replies as the daemon, an older one, or something hostile at its
address could send them: the parts and removed blocks of PROTOCOL.md 6.3
are checked as libtsdf checks them, and a reply without them still reads.
No daemon is needed: the replies are built here."""

import numpy as np
import pytest

from tsdf import ErrorCode, TsdfError
from tsdf._messages import mesh_result


def u32(*values):
    return np.array(values, "<u4").tobytes()


def reply(**change):
    """A by_block, incremental reply of three parts: two triangles in block
    (0, 0, 0), one in (1, 0, 0), none in (-1, 2, -3); one block removed."""
    r = {"version": 60, "vertex_count": 7, "triangle_count": 3,
         "positions": np.arange(21, dtype="<f4").tobytes(),
         "normals": np.zeros(21, "<f4").tobytes(),
         "indices": u32(0, 1, 2, 0, 2, 3, 4, 5, 6),
         "block_coords": np.array([0, 0, 0, 1, 0, 0, -1, 2, -3], "<i4").tobytes(),
         "block_vertex_start": u32(0, 4, 7, 7), "block_triangle_start": u32(0, 2, 3, 3),
         "removed": np.array([5, 5, 5], "<i4").tobytes(), "full": False}
    r.update(change)
    return {k: v for k, v in r.items() if v is not None}


def test_parts_and_removed_decode():
    m = mesh_result(reply(), by_block=True)
    assert m.block_coords.tolist() == [[0, 0, 0], [1, 0, 0], [-1, 2, -3]]
    assert m.block_vertex_start.tolist() == [0, 4, 7, 7]
    assert m.block_triangle_start.tolist() == [0, 2, 3, 3]
    assert m.removed.tolist() == [[5, 5, 5]] and m.full is False
    parts = list(m.parts())
    assert [p.block for p in parts] == [(0, 0, 0), (1, 0, 0), (-1, 2, -3)]
    assert parts[1].faces.tolist() == [[0, 1, 2]] and len(parts[1].vertices) == 3
    assert len(parts[2].faces) == 0 and len(parts[2].vertices) == 0


def test_a_reply_without_the_new_keys_is_a_whole_mesh():
    old = reply(block_coords=None, block_vertex_start=None, block_triangle_start=None,
                removed=None, full=None)
    m = mesh_result(old)
    assert len(m.faces) == 3 and m.block_coords is None and m.removed is None
    assert m.full is False


def test_parts_asked_for_but_missing_say_why():
    old = reply(block_coords=None, block_vertex_start=None, block_triangle_start=None)
    with pytest.raises(TsdfError) as e:
        mesh_result(old, by_block=True)
    assert e.value.code is ErrorCode.FORMAT and "older than by_block" in e.value.message


@pytest.mark.parametrize("change", [
    dict(block_coords=b"\0" * 10),                    # no whole blocks
    dict(block_coords=b"\0" * 24),                    # 2 blocks, starts for 3
    dict(block_coords="abc"),                         # not a bin
    dict(block_vertex_start=None),                    # one of the three missing
    dict(block_triangle_start=u32(0, 2, 3)),          # too short
    dict(block_vertex_start=u32(1, 4, 7, 7)),         # not from 0
    dict(block_vertex_start=u32(0, 5, 4, 7)),         # going back
    dict(block_vertex_start=u32(0, 4, 6, 6)),         # not up to vertex_count
    dict(block_triangle_start=u32(0, 2, 3, 4)),       # beyond triangle_count
    dict(indices=u32(0, 1, 2, 0, 2, 3, 4, 5, 3)),     # part 1 uses part 0's vertex
    dict(indices=u32(0, 1, 4, 0, 2, 3, 4, 5, 6)),     # part 0 uses part 1's
    dict(block_triangle_start=u32(0, 1, 3, 3)),       # a triangle moved to a foreign part
    dict(removed=b"\0" * 13),                         # no whole blocks
    dict(full=None),                                  # removed without full
    dict(removed=None),                               # full without removed
    dict(full=1),                                     # not a bool
])
def test_malformed_parts_and_removed_are_refused(change):
    with pytest.raises(TsdfError) as e:
        mesh_result(reply(**change), by_block=True)
    assert e.value.code is ErrorCode.FORMAT

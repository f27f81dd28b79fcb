"""What the client's calls return (the type-specific keys of each reply)."""

from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class Ping:
    server: str  # e.g. "tsdfd 0.1.0"
    uptime_ms: int
    # The daemon's [server] ring_socket, where attach_ring(None, ...) goes;
    # "" when it has none (PROTOCOL.md 6.8).
    ring_socket: str = ""


@dataclass(frozen=True)
class Integrated:
    seq: int  # the frame's seq, echoed
    version: int  # the map's version after the frame (0 if unknown)
    integrate_ms: float  # time the daemon spent integrating (0 if unknown)


@dataclass(frozen=True)
class Raycast:
    depth: np.ndarray  # (H, W) float32 z-depth in metres, NaN where no surface
    # (H, W, 3) float32 unit normals, world frame, NaN where no surface; None
    # when asked for depth alone (normals=False)
    normals: Optional[np.ndarray]
    rgb: Optional[np.ndarray]  # (H, W, 3) uint8, only when asked for and the map has colour
    version: int = 0  # the map version the image shows; 0 from daemons before it

    @property
    def has_rgb(self) -> bool:
        """True when the daemon sent colour: asked for, and the map has
        colour (a map without it sends none rather than black pixels)."""
        return self.rgb is not None


@dataclass(frozen=True)
class MeshPart:
    block: tuple  # (x, y, z) block coordinates: the block spans block * 8 voxels, 8 a side
    vertices: np.ndarray  # (n, 3) float32, the part's own vertices
    faces: np.ndarray  # (m, 3) uint32 indices into this part's vertices
    normals: np.ndarray  # (n, 3) float32
    colors: Optional[np.ndarray]  # (n, 3) uint8, when the map has colour


@dataclass(frozen=True)
class Mesh:
    version: int  # the map version the mesh was extracted at (pass as since=)
    vertices: np.ndarray  # (N, 3) float32 metres, world frame
    faces: np.ndarray  # (M, 3) uint32 vertex indices, counter-clockwise seen from outside
    normals: np.ndarray  # (N, 3) float32 unit vertex normals, pointing into free space
    colors: Optional[np.ndarray]  # (N, 3) uint8, when the map has colour
    # by_block=True: one part per voxel block (PROTOCOL.md 6.3); None otherwise.
    # Part i is vertices[block_vertex_start[i]:block_vertex_start[i + 1]] and
    # faces[block_triangle_start[i]:block_triangle_start[i + 1]].
    block_coords: Optional[np.ndarray] = None  # (B, 3) int32
    block_vertex_start: Optional[np.ndarray] = None  # (B + 1,) uint32
    block_triangle_start: Optional[np.ndarray] = None  # (B + 1,) uint32
    # since=V: the blocks gone since V, (R, 3) int32 (None for a whole mesh,
    # and from a daemon before them); full: this mesh is the whole map and
    # replaces everything the caller holds (a reset or load after V, or V
    # too old for the daemon to say what went).
    removed: Optional[np.ndarray] = None
    full: bool = False

    def write_ply(self, path):
        """Writes the mesh as a binary little-endian PLY file (vertices with
        their normals and, when the map has colour, colours; triangles), as
        tsdfctl mesh does; Open3D, MeshLab and Blender read it."""
        n, m = len(self.vertices), len(self.faces)
        header = ["ply", "format binary_little_endian 1.0", f"element vertex {n}",
                  "property float x", "property float y", "property float z",
                  "property float nx", "property float ny", "property float nz"]
        fields = [("x", "<f4"), ("y", "<f4"), ("z", "<f4"),
                  ("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4")]
        if self.colors is not None:
            header += ["property uchar red", "property uchar green", "property uchar blue"]
            fields += [("red", "u1"), ("green", "u1"), ("blue", "u1")]
        header += [f"element face {m}", "property list uchar int vertex_indices", "end_header"]
        vertex = np.empty(n, dtype=fields)
        for i, axis in enumerate("xyz"):
            vertex[axis] = self.vertices[:, i]
            vertex["n" + axis] = self.normals[:, i]
        if self.colors is not None:
            for i, c in enumerate(("red", "green", "blue")):
                vertex[c] = self.colors[:, i]
        face = np.empty(m, dtype=[("n", "u1"), ("v", "<i4", (3,))])
        face["n"] = 3
        face["v"] = self.faces
        with open(path, "wb") as f:
            f.write(("\n".join(header) + "\n").encode("ascii"))
            f.write(vertex.tobytes())
            f.write(face.tobytes())

    def parts(self):
        """The parts of a by_block mesh as MeshPart, in the daemon's order,
        each with faces indexing its own vertices; none for a whole mesh."""
        if self.block_coords is None:
            return
        vs, ts = self.block_vertex_start, self.block_triangle_start
        for i, block in enumerate(self.block_coords):
            v0, v1, t0, t1 = int(vs[i]), int(vs[i + 1]), int(ts[i]), int(ts[i + 1])
            yield MeshPart(block=tuple(int(x) for x in block), vertices=self.vertices[v0:v1],
                           faces=self.faces[t0:t1] - np.uint32(v0),
                           normals=self.normals[v0:v1],
                           colors=None if self.colors is None else self.colors[v0:v1])


@dataclass(frozen=True)
class Snapshot:
    path: str  # the snapshot file written or read, on the daemon's machine
    version: int  # save: the map's version; load: its version after the restore

"""What the client's calls return (the type-specific keys of each reply)."""

from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class Ping:
    server: str  # e.g. "tsdfd 0.1.0"
    uptime_ms: int


@dataclass(frozen=True)
class Integrated:
    seq: int  # the frame's seq, echoed
    version: int  # the map's version after the frame (0 if unknown)
    integrate_ms: float  # time the daemon spent integrating (0 if unknown)


@dataclass(frozen=True)
class Raycast:
    depth: np.ndarray  # (H, W) float32 z-depth in metres, NaN where no surface
    normals: np.ndarray  # (H, W, 3) float32 unit normals, world frame, NaN where no surface
    rgb: Optional[np.ndarray]  # (H, W, 3) uint8, only when asked for and the map has colour

    @property
    def has_rgb(self) -> bool:
        """True when the daemon sent colour: asked for, and the map has
        colour (a map without it sends none rather than black pixels)."""
        return self.rgb is not None


@dataclass(frozen=True)
class Mesh:
    version: int  # the map version the mesh was extracted at (pass as since=)
    vertices: np.ndarray  # (N, 3) float32 metres, world frame
    faces: np.ndarray  # (M, 3) uint32 vertex indices, counter-clockwise seen from outside
    normals: np.ndarray  # (N, 3) float32 unit vertex normals, pointing into free space
    colors: Optional[np.ndarray]  # (N, 3) uint8, when the map has colour


@dataclass(frozen=True)
class Snapshot:
    path: str  # the snapshot file written or read, on the daemon's machine
    version: int  # save: the map's version; load: its version after the restore

"""tsdf: the Python client of tsdfd, the GPU TSDF reconstruction daemon.

    import tsdf
    with tsdf.Client("ipc:///run/tsdfd/tsdfd.sock") as c:
        c.integrate("lab", depth_u16, K, T_world_cam)
        mesh = c.mesh("lab")

The wire protocol is proto/PROTOCOL.md of the tsdfd repository.
"""

from ._version import __version__
from .client import DEFAULT_PUSH_URL, DEFAULT_REQ_URL, PROTOCOL_VERSION, Client
from .errors import ArgumentError, ErrorCode, TsdfError
from .results import Integrated, Mesh, MeshPart, Ping, Raycast, Snapshot

__all__ = [
    "__version__", "Client", "DEFAULT_REQ_URL", "DEFAULT_PUSH_URL", "PROTOCOL_VERSION",
    "ArgumentError", "ErrorCode", "TsdfError",
    "Integrated", "Mesh", "MeshPart", "Ping", "Raycast", "Snapshot",
]

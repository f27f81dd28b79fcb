"""The error codes of tsdfd as names, and the one exception of this package.

The numbers are common/tsdf_error.h's TSDF_ERRNO_MAP, which also defines
them on the wire (proto/PROTOCOL.md section 4). They are stable: a code is
never renumbered or reused, and new ones are appended. The table below is
written out rather than generated so that an installed package needs no C
header; python/tests/test_errors.py parses the header and fails when the
two differ, so a code added there must be added here too.
"""

import enum


class ErrorCode(enum.IntEnum):
    """A negative tsdf status code; ``ErrorCode(-3).name == "BAD_INTRINSICS"``."""

    INVAL = -1
    NOMEM = -2
    BAD_INTRINSICS = -3
    BAD_POSE = -4
    BAD_SIZE = -5
    EMPTY_IMAGE = -6
    BAD_DEPTH_RANGE = -7
    BAD_PARAMS = -8
    CAPACITY = -9
    CUDA = -10
    NO_GPU = -11
    NOT_BUILT = -12
    IO = -13
    FORMAT = -14
    CHECKSUM = -15
    VERSION = -16
    TOO_LARGE = -17
    PROTO_TYPE = -18
    PROTO_KEY = -19
    NOT_FOUND = -20
    QUEUE_FULL = -21
    TIMEOUT = -22
    CLOSED = -23
    CONNREFUSED = -24
    NNG = -25
    SHUTDOWN = -26
    BUSY = -27
    INTERNAL = -28
    LIMIT = -29
    DROPPED = -30
    FORBIDDEN = -31
    AUTH = -32
    DEPTH_DECODE = -33


class TsdfError(Exception):
    """A failed call: an error reply of the daemon or a local failure.

    ``code`` is the status as an ``ErrorCode`` (a plain int when this
    package does not know the code, e.g. from a newer daemon), ``name``
    its name as the daemon spells it ("BAD_POSE"), ``message`` the
    daemon's or the local explanation.
    """

    def __init__(self, code, message="", name=None):
        try:
            code = ErrorCode(code)
        except ValueError:
            pass
        if name is None:
            name = code.name if isinstance(code, ErrorCode) else "UNKNOWN"
        self.code = code
        self.name = name
        self.message = message
        super().__init__(f"{name} ({int(code)}): {message}" if message else f"{name} ({int(code)})")


class ArgumentError(TsdfError, ValueError):
    """An argument refused before anything was sent (wrong shape, dtype or
    type). It is also a ValueError, as Python code expects of bad input."""

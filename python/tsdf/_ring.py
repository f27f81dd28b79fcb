"""A shared-memory frame ring (proto/PROTOCOL.md 6.10), the Python side of
libtsdf's client/client_ring.c.

A memfd of `slots` slots, sealed against shrinking and growing, mapped
here and handed to the daemon over its ring socket (SCM_RIGHTS), which
answers a token. An integrate then copies its raw depth into free slots
and names (token, offset) instead of carrying the samples. The daemon
copies them out before it answers, so the slots are free again once the
reply arrived. A raycast names free slots that its image fits in, and the
daemon writes the image there before it answers. A slot whose request got
no answer (timeout, broken connection) is retired, since the daemon may
still read or write it. Each request carries the seq of its slots
("ring_seq"); when no run of free slots is left, a fence at the lowest
seq still in flight makes the daemon refuse the retired ones' requests
from then on, and their slots are free again (PROTOCOL.md 6.10, item 5).
"""

import fcntl
import mmap
import os
import socket
import struct
import threading

import numpy as np

from .errors import ArgumentError, ErrorCode, TsdfError

_MAGIC = 0x47525354  # "TSRG"
_FENCE_MAGIC = 0x46525354  # "TSRF"
_VERSION = 1
# Native byte order and layout: both ends are on one host.
_ATTACH = struct.Struct("=IIQ")
_FENCE = struct.Struct("=IIQ")
_FENCE_TIMEOUT_S = 1.0
_REPLY = struct.Struct("=IiQ64s")
MAX_SLOTS = 64


class Ring:
    def __init__(self, path, slot_bytes, slots, timeout_ms):
        if not 1 <= slots <= MAX_SLOTS or slot_bytes <= 0 or slot_bytes * slots > 1 << 30:
            raise ArgumentError(ErrorCode.INVAL, "1..64 slots of at most 1 GiB in all")
        self.slot_bytes = (slot_bytes + 63) & ~63
        size = self.slot_bytes * slots
        self._lock = threading.Lock()
        self._slots = slots
        self._free = list(range(slots))
        self._retired = set()
        self._slot_seq = [0] * slots  # the seq of the request in each slot
        self._last_seq = 0
        self._no_fence = False  # the daemon refused or ignored a fence
        self.broken = False
        self._map = None
        self._sock = None
        fd = os.memfd_create("tsdf-frame-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            # The daemon takes only a ring that cannot shrink (PROTOCOL.md 6.10).
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self._map = mmap.mmap(fd, size)
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._sock.settimeout(max(timeout_ms, 1) / 1000.0)
            try:
                self._sock.connect(os.fspath(path))
                socket.send_fds(self._sock, [_ATTACH.pack(_MAGIC, _VERSION, size)], [fd])
                data = self._sock.recv(_REPLY.size)
            except socket.timeout as e:
                raise TsdfError(ErrorCode.TIMEOUT, f"ring socket {path}: no answer") from e
            except OSError as e:
                raise TsdfError(ErrorCode.CONNREFUSED, f"ring socket {path}: {e}") from e
            if len(data) != _REPLY.size:
                raise TsdfError(ErrorCode.FORMAT, f"ring socket {path}: not a ring answer")
            magic, status, token, reason = _REPLY.unpack(data)
            if magic != _MAGIC:
                raise TsdfError(ErrorCode.FORMAT, f"ring socket {path}: not a ring answer")
            if status != 0:
                text = reason.split(b"\0", 1)[0].decode("utf-8", "replace")
                raise TsdfError(status, f"ring refused: {text}")
            self.token = token
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)

    def take(self, nbytes):
        """The fewest consecutive free slots that hold nbytes: (slots,
        offset, seq), or None when no such run is free (after a fence that
        frees retired slots, where there are any), nbytes is 0, or the ring
        is broken."""
        count = -(-nbytes // self.slot_bytes)
        if self.broken or nbytes <= 0:
            return None
        with self._lock:
            run = self._find_run(count)
            if run is None and self._reclaim():
                run = self._find_run(count)
            if run is None:
                return None
            self._free = [s for s in self._free if s not in run]
            self._last_seq += 1
            for s in run:
                self._slot_seq[s] = self._last_seq
            return list(run), run[0] * self.slot_bytes, self._last_seq

    def _find_run(self, count):
        free = set(self._free)
        for first in sorted(free):
            run = range(first, first + count)
            if all(s in free for s in run):
                return run
        return None

    def _reclaim(self):
        """Frees the retired slots below a fence at the lowest seq still in
        flight (or past every one handed out); True when some were. Lock
        held. A daemon that does not take a fence is not asked again."""
        if not self._retired or self._no_fence:
            return False
        in_flight = set(range(self._slots)) - set(self._free) - self._retired
        fence = min([self._slot_seq[s] for s in in_flight] + [self._last_seq + 1])
        freed = [s for s in self._retired if self._slot_seq[s] < fence]
        if not freed:
            return False
        try:
            self._sock.settimeout(_FENCE_TIMEOUT_S)
            self._sock.send(_FENCE.pack(_FENCE_MAGIC, _VERSION, fence))
            data = self._sock.recv(_REPLY.size)
            ok = len(data) == _REPLY.size and _REPLY.unpack(data)[:3] == (_MAGIC, 0, self.token)
        except OSError:
            ok = False
        if not ok:
            self._no_fence = True
            return False
        self._retired.difference_update(freed)
        self._free.extend(freed)
        return True

    def put(self, samples):
        """Copies samples (bytes) into free slots: (slots, offset, seq), or
        None as take."""
        taken = self.take(len(samples))
        if taken is not None:
            offset = taken[1]
            self._map[offset:offset + len(samples)] = samples
        return taken

    def read(self, offset, nbytes):
        """A copy of nbytes of the ring from offset (a raycast's image), as
        a writable uint8 array: the one copy the image gets on this side
        (a bytes slice of the map, then the arrays' own copies, took three
        of 4.9 MB for 640 x 480 depth and normals)."""
        return np.frombuffer(self._map, dtype=np.uint8, count=nbytes, offset=offset).copy()

    def release(self, slots, answered):
        """Frees slots after the daemon answered their request; else
        retires them until a fence frees them."""
        with self._lock:
            if answered:
                self._free.extend(slots)
            else:
                self._retired.update(slots)

    def close(self):
        """Detaches (closes the ring socket's connection) and unmaps."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._map is not None:
            self._map.close()
            self._map = None

"""Client, the Python counterpart of libtsdf (client/tsdf_client.h).

A client holds a REQ socket for the requests that are answered and, when
given a push_url, a PUSH socket for fire-and-forget frames, and speaks
proto/PROTOCOL.md over them with pynng and msgpack.
"""

import itertools
import os
import threading
import urllib.parse

import msgpack
import pynng

from . import _messages as m
from ._ring import Ring
from .errors import ArgumentError, ErrorCode, TsdfError
from .results import Integrated, Ping, Snapshot

PROTOCOL_VERSION = 1
DEFAULT_REQ_URL = "ipc:///run/tsdfd/tsdfd.sock"
DEFAULT_PUSH_URL = "ipc:///run/tsdfd/frames.sock"
# Neither side sends or accepts a larger message (TSDF_PROTO_MAX_MESSAGE_BYTES).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# The most a raycast may shrink its image ("scale", PROTOCOL.md 6.2).
MAX_RAYCAST_SCALE = 8

# nng's failures as tsdf codes, as libtsdf maps them (tsdf_client_nng_error).
_NNG_CODES = (
    (pynng.Timeout, ErrorCode.TIMEOUT),
    (pynng.ConnectionRefused, ErrorCode.CONNREFUSED),
    (pynng.NoEntry, ErrorCode.CONNREFUSED),
    (pynng.DestinationUnreachable, ErrorCode.CONNREFUSED),
    (pynng.Closed, ErrorCode.CLOSED),
    (pynng.TryAgain, ErrorCode.QUEUE_FULL),
    (pynng.MessageTooLarge, ErrorCode.TOO_LARGE),
    (pynng.NoMemory, ErrorCode.NOMEM),
    (pynng.AddressInvalid, ErrorCode.INVAL),
)


def _nng_error(exc, doing):
    for cls, code in _NNG_CODES:
        if isinstance(exc, cls):
            return TsdfError(code, f"{doing}: {exc}")
    return TsdfError(ErrorCode.NNG, f"{doing}: {exc}")


def _tls_config(url, tls_ca, tls_cert, tls_key, tls_server_name):
    """A client TLS configuration for url that verifies the daemon's
    certificate against tls_ca and, with tls_cert and tls_key, presents a
    client certificate (PEM files)."""
    if (tls_cert is None) != (tls_key is None):
        raise ArgumentError(ErrorCode.INVAL, "tls_cert and tls_key must be given together")
    if tls_ca is None:
        # The client always verifies the daemon, and nng has no system trust
        # store to verify it against: the CA must be named.
        raise ArgumentError(ErrorCode.INVAL, "a tls+tcp:// URL needs tls_ca (the CA's PEM file)")
    own = {}
    if tls_cert is not None:
        with open(tls_cert, encoding="ascii") as f:
            own["own_cert_string"] = f.read()
        with open(tls_key, encoding="ascii") as f:
            own["own_key_string"] = f.read()
    if tls_server_name is None:
        # nng takes the name to verify from the URL only for the
        # configuration it makes itself, not for one set on the socket.
        tls_server_name = urllib.parse.urlsplit(url).hostname
    return pynng.TLSConfig(pynng.TLSConfig.MODE_CLIENT, server_name=tls_server_name,
                           ca_files=[os.fspath(tls_ca)],
                           auth_mode=pynng.TLSConfig.AUTH_MODE_REQUIRED, **own)


class Client:
    """A connection to tsdfd.

    req_url: the daemon's REQ/REP address (ipc://, tcp:// or tls+tcp://).
    push_url: its PUSH/PULL address for send_frame; None: no PUSH socket.
    timeout_ms: the most any call waits, milliseconds (also settable later
        through the timeout_ms attribute). After a timeout the daemon may
        still execute the request (an integrate may still integrate).
    push_buffer: frames the PUSH socket buffers before send_frame blocks.
    tls_ca, tls_cert, tls_key: PEM files for tls+tcp:// URLs: the CA that
        signed the daemon's certificate, and optionally a client
        certificate and its key. tls_server_name: the name expected in the
        daemon's certificate (default: the URL's host).

    The constructor dials synchronously and raises TsdfError CONNREFUSED
    when the daemon is not there. Every call raises TsdfError: with the
    daemon's code and message for an error reply, TIMEOUT, CLOSED,
    CONNREFUSED or NNG for transport failures, FORMAT for a reply that
    does not decode or answers another request, and ArgumentError (also a
    ValueError) for arguments refused before anything was sent.

    Threads: the methods may be called from several threads; requests are
    sent one at a time (one REQ socket), frames on the PUSH socket are not
    serialised with them. Use it as a context manager, or call close().
    """

    def __init__(self, req_url=DEFAULT_REQ_URL, push_url=None, timeout_ms=5000, push_buffer=16,
                 tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None):
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._req = None
        self._push = None
        self._ring = None
        self._req_ipc = str(req_url).startswith("ipc://")
        self.timeout_ms = timeout_ms
        t = self._timeout_ms
        tls = (tls_ca, tls_cert, tls_key, tls_server_name)
        urls = [u for u in (req_url, push_url) if u is not None]
        if any(a is not None for a in tls) and not any(u.startswith("tls+") for u in urls):
            raise ArgumentError(ErrorCode.INVAL, "tls_* arguments given but no URL is tls+tcp://")
        try:
            # A resent integrate would integrate its frame twice (PROTOCOL.md
            # section 1): never resend, rely on the timeout instead.
            self._req = pynng.Req0(resend_time=-1, recv_timeout=t, send_timeout=t)
            self._dial(self._req, req_url, tls)
            if push_url is not None:
                if not 1 <= m.uint(push_buffer, "push_buffer") <= 8192:
                    raise ArgumentError(ErrorCode.INVAL, "push_buffer must be 1..8192")
                self._push = pynng.Push0(send_buffer_size=push_buffer, send_timeout=t)
                self._dial(self._push, push_url, tls)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _dial(sock, url, tls):
        if url.startswith("tls+"):
            sock.tls_config = _tls_config(url, *tls)
        try:
            sock.dial(url, block=True)
        except pynng.NNGException as e:
            raise _nng_error(e, f"dial {url}") from e

    @property
    def timeout_ms(self):
        return self._timeout_ms

    @timeout_ms.setter
    def timeout_ms(self, value):
        value = m.uint(value, "timeout_ms")
        if value == 0:
            raise ArgumentError(ErrorCode.INVAL, "timeout_ms must be > 0")
        self._timeout_ms = value
        for sock in (self._req, self._push):
            if sock is not None:
                sock.send_timeout = value
                sock.recv_timeout = value

    def close(self):
        """Closes the sockets; frames still buffered may be lost. Idempotent."""
        for sock in (self._push, self._req):
            if sock is not None:
                sock.close()
        self._push = self._req = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, msg_type, **fields):
        """Sends one request of msg_type with fields (None values are left
        out) and returns the reply map of a success; raises TsdfError for an
        error reply. The typed methods below are built on it."""
        msg = {k: v for k, v in fields.items() if v is not None}
        with self._lock:
            if self._req is None:
                raise TsdfError(ErrorCode.CLOSED, "the client is closed")
            request_id = next(self._ids)
            msg.update(v=PROTOCOL_VERSION, type=msg_type, id=request_id)
            data = self._pack(msg)
            try:
                self._req.send(data)
                raw = self._req.recv()
            except pynng.NNGException as e:
                raise _nng_error(e, msg_type) from e
        return self._reply(raw, request_id)

    @staticmethod
    def _pack(msg):
        data = msgpack.packb(msg, use_bin_type=True)
        if len(data) > MAX_MESSAGE_BYTES:
            raise ArgumentError(ErrorCode.TOO_LARGE,
                                f"the message would be {len(data)} bytes, over 64 MiB")
        return data

    @staticmethod
    def _reply(raw, request_id):
        try:
            reply = msgpack.unpackb(raw, raw=False)
        except (ValueError, msgpack.UnpackException) as e:
            raise TsdfError(ErrorCode.FORMAT, f"the reply does not decode: {e}") from None
        if not isinstance(reply, dict) or reply.get("v") != PROTOCOL_VERSION:
            raise TsdfError(ErrorCode.FORMAT, "the reply is not a version 1 map")
        if reply.get("id") != request_id:
            raise TsdfError(ErrorCode.FORMAT,
                            f"the reply answers request {reply.get('id')}, not {request_id}")
        status = reply.get("status")
        if not isinstance(status, int):
            raise TsdfError(ErrorCode.FORMAT, "the reply has no status")
        if status != 0:
            raise TsdfError(status, str(reply.get("message", "")), name=reply.get("error"))
        return reply

    def ping(self):
        r = self.request("ping")
        return Ping(server=r.get("server", ""), uptime_ms=r.get("uptime_ms", 0),
                    ring_socket=r.get("ring_socket", ""))

    def maps(self):
        """The names of the daemon's maps."""
        return list(self.request("maps").get("maps", []))

    def stats(self, map):
        """The stats reply as a dict: "engine" (the map's volume statistics,
        layout, pool_capacity_blocks and blocks_erased among them; absent
        when the map does not exist), "params" (the map's voxel_size_m,
        trunc_vox, max_weight, memory_cap_bytes and layout, which a load
        may have changed; absent when the map does not exist),
        "daemon" (the daemon's counters) and, on the CUDA backend,
        "timeline" (PROTOCOL.md 6.6)."""
        r = self.request("stats", map=m.check_map(map))
        return {k: v for k, v in r.items() if k not in ("v", "type", "id", "status")}

    def integrate(self, map, depth, K, T_world_cam, rgb=None, sensor=None, seq=0, stamp_ns=None,
                  depth_scale=0.001, min_depth=0.1, max_depth=5.0, depth_encoding="raw",
                  compress_level=None):
        """Integrates one frame and waits until the daemon has done so.

        depth: (H, W) uint16 (metres = value x depth_scale) or float (metres);
        0 and values outside [min_depth, max_depth] are no measurement.
        K: a 3x3 pinhole matrix or (fx, fy, cx, cy), pixels.
        T_world_cam: the 4x4 rigid camera-to-world transform (x right,
        y down, z forward). rgb: optional (H, W, 3) uint8 registered to depth.
        sensor: a str or int naming the camera.
        depth_encoding: how the depth travels, losslessly (PROTOCOL.md
        6.1): "raw" (default), "png" (uint16 depth only; a 16-bit PNG
        written with zlib) or "zstd" (uint16 or float; needs the optional
        zstandard package, pip install 'tsdf-client[zstd]', else
        ArgumentError NOT_BUILT). compress_level: png 0..9 (default 1),
        zstd 1..22 (default 3). Returns Integrated; raises TsdfError with
        the frame's code (BAD_POSE, CAPACITY, QUEUE_FULL, DEPTH_DECODE...).
        """
        fields = m.frame_fields(map, depth, K, T_world_cam, rgb, sensor, seq, stamp_ns,
                                depth_scale, min_depth, max_depth, depth_encoding,
                                compress_level)
        r = self._integrate_via_ring(fields)
        if r is None:
            r = self.request("integrate", **fields)
        return Integrated(seq=r.get("seq", 0), version=r.get("version", 0),
                          integrate_ms=float(r.get("integrate_ms", 0.0)))

    def attach_ring(self, ring_socket, slot_bytes, slots=2):
        """Frames and raycast images through shared memory (PROTOCOL.md
        6.10), for a client on the daemon's host over ipc://: integrate then
        copies raw depth into free slots of a ring of `slots` (1..64) slots
        of slot_bytes shared with the daemon, instead of sending it in the
        request, and raycast takes its image out of the ring instead of the
        reply. Each takes as many consecutive free slots as it needs (a
        frame's depth is 614400 bytes at 640 x 480 uint16; an image 4 bytes
        a pixel, 16 with normals, 19 with colour too), and goes through the
        socket when they are not free. ring_socket is the daemon's [server]
        ring_socket; None asks the daemon for it (ping), NOT_FOUND when it
        names none, INVAL for a client not over ipc://. Once per client
        (BUSY for a second); CONNREFUSED when nothing listens there, the
        daemon's code when it refuses the ring.
        Should the daemon lose the ring (a restart), frames and images go
        through the socket again."""
        if ring_socket is None:
            # A path on the daemon's host, which only an ipc:// client shares.
            if not self._req_ipc:
                raise TsdfError(ErrorCode.INVAL, "a ring needs requests over ipc:// (the "
                                "daemon's host); this client connected otherwise")
            ring_socket = self.ping().ring_socket
            if not ring_socket:
                raise TsdfError(ErrorCode.NOT_FOUND,
                                "the daemon named no ring socket (none is set in its [server] "
                                "ring_socket, or it predates naming it)")
        ring = Ring(ring_socket, m.uint(slot_bytes, "slot_bytes"), m.uint(slots, "slots"),
                    self._timeout_ms)
        with self._lock:
            if self._ring is None:
                self._ring, ring = ring, None
        if ring is not None:
            ring.close()
            raise TsdfError(ErrorCode.BUSY, "this client already has a ring")

    def _integrate_via_ring(self, fields):
        """The integrate reply with fields' raw depth sent through the ring,
        or None when it goes in the request (no ring, compressed depth, no
        free slot, or the daemon lost the ring)."""
        ring = self._ring
        if ring is None or "depth_encoding" in fields:
            return None
        put = ring.put(fields["depth"])
        if put is None:
            return None
        named = {k: v for k, v in fields.items() if k != "depth"}
        return self._request_via_ring(ring, put, "integrate", named, lambda r: r)

    def _request_via_ring(self, ring, taken, msg_type, fields, answer):
        """answer(reply) of a request naming the ring slots taken ((slots,
        offset, seq) of ring.take); None when the daemon lost the ring,
        which is then broken (the caller asks again without it)."""
        slots, offset, seq = taken
        fields["ring_token"] = ring.token
        fields["ring_offset"] = offset
        fields["ring_seq"] = seq
        try:
            r = self.request(msg_type, **fields)
        except TsdfError as e:
            # Unanswered: the daemon may still read or write the slots.
            answered = e.code not in (ErrorCode.TIMEOUT, ErrorCode.CLOSED, ErrorCode.NNG,
                                      ErrorCode.CONNREFUSED, ErrorCode.NOMEM)
            ring.release(slots, answered)
            if answered and e.code in (ErrorCode.NOT_FOUND, ErrorCode.FORBIDDEN) and \
                    e.message.startswith("ring_token"):
                ring.broken = True
                return None
            raise
        except BaseException:
            # Interrupted (KeyboardInterrupt, a failure below the client):
            # whether the daemon got the request is unknown. Retired, the
            # slots come back through a fence; never released, they would
            # hold every later fence below their seq.
            ring.release(slots, False)
            raise
        try:
            return answer(r)
        finally:
            ring.release(slots, True)

    def _raycast_via_ring(self, fields, width, height, normals, rgb):
        """The raycast reply with its image taken out of the ring into the
        reply's keys, or None when it comes in the reply (no ring, no free
        run of slots that holds it, or the daemon lost the ring)."""
        ring = self._ring
        px = width * height

        def image_bytes(n, c):  # depth, then normals, then rgb (PROTOCOL.md 6.10)
            return px * (4 + 12 * n + 3 * c)

        taken = ring.take(image_bytes(bool(normals), bool(rgb))) if ring is not None else None
        if taken is None:
            return None

        def answer(r):
            if "ring_offset" not in r:
                return r
            at, nbytes = r.get("ring_offset"), r.get("ring_bytes")
            layouts = {image_bytes(n, c): (n, c) for n in (0, 1) for c in (0, 1)}
            if at != taken[1] or nbytes not in layouts:
                raise TsdfError(ErrorCode.FORMAT, "raycast reply names a ring slot not asked for")
            has_normals, has_rgb = layouts[nbytes]
            # Only the layout asked for lies inside the slots taken.
            if has_normals != bool(normals) or (has_rgb and not rgb):
                raise TsdfError(ErrorCode.FORMAT, "raycast reply names a layout not asked for")
            # One copy out of the ring; the arrays are views of it.
            image = ring.read(at, nbytes)
            r = dict(r, depth=image[:px * 4])
            if has_normals:
                r["normals"] = image[px * 4:px * 16]
            if has_rgb:
                r["rgb"] = image[nbytes - px * 3:]
            return r

        return self._request_via_ring(ring, taken, "raycast", dict(fields), answer)

    def send_frame(self, map, depth, K, T_world_cam, rgb=None, sensor=None, seq=0,
                   stamp_ns=None, depth_scale=0.001, min_depth=0.1, max_depth=5.0, block=True,
                   depth_encoding="raw", compress_level=None):
        """Queues a frame on the PUSH socket (arguments as integrate) and
        returns once nng took it; the daemon's result is not reported (see
        stats). When the send buffer is full: block=True waits up to
        timeout_ms (then TIMEOUT), block=False raises QUEUE_FULL at once."""
        if self._req is None:
            raise TsdfError(ErrorCode.CLOSED, "the client is closed")
        if self._push is None:
            raise ArgumentError(ErrorCode.INVAL, "send_frame needs a client opened with push_url")
        fields = m.frame_fields(map, depth, K, T_world_cam, rgb, sensor, seq, stamp_ns,
                                depth_scale, min_depth, max_depth, depth_encoding,
                                compress_level)
        data = self._pack({"v": PROTOCOL_VERSION, "type": "frame", **fields})
        try:
            self._push.send(data, block=block)
        except pynng.NNGException as e:
            raise _nng_error(e, "send_frame") from e

    def raycast(self, map, width, height, K, T_world_cam, min_depth=0.1, max_depth=5.0,
                rgb=False, normals=True, scale=1, after="integrated"):
        """Renders the map's surface from a virtual camera (K and
        T_world_cam as for integrate). Returns Raycast: depth (H, W) float32
        metres and normals (H, W, 3) float32 world-frame, NaN where no
        surface; rgb (H, W, 3) uint8 when asked for and the map has colour;
        version, the map version the image shows (0 from older daemons).

        normals=False: depth alone (Raycast.normals is None), a quarter of
        the bytes. scale=2..8: the same view in width // scale x height //
        scale pixels, each the centre of scale x scale full-size pixels.
        after="queued": rendered only after every frame queued for the map
        when the request arrived; the default, "integrated", renders ahead
        of them (PROTOCOL.md 6.9)."""
        width, height = m.uint(width, "width"), m.uint(height, "height")
        if not isinstance(normals, bool):
            raise ArgumentError(ErrorCode.INVAL,
                                f"normals must be a bool, not {type(normals).__name__}")
        scale = m.uint(scale, "scale")
        if not 1 <= scale <= MAX_RAYCAST_SCALE or width // scale == 0 or height // scale == 0:
            raise ArgumentError(ErrorCode.INVAL,
                                f"scale {scale}: not 1..{MAX_RAYCAST_SCALE}, or no pixel of a "
                                f"{width}x{height} image left")
        fields = dict(map=m.check_map(map), width=width, height=height, **m.intrinsics(K),
                      T_world_cam=m.pose(T_world_cam), min_depth=m.num(min_depth, "min_depth"),
                      max_depth=m.num(max_depth, "max_depth"), rgb=bool(rgb),
                      # Each only when not the default, as libtsdf sends them.
                      normals=None if normals else False,
                      scale=scale if scale != 1 else None, after=m.after(after))
        w, h = width // scale, height // scale
        r = self._raycast_via_ring(fields, w, h, normals, bool(rgb))
        if r is None:
            r = self.request("raycast", **fields)
        return m.raycast_result(r, w, h, normals)

    def mesh(self, map, box=None, since=None, by_block=False, after="integrated"):
        """The map's triangle mesh. box: (minx, miny, minz, maxx, maxy, maxz)
        metres, only blocks that intersect it; since: a Mesh.version, only
        blocks changed after it. Returns Mesh (vertices (N, 3) float32,
        faces (M, 3) uint32, normals, colors or None, version).

        by_block=True: the mesh comes in one part per voxel block,
        block_coords (B, 3) int32 with block_vertex_start and
        block_triangle_start (B + 1,) uint32 (Mesh.parts() iterates them),
        so that a mesh kept by block can be updated part by part. With
        since: removed (R, 3) int32, the blocks gone since that version,
        and full, True when the mesh replaces everything instead
        (PROTOCOL.md 6.3 says how to apply them). after: as for raycast."""
        if box is not None:
            box = [m.num(x, "box") for x in box]
            if len(box) != 6:
                raise ArgumentError(ErrorCode.INVAL, "box must hold 6 numbers")
        if since is not None:
            since = m.uint(since, "since")
        if not isinstance(by_block, bool):
            raise ArgumentError(ErrorCode.INVAL,
                                f"by_block must be a bool, not {type(by_block).__name__}")
        # Sent only when asked for, as libtsdf sends it.
        r = self.request("mesh", map=m.check_map(map), box=box, since_version=since,
                         by_block=True if by_block else None, after=m.after(after))
        return m.mesh_result(r, by_block)

    def save(self, map, path=None):
        """Saves every map (path None: a new snapshot in the daemon's state
        directory; else that file, inside it). Returns Snapshot with map's
        version."""
        return self._snapshot("save", map, path)

    def load(self, map, path=None):
        """Restores map only, from path or the newest valid snapshot."""
        return self._snapshot("load", map, path)

    def _snapshot(self, msg_type, map, path):
        if path is not None:
            path = os.fspath(path)
            if not isinstance(path, str) or not path:
                raise ArgumentError(ErrorCode.INVAL, "path must be a non-empty str (or None)")
        r = self.request(msg_type, map=m.check_map(map), path=path)
        return Snapshot(path=r.get("path", ""), version=r.get("version", 0))

    def reset(self, map):
        """Drops every block of map (NOT_FOUND when it does not exist)."""
        self.request("reset", map=m.check_map(map))

    def delete(self, map):
        """Deletes map from the daemon: its blocks, its name and its slot
        (NOT_FOUND when it does not exist)."""
        self.request("delete", map=m.check_map(map))

/*
 * tsdf_client.h - libtsdf, the thin C client of tsdfd.
 *
 * A client holds two nng sockets: a REQ socket for requests that are
 * answered (integrate, raycast, mesh, stats, save, load, reset, maps, ping)
 * and an optional PUSH socket for fire-and-forget frames (send_frame). The
 * wire format is proto/PROTOCOL.md; this library encodes and validates with
 * proto/tsdf_proto.h before anything is sent, so a malformed frame is
 * refused locally with the code the daemon would have sent.
 *
 * Errors: every function returns TSDF_OK or a negative tsdf_errno
 * (tsdf_error.h; tsdf_strerror() gives a message). Error replies of the
 * daemon are returned as their status code (e.g. TSDF_EBAD_POSE), and the
 * daemon's message is available from tsdf_client_last_message() on the
 * calling thread. nng failures are mapped: timeouts to TSDF_ETIMEOUT,
 * refused or missing endpoints to TSDF_ECONNREFUSED, closed sockets to
 * TSDF_ECLOSED, a full PUSH buffer to TSDF_EQUEUE_FULL, a failed TLS
 * handshake to TSDF_EAUTH, anything else to TSDF_ENNG. A reply that does not decode, or answers
 * another request, is TSDF_EFORMAT (or the decoder's code).
 *
 * Timeouts: every call takes timeout_ms, the most it waits in total, in
 * milliseconds. timeout_ms < 0 (TSDF_CLIENT_TIMEOUT_DEFAULT) uses the
 * client's default (options.default_timeout_ms). For send_frame, 0 means
 * "do not wait": the frame is queued or TSDF_EQUEUE_FULL is returned at
 * once. For the other calls 0 also means the default (a request cannot be
 * answered without waiting). After a timeout the request may still be
 * executed by the daemon (an integrate may still integrate its frame).
 *
 * Threads: after tsdf_client_open returns, any number of threads may call
 * any function on one client concurrently, except tsdf_client_close, which
 * must be called once, after every other call on the client has returned.
 * Each request uses its own nng context on the shared REQ socket, so
 * concurrent requests run in parallel and each gets its own reply.
 *
 * Ownership: the client never keeps pointers to caller memory after a call
 * returns; outputs are written into caller-provided structs and buffers, or
 * malloc'ed arrays (mesh) that the caller frees.
 *
 * ABI: libtsdf.so exports exactly the functions marked TSDF_API, here and
 * in tsdf_types.h, tsdf_error.h and tsdf_pose.h; the wire codec and the
 * transport it is built on are compiled in but stay internal.
 */
#ifndef TSDF_CLIENT_H
#define TSDF_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_api.h"
#include "tsdf_error.h"
#include "tsdf_proto_types.h"
#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSDF_CLIENT_TIMEOUT_DEFAULT (-1)

/* An opaque client. */
typedef struct tsdf_client tsdf_client;

typedef struct {
    /* 0 (default): tsdf_client_open dials synchronously and fails with
     * TSDF_ECONNREFUSED when the daemon is not there. 1: dial in the
     * background and keep retrying; calls time out until the daemon comes. */
    int lazy_connect;
    /* Frames the PUSH socket buffers before send_frame reports
     * TSDF_EQUEUE_FULL (1..8192); default 16. */
    int push_send_buffer;
    /* Timeout of calls that pass TSDF_CLIENT_TIMEOUT_DEFAULT, ms; default 5000. */
    int default_timeout_ms;
    /* TLS, for tls+tcp:// URLs (NULL, the default: none; a tls+tcp:// URL
     * then fails with TSDF_EINVAL, and TLS files with a URL that is not
     * tls+tcp:// too, so that a certificate is never silently unused).
     * PEM file paths, read during tsdf_client_open only (the strings are not
     * kept; the caller keeps ownership):
     *   tls_ca_file      CA certificate(s) the daemon's certificate must chain
     *                    to (required for TLS)
     *   tls_cert_file    this client's certificate, and
     *   tls_key_file     its private key (unencrypted): tsdfd requires both
     *   tls_server_name  the name the daemon's certificate must carry
     *                    (NULL: the URL's host)
     * A handshake the daemon refuses (a certificate from another CA, an
     * expired one, none) or one whose certificate fails here is
     * TSDF_EAUTH where nng tells (see tsdf_client_open). */
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_server_name;
} tsdf_client_options;

/* Fills *o with the defaults above. */
TSDF_API void tsdf_client_options_default(tsdf_client_options *o);

/* Opens a client. req_url is the daemon's REQ/REP address (NULL:
 * TSDF_PROTO_DEFAULT_REQ_URL); push_url its PUSH/PULL address (NULL: no
 * PUSH socket; send_frame then returns TSDF_EINVAL). opts NULL: defaults.
 * Returns TSDF_EINVAL (bad option or URL), TSDF_EIO (a TLS file cannot be
 * read), TSDF_ECONNREFUSED, TSDF_EAUTH (TLS handshake failed), TSDF_ETIMEOUT,
 * TSDF_ENOMEM, TSDF_ENNG. On success *out owns the client; release it with
 * tsdf_client_close.
 * Without lazy_connect the dial is NOT bounded by default_timeout_ms: it
 * waits for the TCP connect and nng's handshake, up to 10 s against a peer
 * that accepts but never answers (TSDF_ETIMEOUT) and up to the OS's connect
 * timeout (minutes) for a host that drops packets. Callers that must not
 * block that long set lazy_connect = 1; their calls then time out instead. */
TSDF_API int tsdf_client_open(const char *req_url, const char *push_url,
                              const tsdf_client_options *opts, tsdf_client **out);

/* Closes the sockets and frees the client. Frames still in the PUSH buffer
 * may be lost. NULL is a no-op. */
TSDF_API void tsdf_client_close(tsdf_client *c);

/* The daemon's message of the last failed call on the calling thread (or a
 * local explanation for local failures); "" when none. Valid until the next
 * call on this thread. */
TSDF_API const char *tsdf_client_last_message(void);

/* Maps an nng error number to a tsdf code (0 -> TSDF_OK): the one mapping
 * the daemon uses too (common/tsdf_transport.h, tsdf_transport_error). */
TSDF_API int tsdf_client_nng_error(int nng_err);

/* One frame to send: a tsdf_frame plus its addressing and how its depth
 * travels. Zero-initialised fields are the defaults. */
typedef struct {
    const char *map;    /* NULL: "default" */
    const char *sensor; /* NULL: the sensor is sensor_id */
    uint64_t sensor_id;
    uint64_t seq;
    uint64_t stamp_ns;
    const tsdf_frame *frame; /* required; buffers are read during the call only */
    /* TSDF_DEPTH_ENC_RAW (0, the default) sends frame->depth as it is. PNG,
     * ZSTD or RVL compress it losslessly first (PROTOCOL.md 6.1), on the
     * calling thread, into a buffer of the call that is freed before it
     * returns; png and rvl take u16 depth only (TSDF_EINVAL otherwise).
     * The daemon decodes it to the same samples, so the frame integrates
     * exactly as a raw one would. A daemon older than the encodings refuses
     * such a frame (BAD_SIZE). */
    tsdf_depth_encoding depth_encoding;
    /* Compression level: png 1..9 (zlib; default 1), zstd 1..19 (default
     * 3), ignored by raw and rvl; 0: the default, out of range: clamped. */
    int depth_level;
} tsdf_client_frame;

/* Queues a frame on the PUSH socket (message type "frame"): returns as soon
 * as nng took the message. TSDF_EQUEUE_FULL when the send buffer is full
 * and timeout_ms is 0; TSDF_ETIMEOUT when it stayed full for timeout_ms.
 * Validation errors (TSDF_EBAD_POSE, TSDF_EBAD_SIZE, ...) are returned
 * before anything is sent. The daemon's result is not reported (see stats). */
TSDF_API int tsdf_client_send_frame(tsdf_client *c, const tsdf_client_frame *f, int timeout_ms);

/* Sends a frame as an "integrate" request and waits until the daemon has
 * integrated or rejected it. Returns the frame's status. out (optional)
 * receives seq, the map version after the frame and the integration time.
 * With a ring attached (tsdf_client_attach_ring), raw depth goes through
 * it when slots that hold it are free; else, and for compressed depth, in
 * the request. */
TSDF_API int tsdf_client_integrate(tsdf_client *c, const tsdf_client_frame *f, int timeout_ms,
                                   tsdf_rep_integrate *out);

/* Frames and raycast images through shared memory (PROTOCOL.md 6.10),
 * for a client on the daemon's host connected over ipc://: the daemon
 * reads the depth of tsdf_client_integrate's frames from a ring of
 * `slots` (1..64) slots of slot_bytes each that this process shares with
 * it, instead of out of the request, and writes the images of
 * tsdf_client_raycast(_ex) and tsdf_client_raycast_view into it instead
 * of into the reply, so those bytes do not go through the sockets (one
 * copy into the ring, one out of it, none out of it for a view; a daemon
 * on the CUDA backend has the GPU write the images into the ring). A
 * frame or an image takes as many consecutive free slots as it
 * needs: a frame's depth is 614,400 bytes at 640 x 480 u16, an image 4
 * bytes a pixel, 16 with normals, 19 with colour too; one that does not
 * fit in the free slots travels through the socket as without a ring.
 * ring_socket is the daemon's [server] ring_socket; NULL asks the
 * daemon for it (its ping reply names it; TSDF_CLIENT_HAS_RING_DISCOVERY),
 * TSDF_ENOT_FOUND when it names none, TSDF_EINVAL for a client whose
 * requests do not go over ipc://. Once per client;
 * TSDF_EBUSY for a second ring, TSDF_ECONNREFUSED when nothing listens
 * there, the daemon's code (and tsdf_client_last_message) when it
 * refuses the ring. Should the daemon lose the ring (a restart), frames
 * and images go through the socket again, by themselves. The slots of a
 * request that got no answer (a timeout) are not used until the daemon
 * has fenced that request off (PROTOCOL.md 6.10, item 5), which libtsdf
 * asks for when it finds no free slots; a daemon from before fences
 * keeps them out of use. Colour images of frames always travel in the
 * request. */
TSDF_API int tsdf_client_attach_ring(tsdf_client *c, const char *ring_socket, size_t slot_bytes,
                                     unsigned slots);

/* Defined by a libtsdf whose tsdf_client_attach_ring takes a NULL path
 * (earlier ones do not check for it). */
#define TSDF_CLIENT_HAS_RING_DISCOVERY 1

/* Renders map (NULL: "default") from p. out->depth_m (width*height floats)
 * is required; out->normals (width*height*3) and out->rgb (width*height*3)
 * are optional. With want_rgb, *has_rgb (optional) says whether the map had
 * colour; when it had none, out->rgb is zeroed. */
TSDF_API int tsdf_client_raycast(tsdf_client *c, const char *map, const tsdf_raycast_params *p,
                                 int want_rgb, tsdf_raycast_output *out, int *has_rgb,
                                 int timeout_ms);

/* The most tsdf_client_raycast_options.scale may be. */
#define TSDF_CLIENT_MAX_RAYCAST_SCALE 8u

/* What a raycast asks for beyond its camera (PROTOCOL.md 6.2). Zeroed, it
 * asks for depth alone at full size, run as every query runs by default. */
typedef struct {
    int want_normals; /* 1: also the normals (out->normals required) */
    int want_rgb;     /* 1: also colour, which only a map with colour sends */
    /* 0 or 1: p->width x p->height pixels. 2..TSDF_CLIENT_MAX_RAYCAST_SCALE:
     * p->width / scale x p->height / scale pixels (rounded down) of the same
     * view, each the centre of scale x scale of the full image's pixels;
     * the outputs then hold that many pixels. */
    uint32_t scale;
    /* 1: run only after every frame queued for the map when the request
     * reached the daemon (PROTOCOL.md 6.9, "after": "queued"); 0: ahead of
     * them, the default. */
    int after_queued;
} tsdf_client_raycast_options;

/* What the reply of tsdf_client_raycast_ex held. */
typedef struct {
    uint32_t width, height; /* the pixels written to the outputs */
    int has_rgb;            /* 1: out->rgb holds colour; 0: it was zeroed (no colour) */
    uint64_t version;       /* the map's version the image shows; 0 from daemons before it */
} tsdf_client_raycast_info;

/* tsdf_client_raycast with options (NULL: depth alone, full size). The
 * outputs hold info->width x info->height pixels (see options.scale);
 * out->normals is required with want_normals (and left alone without);
 * out->rgb (optional) receives the colour, or zeros when the reply has
 * none (not asked for, or a map without colour). A daemon from before these keys sends a
 * full-size reply to a scaled request: TSDF_EBAD_SIZE, nothing written.
 * info (optional) says what came. */
TSDF_API int tsdf_client_raycast_ex(tsdf_client *c, const char *map, const tsdf_raycast_params *p,
                                    const tsdf_client_raycast_options *o, tsdf_raycast_output *out,
                                    tsdf_client_raycast_info *info, int timeout_ms);

/* A raycast image read where it arrived, without a copy into the
 * caller's arrays: in this client's ring (tsdf_client_attach_ring), or
 * in the reply message. The arrays are valid, read-only, until
 * tsdf_client_view_release; depth_m holds info.width x
 * info.height floats, normals 3 of them a pixel (NULL unless asked for),
 * rgb 3 bytes a pixel (NULL when none came: not asked for, or a map
 * without colour). */
typedef struct {
    const float *depth_m;
    const float *normals;
    const uint8_t *rgb;
    tsdf_client_raycast_info info;
    struct tsdf_client_view_hold *hold; /* internal: what release gives back */
} tsdf_client_view;

/* tsdf_client_raycast_ex into a view: the same request, options (NULL:
 * depth alone, full size) and errors, but the arrays are read in place
 * (an image of 640 x 480 with normals is 4.9 MB the call does not copy).
 * Only the floats of a reply that came through the socket unaligned
 * (msgpack does not align) are copied, into memory the view owns. On
 * failure *v is zeroed and nothing is held. A view holds its ring slots
 * (later raycasts that find none free come through the socket) and its
 * reply message until released; release every view before
 * tsdf_client_close. */
TSDF_API int tsdf_client_raycast_view(tsdf_client *c, const char *map, const tsdf_raycast_params *p,
                                      const tsdf_client_raycast_options *o, tsdf_client_view *v,
                                      int timeout_ms);

/* Gives back what view v holds and zeroes it; nothing for a zeroed view
 * or NULL. */
TSDF_API void tsdf_client_view_release(tsdf_client_view *v);

/* Defined by a libtsdf that has tsdf_client_raycast_view. */
#define TSDF_CLIENT_HAS_RAYCAST_VIEW 1

/* Extracts the mesh of map (NULL: "default"); params NULL: the whole map.
 * On success the old arrays of *out (initialised by the caller, e.g. with
 * tsdf_mesh_init or zeroed) are freed and replaced by malloc'ed arrays
 * that the caller frees with tsdf_client_mesh_release (or tsdf_mesh_fini).
 * *version (optional) receives the map version of the mesh. On error *out
 * is unchanged.
 * params->by_block: the mesh comes in parts, one per voxel block, with
 * block_count, block_coords, block_vertex_start and block_triangle_start
 * as tsdf_mesh describes them (NULL arrays when there are no parts); a
 * daemon too old to send parts is TSDF_EPROTO_KEY. params->since_version
 * > 0: removed_count and removed_coords list the blocks gone since that
 * version, and full says the mesh replaces everything instead (a daemon
 * from before them sends neither: 0 and NULL). PROTOCOL.md 6.3 says how to
 * keep a mesh current with them. */
TSDF_API int tsdf_client_mesh(tsdf_client *c, const char *map, const tsdf_mesh_params *params,
                              tsdf_mesh *out, uint64_t *version, int timeout_ms);

/* tsdf_client_mesh, run only after every frame queued for the map when the
 * request reached the daemon when after_queued is 1 (PROTOCOL.md 6.9,
 * "after": "queued"); 0 is tsdf_client_mesh. */
TSDF_API int tsdf_client_mesh_ex(tsdf_client *c, const char *map, const tsdf_mesh_params *params,
                                 int after_queued, tsdf_mesh *out, uint64_t *version,
                                 int timeout_ms);

/* Frees the arrays of a mesh filled by tsdf_client_mesh and zeroes it: the
 * same as tsdf_mesh_fini, kept so that existing callers still link. */
TSDF_API void tsdf_client_mesh_release(tsdf_mesh *m);

/* Engine statistics of map (NULL: "default") and the daemon's counters. */
TSDF_API int tsdf_client_stats(tsdf_client *c, const char *map, tsdf_rep_stats *out,
                               int timeout_ms);

/* Saves / loads map to / from path (NULL: the daemon's snapshot file).
 * out (optional) receives the path used and the map version. */
TSDF_API int tsdf_client_save(tsdf_client *c, const char *map, const char *path, tsdf_rep_path *out,
                              int timeout_ms);
TSDF_API int tsdf_client_load(tsdf_client *c, const char *map, const char *path, tsdf_rep_path *out,
                              int timeout_ms);

/* Drops every block of map (NULL: "default"). */
TSDF_API int tsdf_client_reset(tsdf_client *c, const char *map, int timeout_ms);

/* Deletes map (NULL: "default") from the daemon: its blocks, its name and
 * its slot of max_maps (PROTOCOL.md, "delete"). TSDF_ENOT_FOUND when there
 * is no such map. */
TSDF_API int tsdf_client_delete(tsdf_client *c, const char *map, int timeout_ms);

/* The names of the daemon's maps. */
TSDF_API int tsdf_client_maps(tsdf_client *c, tsdf_rep_maps *out, int timeout_ms);

/* Round trip to the daemon; out (optional) receives its version string and
 * uptime. */
TSDF_API int tsdf_client_ping(tsdf_client *c, tsdf_rep_ping *out, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_CLIENT_H */

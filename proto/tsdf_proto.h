/*
 * tsdf_proto.h - the wire codec of tsdfd: typed C structs for every request
 * and reply, encoded as msgpack maps (see proto/PROTOCOL.md for the exact
 * format, which this header implements).
 *
 * Pure C, no I/O, no sockets: the daemon and the client move the bytes over
 * nng; this module only turns structs into bytes and bytes into validated
 * structs.
 *
 * Encoding: every encoder appends one complete msgpack message to a
 * caller-owned growable buffer (tsdf_buf). The buffer refuses to grow past
 * its max_len (default TSDF_PROTO_MAX_MESSAGE_BYTES) and the encoder then
 * returns TSDF_ETOO_LARGE, leaving buf->len as it was before the call.
 *
 * Decoding: every decoder validates the WHOLE message before it returns
 * TSDF_OK: the msgpack structure, the protocol version, the type, the msgpack
 * type of every known key, sizes (width * height * bytes per sample must equal
 * a payload's length), finite numbers, rigid poses, image and name limits.
 * Unknown keys are ignored, so newer peers may add keys; a key whose value is
 * nil counts as absent; a key that appears twice is an error. Each fault has its
 * own code (see the comment of tsdf_proto_decode_request). On failure the
 * decoder fills *err (when not NULL) with the offending key and a
 * human-readable message that the daemon can send back in an error reply.
 *
 * Lifetimes (zero-copy): strings (map, sensor, path, error, message, map
 * names) are COPIED into fixed arrays of the decoded struct, NUL-terminated.
 * Binary payloads (depth, rgb, normals, positions, indices, colours) are NOT
 * copied: the decoded struct points INTO the bytes passed to the decoder, so
 * those bytes must outlive every use of the decoded struct (for nng: keep the
 * nng_msg until you are done). Such pointers are typed const void * because
 * they are NOT aligned: read them with memcpy, or copy the payload first.
 * Payloads are little-endian; the codec is built for little-endian hosts only
 * (a compile-time check in tsdf_proto.c), so on such hosts the bytes are the
 * native float32/uint16/uint32 values.
 *
 * Threads: every function is reentrant; distinct buffers and structs may be
 * used from different threads at once. A tsdf_buf is not thread-safe.
 */
#ifndef TSDF_PROTO_H
#define TSDF_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_error.h"
#include "tsdf_proto_types.h"
#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The limits and default addresses, the depth encodings and the replies
 * that the client calls fill are in tsdf_proto_types.h. */

/* ---- message types ------------------------------------------------------ */

/* The one list of message types: X(NAME, value, wire name, is a request).
 * A request travels REQ/REP and is answered with a reply of its own type;
 * "frame" travels PUSH/PULL only and is never answered; "error" is
 * reply-only, the answer to a request whose type could not be read.
 * Requests added later take the next numbers. Whether a type is a request
 * is read here (tsdf_msg_type_is_request), never from a range of values:
 * "delete" comes after "error". */
#define TSDF_MSG_TYPES(X)                                                                          \
    X(NONE, 0, "none", 0)                                                                          \
    X(FRAME, 1, "frame", 0)                                                                        \
    X(INTEGRATE, 2, "integrate", 1)                                                                \
    X(RAYCAST, 3, "raycast", 1)                                                                    \
    X(MESH, 4, "mesh", 1)                                                                          \
    X(STATS, 5, "stats", 1)                                                                        \
    X(SAVE, 6, "save", 1)                                                                          \
    X(LOAD, 7, "load", 1)                                                                          \
    X(RESET, 8, "reset", 1)                                                                        \
    X(MAPS, 9, "maps", 1)                                                                          \
    X(PING, 10, "ping", 1)                                                                         \
    X(ERROR, 11, "error", 0)                                                                       \
    X(DELETE, 12, "delete", 1)

typedef enum {
#define TSDF_MSG_ENUM_(name, value, wire, request) TSDF_MSG_##name = value,
    TSDF_MSG_TYPES(TSDF_MSG_ENUM_)
#undef TSDF_MSG_ENUM_
        TSDF_MSG_TYPE_COUNT
} tsdf_msg_type;

/* 1 when t is a request type (answered over REQ/REP), else 0. */
int tsdf_msg_type_is_request(tsdf_msg_type t);

/* The wire name ("frame", "integrate", ...); "none" for unknown values. */
const char *tsdf_msg_type_name(tsdf_msg_type t);
/* Parses a wire name of len bytes (not NUL-terminated) into *out;
 * TSDF_EPROTO_TYPE for anything else. */
int tsdf_msg_type_parse(const char *name, size_t len, tsdf_msg_type *out);

/* ---- growable output buffer -------------------------------------------- */

typedef struct {
    uint8_t *data;  /* malloc'ed and owned by the buffer, or the caller's (fixed) */
    size_t len;     /* bytes in use */
    size_t cap;     /* bytes allocated */
    size_t max_len; /* growth limit; TSDF_PROTO_MAX_MESSAGE_BYTES after init */
    int fixed;      /* 1: data is the caller's memory of cap bytes, never grown or freed */
} tsdf_buf;

/* Caller-owned struct: init before use, fini to free. */
void tsdf_buf_init(tsdf_buf *b);
/* A buffer over the caller's cap bytes at mem (e.g. the body of an nng
 * message of a size from tsdf_proto_request_bound): encoders write there
 * directly, and one that needs more than cap bytes fails with
 * TSDF_ETOO_LARGE. fini forgets mem without freeing it; mem must outlive
 * the buffer. */
void tsdf_buf_init_fixed(tsdf_buf *b, void *mem, size_t cap);
void tsdf_buf_fini(tsdf_buf *b);
/* Drops the content, keeps the allocation. */
void tsdf_buf_clear(tsdf_buf *b);
/* Appends n bytes; TSDF_ETOO_LARGE past max_len, TSDF_ENOMEM. */
int tsdf_buf_append(tsdf_buf *b, const void *p, size_t n);
/* Makes room for n more bytes after len (data + len .. + n becomes
 * writable; len is unchanged): for writers that produce bytes in place,
 * such as the depth encoders. TSDF_ETOO_LARGE past max_len, TSDF_ENOMEM. */
int tsdf_buf_reserve(tsdf_buf *b, size_t n);

/* ---- decode error detail ------------------------------------------------ */

typedef struct {
    char key[32]; /* the offending key ("depth"), or "" */
    /* e.g. "depth: 1000 bytes, expected 614400 (640x480 u16)"; always valid
     * UTF-8 without control characters, though it may quote the peer. */
    char message[160];
} tsdf_proto_error;

/* ---- requests ----------------------------------------------------------- */

/* The wire name ("raw", "png", "zstd", "rvl"); "unknown" for other values. */
const char *tsdf_depth_encoding_name(tsdf_depth_encoding e);
/* Parses a wire name of len bytes (not NUL-terminated) into *out;
 * TSDF_EPROTO_KEY for anything else, TSDF_EINVAL for NULL arguments. */
int tsdf_depth_encoding_parse(const char *name, size_t len, tsdf_depth_encoding *out);
/* 1 when encoding e can carry samples of format f (png and rvl: u16 only). */
int tsdf_depth_encoding_allows(tsdf_depth_encoding e, tsdf_depth_format f);

/* A sensor is named either by a string or by a number on the wire. */
typedef struct {
    int is_id;   /* 1: id is valid; 0: name is valid */
    uint64_t id; /* default 0 (is_id = 1) */
    char name[TSDF_PROTO_MAX_SENSOR_NAME_LEN + 1];
} tsdf_proto_sensor;

/* frame and integrate: one depth image with its pose. */
typedef struct {
    tsdf_proto_sensor sensor;
    uint64_t seq;      /* sender's frame counter; default 0 */
    uint64_t stamp_ns; /* capture time, ns since any epoch the sender likes; default 0 */
    /* width, height, K, T_world_cam, depth_format, depth (unaligned, inside
     * the message), depth_scale, min/max depth, rgb (optional, inside the
     * message). Ready for tsdf_volume_integrate once the payload alignment
     * is taken care of (see the lifetimes note above). */
    tsdf_frame frame;
    /* "depth_encoding". TSDF_DEPTH_ENC_RAW (default): frame.depth holds the
     * samples. Any other: the samples are still compressed, so frame.depth
     * is NULL and frame.depth_size_bytes 0 (an engine handed such a frame
     * refuses it with TSDF_EINVAL rather than read compressed bytes as
     * depth), and depth_coded / depth_coded_bytes are the payload, inside
     * the message like every payload; tsdf_depth_decode turns it into
     * width x height samples of frame.depth_format. The decoder checks only
     * that the payload is not empty: whether it decodes is the receiver's
     * to find out (TSDF_EDEPTH_DECODE). The encoder writes depth_coded when
     * the encoding is not raw and ignores frame.depth then. */
    tsdf_depth_encoding depth_encoding;
    const void *depth_coded;
    size_t depth_coded_bytes;
    /* "ring_token" and "ring_offset" (PROTOCOL.md 6.10), integrate only:
     * has_ring 1 when the raw samples are not in the message but at
     * ring_offset of the shared ring the daemon gave ring_token for; then
     * frame.depth is NULL and frame.depth_size_bytes 0, and the receiver
     * finds the samples (width x height of depth_format). The encoder
     * writes the two keys instead of "depth" when has_ring is set. */
    int has_ring;
    uint64_t ring_token;
    uint64_t ring_offset;
    /* "ring_seq" (PROTOCOL.md 6.10, item 5): the sender's number for this
     * request, which the ring's fences compare; 0 = none (not written;
     * never fenced). */
    uint64_t ring_seq;
} tsdf_req_frame;

/* The most a raycast may shrink its image ("scale", PROTOCOL.md 6.2). */
#define TSDF_PROTO_MAX_RAYCAST_SCALE 8u

/* The longest ring socket path a ping reply carries (a Unix socket path:
 * sun_path less its terminating NUL). */
#define TSDF_PROTO_MAX_RING_SOCKET_LEN 107u

/* When a query runs relative to the frames queued for its map ("after",
 * PROTOCOL.md 6.9). */
typedef enum {
    TSDF_AFTER_INTEGRATED = 0, /* default: ahead of the frames still queued */
    TSDF_AFTER_QUEUED = 1,     /* after every frame queued before it arrived */
} tsdf_query_after;

typedef struct {
    uint32_t width, height; /* the camera's image; the reply's is width/scale x height/scale */
    tsdf_intrinsics K;
    float T_world_cam[16]; /* row-major camera-to-world */
    float min_depth_m;     /* default TSDF_PROTO_DEFAULT_MIN_DEPTH_M */
    float max_depth_m;     /* default TSDF_PROTO_DEFAULT_MAX_DEPTH_M */
    int want_rgb;          /* "rgb": true asks for colour; default 0 */
    /* "normals": 0 asks for depth alone; default 1. The encoder writes the
     * key only when it is 0, so a request for normals is what clients
     * before the key sent. */
    int want_normals;
    /* "scale": 1..TSDF_PROTO_MAX_RAYCAST_SCALE; the daemon renders
     * width/scale x height/scale pixels (rounded down, at least 1) with the
     * intrinsics scaled to match (tsdf_proto_raycast_scaled). Default 1,
     * written only when it is not. */
    uint32_t scale;
    tsdf_query_after after; /* "after"; written only when not the default */
    /* "ring_token" and "ring_offset" (PROTOCOL.md 6.10): has_ring 1 asks
     * for the image's arrays in the sender's shared ring from ring_offset
     * on (depth, then normals, then rgb, each as in the reply), and a
     * reply that only says where (tsdf_rep_raycast.in_ring). */
    int has_ring;
    uint64_t ring_token;
    uint64_t ring_offset;
    uint64_t ring_seq; /* "ring_seq", as tsdf_req_frame's */
} tsdf_req_raycast;

/* The image a raycast request asks the engine for: its size divided by
 * q->scale (rounded down) and the intrinsics of that coarser grid (focal
 * lengths divided by scale; principal point (c + 0.5) / scale - 0.5, so
 * that each coarse pixel centre is the centre of the scale x scale fine
 * pixels it stands for). */
void tsdf_proto_raycast_scaled(const tsdf_req_raycast *q, uint32_t *width, uint32_t *height,
                               tsdf_intrinsics *K);

/* The bytes of the reply to raycast request q (status 0): its payloads at
 * the scaled size, depth (4 bytes a pixel), normals (12) if asked for, rgb
 * (3) if asked for, plus a bound on the envelope and keys. The decoder
 * refuses a request whose reply would exceed TSDF_PROTO_MAX_MESSAGE_BYTES;
 * a daemon with a lower limit compares with its own. */
uint64_t tsdf_proto_raycast_reply_bytes(const tsdf_req_raycast *q);

/* The bytes of a raycast image of px pixels, its arrays one after the
 * other as a reply or a ring holds them: depth (4 a pixel), normals (12)
 * when normals, rgb (3) when rgb. The normals start px * 4 bytes in, the
 * rgb tsdf_proto_raycast_rgb_offset bytes in. */
uint64_t tsdf_proto_raycast_image_bytes(uint64_t px, int normals, int rgb);
uint64_t tsdf_proto_raycast_rgb_offset(uint64_t px, int normals);

/* tsdf_proto_raycast_image_bytes of the image request q asks for (its
 * scaled size, the arrays it wants). */
uint64_t tsdf_proto_raycast_request_image_bytes(const tsdf_req_raycast *q);

typedef struct {
    int use_box; /* 1 when "box" was given */
    tsdf_aabb box;
    uint64_t since_version; /* 0: whole map */
    /* "by_block": 1 asks for the mesh in one part per voxel block (see
     * tsdf_rep_mesh); default 0. The encoder writes the key only when it is
     * 1, so a request without it is what clients before it sent. */
    int by_block;
    tsdf_query_after after; /* "after"; written only when not the default */
} tsdf_req_mesh;

/* save and load: an optional path (empty: the daemon's snapshot file for the map). */
typedef struct {
    char path[TSDF_PROTO_MAX_PATH_LEN + 1];
} tsdf_req_path;

typedef struct {
    tsdf_msg_type type;
    uint64_t id; /* echoed in the reply; optional (0) for frame */
    /* The map the request works on; "default" when absent. Unused by maps and ping. */
    char map[TSDF_PROTO_MAX_NAME_LEN + 1];
    union {
        tsdf_req_frame frame; /* TSDF_MSG_FRAME and TSDF_MSG_INTEGRATE */
        tsdf_req_raycast raycast;
        tsdf_req_mesh mesh;
        tsdf_req_path path; /* TSDF_MSG_SAVE and TSDF_MSG_LOAD */
    } u;
} tsdf_request;

/* Zeroes *r and sets type, map "default", and the defaults of that type
 * (depth range 0.1..5.0 m, depth_scale 0.001, identity poses, sensor id 0). */
void tsdf_request_init(tsdf_request *r, tsdf_msg_type type);

/* ---- replies ------------------------------------------------------------ */

typedef struct {
    uint32_t width, height; /* the rendered image (the request's size divided by its scale) */
    const void *depth_m;    /* width*height float32 LE; NaN = no surface */
    /* width*height*3 float32 LE, world frame; NaN = no surface. NULL when
     * the reply has none (the request said "normals": false). */
    const void *normals;
    const uint8_t *rgb; /* optional width*height*3, or NULL */
    uint64_t version;   /* "version": the map's version the image shows; 0: not sent */
    /* The reply to a request with has_ring (PROTOCOL.md 6.10): in_ring 1
     * when the arrays are in the sender's ring from ring_offset on, not in
     * the message ("ring_offset", "ring_bytes"); then depth_m, normals and
     * rgb are NULL, and ring_normals / ring_rgb say which arrays follow
     * the depth there. The encoder writes the ring's keys when in_ring is
     * set and ignores the three pointers. */
    int in_ring;
    uint64_t ring_offset;
    int ring_normals, ring_rgb;
} tsdf_rep_raycast;

typedef struct {
    uint64_t version; /* the map's version the mesh was made at */
    uint64_t vertex_count;
    uint64_t triangle_count;
    const void *positions; /* 3 * vertex_count float32 LE, metres, world frame */
    const void *normals;   /* 3 * vertex_count float32 LE */
    const uint8_t *colors; /* optional 3 * vertex_count RGB8, or NULL */
    const void *indices;   /* 3 * triangle_count uint32 LE, each < vertex_count */
    /* The parts of a by_block mesh (the request's by_block; PROTOCOL.md
     * 6.3, and tsdf_mesh in tsdf_types.h for what a part is). has_blocks:
     * 1 when the reply carries them ("block_coords", "block_vertex_start",
     * "block_triangle_start", all three or none), also for 0 blocks. The
     * decoder checks that the starts begin at 0, never decrease and end at
     * vertex_count and triangle_count, and that every triangle's indices
     * lie in its own part's vertices. The encoder writes the starts of 0
     * blocks ([0]) itself when they are NULL, as the engine leaves them. */
    int has_blocks;
    uint64_t block_count;
    const void *block_coords;         /* 3 * block_count int32 LE block coordinates */
    const void *block_vertex_start;   /* block_count + 1 uint32 LE */
    const void *block_triangle_start; /* block_count + 1 uint32 LE */
    /* An incremental mesh (the request's since_version > 0): has_removed 1
     * when the reply carries "removed" and "full" (both or neither). */
    int has_removed;
    uint64_t removed_count;
    const void *removed_coords; /* 3 * removed_count int32 LE: the blocks gone since */
    int full;                   /* 1: the mesh is the whole map and replaces all the client holds */
} tsdf_rep_mesh;

typedef struct {
    tsdf_msg_type type; /* the request's type (TSDF_MSG_ERROR: it was unreadable) */
    uint64_t id;        /* the request's id (0 when unreadable) */
    int status;         /* TSDF_OK or a negative tsdf_errno */
    /* On error only (status != 0): the code's name ("BAD_POSE") and a message. */
    char error[32];
    char message[TSDF_PROTO_MAX_MESSAGE_LEN + 1];
    /* Valid when status == TSDF_OK, by type; reset and frame have none. */
    union {
        tsdf_rep_integrate integrate;
        tsdf_rep_raycast raycast;
        tsdf_rep_mesh mesh;
        tsdf_rep_stats stats;
        tsdf_rep_path path; /* TSDF_MSG_SAVE and TSDF_MSG_LOAD */
        tsdf_rep_maps maps;
        tsdf_rep_ping ping;
    } u;
    /* ping: the daemon's ring socket (PROTOCOL.md 6.8 and 6.10), "" when
     * it has none. Beside the union, not in tsdf_rep_ping, whose size is
     * part of libtsdf's ABI. */
    char ring_socket[TSDF_PROTO_MAX_RING_SOCKET_LEN + 1];
} tsdf_reply;

/* Zeroes *r and sets type, id and status TSDF_OK. */
void tsdf_reply_init(tsdf_reply *r, tsdf_msg_type type, uint64_t id);

/* Turns *r into an error reply: status, error = tsdf_errname(status), and
 * message (printf-style; NULL fmt: tsdf_strerror(status)). The formatted
 * message is made valid UTF-8 without control characters: each invalid or
 * truncated byte sequence and each control character becomes '?', so a
 * client's bytes passed through %s can never make the reply unreadable. */
void tsdf_reply_set_error(tsdf_reply *r, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- encoding ----------------------------------------------------------- */

/* Checks req with the rules the decoder applies to its bytes, on the
 * struct itself (nothing is encoded or decoded): the codes are those of
 * tsdf_proto_decode_request, plus TSDF_EINVAL for what no decoded request
 * can hold (a NULL payload, a string without its NUL, an unknown enum). */
int tsdf_proto_check_request(const tsdf_request *req);

/* Appends req as one msgpack message to out, after tsdf_proto_check_request
 * (so a client cannot send what the daemon would refuse). Payload pointers
 * are read, not kept. A raw depth payload is placed so that its first byte
 * lies at a multiple of TSDF_PROTO_PAYLOAD_ALIGN from the message's start
 * (an ignored "pad" key takes up the difference), so that a receiver whose
 * message starts aligned reads the samples in place. On error out->len is
 * unchanged. */
int tsdf_proto_encode_request(const tsdf_request *req, tsdf_buf *out);
#define TSDF_PROTO_PAYLOAD_ALIGN 16u

/* The most bytes tsdf_proto_encode_request can append for req (its
 * payloads plus a bound on everything else): size a fixed buffer with it. */
size_t tsdf_proto_request_bound(const tsdf_request *req);

/* Appends rep to out. An error reply (status != 0) carries only v, type, id,
 * status, error and message. The struct is checked, not the bytes decoded
 * again: TSDF_EINVAL for inconsistent payloads (NULL pointer with non-zero
 * counts) or a string that is not valid UTF-8 (no encoder ever writes one;
 * tsdf_reply_set_error repairs messages); for a mesh, TSDF_EBAD_SIZE for an
 * index or part that its decoder would refuse; TSDF_ETOO_LARGE,
 * TSDF_ENOMEM. */
int tsdf_proto_encode_reply(const tsdf_reply *rep, tsdf_buf *out);

/* The most bytes tsdf_proto_encode_reply can append for rep. */
size_t tsdf_proto_reply_bound(const tsdf_reply *rep);

/* ---- decoding ----------------------------------------------------------- */

/* Reads only the envelope of a request: version, type and id. Useful to
 * answer a request the full decoder refuses. *type and *id are set to what
 * could be read (TSDF_MSG_NONE / 0 otherwise) even when an error is returned
 * (a bad version too: the rule of PROTOCOL.md section 3). */
int tsdf_proto_peek(const void *data, size_t len, tsdf_msg_type *type, uint64_t *id);

/* Decodes and fully validates one request (including frame) from len bytes.
 * Returns TSDF_OK, or:
 *   TSDF_ETOO_LARGE     len > TSDF_PROTO_MAX_MESSAGE_BYTES, an image beyond
 *                       TSDF_MAX_IMAGE_DIM / TSDF_MAX_IMAGE_PIXELS, a name or
 *                       path too long, a map with too many entries, nesting
 *                       deeper than TSDF_PROTO_MAX_DEPTH
 *   TSDF_EFORMAT        not exactly one well-formed msgpack value, or the top
 *                       value is not a map, or trailing bytes
 *   TSDF_EVERSION       "v" is missing, not an unsigned integer, or not 1
 *   TSDF_EPROTO_TYPE    "type" unknown or a reply-only type
 *   TSDF_EPROTO_KEY     a required key is missing, a key has the wrong msgpack
 *                       type, a key appears twice, an unknown enum string
 *                       ("depth_format", "depth_encoding"), an encoding that
 *                       cannot carry the depth_format (png or rvl with f32)
 *   TSDF_EEMPTY_IMAGE   width or height is 0
 *   TSDF_EBAD_SIZE      a payload's length differs from width*height*bytes
 *                       (a compressed depth payload: when it is empty)
 *   TSDF_EBAD_INTRINSICS refused by tsdf_intrinsics_check (fx, fy <= 0, an
 *                       intrinsic not finite, a field of view beyond 170 degrees)
 *   TSDF_EBAD_POSE      T_world_cam not finite or not rigid (tsdf_pose_is_rigid)
 *   TSDF_EBAD_DEPTH_RANGE min/max depth or depth_scale invalid (as tsdf_frame_check)
 *   TSDF_EINVAL         a name with bad characters, a path that is not valid
 *                       UTF-8, an empty name or path, an inverted box, a
 *                       negative or non-finite number where a value must be
 *                       finite
 *   TSDF_ENOMEM         the msgpack zone could not be allocated
 * On success payload pointers in *out point into data (see lifetimes above).
 * On failure out->type and out->id hold what could be read (a known type
 * name and an unsigned id, also when "v" is bad), so the caller can still
 * reply to the right request; err (optional) says which key failed. */
int tsdf_proto_decode_request(const void *data, size_t len, tsdf_request *out,
                              tsdf_proto_error *err);

/* Decodes and validates one reply. Same codes as above; for an error reply
 * the call returns TSDF_OK and out->status holds the daemon's code. Payloads
 * are checked against their counts (depth == width*height*4, positions ==
 * vertex_count*12, indices == triangle_count*12 and every index <
 * vertex_count, a mesh's parts consistent with its counts, ...). */
int tsdf_proto_decode_reply(const void *data, size_t len, tsdf_reply *out, tsdf_proto_error *err);

/* ---- small helpers shared with the daemon ------------------------------ */

/* TSDF_OK if name is a valid map name of len bytes (1..TSDF_PROTO_MAX_NAME_LEN
 * of [A-Za-z0-9_.-], not starting with '.'); TSDF_ETOO_LARGE or TSDF_EINVAL. */
int tsdf_proto_check_name(const char *name, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_PROTO_H */

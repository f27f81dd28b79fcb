/*
 * proto_request.c - requests on the wire: tsdf_request's defaults, its
 * decoder (every key a request type knows, with its checks) and its encoder.
 */
#include "tsdf_proto.h"

#include <math.h>
#include <string.h>

#include "proto_check.h"
#include "proto_read.h"
#include "proto_write.h"
#include "tsdf_pose.h"

/* ---- defaults ----------------------------------------------------------- */

void tsdf_request_init(tsdf_request *r, tsdf_msg_type type)
{
    memset(r, 0, sizeof(*r));
    r->type = type;
    strcpy(r->map, TSDF_PROTO_DEFAULT_MAP);
    if (type == TSDF_MSG_FRAME || type == TSDF_MSG_INTEGRATE) {
        tsdf_req_frame *f = &r->u.frame;
        f->sensor.is_id = 1;
        f->frame.depth_format = TSDF_DEPTH_U16;
        f->frame.depth_scale = TSDF_PROTO_DEFAULT_DEPTH_SCALE;
        f->frame.min_depth_m = TSDF_PROTO_DEFAULT_MIN_DEPTH_M;
        f->frame.max_depth_m = TSDF_PROTO_DEFAULT_MAX_DEPTH_M;
        tsdf_pose_identity(f->frame.T_world_cam);
    } else if (type == TSDF_MSG_RAYCAST) {
        r->u.raycast.want_normals = 1;
        r->u.raycast.scale = 1;
        r->u.raycast.min_depth_m = TSDF_PROTO_DEFAULT_MIN_DEPTH_M;
        r->u.raycast.max_depth_m = TSDF_PROTO_DEFAULT_MAX_DEPTH_M;
        tsdf_pose_identity(r->u.raycast.T_world_cam);
    }
}

/* ---- decoding ----------------------------------------------------------- */

/* The intrinsics of a w x h image, checked by the engine's own test
 * (tsdf_intrinsics_check), so the codec and the engine agree on them. */
static int read_intrinsics(const proto_reader *r, uint32_t w, uint32_t h, tsdf_intrinsics *K)
{
    PROTO_TRY(proto_get_float(r, "fx", TSDF_EBAD_INTRINSICS, &K->fx, NULL));
    PROTO_TRY(proto_get_float(r, "fy", TSDF_EBAD_INTRINSICS, &K->fy, NULL));
    PROTO_TRY(proto_get_float(r, "cx", TSDF_EBAD_INTRINSICS, &K->cx, NULL));
    PROTO_TRY(proto_get_float(r, "cy", TSDF_EBAD_INTRINSICS, &K->cy, NULL));
    if (!(K->fx > 0.0f) || !(K->fy > 0.0f))
        return proto_fail(r->err, TSDF_EBAD_INTRINSICS, K->fx > 0.0f ? "fy" : "fx",
                          "focal lengths must be positive (fx %g, fy %g)", K->fx, K->fy);
    if (tsdf_intrinsics_check(K, w, h) != TSDF_OK)
        return proto_fail(r->err, TSDF_EBAD_INTRINSICS, "fx",
                          "intrinsics fx %g fy %g cx %g cy %g describe no real %ux%u camera (a "
                          "pixel ray more than %g degrees off the optical axis)",
                          K->fx, K->fy, K->cx, K->cy, w, h, TSDF_INTRINSICS_MAX_ANGLE_DEG);
    return TSDF_OK;
}

static int read_pose(const proto_reader *r, float T[16])
{
    double d[16];
    PROTO_TRY(proto_get_numbers(r, "T_world_cam", 16, d, NULL));
    for (int i = 0; i < 16; i++)
        T[i] = proto_to_float(d[i]);
    if (!tsdf_pose_is_rigid(T))
        return proto_fail(
            r->err, TSDF_EBAD_POSE, "T_world_cam",
            "T_world_cam is not a finite rigid transform (row-major, last row 0 0 0 1)");
    return TSDF_OK;
}

static int read_depth_range(const proto_reader *r, float *min_m, float *max_m)
{
    PROTO_TRY(proto_get_float(r, "min_depth", TSDF_EBAD_DEPTH_RANGE, min_m, &(int){0}));
    PROTO_TRY(proto_get_float(r, "max_depth", TSDF_EBAD_DEPTH_RANGE, max_m, &(int){0}));
    if (!(*min_m >= 0.0f) || !(*max_m > *min_m))
        return proto_fail(r->err, TSDF_EBAD_DEPTH_RANGE, "min_depth",
                          "depth range [%g, %g] m is invalid", *min_m, *max_m);
    return TSDF_OK;
}

static int read_map_name(const proto_reader *r, char *map)
{
    int present = 0;
    PROTO_TRY(proto_get_str(r, "map", map, TSDF_PROTO_MAX_NAME_LEN + 1, 0, &present));
    if (!present) {
        strcpy(map, TSDF_PROTO_DEFAULT_MAP);
        return TSDF_OK;
    }
    int rc = tsdf_proto_check_name(map, strlen(map));
    if (rc != TSDF_OK)
        return proto_fail(r->err, rc, "map",
                          "map: name \"%s\" is not 1..%u characters of "
                          "[A-Za-z0-9_.-] not starting with '.'",
                          map, TSDF_PROTO_MAX_NAME_LEN);
    return TSDF_OK;
}

static int read_path(const proto_reader *r, char *path)
{
    int present = 0;
    PROTO_TRY(proto_get_str(r, "path", path, TSDF_PROTO_MAX_PATH_LEN + 1, 0, &present));
    if (present && path[0] == '\0')
        return proto_fail(r->err, TSDF_EINVAL, "path", "path: empty (leave the key out instead)");
    return TSDF_OK;
}

/* "ring_token" and "ring_offset" of a frame or a raycast (PROTOCOL.md
 * 6.10): both or neither; *has 1 with both. "ring_seq", the sender's
 * number for the request that its fences compare (0 when absent), only
 * with them. */
static int read_ring_keys(const proto_reader *r, int *has, uint64_t *token, uint64_t *offset,
                          uint64_t *seq)
{
    int has_token = 0, has_offset = 0, has_seq = 0;
    PROTO_TRY(proto_get_uint(r, "ring_token", UINT64_MAX, token, &has_token));
    PROTO_TRY(proto_get_uint(r, "ring_offset", UINT64_MAX, offset, &has_offset));
    PROTO_TRY(proto_get_uint(r, "ring_seq", UINT64_MAX, seq, &has_seq));
    if (has_token != has_offset)
        return proto_fail(r->err, TSDF_EPROTO_KEY, has_token ? "ring_offset" : "ring_token",
                          "ring_token and ring_offset go together");
    if (has_seq && !has_token)
        return proto_fail(r->err, TSDF_EPROTO_KEY, "ring_seq",
                          "ring_seq: only with ring_token and ring_offset");
    *has = has_token;
    return TSDF_OK;
}

/* A frame's ring keys: with them the frame carries no "depth" and raw
 * samples only. */
static int read_ring(const proto_reader *r, tsdf_req_frame *f)
{
    int has = 0;
    const msgpack_object *o;
    PROTO_TRY(read_ring_keys(r, &has, &f->ring_token, &f->ring_offset, &f->ring_seq));
    if (!has)
        return TSDF_OK;
    if (f->depth_encoding != TSDF_DEPTH_ENC_RAW)
        return proto_fail(r->err, TSDF_EPROTO_KEY, "depth_encoding",
                          "depth_encoding: a frame in a shared ring carries raw samples");
    int s = proto_find(r, "depth", &o);
    if (s < 0)
        return s;
    if (s == 1)
        return proto_fail(r->err, TSDF_EPROTO_KEY, "depth",
                          "depth: a frame names its shared ring slot or carries its depth, "
                          "not both");
    f->has_ring = 1;
    return TSDF_OK;
}

static int read_frame(const proto_reader *r, tsdf_req_frame *f)
{
    tsdf_frame *fr = &f->frame;
    const msgpack_object *o;
    int s = proto_find(r, "sensor", &o);
    if (s < 0)
        return s;
    if (s == 1) {
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
            f->sensor.is_id = 1;
            f->sensor.id = o->via.u64;
        } else if (o->type == MSGPACK_OBJECT_STR) {
            int rc = proto_check_sensor_name(o->via.str.ptr, o->via.str.size);
            if (rc != TSDF_OK)
                return proto_fail(r->err, rc, "sensor",
                                  "sensor: name must be 1..%u printable characters without spaces",
                                  TSDF_PROTO_MAX_SENSOR_NAME_LEN);
            f->sensor.is_id = 0;
            memcpy(f->sensor.name, o->via.str.ptr, o->via.str.size);
            f->sensor.name[o->via.str.size] = '\0';
        } else {
            return proto_wrong_type(r, "sensor", "a string or an unsigned integer");
        }
    }
    int present = 0;
    PROTO_TRY(proto_get_uint(r, "seq", UINT64_MAX, &f->seq, &present));
    PROTO_TRY(proto_get_uint(r, "stamp_ns", UINT64_MAX, &f->stamp_ns, &present));
    PROTO_TRY(proto_read_size(r, &fr->width, &fr->height));
    PROTO_TRY(read_intrinsics(r, fr->width, fr->height, &fr->K));

    char fmt[8] = "u16";
    PROTO_TRY(proto_get_str(r, "depth_format", fmt, sizeof(fmt), 1, &present));
    if (strcmp(fmt, "u16") == 0)
        fr->depth_format = TSDF_DEPTH_U16;
    else if (strcmp(fmt, "f32") == 0)
        fr->depth_format = TSDF_DEPTH_F32;
    else
        return proto_fail(r->err, TSDF_EPROTO_KEY, "depth_format",
                          "depth_format: \"%s\" is neither \"u16\" nor \"f32\"", fmt);

    char enc[8] = "raw";
    PROTO_TRY(proto_get_str(r, "depth_encoding", enc, sizeof(enc), 1, &present));
    if (tsdf_depth_encoding_parse(enc, strlen(enc), &f->depth_encoding) != TSDF_OK)
        return proto_fail(r->err, TSDF_EPROTO_KEY, "depth_encoding",
                          "depth_encoding: \"%s\" is none of \"raw\", \"png\", \"zstd\", \"rvl\"",
                          enc);
    if (!tsdf_depth_encoding_allows(f->depth_encoding, fr->depth_format))
        return proto_fail(r->err, TSDF_EPROTO_KEY, "depth_encoding",
                          "depth_encoding: \"%s\" carries u16 samples only, not %s", enc, fmt);

    size_t pixels = (size_t)fr->width * fr->height;
    size_t bps = fr->depth_format == TSDF_DEPTH_U16 ? 2 : 4;
    const void *p;
    size_t n;
    PROTO_TRY(read_ring(r, f));
    if (!f->has_ring) {
        PROTO_TRY(proto_get_bin(r, "depth", &p, &n, NULL));
        if (f->depth_encoding != TSDF_DEPTH_ENC_RAW) {
            /* Only decoding can tell whether a compressed payload holds
             * the image; that is the receiver's step (tsdf_depth_decode),
             * which writes into a buffer of exactly pixels * bps bytes. */
            if (n == 0)
                return proto_fail(r->err, TSDF_EBAD_SIZE, "depth", "depth: empty %s payload", enc);
            f->depth_coded = p;
            f->depth_coded_bytes = n;
        } else if (n != pixels * bps) {
            return proto_fail(r->err, TSDF_EBAD_SIZE, "depth",
                              "depth: %zu bytes, expected %zu (%ux%u %s)", n, pixels * bps,
                              fr->width, fr->height, fmt);
        } else {
            fr->depth = p;
            fr->depth_size_bytes = n;
        }
    }

    if (fr->depth_format == TSDF_DEPTH_U16) {
        PROTO_TRY(
            proto_get_float(r, "depth_scale", TSDF_EBAD_DEPTH_RANGE, &fr->depth_scale, &present));
        if (!(fr->depth_scale > 0.0f))
            return proto_fail(r->err, TSDF_EBAD_DEPTH_RANGE, "depth_scale",
                              "depth_scale: %g m per unit must be positive", fr->depth_scale);
    }
    PROTO_TRY(read_depth_range(r, &fr->min_depth_m, &fr->max_depth_m));
    PROTO_TRY(read_pose(r, fr->T_world_cam));

    PROTO_TRY(proto_get_bin(r, "rgb", &p, &n, &present));
    if (present) {
        if (n != pixels * 3)
            return proto_fail(r->err, TSDF_EBAD_SIZE, "rgb",
                              "rgb: %zu bytes, expected %zu (%ux%u RGB8)", n, pixels * 3, fr->width,
                              fr->height);
        fr->rgb = p;
        fr->rgb_size_bytes = n;
    }
    return TSDF_OK;
}

/* "after": absent is the default, "integrated"; "queued" is the other. */
static int read_after(const proto_reader *r, tsdf_query_after *out)
{
    char v[16] = "integrated";
    int present = 0;
    PROTO_TRY(proto_get_str(r, "after", v, sizeof(v), 1, &present));
    for (int a = TSDF_AFTER_INTEGRATED; a <= TSDF_AFTER_QUEUED; a++) {
        if (strcmp(v, proto_after_name((tsdf_query_after)a)) == 0) {
            *out = (tsdf_query_after)a;
            return TSDF_OK;
        }
    }
    return proto_fail(r->err, TSDF_EPROTO_KEY, "after",
                      "after: \"%s\" is neither \"integrated\" nor \"queued\"", v);
}

static int read_raycast(const proto_reader *r, tsdf_req_raycast *q)
{
    PROTO_TRY(proto_read_size(r, &q->width, &q->height));
    PROTO_TRY(read_intrinsics(r, q->width, q->height, &q->K));
    PROTO_TRY(read_pose(r, q->T_world_cam));
    PROTO_TRY(read_depth_range(r, &q->min_depth_m, &q->max_depth_m));
    PROTO_TRY(proto_get_bool(r, "rgb", &q->want_rgb));
    PROTO_TRY(proto_get_bool(r, "normals", &q->want_normals));
    uint64_t scale = 1;
    int present = 0;
    PROTO_TRY(proto_get_uint(r, "scale", UINT64_MAX, &scale, &present));
    q->scale = scale <= TSDF_PROTO_MAX_RAYCAST_SCALE ? (uint32_t)scale : 0u;
    PROTO_TRY(read_after(r, &q->after));
    PROTO_TRY(read_ring_keys(r, &q->has_ring, &q->ring_token, &q->ring_offset, &q->ring_seq));
    /* Refuse a raycast whose reply could not be sent (depth, normals and
     * rgb as asked for, at the scaled size, plus room for the envelope). */
    const char *key = NULL;
    int rc = proto_check_raycast_shape(q, &key);
    if (rc == TSDF_EINVAL)
        return proto_fail(
            r->err, rc, key, "scale: %llu is not 1..%u, or leaves no pixel of a %ux%u image",
            (unsigned long long)scale, TSDF_PROTO_MAX_RAYCAST_SCALE, q->width, q->height);
    if (rc != TSDF_OK)
        return proto_fail(r->err, rc, key, "a %ux%u raycast reply would exceed %u bytes",
                          q->width / q->scale, q->height / q->scale, TSDF_PROTO_MAX_MESSAGE_BYTES);
    return TSDF_OK;
}

static int read_mesh_req(const proto_reader *r, tsdf_req_mesh *q)
{
    double b[6];
    int present = 0;
    PROTO_TRY(proto_get_numbers(r, "box", 6, b, &present));
    if (present) {
        for (int i = 0; i < 3; i++) {
            q->box.min[i] = proto_to_float(b[i]);
            q->box.max[i] = proto_to_float(b[i + 3]);
            if (!isfinite(q->box.min[i]) || !isfinite(q->box.max[i]) ||
                q->box.max[i] < q->box.min[i])
                return proto_fail(
                    r->err, TSDF_EINVAL, "box",
                    "box: must be finite [minx,miny,minz,maxx,maxy,maxz] with max >= min");
        }
        q->use_box = 1;
    }
    PROTO_TRY(proto_get_uint(r, "since_version", UINT64_MAX, &q->since_version, &present));
    PROTO_TRY(proto_get_bool(r, "by_block", &q->by_block));
    return read_after(r, &q->after);
}

static int decode_request(const proto_reader *r, tsdf_request *out)
{
    tsdf_msg_type type = TSDF_MSG_NONE;
    uint64_t id = 0;
    /* The envelope sets type and id to what it could read even when it
     * fails, so that the error reply can echo them. */
    int rc = proto_read_envelope(r, &type, &id, 0);
    out->type = type;
    out->id = id;
    if (rc != TSDF_OK)
        return rc;
    if (type == TSDF_MSG_ERROR)
        return proto_fail(r->err, TSDF_EPROTO_TYPE, "type", "\"error\" is a reply type");
    tsdf_request_init(out, type);
    out->id = id;
    /* Only a frame may leave the id out (the envelope read it otherwise). */
    const msgpack_object *id_obj;
    if (type != TSDF_MSG_FRAME && proto_find(r, "id", &id_obj) == 0)
        return proto_missing(r, "id");

    if (type != TSDF_MSG_MAPS && type != TSDF_MSG_PING)
        PROTO_TRY(read_map_name(r, out->map));
    switch (type) {
    case TSDF_MSG_FRAME:
        PROTO_TRY(read_frame(r, &out->u.frame));
        /* A pushed frame gets no reply, so its sender could not know when
         * the slot is free again. */
        if (out->u.frame.has_ring)
            return proto_fail(r->err, TSDF_EPROTO_KEY, "ring_token",
                              "ring_token: only integrate requests may name a shared ring slot");
        return TSDF_OK;
    case TSDF_MSG_INTEGRATE:
        return read_frame(r, &out->u.frame);
    case TSDF_MSG_RAYCAST:
        return read_raycast(r, &out->u.raycast);
    case TSDF_MSG_MESH:
        return read_mesh_req(r, &out->u.mesh);
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD:
        return read_path(r, out->u.path.path);
    default:
        return TSDF_OK;
    }
}

static int decode_request_body(const proto_reader *r, void *out)
{
    return decode_request(r, out);
}

int tsdf_proto_decode_request(const void *data, size_t len, tsdf_request *out,
                              tsdf_proto_error *err)
{
    return proto_decode_message(data, len, out, sizeof(*out), err, decode_request_body);
}

/* ---- encoding ----------------------------------------------------------- */

static void w_intrinsics(proto_writer *w, const tsdf_intrinsics *K)
{
    proto_w_float(w, "fx", K->fx);
    proto_w_float(w, "fy", K->fy);
    proto_w_float(w, "cx", K->cx);
    proto_w_float(w, "cy", K->cy);
}

/* The msgpack header of a bin of n bytes: bin 8, 16 or 32. */
static size_t bin_header_bytes(size_t n)
{
    return n <= UINT8_MAX ? 2u : n <= UINT16_MAX ? 3u : 5u;
}

/* Writes the raw depth samples so that their first byte lies at a multiple
 * of TSDF_PROTO_PAYLOAD_ALIGN from the message's start: first a "pad" bin
 * (key 4 bytes, bin 8 header 2, then 0..ALIGN-1 zero bytes) that every
 * decoder ignores as an unknown key, then "depth" (key 6 bytes, its bin
 * header, the samples). A daemon then integrates the samples in place
 * rather than copying them to an aligned buffer first. */
static void w_aligned_depth(proto_writer *w, const void *depth, size_t n)
{
    static const uint8_t zeros[TSDF_PROTO_PAYLOAD_ALIGN];
    size_t at = proto_w_offset(w) + 4u + 2u + 6u + bin_header_bytes(n);
    size_t pad =
        (TSDF_PROTO_PAYLOAD_ALIGN - at % TSDF_PROTO_PAYLOAD_ALIGN) % TSDF_PROTO_PAYLOAD_ALIGN;
    proto_w_bin(w, "pad", zeros, pad);
    proto_w_bin(w, "depth", depth, n);
}

static int encode_request_body(proto_writer *w, const void *src)
{
    const tsdf_request *q = src;
    int has_map = q->type != TSDF_MSG_MAPS && q->type != TSDF_MSG_PING;
    uint32_t n = 3 + (has_map ? 1 : 0);
    switch (q->type) {
    case TSDF_MSG_FRAME:
    case TSDF_MSG_INTEGRATE: {
        const tsdf_frame *f = &q->u.frame.frame;
        tsdf_depth_encoding enc = q->u.frame.depth_encoding;
        int coded = enc != TSDF_DEPTH_ENC_RAW;
        int u16 = f->depth_format == TSDF_DEPTH_U16;
        /* The samples take two keys: "depth" and its "pad" (a coded
         * payload is decoded into a buffer of its own anyway: only raw
         * samples are worth aligning), or "depth_encoding" and "depth", or
         * "ring_token" and "ring_offset" (and "ring_seq" when not 0). */
        const int ring_seq = q->u.frame.has_ring && q->u.frame.ring_seq != 0;
        n += 14 + (u16 ? 1 : 0) + (f->rgb ? 1 : 0) + 1 + (uint32_t)ring_seq;
        msgpack_pack_map(&w->pk, n);
        proto_w_envelope(w, q->type, q->id);
        proto_w_str(w, "map", q->map);
        if (q->u.frame.sensor.is_id) {
            proto_w_uint(w, "sensor", q->u.frame.sensor.id);
        } else {
            proto_w_str(w, "sensor", q->u.frame.sensor.name);
        }
        proto_w_uint(w, "seq", q->u.frame.seq);
        proto_w_uint(w, "stamp_ns", q->u.frame.stamp_ns);
        proto_w_uint(w, "width", f->width);
        proto_w_uint(w, "height", f->height);
        w_intrinsics(w, &f->K);
        proto_w_str(w, "depth_format", u16 ? "u16" : "f32");
        if (u16)
            proto_w_float(w, "depth_scale", f->depth_scale);
        proto_w_float(w, "min_depth", f->min_depth_m);
        proto_w_float(w, "max_depth", f->max_depth_m);
        proto_w_floats(w, "T_world_cam", f->T_world_cam, 16);
        if (f->rgb)
            proto_w_bin(w, "rgb", f->rgb, (size_t)f->width * f->height * 3u);
        /* Raw frames carry no depth_encoding key, so that daemons from
         * before it still read them. */
        if (q->u.frame.has_ring) {
            proto_w_uint(w, "ring_token", q->u.frame.ring_token);
            proto_w_uint(w, "ring_offset", q->u.frame.ring_offset);
            if (ring_seq)
                proto_w_uint(w, "ring_seq", q->u.frame.ring_seq);
        } else if (coded) {
            proto_w_str(w, "depth_encoding", tsdf_depth_encoding_name(enc));
            proto_w_bin(w, "depth", q->u.frame.depth_coded, q->u.frame.depth_coded_bytes);
        } else {
            w_aligned_depth(w, f->depth, (size_t)f->width * f->height * (u16 ? 2u : 4u));
        }
        return TSDF_OK;
    }
    case TSDF_MSG_RAYCAST: {
        const tsdf_req_raycast *r = &q->u.raycast;
        /* The keys after rgb only when they ask for something else than
         * their default: such a request is byte for byte what clients
         * before them sent, and daemons before them read it unchanged. */
        int no_normals = !r->want_normals, scaled = r->scale != 1;
        int after = r->after != TSDF_AFTER_INTEGRATED;
        int ring_keys = r->has_ring ? 2 + (r->ring_seq != 0) : 0;
        msgpack_pack_map(&w->pk, n + 10 + (uint32_t)(no_normals + scaled + after + ring_keys));
        proto_w_envelope(w, q->type, q->id);
        proto_w_str(w, "map", q->map);
        proto_w_uint(w, "width", r->width);
        proto_w_uint(w, "height", r->height);
        w_intrinsics(w, &r->K);
        proto_w_floats(w, "T_world_cam", r->T_world_cam, 16);
        proto_w_float(w, "min_depth", r->min_depth_m);
        proto_w_float(w, "max_depth", r->max_depth_m);
        proto_w_bool(w, "rgb", r->want_rgb);
        if (no_normals)
            proto_w_bool(w, "normals", 0);
        if (scaled)
            proto_w_uint(w, "scale", r->scale);
        if (after)
            proto_w_str(w, "after", proto_after_name(r->after));
        if (r->has_ring) {
            proto_w_uint(w, "ring_token", r->ring_token);
            proto_w_uint(w, "ring_offset", r->ring_offset);
            if (r->ring_seq != 0)
                proto_w_uint(w, "ring_seq", r->ring_seq);
        }
        return TSDF_OK;
    }
    case TSDF_MSG_MESH: {
        const tsdf_req_mesh *m = &q->u.mesh;
        int after = m->after != TSDF_AFTER_INTEGRATED;
        msgpack_pack_map(&w->pk,
                         n + 1 + (m->use_box ? 1 : 0) + (m->by_block ? 1 : 0) + (after ? 1 : 0));
        proto_w_envelope(w, q->type, q->id);
        proto_w_str(w, "map", q->map);
        if (m->use_box) {
            float b[6] = {m->box.min[0], m->box.min[1], m->box.min[2],
                          m->box.max[0], m->box.max[1], m->box.max[2]};
            proto_w_floats(w, "box", b, 6);
        }
        proto_w_uint(w, "since_version", m->since_version);
        /* Only when asked for: a whole mesh is requested with the bytes
         * clients sent before the key existed. */
        if (m->by_block)
            proto_w_bool(w, "by_block", 1);
        if (after)
            proto_w_str(w, "after", proto_after_name(m->after));
        return TSDF_OK;
    }
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD: {
        int has_path = q->u.path.path[0] != '\0';
        msgpack_pack_map(&w->pk, n + (has_path ? 1 : 0));
        proto_w_envelope(w, q->type, q->id);
        proto_w_str(w, "map", q->map);
        if (has_path)
            proto_w_str(w, "path", q->u.path.path);
        return TSDF_OK;
    }
    case TSDF_MSG_STATS:
    case TSDF_MSG_RESET:
    case TSDF_MSG_DELETE:
    case TSDF_MSG_MAPS:
    case TSDF_MSG_PING:
        msgpack_pack_map(&w->pk, n);
        proto_w_envelope(w, q->type, q->id);
        if (has_map)
            proto_w_str(w, "map", q->map);
        return TSDF_OK;
    default:
        return TSDF_EPROTO_TYPE;
    }
}

static int check_request(const void *src)
{
    return tsdf_proto_check_request(src);
}

int tsdf_proto_encode_request(const tsdf_request *req, tsdf_buf *out)
{
    return proto_encode(out, req, check_request, encode_request_body);
}

/* Everything of a request but its payloads: at most 24 keys of at most 16
 * bytes with values of at most 9 bytes, 16 floats of 5, a map name, a
 * sensor name, a path, and the pad of the depth. Far below this. */
#define REQUEST_OVERHEAD_BYTES (4096u + TSDF_PROTO_MAX_PATH_LEN)

size_t tsdf_proto_request_bound(const tsdf_request *req)
{
    size_t n = REQUEST_OVERHEAD_BYTES;
    if (req == NULL || (req->type != TSDF_MSG_FRAME && req->type != TSDF_MSG_INTEGRATE))
        return n;
    const tsdf_req_frame *f = &req->u.frame;
    size_t px = (size_t)f->frame.width * f->frame.height;
    /* Sizes beyond the image limits are refused before anything is
     * written; keep the sum from overflowing for them all the same. */
    if (f->frame.width > TSDF_MAX_IMAGE_DIM || f->frame.height > TSDF_MAX_IMAGE_DIM)
        return n;
    /* A frame in a shared ring: two integer keys, within the overhead. */
    if (!f->has_ring && f->depth_encoding != TSDF_DEPTH_ENC_RAW)
        n += f->depth_coded_bytes;
    else if (!f->has_ring)
        n += px * (f->frame.depth_format == TSDF_DEPTH_U16 ? 2u : 4u);
    if (f->frame.rgb != NULL)
        n += px * 3u;
    return n;
}

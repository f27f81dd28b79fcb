/*
 * proto_check.c - the rules of a request, on the struct: what the encoder
 * checks before it writes (tsdf_proto_check_request), with the decoder's
 * codes, and the few rules both halves share (proto_check.h).
 *
 * The encoder used to decode its own output to enforce the decoder's rules.
 * These checks read the struct once instead; tests/test_proto_consistency.c
 * holds the two to the same codes.
 */
#include "proto_check.h"

#include <math.h>
#include <string.h>

#include "proto_read.h"
#include "proto_utf8.h"
#include "proto_write.h"
#include "tsdf_pose.h"

/* One limit for every name a client gives: a sensor's was 64 bytes where a
 * map's is 63, for no reason. */
_Static_assert(TSDF_PROTO_MAX_SENSOR_NAME_LEN == TSDF_PROTO_MAX_NAME_LEN,
               "sensor and map names have the same limit");

int proto_check_sensor_name(const char *name, size_t len)
{
    if (len == 0)
        return TSDF_EINVAL;
    if (len > TSDF_PROTO_MAX_SENSOR_NAME_LEN)
        return TSDF_ETOO_LARGE;
    /* Sensor names are only labels in logs and stats: printable ASCII
     * without spaces is enough. */
    for (size_t i = 0; i < len; i++) {
        if (name[i] < 0x21 || name[i] > 0x7e)
            return TSDF_EINVAL;
    }
    return TSDF_OK;
}

const char *proto_after_name(tsdf_query_after a)
{
    switch (a) {
    case TSDF_AFTER_INTEGRATED:
        return "integrated";
    case TSDF_AFTER_QUEUED:
        return "queued";
    }
    return NULL;
}

void tsdf_proto_raycast_scaled(const tsdf_req_raycast *q, uint32_t *width, uint32_t *height,
                               tsdf_intrinsics *K)
{
    uint32_t s = q->scale >= 1 ? q->scale : 1;
    float fs = (float)s;
    *width = q->width / s;
    *height = q->height / s;
    K->fx = q->K.fx / fs;
    K->fy = q->K.fy / fs;
    K->cx = (q->K.cx + 0.5f) / fs - 0.5f;
    K->cy = (q->K.cy + 0.5f) / fs - 0.5f;
}

/* Room for the envelope and the keys of a raycast reply beside its bins. */
#define RAYCAST_REPLY_OVERHEAD 4096u

uint64_t tsdf_proto_raycast_image_bytes(uint64_t px, int normals, int rgb)
{
    return px * (4u + (normals ? 12u : 0u) + (rgb ? 3u : 0u));
}

uint64_t tsdf_proto_raycast_rgb_offset(uint64_t px, int normals)
{
    return px * (normals ? 16u : 4u);
}

uint64_t tsdf_proto_raycast_request_image_bytes(const tsdf_req_raycast *q)
{
    uint32_t w, h;
    tsdf_intrinsics K;
    tsdf_proto_raycast_scaled(q, &w, &h, &K);
    return tsdf_proto_raycast_image_bytes((uint64_t)w * h, q->want_normals, q->want_rgb);
}

uint64_t tsdf_proto_raycast_reply_bytes(const tsdf_req_raycast *q)
{
    return tsdf_proto_raycast_request_image_bytes(q) + RAYCAST_REPLY_OVERHEAD;
}

int proto_check_raycast_shape(const tsdf_req_raycast *q, const char **key)
{
    const char *k_unused;
    if (key == NULL)
        key = &k_unused;
    if (q->scale < 1 || q->scale > TSDF_PROTO_MAX_RAYCAST_SCALE || q->width / q->scale == 0 ||
        q->height / q->scale == 0) {
        *key = "scale";
        return TSDF_EINVAL;
    }
    if (tsdf_proto_raycast_reply_bytes(q) > TSDF_PROTO_MAX_MESSAGE_BYTES) {
        *key = "width";
        return TSDF_ETOO_LARGE;
    }
    return TSDF_OK;
}

/* ---- the struct checks of tsdf_proto_check_request ---------------------- */

static int terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static int finite4(const tsdf_intrinsics *K)
{
    return isfinite(K->fx) && isfinite(K->fy) && isfinite(K->cx) && isfinite(K->cy);
}

/* The decoder's read_intrinsics: finite, positive focal lengths, a real
 * camera for the image. */
static int check_intrinsics(const tsdf_intrinsics *K, uint32_t w, uint32_t h)
{
    if (!finite4(K) || !(K->fx > 0.0f) || !(K->fy > 0.0f))
        return TSDF_EBAD_INTRINSICS;
    return tsdf_intrinsics_check(K, w, h) == TSDF_OK ? TSDF_OK : TSDF_EBAD_INTRINSICS;
}

static int check_depth_range(float min_m, float max_m)
{
    if (!isfinite(min_m) || !isfinite(max_m) || !(min_m >= 0.0f) || !(max_m > min_m))
        return TSDF_EBAD_DEPTH_RANGE;
    return TSDF_OK;
}

static int check_pose(const float T[16])
{
    return tsdf_pose_is_rigid(T) ? TSDF_OK : TSDF_EBAD_POSE;
}

/* In the decoder's order (read_frame): sensor, size, intrinsics, formats,
 * payload, depth_scale, depth range, pose. */
static int check_frame(const tsdf_req_frame *q)
{
    const tsdf_frame *f = &q->frame;
    if (!q->sensor.is_id) {
        if (!terminated(q->sensor.name, sizeof(q->sensor.name)))
            return TSDF_EINVAL;
        PROTO_TRY(proto_check_sensor_name(q->sensor.name, strlen(q->sensor.name)));
    }
    PROTO_TRY(proto_check_image(f->width, f->height));
    PROTO_TRY(check_intrinsics(&f->K, f->width, f->height));
    if (f->depth_format != TSDF_DEPTH_U16 && f->depth_format != TSDF_DEPTH_F32)
        return TSDF_EINVAL;
    if (!tsdf_depth_encoding_allows(q->depth_encoding, f->depth_format))
        return (unsigned)q->depth_encoding < TSDF_DEPTH_ENC_COUNT ? TSDF_EPROTO_KEY : TSDF_EINVAL;
    /* The samples: raw in a shared ring's slot, coded, or raw in the
     * message. */
    const int coded = q->depth_encoding != TSDF_DEPTH_ENC_RAW;
    int missing;
    if (q->has_ring)
        missing = coded;
    else if (coded)
        missing = q->depth_coded == NULL || q->depth_coded_bytes == 0;
    else
        missing = f->depth == NULL;
    if (missing)
        return TSDF_EINVAL;
    if (f->depth_format == TSDF_DEPTH_U16 && !(isfinite(f->depth_scale) && f->depth_scale > 0.0f))
        return TSDF_EBAD_DEPTH_RANGE;
    PROTO_TRY(check_depth_range(f->min_depth_m, f->max_depth_m));
    return check_pose(f->T_world_cam);
}

static int check_raycast(const tsdf_req_raycast *q)
{
    PROTO_TRY(proto_check_image(q->width, q->height));
    PROTO_TRY(check_intrinsics(&q->K, q->width, q->height));
    PROTO_TRY(check_pose(q->T_world_cam));
    PROTO_TRY(check_depth_range(q->min_depth_m, q->max_depth_m));
    if (proto_after_name(q->after) == NULL)
        return TSDF_EINVAL;
    return proto_check_raycast_shape(q, NULL);
}

static int check_mesh(const tsdf_req_mesh *q)
{
    for (int i = 0; i < 3 && q->use_box; i++) {
        if (!isfinite(q->box.min[i]) || !isfinite(q->box.max[i]) || q->box.max[i] < q->box.min[i])
            return TSDF_EINVAL;
    }
    return proto_after_name(q->after) != NULL ? TSDF_OK : TSDF_EINVAL;
}

int tsdf_proto_check_request(const tsdf_request *q)
{
    if (q == NULL)
        return TSDF_EINVAL;
    if (q->type != TSDF_MSG_FRAME && !tsdf_msg_type_is_request(q->type))
        return TSDF_EPROTO_TYPE;
    if (q->type != TSDF_MSG_MAPS && q->type != TSDF_MSG_PING) {
        if (!terminated(q->map, sizeof(q->map)))
            return TSDF_EINVAL;
        PROTO_TRY(tsdf_proto_check_name(q->map, strlen(q->map)));
    }
    switch (q->type) {
    case TSDF_MSG_FRAME:
        if (q->u.frame.has_ring)
            return TSDF_EPROTO_KEY;
        return check_frame(&q->u.frame);
    case TSDF_MSG_INTEGRATE:
        return check_frame(&q->u.frame);
    case TSDF_MSG_RAYCAST:
        return check_raycast(&q->u.raycast);
    case TSDF_MSG_MESH:
        return check_mesh(&q->u.mesh);
    case TSDF_MSG_SAVE:
    case TSDF_MSG_LOAD:
        /* An empty path is the key left out; any other must be UTF-8. */
        if (!terminated(q->u.path.path, sizeof(q->u.path.path)))
            return TSDF_EINVAL;
        return proto_utf8_valid(q->u.path.path, strlen(q->u.path.path)) ? TSDF_OK : TSDF_EINVAL;
    default:
        return TSDF_OK;
    }
}

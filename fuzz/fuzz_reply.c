/*
 * fuzz_reply.c - libFuzzer target: the reply decoder
 * (tsdf_proto_decode_reply), which the client library runs on every byte a
 * daemon (or anything listening at its address) sends back.
 *
 * Beyond "no crash" it checks that every code is a known one, that the
 * error detail is a terminated string, that payloads point inside the
 * input with the sizes their counts promise (mesh indices below
 * vertex_count), and that a decoded reply is one the encoder accepts and
 * that survives a round trip unchanged: decode(encode(decode(x))) ==
 * decode(x), and the second encoding is byte-identical to the first.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "tsdf_proto.h"

/* Static: a reply is about 30 KiB (the maps and stats arrays). */
static tsdf_reply g_rep, g_again;

static int inside(const void *p, size_t n, const uint8_t *data, size_t size)
{
    const uint8_t *q = p;
    return q >= data && n <= size && q - data <= (ptrdiff_t)(size - n);
}

/* One payload: inside the message when there is one, NULL when the count
 * is 0 and nothing was sent; returns it and clears the struct's pointer. */
static const void *take(const void **p, size_t n, const uint8_t *data, size_t size)
{
    const void *q = *p;
    if (q != NULL)
        FUZZ_CHECK(inside(q, n, data, size));
    *p = NULL;
    return q;
}

typedef struct {
    const void *p[4];
    size_t n[4];
} payloads;

/* Checks the payloads of an OK reply, moves them into *out and clears the
 * pointers in *r, so that two decodes of different buffers compare equal
 * with memcmp when their content is. */
static void take_payloads(tsdf_reply *r, const uint8_t *data, size_t size, payloads *out)
{
    memset(out, 0, sizeof *out);
    if (r->status != TSDF_OK)
        return;
    if (r->type == TSDF_MSG_RAYCAST) {
        tsdf_rep_raycast *q = &r->u.raycast;
        size_t px = (size_t)q->width * q->height;
        FUZZ_CHECK(q->depth_m != NULL && q->normals != NULL);
        out->n[0] = px * 4;
        out->n[1] = px * 12;
        out->n[2] = q->rgb ? px * 3 : 0;
        out->p[0] = take(&q->depth_m, out->n[0], data, size);
        out->p[1] = take(&q->normals, out->n[1], data, size);
        out->p[2] = take((const void **)&q->rgb, out->n[2], data, size);
    } else if (r->type == TSDF_MSG_MESH) {
        tsdf_rep_mesh *q = &r->u.mesh;
        out->n[0] = out->n[1] = (size_t)q->vertex_count * 12;
        out->n[2] = q->colors ? (size_t)q->vertex_count * 3 : 0;
        out->n[3] = (size_t)q->triangle_count * 12;
        const uint8_t *idx = q->indices;
        for (uint64_t i = 0; i < q->triangle_count * 3; i++) {
            uint32_t v;
            memcpy(&v, idx + 4 * i, 4);
            FUZZ_CHECK(v < q->vertex_count);
        }
        out->p[0] = take(&q->positions, out->n[0], data, size);
        out->p[1] = take(&q->normals, out->n[1], data, size);
        out->p[2] = take((const void **)&q->colors, out->n[2], data, size);
        out->p[3] = take(&q->indices, out->n[3], data, size);
    }
}

static int payloads_equal(const payloads *a, const payloads *b)
{
    for (int i = 0; i < 4; i++) {
        if (a->n[i] != b->n[i] || (a->p[i] == NULL) != (b->p[i] == NULL))
            return 0;
        if (a->n[i] > 0 && memcmp(a->p[i], b->p[i], a->n[i]) != 0)
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tsdf_proto_error err;
    int rc = tsdf_proto_decode_reply(data, size, &g_rep, &err);
    if (fuzz_check_result(rc, err.key, sizeof err.key, err.message, sizeof err.message))
        return 0;
    FUZZ_CHECK(g_rep.type >= TSDF_MSG_INTEGRATE && g_rep.type <= TSDF_MSG_ERROR);
    FUZZ_CHECK(g_rep.status <= 0);
    FUZZ_CHECK(g_rep.type != TSDF_MSG_ERROR || g_rep.status != TSDF_OK);
    FUZZ_CHECK(memchr(g_rep.error, '\0', sizeof g_rep.error) != NULL);
    FUZZ_CHECK(memchr(g_rep.message, '\0', sizeof g_rep.message) != NULL);
    if (g_rep.status == TSDF_OK && g_rep.type == TSDF_MSG_STATS) {
        FUZZ_CHECK(g_rep.u.stats.extra_count <= TSDF_PROTO_MAX_STATS_EXTRA);
        FUZZ_CHECK(g_rep.u.stats.timeline_count <= TSDF_PROTO_MAX_TIMELINE);
    }
    if (g_rep.status == TSDF_OK && g_rep.type == TSDF_MSG_MAPS)
        FUZZ_CHECK(g_rep.u.maps.count <= TSDF_PROTO_MAX_MAPS);

    tsdf_buf first, second;
    tsdf_buf_init(&first);
    tsdf_buf_init(&second);
    /* A reply the client accepts is one the daemon could have sent. */
    FUZZ_CHECK(tsdf_proto_encode_reply(&g_rep, &first) == TSDF_OK);
    FUZZ_CHECK(tsdf_proto_decode_reply(first.data, first.len, &g_again, &err) == TSDF_OK);
    FUZZ_CHECK(tsdf_proto_encode_reply(&g_again, &second) == TSDF_OK);
    FUZZ_CHECK(second.len == first.len && memcmp(second.data, first.data, first.len) == 0);

    payloads a, b;
    take_payloads(&g_rep, data, size, &a);
    take_payloads(&g_again, first.data, first.len, &b);
    FUZZ_CHECK(payloads_equal(&a, &b));
    FUZZ_CHECK(memcmp(&g_rep, &g_again, sizeof g_rep) == 0);
    tsdf_buf_fini(&first);
    tsdf_buf_fini(&second);
    return 0;
}

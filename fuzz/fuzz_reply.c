/*
 * fuzz_reply.c - libFuzzer target: the reply decoder
 * (tsdf_proto_decode_reply), which the client library runs on every byte a
 * daemon (or anything listening at its address) sends back.
 *
 * Beyond "no crash" it checks that every code is a known one, that the
 * error detail is a terminated string, that payloads point inside the
 * input with the sizes their counts promise (mesh indices below
 * vertex_count, and inside their own part's vertices for a by_block mesh),
 * and that a decoded reply is one the encoder accepts and
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

#define MAX_PAYLOADS 8

typedef struct {
    const void *p[MAX_PAYLOADS];
    size_t n[MAX_PAYLOADS];
} payloads;

static uint32_t u32_at(const void *p, uint64_t i)
{
    uint32_t v;
    memcpy(&v, (const uint8_t *)p + 4 * i, 4);
    return v;
}

/* The parts of a by_block mesh: starts from 0 to the counts, never
 * decreasing, and every triangle on its own part's vertices, which is what
 * lets a client replace one part without touching the others. */
static void check_parts(const tsdf_rep_mesh *q)
{
    FUZZ_CHECK(q->block_vertex_start != NULL && q->block_triangle_start != NULL);
    FUZZ_CHECK(q->block_count == 0 || q->block_coords != NULL);
    FUZZ_CHECK(u32_at(q->block_vertex_start, 0) == 0 && u32_at(q->block_triangle_start, 0) == 0);
    FUZZ_CHECK(u32_at(q->block_vertex_start, q->block_count) == q->vertex_count);
    FUZZ_CHECK(u32_at(q->block_triangle_start, q->block_count) == q->triangle_count);
    for (uint64_t b = 0; b < q->block_count; b++) {
        uint32_t v0 = u32_at(q->block_vertex_start, b), v1 = u32_at(q->block_vertex_start, b + 1);
        uint32_t t0 = u32_at(q->block_triangle_start, b);
        uint32_t t1 = u32_at(q->block_triangle_start, b + 1);
        FUZZ_CHECK(v0 <= v1 && t0 <= t1);
        for (uint64_t i = 3 * (uint64_t)t0; i < 3 * (uint64_t)t1; i++) {
            uint32_t v = u32_at(q->indices, i);
            FUZZ_CHECK(v >= v0 && v < v1);
        }
    }
}

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
        /* Depth always; normals only when the request asked for them, and
         * then of the same size. */
        FUZZ_CHECK(q->depth_m != NULL);
        out->n[0] = px * 4;
        out->n[1] = q->normals ? px * 12 : 0;
        out->n[2] = q->rgb ? px * 3 : 0;
        out->p[0] = take(&q->depth_m, out->n[0], data, size);
        out->p[1] = take(&q->normals, out->n[1], data, size);
        out->p[2] = take((const void **)&q->rgb, out->n[2], data, size);
    } else if (r->type == TSDF_MSG_MESH) {
        tsdf_rep_mesh *q = &r->u.mesh;
        out->n[0] = out->n[1] = (size_t)q->vertex_count * 12;
        out->n[2] = q->colors ? (size_t)q->vertex_count * 3 : 0;
        out->n[3] = (size_t)q->triangle_count * 12;
        for (uint64_t i = 0; i < q->triangle_count * 3; i++)
            FUZZ_CHECK(u32_at(q->indices, i) < q->vertex_count);
        if (q->has_blocks)
            check_parts(q);
        else
            FUZZ_CHECK(q->block_count == 0 && q->block_coords == NULL &&
                       q->block_vertex_start == NULL && q->block_triangle_start == NULL);
        FUZZ_CHECK(q->has_removed ||
                   (q->removed_count == 0 && q->removed_coords == NULL && q->full == 0));
        FUZZ_CHECK(q->full == 0 || q->full == 1);
        out->n[4] = (size_t)q->block_count * 12;
        out->n[5] = out->n[6] = q->has_blocks ? ((size_t)q->block_count + 1) * 4 : 0;
        out->n[7] = (size_t)q->removed_count * 12;
        out->p[0] = take(&q->positions, out->n[0], data, size);
        out->p[1] = take(&q->normals, out->n[1], data, size);
        out->p[2] = take((const void **)&q->colors, out->n[2], data, size);
        out->p[3] = take(&q->indices, out->n[3], data, size);
        out->p[4] = take(&q->block_coords, out->n[4], data, size);
        out->p[5] = take(&q->block_vertex_start, out->n[5], data, size);
        out->p[6] = take(&q->block_triangle_start, out->n[6], data, size);
        out->p[7] = take(&q->removed_coords, out->n[7], data, size);
    }
}

static int payloads_equal(const payloads *a, const payloads *b)
{
    for (int i = 0; i < MAX_PAYLOADS; i++) {
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

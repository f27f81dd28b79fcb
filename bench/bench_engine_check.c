/*
 * bench_engine_check.c - volume checksums and incremental-mesh comparison
 * for bench_engine; see bench_engine_check.h.
 */
#include "bench_engine_check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tsdf_math.h"

#define FNV_PRIME 0x100000001b3ull
#define BENCH_POS_TOL_M 1e-5

uint64_t bench_fnv1a(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

uint64_t bench_mesh_checksum(const tsdf_mesh *m)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < m->vertex_count; i++) {
        uint64_t h = bench_fnv1a(BENCH_FNV_OFFSET, &m->positions[3 * i], 3 * sizeof(float));
        sum += bench_fnv1a(h, &m->normals[3 * i], 3 * sizeof(float));
    }
    for (size_t t = 0; t < m->triangle_count; t++) {
        uint64_t h = BENCH_FNV_OFFSET;
        for (int k = 0; k < 3; k++)
            h = bench_fnv1a(h, &m->positions[3 * (size_t)m->indices[3 * t + (size_t)k]],
                            3 * sizeof(float));
        sum += h;
    }
    return sum;
}

int bench_digest_volume(tsdf_volume *v, bench_digest *d)
{
    tsdf_block_set s;
    tsdf_block_set_init(&s);
    memset(d, 0, sizeof *d);
    int rc = tsdf_volume_export_blocks(v, &s);
    if (rc != TSDF_OK)
        return rc;
    size_t geom = tsdf_block_set_geom_bytes(&s);
    size_t rgb = s.rgb ? s.count * TSDF_BLOCK_VOXELS * 3 : 0;
    uint64_t h = BENCH_FNV_OFFSET;
    if (s.count) {
        h = bench_fnv1a(h, s.coords, 3 * s.count * sizeof *s.coords);
        h = bench_fnv1a(h, s.geom, geom);
        if (rgb)
            h = bench_fnv1a(h, s.rgb, rgb);
        d->block_bytes = (geom + rgb) / s.count;
    }
    d->blocks = s.count;
    d->hash = h;
    tsdf_block_set_fini(&s);
    return TSDF_OK;
}

int bench_digest_equal(const bench_digest *a, const bench_digest *b)
{
    return a->blocks == b->blocks && a->hash == b->hash && a->block_bytes == b->block_bytes;
}

int bench_check_digest(tsdf_volume *v, const bench_digest *ref, const char *what, uint32_t frames)
{
    bench_digest d;
    int rc = bench_digest_volume(v, &d);
    if (rc != TSDF_OK) {
        fprintf(stderr, "bench_engine: %s: exporting blocks: %s\n", what, tsdf_strerror(rc));
        return 2;
    }
    printf("check: %s vs synced after %u frames: %zu vs %zu blocks, checksum %016llx vs %016llx",
           what, frames, d.blocks, ref->blocks, (unsigned long long)d.hash,
           (unsigned long long)ref->hash);
    if (!bench_digest_equal(&d, ref)) {
        printf(" -> FAIL\n");
        return 1;
    }
    return 0;
}

static uint64_t key_at(const int32_t *coords, size_t i)
{
    return tsdf_block_key(coords[3 * i], coords[3 * i + 1], coords[3 * i + 2]);
}

/* The sum of every coordinate of part p's vertices, in metres. */
static double part_pos_sum(const tsdf_mesh *m, size_t p)
{
    double sum = 0.0;
    for (size_t i = 3 * (size_t)m->block_vertex_start[p];
         i < 3 * (size_t)m->block_vertex_start[p + 1]; i++)
        sum += m->positions[i];
    return sum;
}

size_t bench_compare_parts(const tsdf_mesh *inc, const tsdf_mesh *whole, const int32_t *changed,
                           size_t nchanged, bench_parts_diff *out)
{
    memset(out, 0, sizeof *out);
    out->parts = inc->block_count;
    out->triangles = inc->triangle_count;
    size_t j = 0;
    for (size_t p = 0; p < inc->block_count; p++) {
        uint64_t key = key_at(inc->block_coords, p);
        while (j < whole->block_count && key_at(whole->block_coords, j) < key)
            j++;
        if (j == whole->block_count || key_at(whole->block_coords, j) != key) {
            out->missing++;
            continue;
        }
        uint32_t tri_a = inc->block_triangle_start[p + 1] - inc->block_triangle_start[p];
        uint32_t tri_b = whole->block_triangle_start[j + 1] - whole->block_triangle_start[j];
        uint32_t vert_a = inc->block_vertex_start[p + 1] - inc->block_vertex_start[p];
        uint32_t vert_b = whole->block_vertex_start[j + 1] - whole->block_vertex_start[j];
        double d = fabs(part_pos_sum(inc, p) - part_pos_sum(whole, j));
        if (d > out->max_pos_diff || isnan(d))
            out->max_pos_diff = d;
        if (tri_a != tri_b || vert_a != vert_b || !(d <= BENCH_POS_TOL_M * (1.0 + vert_a)))
            out->differ++;
    }
    j = 0;
    for (size_t c = 0; c < nchanged; c++) {
        uint64_t key = key_at(changed, c);
        while (j < inc->block_count && key_at(inc->block_coords, j) < key)
            j++;
        if (j == inc->block_count || key_at(inc->block_coords, j) != key)
            out->uncovered++;
    }
    return out->missing + out->differ + out->uncovered;
}

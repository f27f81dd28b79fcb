/*
 * cpu_ray_range.c - the depth range of the blocks per image tile (see
 * cpu_ray_range.h).
 *
 * A ray's point at parameter z has camera depth z (its direction's camera
 * z is 1), so the ray is inside a block only at depths between the
 * block's nearest and farthest corner, and only where the pixel lies in
 * the bounding box of the corners' projections (a convex block in front of
 * the camera projects into the hull of its corners). The march computes
 * points and blocks in float; the box is grown by a hundredth of a block
 * and a pixel each way, which covers that rounding many times over. A
 * block that reaches within TSDF_RAY_RANGE_NEAR_M of the camera plane has
 * no bounded projection: it covers every tile, from depth 0.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ray_range.h"
#include "tsdf_math.h"

#define NEAR_PLANE_M 1e-3f
/* Blocks per chunk of the build. */
#define RANGE_BLOCKS 256

void cpu_ray_range_init(cpu_ray_range *r)
{
    memset(r, 0, sizeof(*r));
}

void cpu_ray_range_fini(cpu_ray_range *r)
{
    free(r->near_m);
    free(r->part);
    cpu_ray_range_init(r);
}

typedef struct {
    cpu_ray_range *r;
    const cpu_volume *v;
    const tsdf_raycast_params *p;
    float T_cam_world[16];
} range_job;

static void cover(float *near, float *far, size_t t, float z0, float z1)
{
    if (z0 < near[t])
        near[t] = z0;
    if (z1 > far[t])
        far[t] = z1;
}

/* Pool slots [b, e) into this worker's part. */
static int range_blocks(void *arg, size_t b, size_t e, unsigned worker)
{
    const range_job *j = arg;
    const cpu_ray_range *r = j->r;
    const cpu_store *st = &j->v->store;
    const tsdf_intrinsics *K = &j->p->K;
    const size_t ntiles = (size_t)r->tiles_x * r->tiles_y;
    float *near = r->part + 2 * ntiles * worker, *far = near + ntiles;
    const float block_m = (float)TSDF_BLOCK_DIM * j->v->params.voxel_size_m;
    const float grow = 0.01f * block_m;

    for (size_t i = b; i < e; i++) {
        int32_t c[3];
        float z0 = INFINITY, z1 = -INFINITY, u0 = INFINITY, u1 = -INFINITY, v0 = INFINITY,
              v1 = -INFINITY;
        if (st->keys[i] == TSDF_KEY_EMPTY)
            continue;
        tsdf_block_key_unpack(st->keys[i], &c[0], &c[1], &c[2]);
        for (int k = 0; k < 8; k++) {
            float w[3], pc[3];
            for (int a = 0; a < 3; a++)
                w[a] = (k >> a & 1) ? (float)(c[a] + 1) * block_m + grow
                                    : (float)c[a] * block_m - grow;
            tsdf_transform_point(j->T_cam_world, w, pc);
            z0 = fminf(z0, pc[2]);
            z1 = fmaxf(z1, pc[2]);
            if (pc[2] > NEAR_PLANE_M) {
                float u = K->fx * pc[0] / pc[2] + K->cx, vv = K->fy * pc[1] / pc[2] + K->cy;
                u0 = fminf(u0, u);
                u1 = fmaxf(u1, u);
                v0 = fminf(v0, vv);
                v1 = fmaxf(v1, vv);
            }
        }
        if (!(z1 > 0.0f))
            continue; /* behind the camera */
        if (!(z0 > NEAR_PLANE_M)) {
            for (size_t t = 0; t < ntiles; t++)
                cover(near, far, t, 0.0f, z1);
            continue;
        }
        /* Pixel centres are integers: the tiles of the pixels within a
         * pixel of the box. */
        float fu0 = floorf(u0) - 1.0f, fu1 = ceilf(u1) + 1.0f;
        float fv0 = floorf(v0) - 1.0f, fv1 = ceilf(v1) + 1.0f;
        if (fu1 < 0.0f || fv1 < 0.0f || fu0 >= (float)j->p->width || fv0 >= (float)j->p->height)
            continue;
        uint32_t tx0 = fu0 > 0.0f ? (uint32_t)fu0 / CPU_RAY_TILE : 0;
        uint32_t ty0 = fv0 > 0.0f ? (uint32_t)fv0 / CPU_RAY_TILE : 0;
        uint32_t tx1 =
            fu1 < (float)(j->p->width - 1) ? (uint32_t)fu1 / CPU_RAY_TILE : r->tiles_x - 1;
        uint32_t ty1 =
            fv1 < (float)(j->p->height - 1) ? (uint32_t)fv1 / CPU_RAY_TILE : r->tiles_y - 1;
        for (uint32_t ty = ty0; ty <= ty1; ty++)
            for (uint32_t tx = tx0; tx <= tx1; tx++)
                cover(near, far, (size_t)ty * r->tiles_x + tx, z0, z1);
    }
    return TSDF_OK;
}

int cpu_ray_range_build(cpu_ray_range *r, cpu_volume *v, const tsdf_raycast_params *p)
{
    const uint32_t tx = (p->width + CPU_RAY_TILE - 1) / CPU_RAY_TILE;
    const uint32_t ty = (p->height + CPU_RAY_TILE - 1) / CPU_RAY_TILE;
    const size_t ntiles = (size_t)tx * ty;
    const unsigned parts = cpu_pool_threads(v->pool);
    range_job j;
    int rc;

    cpu_ray_range_fini(r);
    r->tiles_x = tx;
    r->tiles_y = ty;
    r->parts = parts;
    r->near_m = malloc(2 * ntiles * sizeof(float));
    r->part = malloc(2 * ntiles * parts * sizeof(float));
    if (r->near_m == NULL || r->part == NULL) {
        cpu_ray_range_fini(r);
        return TSDF_ENOMEM;
    }
    r->far_m = r->near_m + ntiles;
    for (size_t i = 0; i < ntiles * parts; i++) {
        size_t w = i / ntiles, t = i % ntiles;
        r->part[2 * ntiles * w + t] = INFINITY;
        r->part[2 * ntiles * w + ntiles + t] = -INFINITY;
    }
    j.r = r;
    j.v = v;
    j.p = p;
    tsdf_rigid_inverse(p->T_world_cam, j.T_cam_world);
    if ((rc = cpu_pool_run(v->pool, v->store.used, RANGE_BLOCKS, range_blocks, &j)) != TSDF_OK) {
        cpu_ray_range_fini(r);
        return rc;
    }
    for (size_t t = 0; t < ntiles; t++) {
        float n = INFINITY, f = -INFINITY;
        for (unsigned w = 0; w < parts; w++) {
            n = fminf(n, r->part[2 * ntiles * w + t]);
            f = fmaxf(f, r->part[2 * ntiles * w + ntiles + t]);
        }
        r->near_m[t] = n;
        r->far_m[t] = f;
    }
    return TSDF_OK;
}

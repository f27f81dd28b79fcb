/*
 * cpu_raycast.c - the CPU raycast: per pixel, the march of
 * tsdf_raycast_march.h (shared with the CUDA kernel), with blocks found in
 * the CPU store's hash table, rows spread over the volume's pool.
 *
 * The fast path (cpu_raycast) gives the reference march's answer without
 * marching where the reference only skips empty space: per 8x8 tile the
 * depths where the volume's blocks can be (tsdf_raycast_range.h), then per
 * pixel tsdf_ray_pixel_ranged, the code the CUDA kernel runs (see there
 * and tests/test_ray_fast.c). cpu_raycast_reference is the plain march,
 * for that test.
 */
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include "cpu_backend.h"
#include "tsdf_raycast_range.h"
#include "tsdf_math.h"

/* A worker's block cache has 2^RAY_CACHE_BITS entries. */
#define RAY_CACHE_BITS 9
#define RAY_CACHE_SLOTS (1u << RAY_CACHE_BITS)

/* A worker's cache of the store's answers, in front of its hash table: a
 * ray's cells that straddle blocks, its normal's six samples and the rays
 * after it ask for the same few blocks over and over, and the shared
 * march's one-entry cache (tsdf_ray_cache) keeps only the last. Direct
 * mapped; it keeps "not allocated" answers too, which empty-space skips
 * ask for. The store does not change during a raycast, so an entry never
 * goes stale within one; each raycast starts with an empty cache. It only
 * saves lookups: the same blocks, the same result. */
typedef struct {
    const cpu_volume *v;
    uint64_t key[RAY_CACHE_SLOTS]; /* TSDF_KEY_EMPTY: a free entry */
    int32_t blk[RAY_CACHE_SLOTS];
} ray_source;

#define TSDF_RAY_SOURCE ray_source *
/* The march's functions inlined into the pixel loop, as nvcc does with
 * its own: GCC left the gather, the sample and the block lookup as calls,
 * and inlined the 7-Scenes raycast took one core 25 % to 40 % less time
 * (noisy VM, several runs; bench/RESULTS.md). CPU only: the CUDA side's
 * macros are untouched, and so is its code. */
#undef TSDF_LOOKUP_FN
#define TSDF_LOOKUP_FN static inline __attribute__((always_inline))
#include "tsdf_raycast_march.h"

/* Rows per chunk of the raycast job. */
#define RAY_ROWS 4

static void ray_source_init(ray_source *s, const cpu_volume *v)
{
    s->v = v;
    for (uint32_t i = 0; i < RAY_CACHE_SLOTS; i++)
        s->key[i] = TSDF_KEY_EMPTY;
}

static int32_t tsdf_ray_source_block(const tsdf_ray_volume *vol, int32_t bx, int32_t by, int32_t bz)
{
    ray_source *s = vol->src;
    if (!tsdf_block_coord_valid(bx, by, bz))
        return -1;
    const uint64_t key = tsdf_block_key(bx, by, bz);
    /* The top bits of a multiplicative hash: neighbouring blocks, whose
     * keys differ in their low bits per axis, land in different entries. */
    const uint32_t e = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - RAY_CACHE_BITS));
    if (s->key[e] != key) {
        s->key[e] = key;
        s->blk[e] = cpu_volume_block(s->v, bx, by, bz);
    }
    return s->blk[e];
}

typedef struct {
    tsdf_ray_volume vol;
    ray_source *sources; /* one per worker of the pool */
    const tsdf_raycast_params *p;
    tsdf_raycast_output *out;
    /* The tile bounds of tsdf_raycast_range.h; NULL: the reference march. */
    const uint32_t *range_lo, *range_hi;
    uint32_t tiles_x;
    atomic_int cancelled;
} ray_job;

/* Rows [b, e). */
static int ray_rows(void *arg, size_t b, size_t e, unsigned worker)
{
    ray_job *j = arg;
    const tsdf_raycast_params *p = j->p;
    tsdf_ray_volume vol = j->vol;
    tsdf_ray_cache cache;
    vol.src = &j->sources[worker];
    tsdf_ray_cache_init(&cache);
    for (uint32_t py = (uint32_t)b; py < (uint32_t)e; py++) {
        if (atomic_load_explicit(&j->cancelled, memory_order_relaxed))
            return TSDF_ETIMEOUT;
        for (uint32_t px = 0; px < p->width; px++) {
            size_t i = (size_t)py * p->width + px;
            /* A large image of long rays takes the CPU minutes; polling
             * every few dozen pixels lets a caller whose client gave up
             * stop it within milliseconds. params.cancel is called on the
             * calling thread only, which is worker 0. */
            if (worker == 0 && p->cancel != NULL && px % TSDF_RAYCAST_CANCEL_PIXELS == 0 &&
                p->cancel(p->cancel_arg)) {
                atomic_store(&j->cancelled, 1);
                return TSDF_ETIMEOUT;
            }
            if (j->range_lo != NULL)
                tsdf_ray_pixel_ranged(&vol, &cache, p->T_world_cam, &p->K, px, py, p->min_depth_m,
                                      p->max_depth_m, j->range_lo, j->range_hi, j->tiles_x, i,
                                      j->out->depth_m, j->out->normals, j->out->rgb);
            else
                tsdf_ray_pixel(&vol, &cache, p->T_world_cam, &p->K, px, py, p->min_depth_m,
                               p->max_depth_m, i, j->out->depth_m, j->out->normals, j->out->rgb);
        }
    }
    return TSDF_OK;
}

static int run_raycast(cpu_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out,
                       const uint32_t *range_lo, const uint32_t *range_hi, uint32_t tiles_x)
{
    ray_job j;
    const unsigned workers = cpu_pool_threads(v->pool);
    j.sources = malloc(workers * sizeof(*j.sources));
    if (j.sources == NULL)
        return TSDF_ENOMEM;
    for (unsigned w = 0; w < workers; w++)
        ray_source_init(&j.sources[w], v);
    j.vol.src = NULL; /* each worker's own, see ray_rows */
    j.vol.layout = v->store.layout;
    j.vol.geom = v->store.geom;
    j.vol.rgb = v->store.rgb;
    j.vol.quant = v->store.quant;
    j.vol.voxel_size_m = v->params.voxel_size_m;
    j.vol.inv_voxel_size = v->inv_voxel_size;
    j.vol.inv_block_size = v->inv_block_size;
    j.p = p;
    j.out = out;
    j.range_lo = range_lo;
    j.range_hi = range_hi;
    j.tiles_x = tiles_x;
    atomic_init(&j.cancelled, 0);
    int rc = cpu_pool_run(v->pool, p->height, RAY_ROWS, ray_rows, &j);
    free(j.sources);
    return rc;
}

int cpu_raycast_reference(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms();
    int rc = run_raycast(v, p, out, NULL, NULL, 0);
    v->last_raycast_ms = cpu_now_ms() - t0;
    return rc;
}

/* The lowest and highest corner depth of the blocks that may cover each
 * tile (lo / hi: tiles_x * tiles_y entries, as float bits): the CUDA
 * kernel's k_range_blocks, one block after the other. A fraction of a
 * millisecond for the 11,690 blocks of 7-Scenes at 1 cm, so not spread
 * over the pool. */
static void range_tiles(const cpu_volume *v, const tsdf_range_view *rv, uint32_t *lo, uint32_t *hi)
{
    const size_t ntiles = (size_t)rv->tiles_x * rv->tiles_y;
    for (size_t t = 0; t < ntiles; t++) {
        lo[t] = TSDF_RANGE_LO_EMPTY;
        hi[t] = 0;
    }
    for (uint32_t slot = 0; slot < v->store.used; slot++) {
        uint32_t tile[4], bl, bh;
        if (!tsdf_range_key(rv, v->store.keys[slot], tile, &bl, &bh))
            continue;
        for (uint32_t ty = tile[1]; ty <= tile[3]; ty++) {
            for (uint32_t tx = tile[0]; tx <= tile[2]; tx++) {
                size_t t = (size_t)ty * rv->tiles_x + tx;
                lo[t] = bl < lo[t] ? bl : lo[t];
                hi[t] = bh > hi[t] ? bh : hi[t];
            }
        }
    }
}

int cpu_raycast(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms();
    tsdf_range_view rv;

    tsdf_range_view_init(&rv, p->T_world_cam, &p->K, p->width, p->height, v->params.voxel_size_m);
    const size_t ntiles = (size_t)rv.tiles_x * rv.tiles_y;
    uint32_t *lo = malloc(2 * ntiles * sizeof(uint32_t));
    if (lo == NULL)
        return TSDF_ENOMEM;
    range_tiles(v, &rv, lo, lo + ntiles);
    int rc = run_raycast(v, p, out, lo, lo + ntiles, rv.tiles_x);
    free(lo);
    v->last_raycast_ms = cpu_now_ms() - t0;
    return rc;
}

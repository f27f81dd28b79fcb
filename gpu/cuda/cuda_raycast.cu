/*
 * cuda_raycast.cu - the raycast on the GPU, the same code as the CPU
 * reference (gpu/cpu/cpu_raycast.c) in three kernels:
 *   range    one thread per pool slot projects its block and lowers /
 *            raises the depth bounds of the tiles it may cover
 *            (tsdf_raycast_range.h; atomicMin / atomicMax, so the result
 *            is the CPU's whatever the order);
 *   march    tsdf_ray_pixel_ranged of tsdf_raycast_march.h per pixel, the
 *            depth only, over its tile's depth range, with blocks found
 *            in the device hash table; each warp takes 8 x 4 pixels at a
 *            time from a counter (see k_raycast);
 *   surface  the normal and colour of every hit (tsdf_ray_pixel_surface).
 *
 * The backend is compiled with --fmad=false, so a GPU ray evaluates every
 * float expression as the CPU ray does and returns the same depth, normal
 * and colour.
 *
 * What the kernels' shape comes from (H200, 7-Scenes at 1 cm, 640 x 480
 * depth + normals from frame 225's pose, kernel medians of 50):
 *   - The march of 2026-12-02 (a cell of 8 voxels at every step, the
 *     normal's six more inline, one thread per pixel) took 0.654 ms, its
 *     warps 13 of 32 lanes active and waiting for instruction fetches.
 *     The march now reads one voxel where it is far from the surface,
 *     works in voxel units (one floor per axis a step, exits multiplied
 *     by 1 / d), takes its cell samples from one inlined call site, and
 *     the normals are a kernel of their own: 0.660 -> 0.403 ms, measured
 *     in one lease against the old build (301,176 hits against 301,188;
 *     tests/test_raycast_truth.c measures both against the exact
 *     surface).
 *   - Earlier: variants that cached two blocks, consulted a block
 *     occupancy grid before the table, or capped registers for occupancy
 *     were slower; the table is small and L2-resident, so a miss costs
 *     little. A march as a state machine whose lanes took the next pixel
 *     of their warp's tile when done needed 96 registers and was slower
 *     (0.80 to 2.13 ms against 0.65).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"
#include "tsdf_raycast_range.h"

#define TSDF_RAY_SOURCE cuda_table_view
#include "tsdf_raycast_march.h"

/* The table probe, called (one copy of its loop for every call site) with
 * its arguments by value: a called function that took the volume view by
 * address made the kernels keep the view in local memory (a 104-byte stack
 * frame, loaded back at every step). */
static __device__ __noinline__ int32_t ray_table_find(const uint64_t *keys, const int32_t *vals,
                                                      uint32_t mask, int32_t bx, int32_t by,
                                                      int32_t bz)
{
    if (!tsdf_block_coord_valid(bx, by, bz))
        return -1;
    const cuda_table_view t = {keys, vals, mask, NULL, NULL};
    return cuda_table_find(t, tsdf_block_key(bx, by, bz));
}

static __device__ __forceinline__ int32_t tsdf_ray_source_block(const tsdf_ray_volume *vol,
                                                                int32_t bx, int32_t by, int32_t bz)
{
    return ray_table_find(vol->src.keys, vol->src.vals, vol->src.mask, bx, by, bz);
}

struct ray_args {
    tsdf_ray_volume vol;
    uint32_t width, height;
    tsdf_intrinsics K;
    float T_world_cam[16];
    float z_min, z_max;
    const uint32_t *range_lo, *range_hi; /* tiles_x per row */
    uint32_t tiles_x;
};

/* The tile bounds, and k_raycast's work counter. */
static __global__ void k_range_init(uint32_t *lo, uint32_t *hi, uint32_t n, uint32_t *next_tile)
{
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) {
        lo[t] = TSDF_RANGE_LO_EMPTY;
        hi[t] = 0;
    }
    if (t == 0)
        *next_tile = 0;
}

/* One thread per pool slot: a block's corners bound the tiles it covers. */
static __global__ void k_range_blocks(tsdf_range_view rv, const uint64_t *block_keys, uint32_t used,
                                      uint32_t *lo, uint32_t *hi)
{
    uint32_t slot = blockIdx.x * blockDim.x + threadIdx.x;
    if (slot >= used)
        return;
    uint32_t tile[4], bl, bh;
    if (!tsdf_range_key(&rv, block_keys[slot], tile, &bl, &bh))
        return;
    for (uint32_t ty = tile[1]; ty <= tile[3]; ty++) {
        for (uint32_t tx = tile[0]; tx <= tile[2]; tx++) {
            size_t t = (size_t)ty * rv.tiles_x + tx;
            atomicMin(&lo[t], bl);
            atomicMax(&hi[t], bh);
        }
    }
}

/* The pixels a warp of k_raycast takes at a time: 8 x 4, so that they
 * share a tile of the depth range (TSDF_RANGE_TILE_PX) and mostly their
 * blocks. */
#define RAY_WARP_W 8
#define RAY_WARP_H 4

/* The march, depth only (its hits' normals and colours come from
 * k_ray_surface). Rays differ in length by an order of magnitude (a tile
 * of sky against a tile of clutter), and with a fixed thread per pixel the
 * SMs idled for 43% of the kernel's time waiting for the CTAs of the
 * longest tiles (Nsight Compute, H200, 7-Scenes: 383 k active of 672 k
 * elapsed cycles). So a grid that just fills the GPU runs, and each warp
 * takes the next 8 x 4 pixels from a counter until none are left. The
 * layout is a template argument: set here, in a local copy of the volume
 * view, it folds the shared code's switch on it. At most 64 registers (8
 * CTAs of 128 per SM): 80 measured the same (0.402 against 0.403 ms). */
template <int LAYOUT>
static __global__ void __launch_bounds__(128, 8)
    k_raycast(ray_args a, float *depth, uint32_t *next_tile)
{
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t tiles_x = (a.width + RAY_WARP_W - 1) / RAY_WARP_W;
    const uint32_t tiles = tiles_x * ((a.height + RAY_WARP_H - 1) / RAY_WARP_H);
    tsdf_ray_volume vol = a.vol;
    vol.layout = (tsdf_layout)LAYOUT;
    for (;;) {
        uint32_t t = 0;
        if (lane == 0)
            t = atomicAdd(next_tile, 1u);
        t = __shfl_sync(0xffffffffu, t, 0);
        if (t >= tiles)
            return;
        const uint32_t px = (t % tiles_x) * RAY_WARP_W + lane % RAY_WARP_W;
        const uint32_t py = (t / tiles_x) * RAY_WARP_H + lane / RAY_WARP_W;
        if (px < a.width && py < a.height) {
            tsdf_ray_cache c;
            tsdf_ray_cache_init(&c);
            tsdf_ray_pixel_ranged(&vol, &c, a.T_world_cam, &a.K, px, py, a.z_min, a.z_max,
                                  a.range_lo, a.range_hi, a.tiles_x, (size_t)py * a.width + px,
                                  depth, NULL, NULL);
        }
    }
}

/* The normals and colours of the march's hits (tsdf_ray_pixel_surface),
 * one thread per pixel; outputs and layout are template arguments. */
template <bool NORMALS, bool COLOR, int LAYOUT>
static __global__ void k_ray_surface(ray_args a, const float *depth, float *normals, uint8_t *rgb)
{
    uint32_t px = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t py = blockIdx.y * blockDim.y + threadIdx.y;
    if (px >= a.width || py >= a.height)
        return;
    size_t i = (size_t)py * a.width + px;
    tsdf_ray_volume vol = a.vol;
    vol.layout = (tsdf_layout)LAYOUT;
    tsdf_ray_cache c;
    float o[3], d[3];
    tsdf_ray_cache_init(&c);
    tsdf_pixel_ray_world(a.T_world_cam, &a.K, (float)px, (float)py, o, d);
    tsdf_ray_pixel_surface(&vol, &c, o, d, depth[i], i, NORMALS ? normals : NULL,
                           COLOR ? rgb : NULL);
}

int cuda_raycast(struct cuda_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    const size_t npix = (size_t)p->width * p->height;
    tsdf_range_view rv;
    tsdf_range_view_init(&rv, p->T_world_cam, &p->K, p->width, p->height, v->p.voxel_size_m);
    const size_t ntiles = (size_t)rv.tiles_x * rv.tiles_y;
    /* The tile bounds and k_raycast's work counter, 4-byte aligned at the
     * start, then the outputs. */
    const size_t range_bytes = (2 * ntiles + 1) * sizeof(uint32_t);
    const size_t bytes =
        range_bytes +
        npix * (sizeof(float) + (out->normals ? 3 * sizeof(float) : 0) + (out->rgb ? 3 : 0));
    /* One device buffer for the outputs, kept between calls. */
    if (bytes > v->ray_cap) {
        int rc = cuda_sync_all(v);
        if (rc != TSDF_OK)
            return rc;
        cuda_dev_free(v, v->d_ray, v->ray_cap);
        v->d_ray = NULL;
        v->ray_cap = 0;
        rc = cuda_dev_alloc(v, &v->d_ray, bytes);
        if (rc != TSDF_OK)
            return rc;
        v->ray_cap = bytes;
    }
    uint32_t *d_lo = (uint32_t *)v->d_ray, *d_hi = d_lo + ntiles;
    uint32_t *d_next = d_hi + ntiles;
    float *d_depth = (float *)(d_next + 1);
    float *d_normals = out->normals ? d_depth + npix : NULL;
    uint8_t *d_rgb = (uint8_t *)(d_depth + npix + (out->normals ? 3 * npix : 0));

    ray_args a;
    a.vol.src = cuda_view(v);
    a.vol.layout = v->p.layout;
    a.vol.geom = v->d_geom;
    a.vol.rgb = v->d_rgb;
    a.vol.quant = v->quant;
    a.vol.voxel_size_m = v->p.voxel_size_m;
    a.vol.inv_voxel_size = 1.0f / v->p.voxel_size_m;
    a.vol.inv_block_size = 1.0f / ((float)TSDF_BLOCK_DIM * v->p.voxel_size_m);
    a.width = p->width;
    a.height = p->height;
    a.K = p->K;
    memcpy(a.T_world_cam, p->T_world_cam, sizeof a.T_world_cam);
    a.z_min = p->min_depth_m;
    a.z_max = p->max_depth_m;
    a.range_lo = d_lo;
    a.range_hi = d_hi;
    a.tiles_x = rv.tiles_x;

    dim3 block(16, 8);
    dim3 grid((p->width + block.x - 1) / block.x, (p->height + block.y - 1) / block.y);
    CUDA_TRY(cudaEventRecord(v->q_start, v->stream));
    k_range_init<<<cuda_grid(ntiles, 256), 256, 0, v->stream>>>(d_lo, d_hi, (uint32_t)ntiles,
                                                                d_next);
    CUDA_TRY_LAUNCH();
    if (v->used) {
        k_range_blocks<<<cuda_grid(v->used, 128), 128, 0, v->stream>>>(rv, v->d_block_keys, v->used,
                                                                       d_lo, d_hi);
        CUDA_TRY_LAUNCH();
    }
    /* As many warps as fit on the GPU at once (8 CTAs of 128 threads an
     * SM), or as there are 8 x 4 tiles. */
    const size_t warp_tiles = (size_t)((p->width + RAY_WARP_W - 1) / RAY_WARP_W) *
                              ((p->height + RAY_WARP_H - 1) / RAY_WARP_H);
    size_t march_ctas = (warp_tiles + 3) / 4;
    if (march_ctas > (size_t)v->sm_count * 8)
        march_ctas = (size_t)v->sm_count * 8;
    if (v->p.layout == TSDF_LAYOUT_S16)
        k_raycast<TSDF_LAYOUT_S16><<<(unsigned)march_ctas, 128, 0, v->stream>>>(a, d_depth, d_next);
    else
        k_raycast<TSDF_LAYOUT_F32><<<(unsigned)march_ctas, 128, 0, v->stream>>>(a, d_depth, d_next);
    CUDA_TRY_LAUNCH();
#define LAUNCH(N, C)                                                                               \
    do {                                                                                           \
        if (v->p.layout == TSDF_LAYOUT_S16)                                                        \
            k_ray_surface<N, C, TSDF_LAYOUT_S16>                                                   \
                <<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);                     \
        else                                                                                       \
            k_ray_surface<N, C, TSDF_LAYOUT_F32>                                                   \
                <<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);                     \
    } while (0)
    if (out->normals && out->rgb)
        LAUNCH(true, true);
    else if (out->normals)
        LAUNCH(true, false);
    else if (out->rgb)
        LAUNCH(false, true);
#undef LAUNCH
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaEventRecord(v->q_end, v->stream));
    /* The outputs may be page-locked (the daemon's frame pool), so these
     * copies run on after the call returns: wait for the ones enqueued
     * also when a later one fails, before the caller reuses the memory. */
    cudaError_t copy = cudaMemcpyAsync(out->depth_m, d_depth, npix * sizeof(float),
                                       cudaMemcpyDeviceToHost, v->stream);
    if (copy == cudaSuccess && out->normals)
        copy = cudaMemcpyAsync(out->normals, d_normals, 3 * npix * sizeof(float),
                               cudaMemcpyDeviceToHost, v->stream);
    if (copy == cudaSuccess && out->rgb)
        copy = cudaMemcpyAsync(out->rgb, d_rgb, 3 * npix, cudaMemcpyDeviceToHost, v->stream);
    int rc = cuda_sync_all(v);
    if (copy != cudaSuccess)
        return cuda_check(copy, "raycast copy", __FILE__, __LINE__);
    if (rc != TSDF_OK)
        return rc;
    float ms = 0.0f;
    CUDA_TRY(cudaEventElapsedTime(&ms, v->q_start, v->q_end));
    v->last_raycast_ms = ms;
    return TSDF_OK;
}

/*
 * cuda_raycast.cu - the raycast on the GPU, the same code as the CPU
 * reference (gpu/cpu/cpu_raycast.c) in two kernels:
 *   range    one thread per pool slot projects its block and lowers /
 *            raises the depth bounds of the tiles it may cover
 *            (tsdf_raycast_range.h; atomicMin / atomicMax, so the result
 *            is the CPU's whatever the order);
 *   march    one thread per pixel runs tsdf_ray_pixel_ranged of
 *            tsdf_raycast_march.h (the reference march's answer, marched
 *            over its tile's depth range), with blocks found in the device
 *            hash table.
 *
 * The backend is compiled with --fmad=false, so a GPU ray evaluates every
 * float expression as the CPU ray does and returns the same depth, normal
 * and colour.
 *
 * The march's samples are called functions that return their values in
 * registers (tsdf_ray_sample_at and its kin in tsdf_raycast_march.h):
 * 0.88 -> 0.71 ms on the H200 (7-Scenes, 450 frames, depth + normals from
 * frame 225, kernel median of 50), the same output checksum.
 *
 * Measured on an H200 (7-Scenes, 100 frames fused at 1 cm, 640x480 depth +
 * normals from frame 50, kernel median of 20) before the range pass, which
 * removed the walk through empty space from the near plane: 1.26 ms.
 * Variants that gathered a cell inside one block with one lookup, kept two
 * cached blocks, consulted a block occupancy grid before the table, or
 * capped registers for occupancy were all slower (1.84 to 2.17 ms): the
 * table is small and L2-resident, so a miss costs little, and every extra
 * register costs occupancy in this latency-bound loop. They were removed.
 *
 * Tried on 2026-12-02 and not kept: the march as a state machine taking at
 * most one sample per turn from one call site, a lane whose pixel was done
 * taking the next pixel of its warp's tile (Nsight Compute shows 13 of 32
 * lanes active in this kernel). It returned the same checksum but needed
 * 96 registers, and fewer warps hid less latency: 0.80 ms with 32 pixels a
 * warp, 1.28 with 64, 2.13 with 128, against 0.65 for this kernel.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"
#include "tsdf_raycast_range.h"

#define TSDF_RAY_SOURCE cuda_table_view
#include "tsdf_raycast_march.h"

static __device__ int32_t tsdf_ray_source_block(const tsdf_ray_volume *vol, int32_t bx, int32_t by,
                                                int32_t bz)
{
    if (!tsdf_block_coord_valid(bx, by, bz))
        return -1;
    return cuda_table_find(vol->src, tsdf_block_key(bx, by, bz));
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

static __global__ void k_range_init(uint32_t *lo, uint32_t *hi, uint32_t n)
{
    uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) {
        lo[t] = TSDF_RANGE_LO_EMPTY;
        hi[t] = 0;
    }
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

/* Outputs and layout are template arguments: the layout set here, in a
 * local copy of the volume view, folds the shared code's switch on it.
 * At most 64 registers (8 CTAs of 128 per SM): with the samples returned
 * in registers the kernel wanted 70, and the cap measured 0.707 against
 * 0.719 ms (H200, one lease, same checksum), with no spills. */
template <bool NORMALS, bool COLOR, int LAYOUT>
static __global__ void __launch_bounds__(128, 8)
    k_raycast(ray_args a, float *depth, float *normals, uint8_t *rgb)
{
    uint32_t px = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t py = blockIdx.y * blockDim.y + threadIdx.y;
    if (px >= a.width || py >= a.height)
        return;
    size_t i = (size_t)py * a.width + px;
    tsdf_ray_volume vol = a.vol;
    vol.layout = (tsdf_layout)LAYOUT;
    tsdf_ray_cache c;
    tsdf_ray_cache_init(&c);
    tsdf_ray_pixel_ranged(&vol, &c, a.T_world_cam, &a.K, px, py, a.z_min, a.z_max, a.range_lo,
                          a.range_hi, a.tiles_x, i, depth, NORMALS ? normals : NULL,
                          COLOR ? rgb : NULL);
}

int cuda_raycast(struct cuda_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    const size_t npix = (size_t)p->width * p->height;
    tsdf_range_view rv;
    tsdf_range_view_init(&rv, p->T_world_cam, &p->K, p->width, p->height, v->p.voxel_size_m);
    const size_t ntiles = (size_t)rv.tiles_x * rv.tiles_y;
    /* The tile bounds first (4-byte aligned at the start), then the outputs. */
    const size_t range_bytes = 2 * ntiles * sizeof(uint32_t);
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
    float *d_depth = (float *)(d_hi + ntiles);
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
    k_range_init<<<cuda_grid(ntiles, 256), 256, 0, v->stream>>>(d_lo, d_hi, (uint32_t)ntiles);
    CUDA_TRY_LAUNCH();
    if (v->used) {
        k_range_blocks<<<cuda_grid(v->used, 128), 128, 0, v->stream>>>(rv, v->d_block_keys, v->used,
                                                                       d_lo, d_hi);
        CUDA_TRY_LAUNCH();
    }
#define LAUNCH(N, C)                                                                               \
    do {                                                                                           \
        if (v->p.layout == TSDF_LAYOUT_S16)                                                        \
            k_raycast<N, C, TSDF_LAYOUT_S16>                                                       \
                <<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);                     \
        else                                                                                       \
            k_raycast<N, C, TSDF_LAYOUT_F32>                                                       \
                <<<grid, block, 0, v->stream>>>(a, d_depth, d_normals, d_rgb);                     \
    } while (0)
    if (out->normals && out->rgb)
        LAUNCH(true, true);
    else if (out->normals)
        LAUNCH(true, false);
    else if (out->rgb)
        LAUNCH(false, true);
    else
        LAUNCH(false, false);
#undef LAUNCH
    CUDA_TRY_LAUNCH();
    CUDA_TRY(cudaEventRecord(v->q_end, v->stream));
    CUDA_TRY(cudaMemcpyAsync(out->depth_m, d_depth, npix * sizeof(float), cudaMemcpyDeviceToHost,
                             v->stream));
    if (out->normals)
        CUDA_TRY(cudaMemcpyAsync(out->normals, d_normals, 3 * npix * sizeof(float),
                                 cudaMemcpyDeviceToHost, v->stream));
    if (out->rgb)
        CUDA_TRY(cudaMemcpyAsync(out->rgb, d_rgb, 3 * npix, cudaMemcpyDeviceToHost, v->stream));
    int rc = cuda_sync_all(v);
    if (rc != TSDF_OK)
        return rc;
    float ms = 0.0f;
    CUDA_TRY(cudaEventElapsedTime(&ms, v->q_start, v->q_end));
    v->last_raycast_ms = ms;
    return TSDF_OK;
}

/*
 * tsdf_voxel_layout.h - how a voxel is stored: the only code that knows.
 *
 * A block's voxels live in channels, each a flat array indexed by
 * block * TSDF_BLOCK_VOXELS + voxel (voxel = tsdf_voxel_index(x, y, z)):
 *   geometry  the sdf and the weight, in the volume's layout (below);
 *   colour    3 bytes of RGB8 a voxel, only in volumes that received
 *             colour (a map without colour pays nothing for it).
 * Everything else (the maths, the kernels, snapshots, tests) sees a voxel
 * as a tsdf_vox value (tsdf_volume.h) and reads and writes it through
 * tsdf_vox_load / tsdf_vox_store. The CUDA kernels are templates on the
 * layout and pass it as a constant, so the switch below folds away and
 * the hot loops stay branch-free; the CPU backend passes it at run time.
 *
 * Layouts (tsdf_layout, common/tsdf_types.h):
 *   TSDF_LAYOUT_F32  sdf float32 metres, weight float32:       8 B a voxel
 *   TSDF_LAYOUT_S16  sdf int16 in units of trunc / 32767, weight uint16:
 *                    4 B a voxel, 2 KiB a block. The sdf never leaves
 *                    [-trunc, +trunc], so 16 bits cover it with a quantum
 *                    of trunc / 32767 (1.2 um at a 4 cm truncation); the
 *                    weight is a frame count, an integer while max_weight
 *                    is one (tsdf_volume_params_check requires that).
 * Stored form: the structs below in little-endian byte order (snapshots
 * write the channels as they are; the engine builds only on little-endian
 * machines, which every CUDA host is).
 *
 * Rounding: tsdf_vox_store rounds to nearest (rintf, ties to even), the
 * same instruction on the host and the device, so the CPU reference and
 * the CUDA backend store the same bits for the same value.
 */
#ifndef TSDF_VOXEL_LAYOUT_H
#define TSDF_VOXEL_LAYOUT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "tsdf_volume.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the voxel channels are stored little-endian: this engine builds for little-endian hosts"
#endif

#ifdef __CUDACC__
#define TSDF_LAYOUT_HD __host__ __device__ __forceinline__
#else
#define TSDF_LAYOUT_HD static inline
#endif

typedef struct {
    float sdf_m;
    float weight;
} tsdf_geom_f32;

typedef struct {
    int16_t sdf;     /* sdf_m / unit_m, in [-TSDF_S16_MAX, TSDF_S16_MAX] */
    uint16_t weight; /* the weight, an integer in [0, 65535] */
} tsdf_geom_s16;

#define TSDF_S16_MAX 32767

/* The largest weight the s16 layout stores exactly. */
#define TSDF_S16_MAX_WEIGHT 65535.0f

/* Bytes of one voxel's colour (RGB8) and of one block's colour channel. */
#define TSDF_RGB_BYTES 3u
#define TSDF_BLOCK_RGB_BYTES (TSDF_RGB_BYTES * TSDF_BLOCK_VOXELS)

/* Bytes one block takes in a pool (both backends): its key and version
 * (8 each), its free-stack entry (4) and its channels. */
#define TSDF_POOL_BLOCK_OVERHEAD 20u

/* What converting a stored sdf to metres needs: for s16 the metres of one
 * unit and its inverse, both computed once per volume with
 * tsdf_quant_for, by the same expressions on both backends; unused by f32. */
typedef struct {
    float unit_m;
    float inv_unit;
} tsdf_quant;

TSDF_LAYOUT_HD tsdf_quant tsdf_quant_for(float trunc_m)
{
    tsdf_quant q;
    q.unit_m = trunc_m / (float)TSDF_S16_MAX;
    q.inv_unit = (float)TSDF_S16_MAX / trunc_m;
    return q;
}

/* Bytes of one voxel's geometry in layout l (0 for an unknown layout). */
TSDF_LAYOUT_HD size_t tsdf_layout_voxel_bytes(tsdf_layout l)
{
    return l == TSDF_LAYOUT_S16 ? sizeof(tsdf_geom_s16)
                                : (l == TSDF_LAYOUT_F32 ? sizeof(tsdf_geom_f32) : 0);
}

/* Bytes of one block's geometry channel in layout l. */
TSDF_LAYOUT_HD size_t tsdf_layout_block_bytes(tsdf_layout l)
{
    return tsdf_layout_voxel_bytes(l) * TSDF_BLOCK_VOXELS;
}

/* Bytes one block takes in a pool of layout l, with or without colour. */
TSDF_LAYOUT_HD size_t tsdf_pool_block_bytes(tsdf_layout l, int with_rgb)
{
    return TSDF_POOL_BLOCK_OVERHEAD + tsdf_layout_block_bytes(l) +
           (with_rgb ? TSDF_BLOCK_RGB_BYTES : 0);
}

/* An s16 voxel read as one 32-bit word (the GPU's loads: device pools
 * are 4-byte aligned): little-endian (checked above), so the sdf is the
 * low half. The same values as the struct's two fields. */
TSDF_LAYOUT_HD tsdf_vox tsdf_vox_from_s16_word(uint32_t w, tsdf_quant q)
{
    tsdf_vox v;
    v.sdf_m = (float)(int16_t)(uint16_t)(w & 0xffffu) * q.unit_m;
    v.weight = (float)(w >> 16);
    return v;
}

/* Voxel i of a geometry channel in layout l (on the GPU an s16 voxel is
 * one 32-bit load, tsdf_vox_from_s16_word). */
TSDF_LAYOUT_HD tsdf_vox tsdf_vox_load(tsdf_layout l, const void *geom, size_t i, tsdf_quant q)
{
    tsdf_vox v;
    if (l == TSDF_LAYOUT_S16) {
#ifdef __CUDA_ARCH__
        v = tsdf_vox_from_s16_word(((const uint32_t *)geom)[i], q);
#else
        tsdf_geom_s16 g = ((const tsdf_geom_s16 *)geom)[i];
        v.sdf_m = (float)g.sdf * q.unit_m;
        v.weight = (float)g.weight;
#endif
    } else {
        tsdf_geom_f32 g = ((const tsdf_geom_f32 *)geom)[i];
        v.sdf_m = g.sdf_m;
        v.weight = g.weight;
    }
    return v;
}

/* tsdf_vox_load for code that only reads the channel while nothing writes
 * it (a raycast, a mesh): on the GPU through the read-only data cache
 * (__ldg). The same values as tsdf_vox_load, which is what the host
 * runs. */
TSDF_LAYOUT_HD tsdf_vox tsdf_vox_load_ro(tsdf_layout l, const void *geom, size_t i, tsdf_quant q)
{
#ifdef __CUDA_ARCH__
    tsdf_vox v;
    if (l == TSDF_LAYOUT_S16) {
        v = tsdf_vox_from_s16_word(__ldg((const unsigned int *)geom + i), q);
    } else {
        float2 g = __ldg((const float2 *)geom + i);
        v.sdf_m = g.x;
        v.weight = g.y;
    }
    return v;
#else
    return tsdf_vox_load(l, geom, i, q);
#endif
}

/* Only the weight of voxel i: what "is this voxel known" needs. */
TSDF_LAYOUT_HD float tsdf_vox_load_weight(tsdf_layout l, const void *geom, size_t i)
{
    if (l == TSDF_LAYOUT_S16)
        return (float)((const tsdf_geom_s16 *)geom)[i].weight;
    return ((const tsdf_geom_f32 *)geom)[i].weight;
}

/* Rounds x to the nearest integer in [-lim, lim] (NaN: 0). */
TSDF_LAYOUT_HD float tsdf_layout_round_clamp(float x, float lim)
{
    float r = rintf(x);
    if (!(r >= -lim))
        r = r < 0.0f ? -lim : 0.0f; /* NaN fails both tests and becomes 0 */
    if (r > lim)
        r = lim;
    return r;
}

/* Stores v as voxel i of a geometry channel in layout l: s16 rounds the sdf
 * to the nearest unit (clamped to the representable band) and the weight
 * to the nearest integer (on the GPU in one 32-bit store, as the load). */
TSDF_LAYOUT_HD void tsdf_vox_store(tsdf_layout l, void *geom, size_t i, tsdf_vox v, tsdf_quant q)
{
    if (l == TSDF_LAYOUT_S16) {
        tsdf_geom_s16 g;
        g.sdf = (int16_t)tsdf_layout_round_clamp(v.sdf_m * q.inv_unit, (float)TSDF_S16_MAX);
        float w = tsdf_layout_round_clamp(v.weight, TSDF_S16_MAX_WEIGHT);
        g.weight = (uint16_t)(w > 0.0f ? w : 0.0f);
#ifdef __CUDA_ARCH__
        ((uint32_t *)geom)[i] = (uint32_t)(uint16_t)g.sdf | ((uint32_t)g.weight << 16);
#else
        ((tsdf_geom_s16 *)geom)[i] = g;
#endif
    } else {
        tsdf_geom_f32 g;
        g.sdf_m = v.sdf_m;
        g.weight = v.weight;
        ((tsdf_geom_f32 *)geom)[i] = g;
    }
}

/* The geometry channel of block b: its TSDF_BLOCK_VOXELS voxels. */
TSDF_LAYOUT_HD void *tsdf_layout_block(tsdf_layout l, void *geom, size_t b)
{
    return (uint8_t *)geom + b * tsdf_layout_block_bytes(l);
}

TSDF_LAYOUT_HD const void *tsdf_layout_block_const(tsdf_layout l, const void *geom, size_t b)
{
    return (const uint8_t *)geom + b * tsdf_layout_block_bytes(l);
}

#endif /* TSDF_VOXEL_LAYOUT_H */

/*
 * tsdf_backend.h - the internal interface between the public volume API
 * (tsdf_volume.c: parameter checks, frame checks, dispatch) and a backend
 * (cpu_*.c: the CPU reference; cuda_*.cu: the CUDA backend).
 *
 * The front end validates every argument before it calls a backend, so a
 * backend may assume: params passed tsdf_volume_params_check, frames passed
 * tsdf_frame_check, raycast params are valid, imported block sets passed
 * validation. A backend owns all of its statistics (counters, version).
 */
#ifndef TSDF_BACKEND_H
#define TSDF_BACKEND_H

#include "tsdf_volume.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsdf_backend_ops {
    const char *name;
    int (*create)(const tsdf_volume_params *p, void **impl);
    void (*destroy)(void *impl);
    int (*reset)(void *impl);
    int (*integrate)(void *impl, const tsdf_frame *f);
    int (*sync)(void *impl);
    int (*raycast)(void *impl, const tsdf_raycast_params *p, tsdf_raycast_output *out);
    int (*mesh)(void *impl, const tsdf_mesh_params *p, tsdf_mesh *out);
    int (*stats)(void *impl, tsdf_volume_stats *out);
    int (*export_blocks)(void *impl, tsdf_block_set *out);
    int (*import_blocks)(void *impl, const tsdf_block_set *in);
    /* Sets the memory cap of later integrate / import calls (see
     * tsdf_volume_set_memory_cap), and reads the memory held now without
     * waiting for the device. */
    int (*set_memory_cap)(void *impl, uint64_t cap_bytes);
    uint64_t (*memory_bytes)(void *impl);
    /* Optional (NULL: TSDF_ENOT_BUILT): tsdf_volume_get_timeline. */
    int (*timeline)(void *impl, tsdf_frame_timeline *out, size_t max, size_t *n);
} tsdf_backend_ops;

extern const tsdf_backend_ops tsdf_cpu_ops;

#ifdef TSDF_HAVE_CUDA
extern const tsdf_backend_ops tsdf_cuda_ops;
/* 1 when device `ordinal` exists and a context can be made on it. */
int tsdf_cuda_probe(int ordinal);
/* tsdf_cuda_device_memory of the CUDA backend. */
int tsdf_cuda_total_memory(int ordinal, uint64_t *total_bytes);
#endif

#ifdef __cplusplus
}
#endif

#endif /* TSDF_BACKEND_H */

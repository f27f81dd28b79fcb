/*
 * bench_copy.h - the copy bandwidth of a CUDA device, measured by
 * bench_engine in its own run so that each stage's bytes per second can be
 * read beside what the same device, driver and load achieve for a plain
 * copy. Built only with the CUDA backend (TSDF_HAVE_CUDA).
 */
#ifndef BENCH_COPY_H
#define BENCH_COPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t d2d_bytes;  /* bytes of one device-to-device copy */
    size_t host_bytes; /* bytes of one host-to-device or device-to-host copy */
    /* Medians over the timed copies, in 1e9 bytes per second. A
     * device-to-device copy reads and writes every byte, so d2d_gbs counts
     * 2 * d2d_bytes (as CUDA's bandwidthTest does and as bench_engine
     * counts the voxels an update reads and writes). */
    double d2d_gbs;
    double h2d_gbs; /* pinned host memory */
    double d2h_gbs; /* pinned host memory */
} bench_copy_result;

/* Times `reps` copies of each kind (cudaMemcpyAsync on a stream of its
 * own, a CUDA event pair around each, one untimed copy of each kind first)
 * on CUDA device `device`: d2d_bytes device to device, host_bytes (at most
 * d2d_bytes) from pinned host memory to the device and back; then checks
 * that each kind delivered the bytes it was given. Frees everything it
 * allocated before it returns. TSDF_OK; TSDF_EINVAL (reps 0, host_bytes 0
 * or above d2d_bytes, out NULL); TSDF_ENOMEM; TSDF_ECHECKSUM when a copy
 * delivered other bytes; TSDF_ECUDA for a failed CUDA call. On a failure
 * err (err_len bytes; may be NULL) says which call or copy and why. Times
 * are the device's own (events), so a busy host does not change them. Any
 * thread; it selects `device` on the calling thread. */
int bench_copy_measure(int device, size_t d2d_bytes, size_t host_bytes, uint32_t reps,
                       bench_copy_result *out, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* BENCH_COPY_H */

/*
 * bench_copy.cu - device-to-device, host-to-device and device-to-host copy
 * bandwidth with CUDA events; see bench_copy.h.
 */
#include "bench_copy.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_engine_report.h"
#include "tsdf_error.h"

/* Records a failure (the call and CUDA's text) and turns it into
 * TSDF_ECUDA; cudaSuccess passes through as TSDF_OK. */
static int cuda_fail(cudaError_t e, const char *call, char *err, size_t err_len)
{
    if (e == cudaSuccess)
        return TSDF_OK;
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, "%s: %s", call, cudaGetErrorString(e));
    return TSDF_ECUDA;
}

/* For the teardown: a failure counts only when nothing failed before it. */
static void keep_first(int *rc, cudaError_t e, const char *call, char *err, size_t err_len)
{
    if (*rc == TSDF_OK)
        *rc = cuda_fail(e, call, err, err_len);
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((rc = cuda_fail((call), #call, err, err_len)) != TSDF_OK)                              \
            goto out;                                                                              \
    } while (0)

/* One untimed copy, then `reps` timed ones (ms[] receives their times):
 * *gbs = bytes_counted / the median time. */
static int time_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                     double bytes_counted, uint32_t reps, cudaStream_t s, cudaEvent_t e0,
                     cudaEvent_t e1, double *ms, double *gbs, char *err, size_t err_len)
{
    int rc = TSDF_OK;
    CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    CHECK(cudaStreamSynchronize(s));
    for (uint32_t r = 0; r < reps; r++) {
        float t = 0.0f;
        CHECK(cudaEventRecord(e0, s));
        CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaEventSynchronize(e1));
        CHECK(cudaEventElapsedTime(&t, e0, e1));
        ms[r] = (double)t;
    }
    {
        double m = bench_median(ms, reps);
        *gbs = m > 0.0 ? bytes_counted / (m * 1e6) : 0.0;
    }
out:
    return rc;
}

/* 1 when every one of the n bytes at p is `want`. */
static int all_bytes(const unsigned char *p, size_t n, unsigned char want)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != want)
            return 0;
    return 1;
}

static int wrong_copy(const char *what, char *err, size_t err_len)
{
    if (err != NULL && err_len > 0)
        snprintf(err, err_len, "the %s copy delivered other bytes than it was given", what);
    return TSDF_ECHECKSUM;
}

extern "C" int bench_copy_measure(int device, size_t d2d_bytes, size_t host_bytes, uint32_t reps,
                                  bench_copy_result *out, char *err, size_t err_len)
{
    unsigned char *d_a = NULL, *d_b = NULL, *h = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double *ms = NULL;
    int rc = TSDF_OK;

    if (out == NULL || reps == 0 || host_bytes == 0 || d2d_bytes < host_bytes)
        return TSDF_EINVAL;
    memset(out, 0, sizeof(*out));
    if (err != NULL && err_len > 0)
        err[0] = '\0';
    if ((ms = (double *)malloc(reps * sizeof(*ms))) == NULL)
        return TSDF_ENOMEM;
    CHECK(cudaSetDevice(device));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaMalloc((void **)&d_a, d2d_bytes));
    CHECK(cudaMalloc((void **)&d_b, d2d_bytes));
    CHECK(cudaHostAlloc((void **)&h, host_bytes, cudaHostAllocDefault));

    /* Each kind of copy is checked after it is timed: the device copy by
     * bringing back its first and its last host_bytes, the host copies by a
     * round trip into a cleared host buffer. */
    CHECK(cudaMemsetAsync(d_a, 1, d2d_bytes, s));
    if ((rc = time_copy(d_b, d_a, d2d_bytes, cudaMemcpyDeviceToDevice, 2.0 * (double)d2d_bytes,
                        reps, s, e0, e1, ms, &out->d2d_gbs, err, err_len)) != TSDF_OK)
        goto out;
    for (int end = 0; end < 2; end++) {
        memset(h, 0, host_bytes);
        CHECK(cudaMemcpyAsync(h, d_b + (end ? d2d_bytes - host_bytes : 0), host_bytes,
                              cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        if (!all_bytes(h, host_bytes, 1)) {
            rc = wrong_copy("device-to-device", err, err_len);
            goto out;
        }
    }
    memset(h, 2, host_bytes);
    if ((rc = time_copy(d_a, h, host_bytes, cudaMemcpyHostToDevice, (double)host_bytes, reps, s, e0,
                        e1, ms, &out->h2d_gbs, err, err_len)) != TSDF_OK)
        goto out;
    memset(h, 0, host_bytes);
    if ((rc = time_copy(h, d_a, host_bytes, cudaMemcpyDeviceToHost, (double)host_bytes, reps, s, e0,
                        e1, ms, &out->d2h_gbs, err, err_len)) != TSDF_OK)
        goto out;
    if (!all_bytes(h, host_bytes, 2)) {
        rc = wrong_copy("host-to-device and device-to-host", err, err_len);
        goto out;
    }
    out->d2d_bytes = d2d_bytes;
    out->host_bytes = host_bytes;

out:
    if (s != NULL)
        keep_first(&rc, cudaStreamSynchronize(s), "cudaStreamSynchronize", err, err_len);
    if (h != NULL)
        keep_first(&rc, cudaFreeHost(h), "cudaFreeHost", err, err_len);
    if (d_b != NULL)
        keep_first(&rc, cudaFree(d_b), "cudaFree", err, err_len);
    if (d_a != NULL)
        keep_first(&rc, cudaFree(d_a), "cudaFree", err, err_len);
    if (e1 != NULL)
        keep_first(&rc, cudaEventDestroy(e1), "cudaEventDestroy", err, err_len);
    if (e0 != NULL)
        keep_first(&rc, cudaEventDestroy(e0), "cudaEventDestroy", err, err_len);
    if (s != NULL)
        keep_first(&rc, cudaStreamDestroy(s), "cudaStreamDestroy", err, err_len);
    free(ms);
    return rc;
}

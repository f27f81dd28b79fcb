/*
 * volume.c - the public volume API: parameter and frame checks, backend
 * choice, life cycle and dispatch through tsdf_backend_ops. Block sets,
 * export, import and eviction are in volume_blocks.c, meshes in
 * volume_mesh.c.
 *
 * Every argument is validated here, before a backend sees it, so the two
 * backends cannot disagree about what is valid input and a rejected call
 * never reaches (or changes) the volume.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_math.h"
#include "tsdf_pose.h"
#include "volume_internal.h"

/* ---- backends ------------------------------------------------------------ */

const char *tsdf_backend_name(tsdf_backend b)
{
    switch (b) {
    case TSDF_BACKEND_AUTO:
        return "auto";
    case TSDF_BACKEND_CPU:
        return "cpu";
    case TSDF_BACKEND_CUDA:
        return "cuda";
    }
    return "unknown";
}

int tsdf_backend_parse(const char *name, tsdf_backend *out)
{
    if (name == NULL || out == NULL)
        return TSDF_EINVAL;
    if (strcmp(name, "auto") == 0)
        *out = TSDF_BACKEND_AUTO;
    else if (strcmp(name, "cpu") == 0)
        *out = TSDF_BACKEND_CPU;
    else if (strcmp(name, "cuda") == 0)
        *out = TSDF_BACKEND_CUDA;
    else
        return TSDF_EINVAL;
    return TSDF_OK;
}

int tsdf_cuda_available(void)
{
#ifdef TSDF_HAVE_CUDA
    return tsdf_cuda_probe(0);
#else
    return 0;
#endif
}

/* ---- host memory for frames ------------------------------------------------ */

/* tsdf_host_alloc's header, in front of the bytes it hands out (64 bytes,
 * so that they stay 64-byte aligned): which allocator to free them with. */
#define HOST_MEM_HEADER 64u
#define HOST_MEM_MAGIC 0x74686d31u /* "thm1" */

typedef struct {
    uint32_t magic;
    uint32_t page_locked;
} host_mem_header;

int tsdf_host_alloc(size_t bytes, void **out)
{
    if (out == NULL)
        return TSDF_EINVAL;
    *out = NULL;
    if (bytes == 0 || bytes > SIZE_MAX - 2 * HOST_MEM_HEADER)
        return TSDF_EINVAL;
    size_t total =
        (bytes + HOST_MEM_HEADER + HOST_MEM_HEADER - 1) / HOST_MEM_HEADER * HOST_MEM_HEADER;
    void *base = NULL;
    int page_locked = 0;
#ifdef TSDF_HAVE_CUDA
    if (tsdf_cuda_available() && tsdf_cuda_host_alloc(total, &base) == TSDF_OK)
        page_locked = 1;
#endif
    if (base == NULL && (base = aligned_alloc(HOST_MEM_HEADER, total)) == NULL)
        return TSDF_ENOMEM;
    host_mem_header *h = (host_mem_header *)base;
    h->magic = HOST_MEM_MAGIC;
    h->page_locked = (uint32_t)page_locked;
    *out = (char *)base + HOST_MEM_HEADER;
    return TSDF_OK;
}

void tsdf_host_free(void *p)
{
    if (p == NULL)
        return;
    host_mem_header *h = (host_mem_header *)((char *)p - HOST_MEM_HEADER);
    if (h->magic != HOST_MEM_MAGIC)
        abort(); /* not tsdf_host_alloc's: freeing it would corrupt a heap */
    h->magic = 0;
#ifdef TSDF_HAVE_CUDA
    if (h->page_locked) {
        tsdf_cuda_host_free(h);
        return;
    }
#endif
    free(h);
}

int tsdf_host_register(void *p, size_t bytes)
{
    if (p == NULL || bytes == 0)
        return TSDF_EINVAL;
#ifdef TSDF_HAVE_CUDA
    if (!tsdf_cuda_available())
        return TSDF_ENO_GPU;
    return tsdf_cuda_host_register(p, bytes);
#else
    return TSDF_ENOT_BUILT;
#endif
}

void tsdf_host_unregister(void *p)
{
#ifdef TSDF_HAVE_CUDA
    if (p != NULL)
        tsdf_cuda_host_unregister(p);
#else
    (void)p;
#endif
}

/* ---- parameters ------------------------------------------------------------ */

void tsdf_volume_params_default(tsdf_volume_params *p)
{
    if (p == NULL)
        return;
    memset(p, 0, sizeof(*p));
    p->voxel_size_m = 0.01f;
    p->trunc_vox = 4.0f;
    p->max_weight = 64.0f;
    p->initial_capacity_blocks = 65536;
    p->max_load_factor = 0.5f;
    p->memory_cap_bytes = 0;
    p->backend = TSDF_BACKEND_AUTO;
    p->cuda_device = 0;
    p->layout = TSDF_LAYOUT_S16;
    p->cpu_threads = 0;
}

static int finite_positive(float x)
{
    return isfinite(x) && x > 0.0f;
}

int tsdf_volume_params_check(const tsdf_volume_params *p)
{
    if (p == NULL)
        return TSDF_EINVAL;
    if (!finite_positive(p->voxel_size_m) || !finite_positive(p->trunc_vox) ||
        !finite_positive(p->max_weight))
        return TSDF_EBAD_PARAMS;
    /* A voxel of 0.1 mm or a band of hundreds of voxels is a unit mistake,
     * not a reconstruction; keep the per-ray block walk small. */
    if (p->voxel_size_m < 1e-4f || p->voxel_size_m > 10.0f || p->trunc_vox > 64.0f)
        return TSDF_EBAD_PARAMS;
    /* Growth doubles the table until blocks / slots is below the factor:
     * near zero that asks for more slots than memory holds (a 1e-10 factor
     * made a snapshot's two blocks want a 128 GiB table), and a denormal
     * one doubles the capacity past 2^63 to 0 and loops forever. Below a
     * tenth full a table only wastes memory, so such a factor is a mistake. */
    if (!(p->max_load_factor >= TSDF_MIN_LOAD_FACTOR && p->max_load_factor <= 0.95f))
        return TSDF_EBAD_PARAMS;
    /* Capacities beyond 2^30 slots cannot be rounded to a power of two in
     * the 32-bit block indices the backends use. */
    if (p->initial_capacity_blocks == 0 || p->initial_capacity_blocks > (1u << 30))
        return TSDF_EBAD_PARAMS;
    if (p->backend != TSDF_BACKEND_AUTO && p->backend != TSDF_BACKEND_CPU &&
        p->backend != TSDF_BACKEND_CUDA)
        return TSDF_EBAD_PARAMS;
    if (p->cuda_device < 0)
        return TSDF_EBAD_PARAMS;
    if (p->layout != TSDF_LAYOUT_F32 && p->layout != TSDF_LAYOUT_S16)
        return TSDF_EBAD_PARAMS;
    if (p->cpu_threads > TSDF_MAX_CPU_THREADS)
        return TSDF_EBAD_PARAMS;
    /* s16 stores weights as integers: a fractional clamp could not be
     * reached, and 16 bits hold 65535 frames. */
    if (p->layout == TSDF_LAYOUT_S16 &&
        !(p->max_weight >= 1.0f && p->max_weight <= TSDF_S16_MAX_WEIGHT &&
          floorf(p->max_weight) == p->max_weight))
        return TSDF_EBAD_PARAMS;
    return TSDF_OK;
}

/* ---- frame checks -------------------------------------------------------- */

static int check_image_size(uint32_t w, uint32_t h)
{
    if (w == 0 || h == 0)
        return TSDF_EEMPTY_IMAGE;
    if (w > TSDF_MAX_IMAGE_DIM || h > TSDF_MAX_IMAGE_DIM ||
        (uint64_t)w * (uint64_t)h > (uint64_t)TSDF_MAX_IMAGE_PIXELS)
        return TSDF_ETOO_LARGE;
    return TSDF_OK;
}

/* The same rigidity test (and 1e-3 tolerance) as the wire codec, so a pose
 * the codec accepts is never refused here or the other way round. */
static int check_pose(const float *T)
{
    return tsdf_pose_is_rigid(T) ? TSDF_OK : TSDF_EBAD_POSE;
}

static int check_depth_range(float min_m, float max_m)
{
    if (!isfinite(min_m) || !isfinite(max_m) || min_m < 0.0f || max_m <= min_m)
        return TSDF_EBAD_DEPTH_RANGE;
    return TSDF_OK;
}

int tsdf_frame_check(const tsdf_frame *f)
{
    int rc;
    if (f == NULL)
        return TSDF_EINVAL;
    if ((rc = check_image_size(f->width, f->height)) != TSDF_OK)
        return rc;
    if ((rc = tsdf_intrinsics_check(&f->K, f->width, f->height)) != TSDF_OK)
        return rc;
    if ((rc = check_pose(f->T_world_cam)) != TSDF_OK)
        return rc;
    if ((rc = check_depth_range(f->min_depth_m, f->max_depth_m)) != TSDF_OK)
        return rc;
    if (f->depth_format == TSDF_DEPTH_U16 && !finite_positive(f->depth_scale))
        return TSDF_EBAD_DEPTH_RANGE;
    if (f->depth_format != TSDF_DEPTH_U16 && f->depth_format != TSDF_DEPTH_F32)
        return TSDF_EINVAL;
    if (f->depth == NULL)
        return TSDF_EINVAL;
    {
        /* check_image_size bounded width*height, so these cannot overflow. */
        size_t pixels = (size_t)f->width * f->height;
        size_t sample = f->depth_format == TSDF_DEPTH_U16 ? 2 : 4;
        if (f->depth_size_bytes != 0 && f->depth_size_bytes != pixels * sample)
            return TSDF_EBAD_SIZE;
        if (f->rgb_size_bytes != 0 && (f->rgb == NULL || f->rgb_size_bytes != pixels * 3))
            return TSDF_EBAD_SIZE;
    }
    return TSDF_OK;
}

static int raycast_params_check(const tsdf_raycast_params *p, const tsdf_raycast_output *out)
{
    int rc;
    if (p == NULL || out == NULL)
        return TSDF_EINVAL;
    if ((rc = check_image_size(p->width, p->height)) != TSDF_OK)
        return rc;
    if ((rc = tsdf_intrinsics_check(&p->K, p->width, p->height)) != TSDF_OK)
        return rc;
    if ((rc = check_pose(p->T_world_cam)) != TSDF_OK)
        return rc;
    if ((rc = check_depth_range(p->min_depth_m, p->max_depth_m)) != TSDF_OK)
        return rc;
    /* A ray must start in front of the camera to be a ray at all, and end
     * within the engine's cap, which bounds the work of every ray. */
    if (!(p->min_depth_m > 0.0f) || !(p->max_depth_m <= TSDF_MAX_RAY_M))
        return TSDF_EBAD_DEPTH_RANGE;
    if (out->depth_m == NULL)
        return TSDF_EINVAL;
    return TSDF_OK;
}

/* ---- life cycle ------------------------------------------------------------ */

int tsdf_volume_create(const tsdf_volume_params *p, tsdf_volume **out)
{
    tsdf_volume_params params;
    const tsdf_backend_ops *ops = &tsdf_cpu_ops;
    tsdf_backend backend = TSDF_BACKEND_CPU;
    tsdf_volume *v;
    int rc;

    if (out == NULL)
        return TSDF_EINVAL;
    *out = NULL;
    if (p != NULL)
        params = *p;
    else
        tsdf_volume_params_default(&params);
    if ((rc = tsdf_volume_params_check(&params)) != TSDF_OK)
        return rc;

    switch (params.backend) {
    case TSDF_BACKEND_CPU:
        break;
    case TSDF_BACKEND_AUTO:
#ifdef TSDF_HAVE_CUDA
        if (tsdf_cuda_probe(params.cuda_device)) {
            ops = &tsdf_cuda_ops;
            backend = TSDF_BACKEND_CUDA;
        }
#endif
        break;
    case TSDF_BACKEND_CUDA:
#ifdef TSDF_HAVE_CUDA
        if (!tsdf_cuda_probe(params.cuda_device))
            return TSDF_ENO_GPU;
        ops = &tsdf_cuda_ops;
        backend = TSDF_BACKEND_CUDA;
        break;
#else
        return TSDF_ENOT_BUILT;
#endif
    }

    v = calloc(1, sizeof(*v));
    if (v == NULL)
        return TSDF_ENOMEM;
    v->ops = ops;
    v->backend = backend;
    v->params = params;
    v->params.backend = backend;
    if ((rc = ops->create(&v->params, &v->impl)) != TSDF_OK) {
        free(v);
        return rc;
    }
    *out = v;
    return TSDF_OK;
}

void tsdf_volume_destroy(tsdf_volume *v)
{
    if (v == NULL)
        return;
    v->ops->destroy(v->impl);
    free(v->removed);
    free(v);
}

int tsdf_volume_reset(tsdf_volume *v)
{
    int rc;
    if (v == NULL)
        return TSDF_EINVAL;
    if ((rc = v->ops->reset(v->impl)) != TSDF_OK)
        return rc;
    volume_forget_removed(v, v->ops->version(v->impl));
    return TSDF_OK;
}

tsdf_backend tsdf_volume_backend(const tsdf_volume *v)
{
    return v != NULL ? v->backend : TSDF_BACKEND_AUTO;
}

const tsdf_volume_params *tsdf_volume_get_params(const tsdf_volume *v)
{
    return v != NULL ? &v->params : NULL;
}

/* ---- work ------------------------------------------------------------------ */

int tsdf_volume_integrate(tsdf_volume *v, const tsdf_frame *f)
{
    int rc;
    if (v == NULL)
        return TSDF_EINVAL;
    if ((rc = tsdf_frame_check(f)) != TSDF_OK) {
        v->frames_rejected_front++;
        return rc;
    }
    return v->ops->integrate(v->impl, f);
}

int tsdf_volume_sync(tsdf_volume *v)
{
    if (v == NULL)
        return TSDF_EINVAL;
    return v->ops->sync(v->impl);
}

int tsdf_volume_set_memory_cap(tsdf_volume *v, uint64_t cap_bytes)
{
    if (v == NULL)
        return TSDF_EINVAL;
    /* The front end's copy is what get_params and the stats report. */
    v->params.memory_cap_bytes = cap_bytes;
    return v->ops->set_memory_cap(v->impl, cap_bytes);
}

uint64_t tsdf_volume_memory_bytes(const tsdf_volume *v)
{
    return v != NULL ? v->ops->memory_bytes(v->impl) : 0;
}

uint64_t tsdf_volume_version(const tsdf_volume *v)
{
    return v != NULL ? v->ops->version(v->impl) : 0;
}

int tsdf_cuda_device_memory(int cuda_device, uint64_t *total_bytes)
{
    if (total_bytes == NULL)
        return TSDF_EINVAL;
    *total_bytes = 0;
#ifdef TSDF_HAVE_CUDA
    return tsdf_cuda_total_memory(cuda_device, total_bytes);
#else
    (void)cuda_device;
    return TSDF_ENOT_BUILT;
#endif
}

int tsdf_volume_get_timeline(tsdf_volume *v, tsdf_frame_timeline *out, size_t max, size_t *n)
{
    if (v == NULL || out == NULL || n == NULL)
        return TSDF_EINVAL;
    *n = 0;
    /* Only the CUDA backend records device-side event timestamps. */
    if (v->ops->timeline == NULL)
        return TSDF_ENOT_BUILT;
    return v->ops->timeline(v->impl, out, max, n);
}

int tsdf_volume_raycast(tsdf_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out)
{
    int rc;
    if (v == NULL)
        return TSDF_EINVAL;
    if ((rc = raycast_params_check(p, out)) != TSDF_OK)
        return rc;
    return v->ops->raycast(v->impl, p, out);
}

static int get_stats(tsdf_volume *v, tsdf_volume_stats *out, int probe)
{
    int rc;
    if (v == NULL || out == NULL)
        return TSDF_EINVAL;
    memset(out, 0, sizeof(*out));
    if ((rc = v->ops->stats(v->impl, out, probe)) != TSDF_OK)
        return rc;
    out->backend = v->backend;
    out->frames_rejected += v->frames_rejected_front;
    out->memory_cap_bytes = v->params.memory_cap_bytes;
    return TSDF_OK;
}

int tsdf_volume_get_stats(tsdf_volume *v, tsdf_volume_stats *out)
{
    return get_stats(v, out, 1);
}

int tsdf_volume_get_counters(tsdf_volume *v, tsdf_volume_stats *out)
{
    return get_stats(v, out, 0);
}

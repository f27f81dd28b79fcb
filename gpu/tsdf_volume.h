/*
 * tsdf_volume.h - the volume engine: a persistent TSDF in a voxel-hashing
 * layout, behind one C API with two backends (the CPU reference and CUDA).
 *
 * Layout: the volume is a sparse set of 8x8x8-voxel blocks. A block is found
 * through an open-addressed hash table keyed by its packed integer block
 * coordinates (see tsdf_math.h). The table grows (rehashes into a larger
 * table) before its load factor passes params.max_load_factor, so a block is
 * never dropped; when the memory cap forbids growth, integrate fails with
 * TSDF_ECAPACITY before it changes anything, and the failure is counted.
 * (Without a memory cap the CUDA backend decides growth from a frame's
 * counts after queueing it, so the load factor may pass max_load_factor by
 * one frame's new blocks, never past max(0.9, max_load_factor): a frame that
 * would is held back on the device and integrated again, in order, once the
 * table has grown.)
 *
 * Frames: camera x right, y down, z forward (optical frame). T_world_cam is a
 * row-major 4x4 rigid transform that maps camera points into the world
 * (p_world = T_world_cam * p_cam). All lengths are metres.
 *
 * Threads: a volume is not thread-safe. One thread at a time may call any
 * function on one volume (the daemon serialises calls per map); different
 * volumes may be used from different threads concurrently.
 *
 * Errors: every function returns TSDF_OK or a negative tsdf_errno code (see
 * common/tsdf_error.h). A failed call leaves the volume as it was, except
 * where its comment says otherwise.
 */
#ifndef TSDF_VOLUME_H
#define TSDF_VOLUME_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSDF_BLOCK_DIM 8
#define TSDF_BLOCK_VOXELS (TSDF_BLOCK_DIM * TSDF_BLOCK_DIM * TSDF_BLOCK_DIM)

/* Limits shared by the engine and the wire codec. */
#define TSDF_MAX_IMAGE_DIM 8192u
#define TSDF_MAX_IMAGE_PIXELS (4096u * 4096u)
/* The smallest max_load_factor a volume takes (see tsdf_volume_params_check). */
#define TSDF_MIN_LOAD_FACTOR 0.1f

typedef enum {
    TSDF_BACKEND_AUTO = 0, /* CUDA when a usable GPU is present, else CPU */
    TSDF_BACKEND_CPU = 1,
    TSDF_BACKEND_CUDA = 2,
} tsdf_backend;

/* "auto", "cpu", "cuda"; "unknown" for other values. */
const char *tsdf_backend_name(tsdf_backend b);
/* Parses "auto", "cpu" or "cuda" into *out; TSDF_EINVAL otherwise. */
int tsdf_backend_parse(const char *name, tsdf_backend *out);
/* 1 if this binary has the CUDA backend and a usable device is present. */
int tsdf_cuda_available(void);

typedef struct {
    float voxel_size_m;               /* edge of one voxel; default 0.01 */
    float trunc_vox;                  /* truncation distance in voxels; default 4 */
    float max_weight;                 /* weights clamp here; default 64 */
    uint32_t initial_capacity_blocks; /* hash-table slots at creation; default 65536 */
    float max_load_factor;     /* grow before blocks/slots passes this; [0.1, 0.95], default 0.5 */
    uint64_t memory_cap_bytes; /* volume memory cap; 0 = no cap; default 0 */
    tsdf_backend backend;      /* default TSDF_BACKEND_AUTO */
    int cuda_device;           /* CUDA device ordinal; default 0 */
} tsdf_volume_params;

/* Fills *p with the defaults listed above. */
void tsdf_volume_params_default(tsdf_volume_params *p);
/* TSDF_OK if *p is usable, else TSDF_EBAD_PARAMS (non-positive or non-finite
 * sizes, max_load_factor outside [TSDF_MIN_LOAD_FACTOR, 0.95], zero capacity). */
int tsdf_volume_params_check(const tsdf_volume_params *p);

typedef struct {
    float fx, fy, cx, cy; /* pinhole intrinsics in pixels */
} tsdf_intrinsics;

/* The widest camera accepted: no pixel ray more than 85 degrees off the
 * optical axis (a field of view of at most 170 degrees), and tan(85 deg). */
#define TSDF_INTRINSICS_MAX_ANGLE_DEG 85.0
#define TSDF_INTRINSICS_MAX_TAN 11.430052302761343

/* TSDF_OK if K describes a real pinhole camera for a width x height image:
 * fx, fy > 0, all four finite, and no ray of the image's extent (pixel
 * edges -0.5 .. width - 0.5, -0.5 .. height - 0.5) more than
 * TSDF_INTRINSICS_MAX_ANGLE_DEG off the optical axis; else
 * TSDF_EBAD_INTRINSICS (TSDF_EINVAL for K NULL). A pinhole model cannot
 * describe a wider lens, and rays that graze every surface would walk
 * volumes of empty space (a 16x16 image with fx = 0.05 spans 179.6
 * degrees). Used by tsdf_frame_check, the raycast's checks and the wire
 * codec; implemented in common/ so the codec needs no engine. Any thread. */
int tsdf_intrinsics_check(const tsdf_intrinsics *K, uint32_t width, uint32_t height);

typedef enum {
    TSDF_DEPTH_U16 = 0, /* uint16 samples, metres = value * depth_scale */
    TSDF_DEPTH_F32 = 1, /* float32 samples in metres */
} tsdf_depth_format;

/* One depth frame to integrate. Nothing here is owned by the engine; the
 * caller's buffers may be reused as soon as tsdf_volume_integrate returns. */
typedef struct {
    uint32_t width, height;
    tsdf_intrinsics K;
    float T_world_cam[16]; /* row-major, camera-to-world */
    tsdf_depth_format depth_format;
    const void *depth; /* width*height samples, row-major, tightly packed */
    float depth_scale; /* metres per unit, TSDF_DEPTH_U16 only (e.g. 0.001) */
    float min_depth_m; /* samples outside [min, max] are no measurement */
    float max_depth_m;
    const uint8_t *rgb; /* optional: width*height*3 RGB8, or NULL */
    /* Optional sizes of the buffers above in bytes, for callers that got
     * them from outside (the daemon sets both from the message): when
     * non-zero they must equal width*height*(2 or 4) and width*height*3, or
     * the frame is refused with TSDF_EBAD_SIZE. 0 = not stated. */
    size_t depth_size_bytes;
    size_t rgb_size_bytes;
} tsdf_frame;

/* An opaque volume. */
typedef struct tsdf_volume tsdf_volume;

/* Creates a volume with parameters *p (NULL: defaults). With backend AUTO it
 * picks CUDA when tsdf_cuda_available(), else CPU; tsdf_volume_backend()
 * says which. Returns TSDF_EBAD_PARAMS, TSDF_ENOMEM, TSDF_ECAPACITY (the
 * initial table exceeds the cap), TSDF_ENO_GPU or TSDF_ENOT_BUILT (CUDA asked
 * for but absent), TSDF_ECUDA. On success *out owns the volume; release it
 * with tsdf_volume_destroy. */
int tsdf_volume_create(const tsdf_volume_params *p, tsdf_volume **out);

/* Releases every host and device resource of v. NULL is a no-op. */
void tsdf_volume_destroy(tsdf_volume *v);

/* Drops every block; the table returns to its initial capacity. Counters of
 * frames and growth are kept; the version keeps increasing. */
int tsdf_volume_reset(tsdf_volume *v);

/* The backend in use (never AUTO) and the parameters the volume was made with. */
tsdf_backend tsdf_volume_backend(const tsdf_volume *v);
const tsdf_volume_params *tsdf_volume_get_params(const tsdf_volume *v);

/* Checks a frame without touching any volume. Distinct codes for distinct
 * faults: TSDF_EEMPTY_IMAGE (zero width or height), TSDF_ETOO_LARGE (beyond
 * TSDF_MAX_IMAGE_DIM / _PIXELS), TSDF_EBAD_INTRINSICS (refused by
 * tsdf_intrinsics_check for the frame's size), TSDF_EBAD_POSE (not finite,
 * last row not 0 0 0 1, or rotation not orthonormal with det +1 within
 * 1e-3), TSDF_EBAD_DEPTH_RANGE
 * (min < 0, max <= min, not finite, or depth_scale <= 0 for U16),
 * TSDF_EBAD_SIZE (a stated buffer size that does not match the image),
 * TSDF_EINVAL (NULL depth or unknown format). */
int tsdf_frame_check(const tsdf_frame *f);

/* Integrates one frame: allocates the blocks within the truncation band of
 * every valid sample (pass 1), then updates every voxel of exactly those
 * blocks (pass 2) with the projective TSDF (weight +1 per frame, clamped at
 * max_weight; colour, when given, as the weight-averaged RGB). Blocks outside
 * this frame's band are not touched, as in voxel hashing: the band is where
 * the frame says anything near a surface. Samples at depth edges (a
 * 4-neighbour more than the truncation distance away) update nothing.
 * Returns the codes of tsdf_frame_check (volume unchanged), TSDF_ECAPACITY
 * (the blocks this frame needs do not fit under the memory cap: nothing of
 * the frame is integrated, stats.insert_failures counts the blocks that did
 * not fit, stats.frames_rejected counts the frame), TSDF_ECUDA.
 * The CUDA backend may still be updating when this returns; every later call
 * on the volume is ordered after it, and tsdf_volume_sync waits for it.
 * Without a memory cap (memory_cap_bytes 0) the CUDA backend reads a frame's
 * block counts back only at the next call on the volume, so a failure of
 * that frame found then (an out-of-memory while growing for it, a device
 * fault) is returned by that next call -- the next integrate (which then
 * does not integrate its own frame either), tsdf_volume_sync, or any other
 * call -- and the failed frame is counted in stats.frames_rejected. With a
 * memory cap every frame's outcome is returned by its own call. */
int tsdf_volume_integrate(tsdf_volume *v, const tsdf_frame *f);

/* Waits for all queued GPU work of v; returns any error it raised. The CPU
 * backend returns TSDF_OK at once. */
int tsdf_volume_sync(tsdf_volume *v);

/* Changes the memory cap of v to cap_bytes (0 = none) for every later
 * integrate and import, as if v had been created with it: a frame whose
 * blocks would not fit under it is refused whole with TSDF_ECAPACITY and
 * counted. Memory already held is kept even when it exceeds the new cap
 * (nothing integrated is dropped); frames that need no new block still go
 * in. tsdf_volume_get_params and the stats show the new cap. On the CUDA
 * backend this first settles a frame queued without a cap, so it may
 * return that frame's failure (counted as for the next call, see
 * tsdf_volume_integrate); the cap is changed anyway. */
int tsdf_volume_set_memory_cap(tsdf_volume *v, uint64_t cap_bytes);

/* The bytes of host (CPU) or device (CUDA) memory v holds now, as
 * stats.memory_bytes, but without waiting for the device or walking the
 * table: cheap enough to call after every frame. 0 for v NULL. */
uint64_t tsdf_volume_memory_bytes(const tsdf_volume *v);

/* The total memory of CUDA device `cuda_device` in bytes, for sizing
 * memory budgets. TSDF_ENOT_BUILT in a binary without the CUDA backend,
 * TSDF_ENO_GPU when the device does not exist, TSDF_EINVAL for total NULL.
 * Any thread. */
int tsdf_cuda_device_memory(int cuda_device, uint64_t *total_bytes);

/*
 * How far a raycast ray goes. A ray starts at camera depth min_depth_m and
 * ends at camera depth max_depth_m, or sooner where it would grow longer
 * than the least of:
 *   - TSDF_RAY_DEPTH_RATIO * max_depth_m along the ray. A ray within 60
 *     degrees of the optical axis is at most twice as long as its camera
 *     depth, so every ordinary camera is marched to exactly max_depth_m;
 *     only extreme intrinsics (fields of view beyond 120 degrees, or a
 *     focal length of a fraction of a pixel) lose range, instead of
 *     marching rays thousands of times longer than the depth asked for;
 *   - TSDF_MAX_RAY_M metres, the engine-wide cap (max_depth_m itself may
 *     not exceed it);
 *   - TSDF_MAX_RAY_VOX voxels, so that a ray's steps stay far above the
 *     float resolution of its depth on volumes of tiny voxels.
 * Together with the step rules of the march (a sample step advances at
 * least half a voxel, an empty-block skip enters the next block) this
 * bounds the work of one ray; see tsdf_ray_max_iterations in
 * tsdf_raycast_march.h.
 */
#define TSDF_RAY_DEPTH_RATIO 2.0f
#define TSDF_MAX_RAY_M 1000.0f
#define TSDF_MAX_RAY_VOX 1048576.0f /* 2^20 */

typedef struct {
    uint32_t width, height;
    tsdf_intrinsics K;
    float T_world_cam[16]; /* row-major, camera-to-world */
    float min_depth_m;     /* rays start here (along z), > 0 */
    float max_depth_m;     /* and stop here (see TSDF_MAX_RAY_M above), <= TSDF_MAX_RAY_M */
    /* Optional cancellation: the CPU backend calls cancel(cancel_arg) on
     * the calling thread every TSDF_RAYCAST_CANCEL_PIXELS pixels, and when
     * it returns non-zero stops and returns TSDF_ETIMEOUT (the outputs are
     * then partly written). The caller is the daemon, whose client gave up
     * on the result. NULL: never cancelled. The CUDA backend does not call
     * it: one kernel launch cannot be stopped half-way, and its work is
     * bounded by the ray bounds above. */
    int (*cancel)(void *cancel_arg);
    void *cancel_arg;
} tsdf_raycast_params;

/* Pixels the CPU raycast marches between two calls of params.cancel. */
#define TSDF_RAYCAST_CANCEL_PIXELS 64u

/* Caller-allocated outputs of a raycast. */
typedef struct {
    float *depth_m; /* width*height z-depths in metres; NaN where no surface */
    float *normals; /* optional: width*height*3 unit normals in the world
                     * frame (from the TSDF gradient); NaN where no surface */
    uint8_t *rgb;   /* optional: width*height*3; 0 where no surface */
} tsdf_raycast_output;

/* Renders the fused surface seen from a pose: marches each ray through
 * allocated blocks, skipping unallocated space block by block, and finds the
 * zero crossing by trilinear interpolation. Checks its parameters like
 * tsdf_frame_check (intrinsics with tsdf_intrinsics_check for the output's
 * size), and refuses a max_depth_m beyond TSDF_MAX_RAY_M with
 * TSDF_EBAD_DEPTH_RANGE. TSDF_ETIMEOUT when params.cancel stopped it. Does
 * not change the volume. */
int tsdf_volume_raycast(tsdf_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out);

/* A triangle mesh with shared vertices. Caller-owned struct: init before
 * use, fini to free; the arrays are malloc'ed by whoever fills the mesh. */
typedef struct {
    size_t vertex_count;
    size_t triangle_count;
    float *positions;  /* 3 * vertex_count, metres, world frame */
    float *normals;    /* 3 * vertex_count, unit, pointing out of the surface */
    uint8_t *colors;   /* 3 * vertex_count RGB8, or NULL when the volume has no colour */
    uint32_t *indices; /* 3 * triangle_count, counter-clockwise seen from outside */
} tsdf_mesh;

void tsdf_mesh_init(tsdf_mesh *m);
void tsdf_mesh_fini(tsdf_mesh *m); /* frees the arrays and re-inits */

typedef struct {
    float min[3], max[3]; /* metres, world frame */
} tsdf_aabb;

typedef struct {
    int use_box; /* 1: only blocks that intersect box */
    tsdf_aabb box;
    uint64_t since_version; /* 0: all blocks; V: only blocks changed after version V */
} tsdf_mesh_params;

/* Marching cubes over the selected blocks (params NULL: all blocks). Cells
 * with a corner of zero weight make no triangles. Vertices are shared: one
 * vertex per crossed voxel edge, also across block seams, so a closed
 * surface gives a closed mesh. On success *out (initialised by the caller;
 * its old arrays are freed) holds the mesh. */
int tsdf_volume_mesh(tsdf_volume *v, const tsdf_mesh_params *params, tsdf_mesh *out);

/* Writes m as binary little-endian PLY (vertex x y z nx ny nz [red green
 * blue], face vertex_indices as uchar count + int indices), atomically
 * enough for tools: to path. TSDF_EIO on failure. */
int tsdf_mesh_write_ply(const tsdf_mesh *m, const char *path);

#define TSDF_PROBE_HIST_BINS 16

typedef struct {
    tsdf_backend backend;
    uint64_t blocks_allocated;
    uint64_t capacity_slots;
    double load_factor;                        /* blocks_allocated / capacity_slots */
    uint32_t max_probe;                        /* longest displacement from a key's home slot */
    double mean_probe;                         /* mean displacement over resident keys */
    uint64_t probe_hist[TSDF_PROBE_HIST_BINS]; /* bin i: displacement i; last bin: >= 15 */
    uint64_t growth_events;                    /* rehashes into a larger table */
    uint64_t frames_integrated;
    uint64_t frames_rejected; /* frames refused by integrate (any error) */
    uint64_t insert_failures; /* blocks not inserted because of the memory cap */
    uint64_t memory_bytes;    /* host (CPU) or device (CUDA) memory held */
    uint64_t memory_cap_bytes;
    uint64_t version; /* bumps on every integrate, reset and import */
    int has_color;
    /* Device-side times of the last integrated frame and query, in ms
     * (CUDA events; wall time on the CPU backend). */
    double last_upload_ms, last_alloc_ms, last_update_ms, last_raycast_ms, last_mesh_ms;
} tsdf_volume_stats;

int tsdf_volume_get_stats(tsdf_volume *v, tsdf_volume_stats *out);

/* One voxel as stored: sdf clamped to [-trunc, +trunc] metres, weight in
 * [0, max_weight] (0 = never observed), weight-averaged colour. */
typedef struct {
    float sdf_m;
    float weight;
    uint8_t rgb[3];
    uint8_t pad;
} tsdf_voxel;

/* A set of blocks copied out of or into a volume (for snapshots, tests and
 * the GPU-vs-CPU comparison). Caller-owned: init, fini. Voxel (x, y, z) of
 * block i is voxels[i * TSDF_BLOCK_VOXELS + x + 8 * (y + 8 * z)]. */
typedef struct {
    size_t count;
    int32_t *coords;    /* 3 * count block coordinates */
    uint64_t *versions; /* count: version at which each block last changed */
    tsdf_voxel *voxels; /* TSDF_BLOCK_VOXELS * count */
    /* Export: the volume's version. Import: the importing volume's version
     * becomes one above the larger of its own and this one, and every
     * imported block carries it, so versions never go back across a
     * snapshot and a restart (0: no constraint). */
    uint64_t version;
} tsdf_block_set;

void tsdf_block_set_init(tsdf_block_set *s);
void tsdf_block_set_fini(tsdf_block_set *s);

/* Copies every block of v into *out, sorted by packed block key ascending
 * (tsdf_block_key), so two volumes compare block by block. */
int tsdf_volume_export_blocks(tsdf_volume *v, tsdf_block_set *out);

/* Replaces the whole content of v by the blocks of *in (growing the table as
 * needed); v's version moves above in->version (see tsdf_block_set). Validates first (coords in
 * range, no duplicate, finite sdf within the truncation band, weights in [0, max_weight]); on any
 * error v is unchanged. */
int tsdf_volume_import_blocks(tsdf_volume *v, const tsdf_block_set *in);

/* ---- frame timeline (CUDA backend) -------------------------------------
 * Device event times of one integrated frame, in ms since the volume's
 * epoch (an event recorded when the volume was created). The upload runs on
 * its own stream, so the upload of frame N+1 may overlap the update of
 * frame N: upload_start_ms of N+1 < update_end_ms of N. */
typedef struct {
    uint64_t frame; /* 1-based index among the volume's integrated frames */
    double upload_start_ms, upload_end_ms;
    double alloc_start_ms, alloc_end_ms;
    double update_start_ms, update_end_ms;
} tsdf_frame_timeline;

/* Copies the timelines of the last (at most 16) integrated frames, oldest
 * first, into out[0 .. max-1]; *n receives the count. Waits for the frames'
 * GPU work. TSDF_ENOT_BUILT on the CPU backend. */
int tsdf_volume_get_timeline(tsdf_volume *v, tsdf_frame_timeline *out, size_t max, size_t *n);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_VOLUME_H */

/*
 * tsdf_volume.h - the volume engine: a persistent TSDF in a voxel-hashing
 * layout, behind one C API with two backends (the CPU reference and CUDA).
 *
 * Layout: the volume is a sparse set of 8x8x8-voxel blocks. A block is found
 * through an open-addressed hash table keyed by its packed integer block
 * coordinates (see tsdf_math.h), and its voxels live in a block pool, one
 * channel for the sdf and weight (in the volume's layout: 4 or 8 bytes a
 * voxel) and one for colour, allocated only once colour arrives. Blocks can
 * be removed one by one (tsdf_volume_evict): their pool slots go to a free
 * list that later blocks take first. The table grows (rehashes into a
 * larger table) before its load factor passes params.max_load_factor, so a
 * block is never dropped; the pool grows in steps of a sixteenth (at least
 * twice the most blocks one frame added), not by doubling. When the memory
 * cap forbids growth, integrate fails with TSDF_ECAPACITY before it changes
 * anything, and the failure is counted.
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
 *
 * Types: the plain data this API takes and returns (tsdf_frame,
 * tsdf_raycast_params, tsdf_mesh, tsdf_volume_stats, ...) are declared in
 * common/tsdf_types.h, which the wire codec and libtsdf share without the
 * engine; this header adds the engine's own types and functions.
 */
#ifndef TSDF_VOLUME_H
#define TSDF_VOLUME_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_error.h"
#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSDF_BLOCK_DIM 8
#define TSDF_BLOCK_VOXELS (TSDF_BLOCK_DIM * TSDF_BLOCK_DIM * TSDF_BLOCK_DIM)

/* The smallest max_load_factor a volume takes (see tsdf_volume_params_check). */
#define TSDF_MIN_LOAD_FACTOR 0.1f

/* "auto", "cpu", "cuda"; "unknown" for other values. */
const char *tsdf_backend_name(tsdf_backend b);
/* Parses "auto", "cpu" or "cuda" into *out; TSDF_EINVAL otherwise. */
int tsdf_backend_parse(const char *name, tsdf_backend *out);
/* 1 if this binary has the CUDA backend and a usable device is present. */
int tsdf_cuda_available(void);

/* Host memory for frames' images that the CUDA backend's copy engines read
 * directly (page-locked when tsdf_cuda_available(), ordinary memory
 * otherwise). A frame whose depth (or colour) lies in it is uploaded from
 * it, skipping the host copy into the volume's staging buffer (614 KB for
 * a 640x480 16-bit depth image); tsdf_volume_integrate then returns once
 * the upload has read it, so the caller may refill it at once, as with any
 * memory. Any other page-locked memory (cudaHostAlloc, cudaHostRegister)
 * takes the same path. Page-locking is slow: allocate once and reuse.
 * The memory is 64-byte aligned. TSDF_EINVAL for a NULL out or 0 bytes,
 * TSDF_ENOMEM when it cannot be had. Free with tsdf_host_free (NULL is
 * ignored), never with free(). */
int tsdf_host_alloc(size_t bytes, void **out);
void tsdf_host_free(void *p);

/* Page-locks bytes of host memory from p that the caller allocated or
 * mapped itself (a shared-memory ring), so that the CUDA backend's copies
 * read and write it directly, as tsdf_host_alloc's memory: a raycast's
 * outputs there are written by the device's copy engine, a frame's depth
 * there is uploaded from it. The pages are faulted in and locked by the
 * driver (a file's pages must exist and stay: the caller keeps the
 * mapping and the file's size until tsdf_host_unregister). TSDF_EINVAL
 * for NULL or 0 bytes, TSDF_ENOT_BUILT without the CUDA backend,
 * TSDF_ENO_GPU without a usable device, TSDF_ENOMEM when the driver
 * refuses (the range is then not registered). Slow (milliseconds for
 * megabytes): register once and reuse. tsdf_host_unregister(p) undoes it;
 * nothing for NULL. */
int tsdf_host_register(void *p, size_t bytes);
void tsdf_host_unregister(void *p);

typedef struct {
    float voxel_size_m;               /* edge of one voxel; default 0.01 */
    float trunc_vox;                  /* truncation distance in voxels; default 4 */
    float max_weight;                 /* weights clamp here; default 64 */
    uint32_t initial_capacity_blocks; /* hash-table slots at creation; default 65536 */
    float max_load_factor;     /* grow before blocks/slots passes this; [0.1, 0.95], default 0.5 */
    uint64_t memory_cap_bytes; /* volume memory cap; 0 = no cap; default 0 */
    tsdf_backend backend;      /* default TSDF_BACKEND_AUTO */
    int cuda_device;           /* CUDA device ordinal; default 0 */
    tsdf_layout layout;        /* how voxels are stored; default TSDF_LAYOUT_S16 */
    /* Threads the CPU backend works with (the calling thread included):
     * 0 = every online core (the default), at most TSDF_MAX_CPU_THREADS.
     * Results do not depend on it. The CUDA backend ignores it. */
    uint32_t cpu_threads;
} tsdf_volume_params;

/* The most threads a CPU volume takes (tsdf_volume_params.cpu_threads). */
#define TSDF_MAX_CPU_THREADS 256u

/* Fills *p with the defaults listed above. */
void tsdf_volume_params_default(tsdf_volume_params *p);
/* TSDF_OK if *p is usable, else TSDF_EBAD_PARAMS (non-positive or non-finite
 * sizes, max_load_factor outside [TSDF_MIN_LOAD_FACTOR, 0.95], zero capacity,
 * an unknown layout, cpu_threads above TSDF_MAX_CPU_THREADS, or the s16 layout with a max_weight
 * that is not an integer in [1, 65535]: its weights are stored as integers). */
int tsdf_volume_params_check(const tsdf_volume_params *p);

/* One voxel's value, whatever its layout: sdf clamped to [-trunc, +trunc]
 * metres, weight in [0, max_weight] (0 = never observed). Colour is a
 * channel of its own (tsdf_block_set.rgb). */
typedef struct {
    float sdf_m;
    float weight;
} tsdf_vox;

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

/* The bytes of host (CPU) or device (CUDA) memory that v's content holds
 * now (hash table and block pool, its spare capacity included; on CUDA the
 * per-frame scratch and query buffers come on top), as stats.memory_bytes,
 * but without waiting for the device or walking the table: cheap enough to
 * call after every frame. 0 for v NULL. */
uint64_t tsdf_volume_memory_bytes(const tsdf_volume *v);

/* The total memory of CUDA device `cuda_device` in bytes, for sizing
 * memory budgets. TSDF_ENOT_BUILT in a binary without the CUDA backend,
 * TSDF_ENO_GPU when the device does not exist, TSDF_EINVAL for total NULL.
 * Any thread. */
int tsdf_cuda_device_memory(int cuda_device, uint64_t *total_bytes);

/* Renders the fused surface seen from a pose: marches each ray through
 * allocated blocks, skipping unallocated space block by block and free
 * space by the sdf of the voxel it is in, and finds the zero crossing by
 * trilinear interpolation (gpu/shared/tsdf_raycast_march.h). Normals are
 * central differences of the interpolated TSDF one voxel apart. Checks its parameters like
 * tsdf_frame_check (intrinsics with tsdf_intrinsics_check for the output's
 * size), and refuses a max_depth_m beyond TSDF_MAX_RAY_M with
 * TSDF_EBAD_DEPTH_RANGE. TSDF_ETIMEOUT when params.cancel stopped it. Does
 * not change the volume. */
int tsdf_volume_raycast(tsdf_volume *v, const tsdf_raycast_params *p, tsdf_raycast_output *out);

/* Marching cubes over the selected blocks (params NULL: all blocks). Cells
 * with a corner of zero weight make no triangles. Vertices are shared: one
 * vertex per crossed voxel edge, also across block seams, so a closed
 * surface gives a closed mesh; by_block meshes come in parts instead, and
 * incremental ones (since_version) also say which blocks went (see
 * tsdf_mesh in tsdf_types.h). On success *out (initialised by the caller)
 * holds the mesh; the arrays of the mesh it held are reused or freed, so
 * meshing again into the same struct is the cheap way (fresh memory costs a
 * page fault every 4 KiB). On failure *out may be left empty. TSDF_EINVAL
 * for a box that is not finite or has max < min. */
int tsdf_volume_mesh(tsdf_volume *v, const tsdf_mesh_params *params, tsdf_mesh *out);

/* Every statistic, the probe-length histogram included: walks the whole
 * table (a kernel and a wait on the CUDA backend), so call it at a
 * monitoring cadence, not after every frame (tsdf_volume_version and
 * tsdf_volume_memory_bytes are the cheap ones). */
int tsdf_volume_get_stats(tsdf_volume *v, tsdf_volume_stats *out);

/* The statistics but the probe-length histogram (max_probe, mean_probe and
 * probe_hist are 0): no walk over the table and no kernel, though the CUDA
 * backend still waits for the queued work, as for every statistic. */
int tsdf_volume_get_counters(tsdf_volume *v, tsdf_volume_stats *out);

/* ---- blocks -----------------------------------------------------------
 * A set of blocks copied out of or into a volume (snapshots, eviction, the
 * GPU-vs-CPU comparison), in channels as the volume stores them (see
 * gpu/shared/tsdf_voxel_layout.h): voxel (x, y, z) of block i is voxel
 * i * TSDF_BLOCK_VOXELS + x + 8 * (y + 8 * z) of each channel. Read voxels
 * with tsdf_block_set_get, whatever the layout. Caller-owned: init, fini
 * (which frees the arrays). */
typedef struct {
    size_t count;
    int32_t *coords;    /* 3 * count block coordinates */
    uint64_t *versions; /* count: version at which each block last changed */
    tsdf_layout layout; /* how geom stores the sdf and the weight */
    float sdf_unit_m;   /* s16: metres of one unit of a stored sdf (trunc / 32767) */
    void *geom;         /* count * TSDF_BLOCK_VOXELS voxels of geometry in layout */
    uint8_t *rgb;       /* count * TSDF_BLOCK_VOXELS * 3 RGB8, or NULL: no colour */
    /* Export: the volume's version. Import: the importing volume's version
     * becomes one above the larger of its own and this one, and every
     * imported block carries it, so versions never go back across a
     * snapshot and a restart (0: no constraint). */
    uint64_t version;
} tsdf_block_set;

void tsdf_block_set_init(tsdf_block_set *s);
void tsdf_block_set_fini(tsdf_block_set *s);

/* Allocates (after fini) room for count blocks of layout (sdf_unit_m for
 * s16), with a colour channel when with_rgb: coords, versions and the
 * channels zeroed (every voxel unobserved). TSDF_EINVAL (bad layout),
 * TSDF_ENOMEM. */
int tsdf_block_set_alloc(tsdf_block_set *s, size_t count, tsdf_layout layout, float sdf_unit_m,
                         int with_rgb);

/* Bytes of the geometry channel of the whole set. */
size_t tsdf_block_set_geom_bytes(const tsdf_block_set *s);

/* Voxel v (0 .. TSDF_BLOCK_VOXELS - 1) of block i: its value, and writing
 * one (rounded as the layout stores it). */
tsdf_vox tsdf_block_set_get(const tsdf_block_set *s, size_t i, unsigned v);
void tsdf_block_set_put(tsdf_block_set *s, size_t i, unsigned v, tsdf_vox x);

/* Copies every block of v into *out, sorted by packed block key ascending
 * (tsdf_block_key), in v's layout, with colour when v has any. */
int tsdf_volume_export_blocks(tsdf_volume *v, tsdf_block_set *out);

/* Replaces the whole content of v by the blocks of *in (converted to v's
 * layout if needed; growing the table as needed); v's version moves above
 * in->version (see tsdf_block_set). Validates first (coords in range, no
 * duplicate, finite sdf within the truncation band, weights in [0,
 * max_weight]); on any error v is unchanged. */
int tsdf_volume_import_blocks(tsdf_volume *v, const tsdf_block_set *in);

/* Which blocks a selection takes: every block for which all the rules in
 * `rules` hold (no rule: every block). Distances are to the block's box
 * (8 voxels a side), so a block half inside a radius is inside it. */
#define TSDF_SELECT_OUTSIDE_RADIUS 1u    /* no point of the block within radius_m of center_m */
#define TSDF_SELECT_INSIDE_RADIUS 2u     /* some point of the block within radius_m of center_m */
#define TSDF_SELECT_OUTSIDE_BOX 4u       /* the block does not intersect box */
#define TSDF_SELECT_INSIDE_BOX 8u        /* the block intersects box */
#define TSDF_SELECT_NOT_SINCE 16u        /* the block last changed at or before version */
#define TSDF_SELECT_SINCE 32u            /* the block changed after version */
#define TSDF_SELECT_INSIDE_FRUSTUM 64u   /* the block may be in view of frustum (see below) */
#define TSDF_SELECT_OUTSIDE_FRUSTUM 128u /* the block is out of view of frustum */
#define TSDF_SELECT_RULES 255u

/* A camera's view: the pinhole K of a width x height image at pose
 * T_world_cam, between camera depths near_m and far_m. A block is inside
 * when no face of that pyramid has all 8 corners of the block's box beyond
 * it: every block the camera sees is inside, and a block just off an edge
 * of the pyramid may be too (the usual box-against-planes test, the price
 * of one cheap test per block). */
typedef struct {
    float T_world_cam[16];
    tsdf_intrinsics K;
    uint32_t width, height;
    float near_m, far_m;
} tsdf_frustum;

typedef struct {
    uint32_t rules;
    float center_m[3];
    float radius_m;
    tsdf_aabb box;
    uint64_t version;
    tsdf_frustum frustum;
} tsdf_block_select;

/* TSDF_OK when q is a selection the engine takes: known rules, finite
 * numbers, radius >= 0, box min <= max, a rigid frustum pose, intrinsics
 * that tsdf_intrinsics_check takes for its image and 0 <= near < far,
 * finite; TSDF_EINVAL otherwise. */
int tsdf_block_select_check(const tsdf_block_select *q);

/* The coordinates of the blocks q selects (q NULL: all), sorted by packed
 * block key: *coords (malloc'ed, 3 * *n) belongs to the caller (NULL when
 * *n is 0). Does not change the volume. */
int tsdf_volume_select(tsdf_volume *v, const tsdf_block_select *q, int32_t **coords, size_t *n);

/* Removes the blocks q selects (q NULL: all of them, but unlike reset the
 * table keeps its size). With out not NULL they are first copied into *out
 * (as tsdf_volume_export_blocks copies, replacing what *out held); *erased
 * (optional) receives how many went. Their memory goes to the pool's free
 * list for later blocks. When any block went the version moves one up and
 * the removed blocks are recorded for mesh(since_version): a later
 * incremental mesh lists them in removed_coords. */
int tsdf_volume_evict(tsdf_volume *v, const tsdf_block_select *q, tsdf_block_set *out,
                      size_t *erased);

/* Writes the blocks of *in into v beside what it holds (converted to v's
 * layout if needed): a block v lacks is added, one it has is replaced.
 * Every written block carries the new version (one above v's), so an
 * incremental mesh sees them. For blocks brought back after an eviction.
 * Validates like import; TSDF_ECAPACITY when they do not fit under the
 * cap. On any error v is unchanged. */
int tsdf_volume_write_blocks(tsdf_volume *v, const tsdf_block_set *in);

/* The volume's version now: bumps on every change (integrate, reset, import,
 * write, evict). Never waits for the device and never goes back. On the
 * CUDA backend a frame queued but not yet settled already counts. 0 for v
 * NULL. */
uint64_t tsdf_volume_version(const tsdf_volume *v);

/* Copies the timelines of the last (at most 16) integrated frames, oldest
 * first, into out[0 .. max-1]; *n receives the count. Waits for the frames'
 * GPU work. TSDF_ENOT_BUILT on the CPU backend. */
int tsdf_volume_get_timeline(tsdf_volume *v, tsdf_frame_timeline *out, size_t max, size_t *n);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_VOLUME_H */

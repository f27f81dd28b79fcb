/*
 * tsdf_types.h - the plain data types that the volume engine, the wire
 * codec, the client library and the frame sources all speak: a depth frame
 * and its intrinsics, raycast parameters and outputs, a mesh, the engine's
 * statistics and frame timeline, and the image limits they share; plus the
 * small helpers of those types (tsdf_intrinsics_check, tsdf_mesh_init and
 * tsdf_mesh_fini).
 *
 * No function here needs the engine: the helpers are in common/ (tsdf_types.c,
 * tsdf_intrinsics.c), compiled into the engine and into libtsdf alike, so
 * that proto/, client/ and scenes/ include this header instead of
 * gpu/tsdf_volume.h and an installed libtsdf provides every function its
 * headers declare. The engine's own functions stay in gpu/tsdf_volume.h.
 *
 * Frames: camera x right, y down, z forward (optical frame). T_world_cam is a
 * row-major 4x4 rigid transform that maps camera points into the world
 * (p_world = T_world_cam * p_cam). All lengths are metres.
 *
 * Threads: the helpers keep no state; any thread may call them on structs
 * that no other thread uses at the same time.
 */
#ifndef TSDF_TYPES_H
#define TSDF_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_api.h"
#include "tsdf_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits shared by the engine and the wire codec. */
#define TSDF_MAX_IMAGE_DIM 8192u
#define TSDF_MAX_IMAGE_PIXELS (4096u * 4096u)

typedef enum {
    TSDF_BACKEND_AUTO = 0, /* CUDA when a usable GPU is present, else CPU */
    TSDF_BACKEND_CPU = 1,
    TSDF_BACKEND_CUDA = 2,
} tsdf_backend;

/* How a volume stores a voxel's sdf and weight (gpu/shared/tsdf_voxel_layout.h
 * has the bytes). Colour, when a map has any, is stored apart from them. */
typedef enum {
    TSDF_LAYOUT_F32 = 1, /* sdf float32 metres, weight float32: 8 B a voxel, 4 KiB a block */
    TSDF_LAYOUT_S16 = 2, /* sdf int16 fraction of the truncation, weight uint16: 4 B, 2 KiB */
} tsdf_layout;

/* "f32", "s16"; "unknown" for other values. */
TSDF_API const char *tsdf_layout_name(tsdf_layout l);
/* Parses "f32" or "s16" into *out; TSDF_EINVAL otherwise. */
TSDF_API int tsdf_layout_parse(const char *name, tsdf_layout *out);

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
TSDF_API int tsdf_intrinsics_check(const tsdf_intrinsics *K, uint32_t width, uint32_t height);

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
     * the calling thread every TSDF_RAYCAST_CANCEL_PIXELS pixels of the
     * rows that thread marches (its other threads march the rest), and
     * when it returns non-zero stops, the other threads at their next
     * row, and returns TSDF_ETIMEOUT (the outputs are then partly
     * written). The caller is the daemon, whose client gave up
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

/* A triangle mesh with shared vertices. Caller-owned struct: init before
 * use, fini to free; the arrays are malloc'ed by whoever fills the mesh.
 *
 * By block (tsdf_mesh_params.by_block): the mesh comes in one part per
 * voxel block that it covers, so that a client can keep a mesh current by
 * replacing parts: part i holds the triangles of the cells of block
 * block_coords[3i..3i+2] (a cell belongs to the block of its minimum
 * corner) and its own copy of their vertices, vertices
 * [block_vertex_start[i], block_vertex_start[i + 1]) and triangles
 * [block_triangle_start[i], block_triangle_start[i + 1]); indices stay
 * global. Every block the mesh covers has a part, also one whose cells make
 * no triangle (its old part is then to be cleared). Parts are in ascending
 * block key order. A whole mesh shares vertices across block seams; parts
 * do not.
 *
 * Since a version (tsdf_mesh_params.since_version > 0): the mesh covers the
 * blocks that changed after that version (and those whose cells reach into
 * one that changed or went); removed_coords lists the blocks that existed
 * then and are gone now (erased, evicted or reset away): a client drops
 * their parts. When the volume cannot say what happened since that version
 * (it was reset or imported after it, or its record of removed blocks no
 * longer reaches back that far), the mesh is the whole volume and full is
 * 1: the client replaces everything it holds. */
typedef struct {
    size_t vertex_count;
    size_t triangle_count;
    float *positions;  /* 3 * vertex_count, metres, world frame */
    float *normals;    /* 3 * vertex_count, unit, pointing out of the surface */
    uint8_t *colors;   /* 3 * vertex_count RGB8, or NULL when the volume has no colour */
    uint32_t *indices; /* 3 * triangle_count, counter-clockwise seen from outside */
    /* By block: the parts (block_count 0 and NULL arrays otherwise). */
    size_t block_count;
    int32_t *block_coords;          /* 3 * block_count block coordinates */
    uint32_t *block_vertex_start;   /* block_count + 1 */
    uint32_t *block_triangle_start; /* block_count + 1 */
    /* Since a version: the blocks gone since then, and whether this mesh
     * replaces everything instead. */
    size_t removed_count;
    int32_t *removed_coords; /* 3 * removed_count block coordinates */
    int full;
} tsdf_mesh;

TSDF_API void tsdf_mesh_init(tsdf_mesh *m);
TSDF_API void tsdf_mesh_fini(tsdf_mesh *m); /* frees the arrays and re-inits */

typedef struct {
    float min[3], max[3]; /* metres, world frame */
} tsdf_aabb;

typedef struct {
    int use_box; /* 1: only blocks that intersect box */
    tsdf_aabb box;
    uint64_t since_version; /* 0: all blocks; V: only blocks changed after version V */
    int by_block;           /* 1: one part per block (see tsdf_mesh) */
} tsdf_mesh_params;

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
    uint64_t memory_bytes;    /* memory of the content: table + block pool (host or device) */
    uint64_t memory_cap_bytes;
    uint64_t version; /* bumps on every integrate, reset, import, write and erase */
    int has_color;
    tsdf_layout layout;            /* how the volume stores its voxels */
    uint64_t pool_capacity_blocks; /* blocks the pool holds room for (in use + free) */
    uint64_t blocks_erased;        /* blocks removed one by one (erase, eviction) so far */
    /* Device-side times of the last integrated frame and query, in ms
     * (CUDA events; wall time on the CPU backend). */
    double last_upload_ms, last_alloc_ms, last_update_ms, last_raycast_ms, last_mesh_ms;
} tsdf_volume_stats;

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

#ifdef __cplusplus
}
#endif

#endif /* TSDF_TYPES_H */

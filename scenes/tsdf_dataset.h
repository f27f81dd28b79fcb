/*
 * tsdf_dataset.h - depth sequences on disk: the Microsoft 7-Scenes layout
 * and the TUM RGB-D layout, read frame by frame.
 *
 * 7-Scenes (detected by frame-000000.depth.png in DIR/frames or DIR):
 *   [frames/]frame-XXXXXX.depth.png  16-bit gray, millimetres; 0 and 65535
 *                                    are no measurement (65535 is returned as 0)
 *   [frames/]frame-XXXXXX.pose.txt   4x4 camera-to-world, row-major, metres
 *   camera-intrinsics.txt            3x3 K (optional: fx = fy = 585,
 *                                    cx = 320, cy = 240 otherwise)
 *   Frames are the indices found on disk, sorted (gaps allowed).
 * TUM RGB-D (detected by depth.txt and groundtruth.txt in DIR):
 *   depth.txt        "timestamp path" lines, '#' comments; path relative to DIR
 *   groundtruth.txt  "timestamp tx ty tz qx qy qz qw" lines, '#' comments:
 *                    the pose of the optical centre in the world
 *   camera-intrinsics.txt  optional: a 3x3 K, or one line "fx fy cx cy";
 *                    otherwise the fr1 defaults fx 525, fy 525, cx 319.5, cy 239.5
 *   depth images are 16-bit gray with 5000 units per metre. Each depth image
 *   takes the ground-truth pose with the nearest timestamp; images with no
 *   pose within 20 ms are skipped (counted in tsdf_dataset_info.skipped).
 *
 * Everything that describes the sequence (file lists, TUM poses,
 * intrinsics) is read and checked by tsdf_dataset_open; a frame's depth
 * image (and its 7-Scenes pose file) by tsdf_dataset_load. Files are
 * parsed strictly: a malformed number, a short line, a non-finite or
 * non-rigid pose is an error code, never a crash or a silent guess.
 *
 * Bounds: at most TSDF_DATASET_MAX_FRAMES frames, lines of at most 4096
 * bytes, paths of at most 4096 bytes, images within TSDF_MAX_IMAGE_DIM.
 *
 * Ownership: tsdf_dataset_open returns an opaque reader that the caller
 * closes with tsdf_dataset_close. Load writes into the caller's buffers.
 * Threads: a reader is read-only after open, so several threads may load
 * frames from one reader at once.
 * Errors: TSDF_EINVAL, TSDF_ENOT_FOUND (no such folder or not a known
 * layout, missing file), TSDF_EIO, TSDF_EFORMAT (malformed text or PNG),
 * TSDF_EBAD_POSE, TSDF_EBAD_INTRINSICS, TSDF_EBAD_SIZE (caller buffer too
 * small), TSDF_ETOO_LARGE, TSDF_ENOMEM.
 */
#ifndef TSDF_DATASET_H
#define TSDF_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_error.h"
#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSDF_DATASET_MAX_FRAMES 1000000u

typedef enum {
    TSDF_DATASET_7SCENES = 1,
    TSDF_DATASET_TUM = 2,
} tsdf_dataset_kind;

typedef struct tsdf_dataset tsdf_dataset;

typedef struct {
    tsdf_dataset_kind kind;
    uint32_t frame_count;
    uint32_t skipped;       /* TUM: depth images without a pose within 20 ms */
    uint32_t width, height; /* of the first frame's depth image */
    tsdf_intrinsics K;
    float depth_scale; /* metres per depth unit: 0.001 (7-Scenes), 0.0002 (TUM) */
} tsdf_dataset_info;

/* One loaded frame. The depth samples are in the caller's buffer. */
typedef struct {
    uint32_t index; /* 0-based position in the sequence */
    uint32_t width, height;
    float depth_scale; /* metres per unit */
    tsdf_intrinsics K;
    float T_world_cam[16]; /* row-major camera-to-world, finite and rigid (1e-3) */
    double timestamp_s;    /* TUM: the depth image's timestamp; 7-Scenes: index / 30 */
} tsdf_dataset_frame;

/* Opens the sequence in folder dir. On success *out owns the reader. */
int tsdf_dataset_open(const char *dir, tsdf_dataset **out);

/* Releases the reader. NULL is a no-op. */
void tsdf_dataset_close(tsdf_dataset *ds);

/* What the sequence is; fills *out. */
int tsdf_dataset_get_info(const tsdf_dataset *ds, tsdf_dataset_info *out);

/* The number of frames (0 for NULL). */
uint32_t tsdf_dataset_count(const tsdf_dataset *ds);

/* Loads frame i: its depth image into depth (capacity_pixels samples;
 * TSDF_EBAD_SIZE when the image is larger), its pose, intrinsics and scale
 * into *out. TSDF_EINVAL when i >= count. */
int tsdf_dataset_load(const tsdf_dataset *ds, uint32_t i, uint16_t *depth, size_t capacity_pixels,
                      tsdf_dataset_frame *out);

/* Makes an engine frame out of a loaded one: TSDF_DEPTH_U16 with the frame's
 * scale, the depth range [min_depth_m, max_depth_m], no colour. *out borrows
 * depth. */
void tsdf_dataset_frame_to_tsdf(const tsdf_dataset_frame *f, const uint16_t *depth,
                                float min_depth_m, float max_depth_m, tsdf_frame *out);

/* Parses a 4x4 row-major matrix (16 numbers, whitespace separated, nothing
 * else but whitespace) from the text file at path and checks that it is a
 * finite rigid transform. TSDF_EFORMAT, TSDF_EBAD_POSE, TSDF_EIO,
 * TSDF_ENOT_FOUND. Exposed for the CLI and the tests. */
int tsdf_dataset_read_pose_file(const char *path, float T[16]);

/* Parses pinhole intrinsics from the text file at path: a 3x3 K (9 numbers,
 * row-major, no skew, last row 0 0 1: 7-Scenes' camera-intrinsics.txt) or
 * the 4 numbers "fx fy cx cy", and checks fx, fy > 0 and all finite.
 * TSDF_EFORMAT (another count of numbers), TSDF_EBAD_INTRINSICS,
 * TSDF_EIO, TSDF_ENOT_FOUND. Exposed for the CLI. */
int tsdf_dataset_read_intrinsics_file(const char *path, tsdf_intrinsics *K);

/* A camera-to-world pose from a translation and a quaternion (x, y, z, w;
 * normalised here). TSDF_EBAD_POSE when not finite or when the quaternion's
 * norm is not within 1e-2 of 1 (a file that is not a rotation). */
int tsdf_dataset_pose_from_tum(const double t[3], const double q_xyzw[4], float T[16]);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_DATASET_H */

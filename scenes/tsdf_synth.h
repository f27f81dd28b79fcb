/*
 * tsdf_synth.h - synthetic analytic scenes with exact depth.
 *
 * A scene is a union of primitives (spheres, boxes that may be rotated,
 * rooms, infinite planes). tsdf_scene_sdf gives the true signed distance of
 * a world point to the scene's surface, tsdf_scene_render ray-casts the
 * scene analytically into a z-depth image, and the named sequences
 * (tsdf_synth_sequence_*) fix one trajectory per standard scene so that the
 * tests, the benchmarks, the demo and the CLI all fuse the same frames.
 *
 * Conventions (the same as common/tsdf_types.h): metres; the world z axis
 * points up in every standard scene; camera x right, y down, z forward;
 * T_world_cam is a row-major 4x4 camera-to-world rigid transform. A pixel
 * (u, v) (integer column and row) is the ray through the image point
 * (u, v), i.e. through ((u - cx) / fx, (v - cy) / fy, 1) in the camera, so a
 * point at camera coordinates (x, y, z) projects onto pixel
 * (fx x / z + cx, fy y / z + cy) rounded to the nearest integer.
 *
 * Signs: a solid's inside is negative, free space positive. A sphere and a
 * box are solids; a room is the inside of an axis-aligned box seen from
 * within: its free space is the box's inside and its solid everything
 * outside the walls; a plane's solid is the half-space behind its normal.
 *
 * Ownership: every struct here is caller-owned, fixed-size and holds no
 * pointer to memory of its own, so it may be copied, and needs no fini.
 * Threads: all functions are reentrant; a scene may be read (sdf, render)
 * from several threads at once.
 * Errors: functions that can fail return TSDF_OK or a negative tsdf_errno.
 */
#ifndef TSDF_SYNTH_H
#define TSDF_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_error.h"
#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most primitives one scene holds. */
#define TSDF_SCENE_MAX_PRIMS 32

typedef enum {
    TSDF_PRIM_SPHERE = 1, /* solid ball: center_m, radius_m */
    TSDF_PRIM_BOX = 2,    /* solid box: center_m, half_m, R_world_box */
    TSDF_PRIM_ROOM = 3,   /* inside of an axis-aligned box: center_m, half_m */
    TSDF_PRIM_PLANE = 4,  /* half-space: center_m is a point on it, normal its unit normal */
} tsdf_prim_type;

typedef struct {
    tsdf_prim_type type;
    float center_m[3];
    float radius_m;       /* sphere only */
    float half_m[3];      /* box and room: half-extents along the box axes */
    float R_world_box[9]; /* box only: row-major rotation, box axes -> world; identity if
                           * axis-aligned. Columns are the box's axes in the world. */
    float normal[3];      /* plane only: unit normal pointing into free space */
    uint8_t rgb[3];       /* colour rendered for this primitive */
} tsdf_primitive;

typedef struct {
    uint32_t count;
    tsdf_primitive prims[TSDF_SCENE_MAX_PRIMS];
} tsdf_scene;

/* Empties *s. */
void tsdf_scene_init(tsdf_scene *s);

/* Appending primitives. Each returns TSDF_EINVAL for NULL, non-finite or
 * non-positive sizes (or a zero normal), TSDF_ETOO_LARGE when the scene
 * already holds TSDF_SCENE_MAX_PRIMS primitives; the scene is then
 * unchanged. rgb may be NULL (grey). */
int tsdf_scene_add_sphere(tsdf_scene *s, const float center_m[3], float radius_m,
                          const uint8_t rgb[3]);
int tsdf_scene_add_box(tsdf_scene *s, const float center_m[3], const float half_m[3],
                       const uint8_t rgb[3]);
/* A box rotated by yaw_rad about the world z axis (counter-clockwise seen
 * from above), which is all the standard scenes need. */
int tsdf_scene_add_box_yaw(tsdf_scene *s, const float center_m[3], const float half_m[3],
                           float yaw_rad, const uint8_t rgb[3]);
int tsdf_scene_add_room(tsdf_scene *s, const float center_m[3], const float half_m[3],
                        const uint8_t rgb[3]);
/* normal need not be unit length (it is normalised) but must not be zero. */
int tsdf_scene_add_plane(tsdf_scene *s, const float point_m[3], const float normal[3],
                         const uint8_t rgb[3]);

/* The signed distance in metres from p_world to the scene's surface,
 * positive in free space. For each primitive it is exact (Euclidean). The
 * scene's value is the minimum over its primitives, which is exact wherever
 * it is >= 0 (free space: the distance to a union is the smallest distance
 * to its parts) and, inside a solid, exact as long as the solids do not
 * overlap. Where solids overlap (a sphere sunk into a plane, a box standing
 * in the room's wall) the value inside the overlap is the negative of the
 * larger single-solid depth: its magnitude under-estimates the true depth
 * and its sign stays right. An empty scene returns +INFINITY. */
float tsdf_scene_sdf(const tsdf_scene *s, const float p_world[3]);

/* Index of the primitive nearest to p_world (the one whose sdf is the
 * scene's), or -1 for an empty scene. */
int tsdf_scene_nearest_prim(const tsdf_scene *s, const float p_world[3]);

/* Renders the scene from pose T_world_cam: for each pixel, the nearest hit
 * over all primitives along the pixel's ray (exact quadratic / slab /
 * plane intersection in double precision). depth_m (width*height floats,
 * row-major) receives the z-depth of the hit in metres (the camera-frame z,
 * not the length of the ray), 0 where the ray hits nothing in front of the
 * camera. rgb (optional, width*height*3) receives the colour of the hit
 * primitive, 0 where there is none.
 * Returns TSDF_EINVAL (NULL scene, K or depth_m), TSDF_EEMPTY_IMAGE,
 * TSDF_ETOO_LARGE (beyond TSDF_MAX_IMAGE_DIM / _PIXELS),
 * TSDF_EBAD_INTRINSICS, TSDF_EBAD_POSE (not finite or not rigid within
 * 1e-3). */
int tsdf_scene_render(const tsdf_scene *s, uint32_t width, uint32_t height,
                      const tsdf_intrinsics *K, const float T_world_cam[16], float *depth_m,
                      uint8_t *rgb);

/* Converts a metric z-depth image into uint16 millimetres (depth_scale
 * 0.001), rounding to the nearest millimetre; samples that are 0, not
 * finite, negative or beyond 65.535 m become 0 (no measurement). */
void tsdf_depth_m_to_mm(const float *depth_m, size_t count, uint16_t *depth_mm);

/* ---- poses ------------------------------------------------------------- */

/* A camera at eye_m looking at target_m, with the image's "up" (-y) as close
 * to up as possible. Writes an exactly rigid (to float rounding)
 * T_world_cam. When the view direction is parallel to up, the world x axis
 * (or y) stands in for up. Returns TSDF_EINVAL when eye == target or any
 * input is not finite. up may be NULL: world +z. */
int tsdf_synth_look_at(const float eye_m[3], const float target_m[3], const float up[3],
                       float T_world_cam[16]);

/* Frame i of n_frames on a horizontal circle of radius_m about center_m, at
 * height_m above center_m (world z), looking at center_m, world +z up. The
 * camera starts on the +x side and walks counter-clockwise seen from above:
 * azimuth 2 pi i / n_frames. Returns TSDF_EINVAL for i >= n_frames, a
 * non-positive radius or non-finite inputs. */
int tsdf_synth_orbit_pose(const float center_m[3], float radius_m, float height_m,
                          uint32_t n_frames, uint32_t i, float T_world_cam[16]);

/* How far T is from a rigid transform: the largest of |(R^T R - I)_ab|,
 * |det R - 1| and the last row's deviation from 0 0 0 1; +INFINITY when an
 * entry is not finite or T is NULL. Tests use it to check that poses are
 * rigid to float rounding (tsdf_pose_is_rigid in common/tsdf_pose.h is the
 * 1e-3 yes/no check every layer applies). */
double tsdf_synth_pose_error(const float T[16]);

/* ---- standard scenes ---------------------------------------------------
 * "sphere": one sphere of radius 0.3 m at the origin.
 * "box":    one axis-aligned box of half-extents 0.25 x 0.15 x 0.1 m at the origin.
 * "room":   a 4 x 3 x 2.5 m room (floor z = 0, centred on x = y = 0), a box
 *           of 0.6 x 0.4 x 0.5 m standing on the floor, a sphere of radius
 *           0.25 m lying on the floor.
 * "demo":   the room with a rotated box (a table), a sphere on it, a second
 *           sphere and a pillar: a scene with some depth complexity.
 * "plane":  the infinite floor plane z = 0 and a sphere of radius 0.3 m
 *           resting on it (they touch in one point and do not overlap, so
 *           the sdf stays exact). */
int tsdf_scene_make_sphere(tsdf_scene *s);
int tsdf_scene_make_box(tsdf_scene *s);
int tsdf_scene_make_room(tsdf_scene *s);
int tsdf_scene_make_demo(tsdf_scene *s);
int tsdf_scene_make_plane(tsdf_scene *s);

/* ---- named sequences ---------------------------------------------------
 * A sequence is a scene, a camera and a trajectory. The trajectory is a set
 * of rings: ring r holds frames_per_ring cameras on a circle about
 * target_m at elevation elev_deg[r] and distance distance_m[r], each looking
 * at target_m. Frame i is ring i / frames_per_ring, azimuth step
 * i % frames_per_ring (successive rings are staggered by half a step so the
 * views interleave).
 *
 * "sphere" and "box" orbit at elevations -70, -25, 25 and 70 degrees at
 *   1.0 m (box: 1.1 m), 12 frames per ring (48 frames): every surface point
 *   is seen, top and bottom included, so the fused object is closed.
 * "room" and "demo" stand inside the room and look at its objects (target
 *   0.3 m above the floor's centre) at elevations 40 and 55 degrees from
 *   1.6 and 1.8 m away (eye heights about 1.33 and 1.77 m), seeing the
 *   floor and walls behind the objects; 24 frames per ring (48 frames).
 * "plane" orbits the sphere on the floor at elevations 20 and 50 degrees,
 *   1.2 m away, 16 frames per ring (32 frames).
 *
 * Image: 320 x 240, fx = fy = 262.5, cx = 159.5, cy = 119.5 (the TUM fr1
 * camera at half resolution) unless changed with
 * tsdf_synth_sequence_set_resolution. Depth range [0.1, 8] m. */
#define TSDF_SYNTH_MAX_RINGS 8
#define TSDF_SYNTH_NAME_MAX 16

typedef struct {
    char name[TSDF_SYNTH_NAME_MAX];
    tsdf_scene scene;
    uint32_t width, height;
    tsdf_intrinsics K;
    float min_depth_m, max_depth_m;
    float target_m[3];
    uint32_t ring_count;
    uint32_t frames_per_ring;
    float elev_deg[TSDF_SYNTH_MAX_RINGS];
    float distance_m[TSDF_SYNTH_MAX_RINGS];
    uint32_t frame_count; /* ring_count * frames_per_ring */
} tsdf_synth_sequence;

/* Fills *seq with the named sequence ("sphere", "box", "room", "demo",
 * "plane"); TSDF_ENOT_FOUND for another name, TSDF_EINVAL for NULL. */
int tsdf_synth_sequence_init(tsdf_synth_sequence *seq, const char *name);

/* The names above, NULL-terminated, for listings and --help texts. */
const char *const *tsdf_synth_sequence_names(void);

/* Changes the image size, scaling the intrinsics so the field of view is
 * unchanged (cx, cy stay the image centre). TSDF_EEMPTY_IMAGE / TSDF_ETOO_LARGE
 * on bad sizes. */
int tsdf_synth_sequence_set_resolution(tsdf_synth_sequence *seq, uint32_t width, uint32_t height);

/* The pose of frame i; TSDF_EINVAL when i >= frame_count. */
int tsdf_synth_sequence_pose(const tsdf_synth_sequence *seq, uint32_t i, float T_world_cam[16]);

/* Renders frame i into the caller's buffers (depth_m: width*height floats;
 * rgb: width*height*3 bytes or NULL) and fills *out to point at them:
 * TSDF_DEPTH_F32, the sequence's K, pose and depth range. *out borrows the
 * buffers; it is valid as long as they are. */
int tsdf_synth_sequence_frame(const tsdf_synth_sequence *seq, uint32_t i, float *depth_m,
                              uint8_t *rgb, tsdf_frame *out);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_SYNTH_H */

/*
 * pose_ring.h - the latest poses of each sensor of one map: where every
 * camera is and the path it came along, for the live view (live_view.h).
 *
 * The daemon keeps no trajectory otherwise: a frame's pose is integrated
 * and forgotten. A map's worker records the pose of every frame it
 * integrated into the map's ring; the view copies the ring out.
 *
 * Bounded: at most POSE_RING_MAX_SENSORS sensors per map (the first ones
 * seen; frames of later sensors are counted in untracked_frames, not
 * recorded), and the POSE_RING_DEPTH latest poses per sensor (older ones
 * are overwritten). A sensor's slot is allocated on its first frame, so a
 * map of one camera holds one slot (about 20 KiB).
 *
 * Ownership: caller-owned struct; pose_ring_init / pose_ring_fini.
 * Threads: every function but init and fini is thread-safe (one mutex,
 * held for a copy at most).
 */
#ifndef TSDFD_POSE_RING_H
#define TSDFD_POSE_RING_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dstats.h"
#include "tsdf_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define POSE_RING_MAX_SENSORS 16u
#define POSE_RING_DEPTH 256u

typedef struct {
    uint64_t seq;          /* the sender's frame counter */
    uint64_t stamp_ns;     /* the sender's capture time (0: none given) */
    int64_t integrated_ns; /* CLOCK_MONOTONIC when the worker integrated it */
    float T_world_cam[12]; /* the top three rows of the row-major pose */
} pose_sample;

/* One sensor as a copy sees it: its camera (of its latest frame) and its
 * poses, the oldest first. */
typedef struct {
    char name[DS_SENSOR_NAME_LEN];
    uint64_t frames; /* frames recorded in all (the ring keeps the last POSE_RING_DEPTH) */
    uint32_t width, height;
    tsdf_intrinsics K;
    float min_depth_m, max_depth_m;
    size_t count; /* valid entries of samples */
    pose_sample samples[POSE_RING_DEPTH];
} pose_track;

typedef struct pose_slot pose_slot;

typedef struct {
    pthread_mutex_t lock;
    pose_slot *slots[POSE_RING_MAX_SENSORS];
    size_t slot_count;
    uint64_t untracked_frames; /* frames of sensors beyond POSE_RING_MAX_SENSORS */
} pose_ring;

/* TSDF_OK or TSDF_ENOMEM. */
int pose_ring_init(pose_ring *r);
void pose_ring_fini(pose_ring *r);

/* Records the pose of frame f of sensor `sensor` (a display name, as
 * dstats_sensor_name writes it) integrated at integrated_ns. A sensor
 * beyond the limit, or one whose slot cannot be allocated, is counted in
 * untracked_frames. */
void pose_ring_record(pose_ring *r, const char *sensor, const tsdf_frame *f, uint64_t seq,
                      uint64_t stamp_ns, int64_t integrated_ns);

/* Copies up to max sensors into out (in the order they were first seen)
 * and returns how many; *untracked (optional) receives untracked_frames. */
size_t pose_ring_copy(pose_ring *r, pose_track *out, size_t max, uint64_t *untracked);

/* Copies the sensor named `sensor` into *out: 1 when it is there, else 0. */
int pose_ring_find(pose_ring *r, const char *sensor, pose_track *out);

/* Drops every sensor (a reset or a load starts a new map). */
void pose_ring_clear(pose_ring *r);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_POSE_RING_H */

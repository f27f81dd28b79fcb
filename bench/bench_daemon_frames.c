/*
 * bench_daemon_frames.c - the frames bench_daemon's clients send: the
 * scene rendered once, before the clock starts, at BD_FRAME_POSES poses on
 * the first ring of its sequence, which every client walks back and forth
 * from a start of its own (bench_daemon.h).
 */
#include "bench_daemon.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_synth.h"

#define DEG_TO_RAD (3.14159265358979323846 / 180.0)

/* The pose of ring index i: the first ring of the scene's sequence, i
 * steps of BD_FRAME_STEP_DEG from its first pose. */
static int pose_at(const tsdf_synth_sequence *seq, uint32_t i, float T[16])
{
    double az = (double)i * BD_FRAME_STEP_DEG * DEG_TO_RAD;
    double el = (double)seq->elev_deg[0] * DEG_TO_RAD;
    double d = seq->distance_m[0];
    float eye[3] = {(float)(seq->target_m[0] + d * cos(el) * cos(az)),
                    (float)(seq->target_m[1] + d * cos(el) * sin(az)),
                    (float)(seq->target_m[2] + d * sin(el))};
    return tsdf_synth_look_at(eye, seq->target_m, NULL, T);
}

void bd_frames_free(bd_frames *r)
{
    for (uint32_t i = 0; i < BD_FRAME_POSES; i++)
        free(r->depth_mm[i]);
    memset(r, 0, sizeof *r);
}

int bd_frames_make(const bench_opts *o, bd_frames *r)
{
    tsdf_synth_sequence seq;
    size_t n = (size_t)o->width * o->height;
    memset(r, 0, sizeof *r);
    int rc = tsdf_synth_sequence_init(&seq, o->scene);
    if (rc == TSDF_OK)
        rc = tsdf_synth_sequence_set_resolution(&seq, o->width, o->height);
    if (rc != TSDF_OK) {
        fprintf(stderr, "bench_daemon: scene %s at %ux%u: %s\n", o->scene, o->width, o->height,
                tsdf_strerror(rc));
        return -1;
    }
    r->width = o->width;
    r->height = o->height;
    r->K = seq.K;
    r->min_depth_m = seq.min_depth_m;
    r->max_depth_m = seq.max_depth_m;
    r->scene = seq.scene;
    float *depth_m = malloc(n * sizeof *depth_m);
    if (depth_m == NULL)
        return -1;
    for (uint32_t i = 0; i < BD_FRAME_POSES && rc == TSDF_OK; i++) {
        r->depth_mm[i] = malloc(n * sizeof(uint16_t));
        rc = r->depth_mm[i] == NULL ? TSDF_ENOMEM : pose_at(&seq, i, r->T_world_cam[i]);
        if (rc == TSDF_OK)
            rc = tsdf_scene_render(&seq.scene, o->width, o->height, &seq.K, r->T_world_cam[i],
                                   depth_m, NULL);
        if (rc == TSDF_OK)
            tsdf_depth_m_to_mm(depth_m, n, r->depth_mm[i]);
    }
    free(depth_m);
    if (rc != TSDF_OK) {
        fprintf(stderr, "bench_daemon: rendering the frames: %s\n", tsdf_strerror(rc));
        bd_frames_free(r);
        return -1;
    }
    return 0;
}

/* Step k of a walk that starts at ring index `start` and goes back and
 * forth, so that the camera never jumps. */
uint32_t bd_frames_index(uint64_t k, uint32_t start)
{
    const uint64_t period = 2 * (BD_FRAME_POSES - 1);
    uint64_t p = (k + start) % period;
    return (uint32_t)(p < BD_FRAME_POSES ? p : period - p);
}

void bd_frames_frame(const bd_frames *r, uint32_t i, tsdf_frame *f)
{
    memset(f, 0, sizeof *f);
    f->width = r->width;
    f->height = r->height;
    f->K = r->K;
    memcpy(f->T_world_cam, r->T_world_cam[i], sizeof f->T_world_cam);
    f->depth_format = TSDF_DEPTH_U16;
    f->depth = r->depth_mm[i];
    f->depth_scale = 0.001f;
    f->min_depth_m = r->min_depth_m;
    f->max_depth_m = r->max_depth_m;
}

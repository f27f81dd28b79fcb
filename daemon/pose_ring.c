/*
 * pose_ring.c - the latest poses of each sensor of a map (see pose_ring.h).
 */
#include "pose_ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_error.h"

struct pose_slot {
    pose_track head; /* name, camera, frames; count and samples unused here */
    size_t next;     /* the ring's write position */
    size_t filled;   /* valid entries, up to POSE_RING_DEPTH */
    pose_sample ring[POSE_RING_DEPTH];
};

int pose_ring_init(pose_ring *r)
{
    memset(r, 0, sizeof *r);
    return pthread_mutex_init(&r->lock, NULL) == 0 ? TSDF_OK : TSDF_ENOMEM;
}

void pose_ring_clear(pose_ring *r)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->slot_count; i++) {
        free(r->slots[i]);
        r->slots[i] = NULL;
    }
    r->slot_count = 0;
    r->untracked_frames = 0;
    pthread_mutex_unlock(&r->lock);
}

void pose_ring_fini(pose_ring *r)
{
    pose_ring_clear(r);
    pthread_mutex_destroy(&r->lock);
}

/* The slot of sensor, created when there is room; NULL otherwise. Lock held. */
static pose_slot *slot_for(pose_ring *r, const char *sensor)
{
    for (size_t i = 0; i < r->slot_count; i++)
        if (strcmp(r->slots[i]->head.name, sensor) == 0)
            return r->slots[i];
    if (r->slot_count >= POSE_RING_MAX_SENSORS)
        return NULL;
    pose_slot *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    snprintf(s->head.name, sizeof s->head.name, "%s", sensor);
    r->slots[r->slot_count++] = s;
    return s;
}

void pose_ring_record(pose_ring *r, const char *sensor, const tsdf_frame *f, uint64_t seq,
                      uint64_t stamp_ns, int64_t integrated_ns)
{
    pthread_mutex_lock(&r->lock);
    pose_slot *s = slot_for(r, sensor);
    if (s == NULL) {
        r->untracked_frames++;
        pthread_mutex_unlock(&r->lock);
        return;
    }
    s->head.frames++;
    s->head.width = f->width;
    s->head.height = f->height;
    s->head.K = f->K;
    s->head.min_depth_m = f->min_depth_m;
    s->head.max_depth_m = f->max_depth_m;
    pose_sample *p = &s->ring[s->next];
    p->seq = seq;
    p->stamp_ns = stamp_ns;
    p->integrated_ns = integrated_ns;
    memcpy(p->T_world_cam, f->T_world_cam, sizeof p->T_world_cam);
    s->next = (s->next + 1) % POSE_RING_DEPTH;
    if (s->filled < POSE_RING_DEPTH)
        s->filled++;
    pthread_mutex_unlock(&r->lock);
}

/* Copies slot s into *out, the oldest pose first. Lock held. */
static void copy_slot(const pose_slot *s, pose_track *out)
{
    *out = s->head;
    size_t first = (s->next + POSE_RING_DEPTH - s->filled) % POSE_RING_DEPTH;
    for (size_t i = 0; i < s->filled; i++)
        out->samples[i] = s->ring[(first + i) % POSE_RING_DEPTH];
    out->count = s->filled;
}

size_t pose_ring_copy(pose_ring *r, pose_track *out, size_t max, uint64_t *untracked)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->slot_count < max ? r->slot_count : max;
    for (size_t i = 0; i < n; i++)
        copy_slot(r->slots[i], &out[i]);
    if (untracked != NULL)
        *untracked = r->untracked_frames;
    pthread_mutex_unlock(&r->lock);
    return n;
}

int pose_ring_find(pose_ring *r, const char *sensor, pose_track *out)
{
    int found = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->slot_count && !found; i++) {
        if (strcmp(r->slots[i]->head.name, sensor) == 0) {
            copy_slot(r->slots[i], out);
            found = 1;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return found;
}

/*
 * evict.c - a map's eviction policy (see evict.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "evict.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "maps.h"
#include "spill.h"
#include "tsdf_error.h"

float evict_frame_reach(const tsdf_frame *f, const tsdf_volume_params *p)
{
    /* The widest ray of a pinhole image leaves through a corner. */
    const float us[2] = {-0.5f, (float)f->width - 0.5f}, vs[2] = {-0.5f, (float)f->height - 0.5f};
    float widest = 1.0f;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            float x = (us[a] - f->K.cx) / f->K.fx, y = (vs[b] - f->K.cy) / f->K.fy;
            float len = sqrtf(x * x + y * y + 1.0f);
            if (len > widest)
                widest = len;
        }
    const float block_m = (float)TSDF_BLOCK_DIM * p->voxel_size_m;
    return f->max_depth_m * widest + p->trunc_vox * p->voxel_size_m + 1.7320508f * block_m;
}

/* The spill store's directory of map m. */
static int spill_dir(const dmap *m, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/spill/%s", m->reg->cfg->state_dir, m->name);
    return n > 0 && (size_t)n < len ? TSDF_OK : TSDF_ETOO_LARGE;
}

int evict_open(dmap *m, const tsdf_volume_params *p)
{
    char dir[4096];
    m->spill = NULL;
    if (m->reg->cfg->evict_mode != CFG_EVICT_SPILL)
        return TSDF_OK;
    int rc = spill_dir(m, dir, sizeof dir);
    if (rc == TSDF_OK)
        rc = spill_open(dir, p, &m->spill);
    if (rc != TSDF_OK)
        TSDF_LOG(TSDF_LOG_ERROR, "map %s: cannot open its spill store: %s", m->name,
                 tsdf_strerror(rc));
    atomic_store(&m->blocks_spilled, 0);
    return rc;
}

static void publish_spilled(dmap *m)
{
    atomic_store(&m->blocks_spilled, spill_blocks(m->spill));
    atomic_fetch_add(&m->reg->spill_chunks_damaged, spill_take_damaged(m->spill));
}

void evict_close(dmap *m, int remove_files)
{
    publish_spilled(m);
    if (remove_files)
        spill_destroy(m->spill);
    else
        spill_close(m->spill);
    m->spill = NULL;
}

/* Removes the blocks farther than radius_m from center: into the spill
 * store (mode spill) or gone (drop). Returns how many went. A store that
 * cannot take them keeps them in the volume (nothing is lost). */
static size_t evict_beyond(dmap *m, const float center[3], float radius_m)
{
    tsdf_block_select q;
    tsdf_block_set out;
    size_t erased = 0;
    int rc;

    memset(&q, 0, sizeof q);
    q.rules = TSDF_SELECT_OUTSIDE_RADIUS;
    memcpy(q.center_m, center, sizeof q.center_m);
    q.radius_m = radius_m;
    tsdf_block_set_init(&out);
    if (m->spill != NULL) {
        rc = tsdf_volume_evict(m->vol, &q, &out, &erased);
        if (rc == TSDF_OK && erased != 0 && (rc = spill_put(m->spill, &out)) != TSDF_OK) {
            /* The store refused them: back into the volume, which has the
             * room they left. */
            int back = tsdf_volume_write_blocks(m->vol, &out);
            TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "spill failed",
                                 "map %s: cannot spill %zu blocks (%s); they stay in the "
                                 "volume%s",
                                 m->name, erased, tsdf_strerror(rc),
                                 back == TSDF_OK ? "" : " -- and could not be written back");
            erased = back == TSDF_OK ? 0 : erased;
        }
        publish_spilled(m);
    } else {
        rc = tsdf_volume_evict(m->vol, &q, NULL, &erased);
    }
    tsdf_block_set_fini(&out);
    if (rc != TSDF_OK) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "evict failed", "map %s: eviction failed: %s", m->name,
                             tsdf_strerror(rc));
        return 0;
    }
    if (erased != 0) {
        atomic_fetch_add(&m->blocks_evicted, erased);
        TSDF_LOG(TSDF_LOG_DEBUG, "map %s: %s %zu blocks beyond %.1f m", m->name,
                 m->spill != NULL ? "spilled" : "dropped", erased, (double)radius_m);
    }
    return erased;
}

static void frame_position(const tsdf_frame *f, float out[3])
{
    out[0] = f->T_world_cam[3];
    out[1] = f->T_world_cam[7];
    out[2] = f->T_world_cam[11];
}

int evict_before_frame(dmap *m, const tsdf_frame *f)
{
    if (m->spill == NULL || spill_blocks(m->spill) == 0)
        return TSDF_OK;
    const tsdf_volume_params *p = tsdf_volume_get_params(m->vol);
    float c[3];
    tsdf_block_set back;
    frame_position(f, c);
    tsdf_block_set_init(&back);
    int rc = spill_take_near(m->spill, c, evict_frame_reach(f, p), &back);
    if (rc == TSDF_OK && back.count != 0) {
        rc = tsdf_volume_write_blocks(m->vol, &back);
        if (rc == TSDF_OK) {
            atomic_fetch_add(&m->blocks_restored, back.count);
        } else {
            /* Not enough room for them: they go back where they were, and
             * the frame waits (the caller refuses it). */
            int again = spill_put(m->spill, &back);
            if (again != TSDF_OK)
                TSDF_LOG(TSDF_LOG_ERROR,
                         "map %s: %zu spilled blocks could neither come back (%s) nor be "
                         "spilled again (%s): they are lost",
                         m->name, back.count, tsdf_strerror(rc), tsdf_strerror(again));
        }
    }
    publish_spilled(m);
    tsdf_block_set_fini(&back);
    return rc;
}

void evict_after_frame(dmap *m, const tsdf_frame *f)
{
    const tsdfd_config *cfg = m->reg->cfg;
    frame_position(f, m->pose_m);
    m->reach_m = evict_frame_reach(f, tsdf_volume_get_params(m->vol));
    m->have_pose = 1;
    if (cfg->evict_mode == CFG_EVICT_OFF || ++m->frames_since_check < cfg->evict_check_frames)
        return;
    m->frames_since_check = 0;
    const float radius = cfg->evict_radius_m > m->reach_m ? cfg->evict_radius_m : m->reach_m;
    evict_beyond(m, m->pose_m, radius);
}

int evict_make_room(dmap *m, const tsdf_frame *f)
{
    if (!m->reg->cfg->evict_on_full || m->reg->cfg->evict_mode == CFG_EVICT_OFF)
        return 0;
    float c[3];
    frame_position(f, c);
    return evict_beyond(m, c, evict_frame_reach(f, tsdf_volume_get_params(m->vol))) != 0;
}

int evict_export_spilled(dmap *m, tsdf_block_set *out)
{
    if (m->spill == NULL) {
        tsdf_block_set_fini(out);
        return TSDF_OK;
    }
    int rc = spill_read_all(m->spill, out);
    publish_spilled(m);
    return rc;
}

int evict_import_spilled(dmap *m, const tsdf_block_set *in, const tsdf_volume_params *p)
{
    int rc = TSDF_OK;
    if (m->spill != NULL) {
        /* A volume of other parameters needs a store of them. */
        evict_close(m, 0);
        if ((rc = evict_open(m, p)) != TSDF_OK)
            return rc;
    }
    if (in->count == 0)
        return TSDF_OK;
    if (m->spill != NULL)
        rc = spill_put(m->spill, in);
    else
        rc = tsdf_volume_write_blocks(m->vol, in);
    publish_spilled(m);
    return rc;
}

void evict_reset(dmap *m)
{
    if (m->spill != NULL && spill_clear(m->spill) != TSDF_OK)
        TSDF_LOG(TSDF_LOG_WARN, "map %s: the spill store was not emptied completely", m->name);
    publish_spilled(m);
    m->have_pose = 0;
    m->frames_since_check = 0;
}

/*
 * persist.c - the save and load requests, the daemon's own saves
 * (handlers_save_all) and the policy that keeps a client's paths inside the
 * state directory.
 */
#define _XOPEN_SOURCE 700 /* realpath */

#include "handlers_internal.h"

#include "evict.h"
#include "log.h"
#include "snapshot.h"
#include "tsdf_error.h"

#include <errno.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every map name a client may create must fit a snapshot: else a map could
 * exist that no save can write. */
_Static_assert(TSDF_PROTO_MAX_NAME_LEN + 1 <= SNAP_NAME_LEN,
               "a map name of the protocol must fit a snapshot's name field");
_Static_assert(MAPS_NAME_MAX == TSDF_PROTO_MAX_NAME_LEN, "one limit on map names");

/* TSDF_OK when path, with symbolic links resolved, lies inside dir: the
 * deepest ancestor of path that exists (path itself when it exists) must
 * resolve to dir or below it, so a link planted in the state directory
 * cannot lead a save or load elsewhere. why (why_len bytes) says what was
 * wrong, for the client's error reply. */
static int inside_real_dir(const char *dir, const char *path, char *why, size_t why_len)
{
    char real_dir[PATH_MAX], probe[PATH_MAX], real[PATH_MAX];
    if (realpath(dir, real_dir) == NULL) {
        snprintf(why, why_len, "the state directory %s: %s", dir, strerror(errno));
        return TSDF_EIO;
    }
    if ((size_t)snprintf(probe, sizeof probe, "%s", path) >= sizeof probe) {
        snprintf(why, why_len, "path '%.200s...' is longer than %d bytes", path, PATH_MAX - 1);
        return TSDF_ETOO_LARGE;
    }
    while (realpath(probe, real) == NULL) {
        char *slash = strrchr(probe, '/');
        if (errno != ENOENT || slash == NULL || slash == probe) {
            snprintf(why, why_len, "path '%.200s': %s", probe, strerror(errno));
            return TSDF_EINVAL;
        }
        *slash = '\0';
    }
    size_t n = strlen(real_dir);
    if (strncmp(real, real_dir, n) != 0 || (real[n] != '\0' && real[n] != '/' && n > 1)) {
        snprintf(why, why_len,
                 "path '%.200s' resolves to '%.200s', outside the state directory %.200s "
                 "(a symbolic link?)",
                 path, real, real_dir);
        return TSDF_EINVAL;
    }
    return TSDF_OK;
}

/* Resolves a client's path inside the state dir: relative paths are taken
 * from there, absolute ones must lie below it, ".." is refused. A client
 * may thus not make the daemon write or read files elsewhere. On failure
 * why says which rule the path broke. */
static int resolve_path(daemon_ctx *d, const char *path, char *out, size_t len, char *why,
                        size_t why_len)
{
    const char *dir = d->cfg->state_dir;
    size_t dl = strlen(dir);

    if (strstr(path, "..") != NULL) {
        snprintf(why, why_len,
                 "path '%.200s': '..' is not allowed (paths are relative to the state directory "
                 "%.200s, or absolute inside it)",
                 path, dir);
        return TSDF_EINVAL;
    }
    if (path[0] == '/') {
        if (strncmp(path, dir, dl) != 0 || (path[dl] != '/' && dir[dl - 1] != '/')) {
            snprintf(why, why_len,
                     "path '%.200s' is outside the state directory %.200s (give a path "
                     "relative to it, or absolute inside it)",
                     path, dir);
            return TSDF_EINVAL;
        }
        if ((size_t)snprintf(out, len, "%s", path) >= len) {
            snprintf(why, why_len, "path '%.200s...' is longer than %zu bytes", path, len - 1);
            return TSDF_ETOO_LARGE;
        }
    } else if ((size_t)snprintf(out, len, "%s/%s", dir, path) >= len) {
        snprintf(why, why_len, "path '%.200s...' in %.200s is longer than %zu bytes", path, dir,
                 len - 1);
        return TSDF_ETOO_LARGE;
    }
    return inside_real_dir(dir, out, why, why_len);
}

/* Marks map m's first `frames` frames as held by a snapshot the daemon
 * restores at start. Saves may finish out of order (an autosave and a
 * client's save): frames_saved only rises. */
static void mark_saved(dmap *m, uint64_t frames)
{
    uint64_t cur = atomic_load(&m->frames_saved);
    while (frames > cur && !atomic_compare_exchange_weak(&m->frames_saved, &cur, frames)) {
    }
}

uint64_t handlers_frames_unsaved(daemon_ctx *d, dmap *m)
{
    dmap *all[TSDF_PROTO_MAX_MAPS];
    size_t n = m != NULL ? 1 : maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);
    uint64_t unsaved = 0;
    if (m != NULL)
        all[0] = m;
    for (size_t i = 0; i < n; i++) {
        uint64_t done = atomic_load(&all[i]->frames_done);
        uint64_t saved = atomic_load(&all[i]->frames_saved);
        unsaved += done > saved ? done - saved : 0;
    }
    if (m == NULL)
        maps_put_list(all, n);
    return unsaved;
}

/* After a snapshot of maps all[0 .. n-1] that the daemon restores at start
 * was written: their frames up to frames[i] are durable now. */
static void saved_for_restore(daemon_ctx *d, dmap *const *all, const uint64_t *frames, size_t n)
{
    for (size_t i = 0; i < n; i++)
        mark_saved(all[i], frames[i]);
    atomic_store(&d->last_save_ns, worker_now_ns());
}

/* Exports every map (in parallel, each by its worker) and writes one
 * snapshot: to the client's file when file is not NULL, else under the
 * daemon's own next name in dir, keeping the newest snapshot_keep files. */
static int save_maps(daemon_ctx *d, const char *dir, const char *file, char *path_out,
                     size_t path_len)
{
    dmap *all[TSDF_PROTO_MAX_MAPS];
    worker_job *jobs[TSDF_PROTO_MAX_MAPS];
    snap_map *sm = NULL;
    size_t n = maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);
    int rc = TSDF_OK;

    memset(jobs, 0, sizeof jobs);
    sm = calloc(n ? n : 1, sizeof *sm);
    if (sm == NULL) {
        maps_put_list(all, n);
        return TSDF_ENOMEM;
    }
    /* Queue every export first so the maps export in parallel. */
    for (size_t i = 0; i < n && rc == TSDF_OK; i++) {
        jobs[i] = job_new(JOB_EXPORT, 1);
        if (jobs[i] == NULL) {
            rc = TSDF_ENOMEM;
            break;
        }
        rc = queue_push_query(&all[i]->queue, jobs[i]);
        if (rc != TSDF_OK) {
            job_free(jobs[i]);
            jobs[i] = NULL;
        }
    }
    /* One deadline for all the exports: waiting request_timeout_ms for each
     * in turn would let a few stuck maps hold a save for many timeouts. */
    int64_t deadline = worker_now_ns() + (int64_t)d->cfg->request_timeout_ms * 1000000LL;
    for (size_t i = 0; i < n; i++) {
        if (jobs[i] == NULL)
            continue;
        int64_t left_ms = (deadline - worker_now_ns()) / 1000000;
        if (job_wait(jobs[i], left_ms > 0 ? (int)left_ms : 0) != TSDF_OK) {
            jobs[i] = NULL; /* the worker frees it */
            if (rc == TSDF_OK)
                rc = TSDF_ETIMEOUT;
            continue;
        }
        if (jobs[i]->status != TSDF_OK && rc == TSDF_OK)
            rc = jobs[i]->status;
        snprintf(sm[i].name, sizeof sm[i].name, "%s", all[i]->name);
        sm[i].params = jobs[i]->params;
        sm[i].blocks = jobs[i]->blocks;
        sm[i].spilled = jobs[i]->spilled;
        /* A map that spilled nothing has no spilled set: give the empty
         * one the map's layout, as the file keeps one layout a map. */
        sm[i].spilled.layout = sm[i].blocks.layout;
        sm[i].spilled.sdf_unit_m = sm[i].blocks.sdf_unit_m;
        sm[i].version = jobs[i]->version;
    }
    if (rc == TSDF_OK && file != NULL) {
        /* keep is not applied: the file's directory may hold the daemon's
         * own snapshots too, and an explicit save must not prune them. */
        rc = snap_write_file(file, sm, n);
        if (rc == TSDF_OK)
            snprintf(path_out, path_len, "%s", file);
    } else if (rc == TSDF_OK) {
        rc = snap_save(dir, sm, n, d->cfg->snapshot_keep, path_out, path_len);
        /* Only the state directory's own snapshots are restored at start:
         * a client's file does not make frames durable. */
        if (rc == TSDF_OK && strcmp(dir, d->cfg->state_dir) == 0) {
            uint64_t frames[TSDF_PROTO_MAX_MAPS] = {0};
            for (size_t i = 0; i < n; i++)
                frames[i] = jobs[i]->frames_done;
            saved_for_restore(d, all, frames, n);
        }
    }
    for (size_t i = 0; i < n; i++)
        job_free(jobs[i]); /* frees the block sets sm[] borrowed */
    free(sm);
    maps_put_list(all, n);
    return rc;
}

int handlers_save_all(daemon_ctx *d, const char *dir, char *path_out, size_t path_len)
{
    return save_maps(d, dir ? dir : d->cfg->state_dir, NULL, path_out, path_len);
}

/* Pours one map of a snapshot into m on m's worker and waits. The job takes
 * the snapshot map's block set (left empty). */
static int import_map(daemon_ctx *d, dmap *m, snap_map *sm, uint64_t *version_out)
{
    worker_job *j = job_new(JOB_IMPORT, 1);
    if (j == NULL)
        return TSDF_ENOMEM;
    j->blocks = sm->blocks;
    tsdf_block_set_init(&sm->blocks);
    j->spilled = sm->spilled;
    tsdf_block_set_init(&sm->spilled);
    j->params = sm->params;
    int rc = queue_push_query(&m->queue, j);
    if (rc != TSDF_OK) {
        job_free(j);
        return rc;
    }
    if (job_wait(j, (int)d->cfg->request_timeout_ms) != TSDF_OK)
        return TSDF_ETIMEOUT; /* the worker frees j */
    rc = j->status;
    if (rc == TSDF_OK && version_out != NULL)
        *version_out = j->version;
    job_free(j);
    return rc;
}

int handlers_load(daemon_ctx *d, const char *path, const char *only_map, char *path_out,
                  size_t path_len, uint64_t *version_out)
{
    snap_map *sm = NULL;
    size_t n = 0;
    int rc;
    char found[PATH_MAX];

    if (version_out != NULL)
        *version_out = 0;
    if (path != NULL) {
        rc = snap_read(path, &sm, &n);
        snprintf(found, sizeof found, "%s", path);
    } else {
        rc = snap_find_latest_valid(d->cfg->state_dir, found, sizeof found, &sm, &n);
    }
    if (rc != TSDF_OK)
        return rc;
    int loaded = 0;
    for (size_t i = 0; i < n && rc == TSDF_OK; i++) {
        if (only_map != NULL && strcmp(sm[i].name, only_map) != 0)
            continue;
        dmap *m;
        rc = maps_get_with(d->maps, sm[i].name, &sm[i].params, &m);
        if (rc != TSDF_OK)
            break;
        rc = import_map(d, m, &sm[i], version_out);
        if (rc == TSDF_OK) {
            loaded++;
            TSDF_LOG(TSDF_LOG_INFO, "map %s: loaded from %s", m->name, found);
        }
        maps_put(m);
    }
    snap_maps_free(sm, n);
    if (rc == TSDF_OK && only_map != NULL && loaded == 0)
        rc = TSDF_ENOT_FOUND;
    if (rc == TSDF_OK && path_out != NULL)
        snprintf(path_out, path_len, "%s", found);
    return rc;
}

void handlers_do_save(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep)
{
    char file[PATH_MAX], why[1024];
    int rc;

    if (req->u.path.path[0] != '\0') {
        const char *slash = strrchr(req->u.path.path, '/');
        const char *base = slash ? slash + 1 : req->u.path.path;
        /* The daemon restores and prunes its snapshots by name: a client's
         * file under such a name could pin every later restart to it. */
        if (snap_name_is_reserved(base)) {
            tsdf_reply_set_error(rep, TSDF_EINVAL,
                                 "save: the name '%.64s' is reserved for the daemon's own "
                                 "snapshots (snap-*.tsdfsnap, .snap-*); choose another",
                                 base);
            return;
        }
        rc = resolve_path(d, req->u.path.path, file, sizeof file, why, sizeof why);
        if (rc != TSDF_OK) {
            tsdf_reply_set_error(rep, rc, "save: %s", why);
            return;
        }
        if (strlen(file) >= sizeof rep->u.path.path) {
            tsdf_reply_set_error(rep, TSDF_ETOO_LARGE,
                                 "save: path '%.200s...' is longer than %zu "
                                 "bytes",
                                 file, sizeof rep->u.path.path - 1);
            return;
        }
        rc = save_maps(d, NULL, file, rep->u.path.path, sizeof rep->u.path.path);
    } else {
        rc = handlers_save_all(d, NULL, rep->u.path.path, sizeof rep->u.path.path);
    }
    if (rc != TSDF_OK) {
        tsdf_reply_set_error(rep, rc, "save: %s", tsdf_strerror(rc));
        return;
    }
    dmap *m;
    if (maps_get(d->maps, req->map, 0, &m) == TSDF_OK) {
        rep->u.path.version = atomic_load(&m->version);
        maps_put(m);
    }
    TSDF_LOG(TSDF_LOG_INFO, "saved a snapshot to %s", rep->u.path.path);
}

void handlers_do_delete(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep)
{
    int rc = maps_delete(d->maps, req->map, d->cfg->stop_timeout_ms);
    if (rc == TSDF_ENOT_FOUND) {
        tsdf_reply_set_error(rep, rc, "delete: no map '%s'", req->map);
        return;
    }
    if (rc != TSDF_OK) {
        tsdf_reply_set_error(rep, rc,
                             "delete: map '%s' is gone from the daemon, but its worker is still "
                             "busy and holds its memory (see the log)",
                             req->map);
        return;
    }
    TSDF_LOG(TSDF_LOG_INFO, "map %s: deleted by a client", req->map);
    /* A restart restores the newest snapshot, which still holds the map:
     * write a new one at once, so that a deleted map stays deleted. */
    if (!d->cfg->load_on_start)
        return;
    char path[PATH_MAX];
    rc = handlers_save_all(d, NULL, path, sizeof path);
    if (rc != TSDF_OK)
        tsdf_reply_set_error(rep, rc,
                             "delete: map '%s' is deleted, but the snapshot that keeps it "
                             "deleted across a restart could not be written: %s",
                             req->map, tsdf_strerror(rc));
}

void handlers_do_load(daemon_ctx *d, const tsdf_request *req, tsdf_reply *rep)
{
    char file[PATH_MAX], why[1024];
    int has_path = req->u.path.path[0] != '\0';
    int rc;

    if (has_path) {
        rc = resolve_path(d, req->u.path.path, file, sizeof file, why, sizeof why);
        if (rc != TSDF_OK) {
            tsdf_reply_set_error(rep, rc, "load of map '%s': %s", req->map, why);
            return;
        }
    }
    rc = handlers_load(d, has_path ? file : NULL, req->map, rep->u.path.path,
                       sizeof rep->u.path.path, &rep->u.path.version);
    /* Without a path only the daemon's own snapshots are looked at
     * (snap-*.tsdfsnap of the state directory, PROTOCOL.md 6.4): say so,
     * since a client's saved file is never one of them. */
    if (rc == TSDF_ENOT_FOUND && !has_path)
        tsdf_reply_set_error(rep, rc,
                             "load of map '%s': no valid snapshot of the daemon's own "
                             "(snap-*.tsdfsnap in %s) holds it; a file saved with a path is "
                             "loaded only with that path",
                             req->map, d->cfg->state_dir);
    else if (rc == TSDF_ENOT_FOUND && access(file, F_OK) != 0)
        tsdf_reply_set_error(rep, rc, "load of map '%s': no file %s", req->map, file);
    else if (rc == TSDF_ENOT_FOUND)
        tsdf_reply_set_error(rep, rc, "load of map '%s': %s holds no map of that name", req->map,
                             file);
    else if (rc != TSDF_OK)
        tsdf_reply_set_error(rep, rc, "load of map '%s': %s", req->map, tsdf_strerror(rc));
}

int handlers_save_on_stop(daemon_ctx *d)
{
    dmap *all[TSDF_PROTO_MAX_MAPS], *saved[TSDF_PROTO_MAX_MAPS] = {NULL};
    uint64_t frames[TSDF_PROTO_MAX_MAPS] = {0};
    size_t n = maps_list(d->maps, all, TSDF_PROTO_MAX_MAPS);
    snap_map *sm = calloc(n ? n : 1, sizeof *sm);
    char path[PATH_MAX];
    int rc = TSDF_OK;

    if (sm == NULL) {
        maps_put_list(all, n);
        return TSDF_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n && rc == TSDF_OK; i++) {
        /* A stuck worker still owns its volume: reading it here would race
         * with whatever the worker is stuck in. Save every other map. */
        if (all[i]->stuck) {
            TSDF_LOG(TSDF_LOG_ERROR, "map %s: not saved: its worker is stuck", all[i]->name);
            continue;
        }
        snprintf(sm[k].name, sizeof sm[k].name, "%s", all[i]->name);
        sm[k].params = *tsdf_volume_get_params(all[i]->vol);
        /* The volume's cap follows the budget; the map's own is what a
         * snapshot keeps (as an export job does). */
        sm[k].params.memory_cap_bytes = all[i]->own_cap_bytes;
        tsdf_block_set_init(&sm[k].blocks);
        tsdf_block_set_init(&sm[k].spilled);
        rc = tsdf_volume_export_blocks(all[i]->vol, &sm[k].blocks);
        /* The workers have stopped: the spill store is this thread's now. */
        if (rc == TSDF_OK)
            rc = evict_export_spilled(all[i], &sm[k].spilled);
        sm[k].spilled.layout = sm[k].blocks.layout;
        sm[k].spilled.sdf_unit_m = sm[k].blocks.sdf_unit_m;
        sm[k].version = sm[k].blocks.version;
        saved[k] = all[i];
        frames[k] = atomic_load(&all[i]->frames_done);
        k++;
    }
    if (rc == TSDF_OK)
        rc = snap_save(d->cfg->state_dir, sm, k, d->cfg->snapshot_keep, path, sizeof path);
    if (rc == TSDF_OK)
        saved_for_restore(d, saved, frames, k);
    for (size_t i = 0; i < k; i++) {
        tsdf_block_set_fini(&sm[i].blocks);
        tsdf_block_set_fini(&sm[i].spilled);
    }
    free(sm);
    maps_put_list(all, n);
    if (rc == TSDF_OK)
        TSDF_LOG(TSDF_LOG_INFO, "saved %zu maps to %s", k, path);
    else
        TSDF_LOG(TSDF_LOG_ERROR, "save at stop failed: %s", tsdf_strerror(rc));
    return rc;
}

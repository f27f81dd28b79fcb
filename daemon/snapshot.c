/*
 * snapshot.c - the snapshot files of a state directory (see snapshot.h):
 * their names and sequences, listing, pruning, finding the newest valid
 * one, and writing them atomically and durably. The bytes inside a file
 * are snapshot_format.c's.
 */
#define _GNU_SOURCE

#include "snapshot.h"
#include "snapshot_format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "tsdf_error.h"

#define FILE_PREFIX "snap-"
#define FILE_SUFFIX ".tsdfsnap"
#define TMP_PREFIX ".snap-"
#define TMP_SUFFIX ".tmp"
#define SEQ_DIGITS 20
/* UINT64_MAX - 1: the largest sequence a snapshot file may carry. */
#define SEQ_MAX_DIGITS "18446744073709551614"
/* A sequence is the write time in microseconds. One further ahead of the
 * clock than this was not written by this daemon with a sane clock (a file
 * planted under a daemon name, or a clock that has since been set back a
 * long way): it is listed after every plausible snapshot and does not raise
 * the next sequence, so it can neither pin the restore nor exhaust the
 * sequence space. */
#define SEQ_FUTURE_SLACK_US (24ull * 3600ull * 1000000ull)
/* Temporary files younger than this are never pruned (see snap_prune). */
#define SNAP_TMP_GRACE_S 60

/* ---- directory listing ------------------------------------------------ */

/* 1 if name is snap-<20 digits>.tsdfsnap. */
static int is_snapshot_name(const char *name)
{
    size_t pl = strlen(FILE_PREFIX), sl = strlen(FILE_SUFFIX);
    if (strlen(name) != pl + SEQ_DIGITS + sl || strncmp(name, FILE_PREFIX, pl) != 0 ||
        strcmp(name + pl + SEQ_DIGITS, FILE_SUFFIX) != 0)
        return 0;
    for (size_t i = 0; i < SEQ_DIGITS; i++) {
        if (name[pl + i] < '0' || name[pl + i] > '9')
            return 0;
    }
    /* A sequence must leave room for a newer one: a file named with 20
     * digits beyond UINT64_MAX - 1 (a client may save under any name in the
     * state directory) would make next_sequence wrap, so that it stayed the
     * "newest" snapshot forever and every restart restored it instead of
     * the daemon's own later saves. Such a file is not one of ours. The
     * digits have a fixed width, so string order is numeric order. */
    return strncmp(name + pl, SEQ_MAX_DIGITS, SEQ_DIGITS) <= 0;
}

/* The sequence of a snapshot name (is_snapshot_name must hold). */
static uint64_t name_sequence(const char *name)
{
    return strtoull(name + strlen(FILE_PREFIX), NULL, 10);
}

static uint64_t now_us(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
}

/* Sequences above this are not plausible now (see SEQ_FUTURE_SLACK_US). */
static uint64_t plausible_horizon(void)
{
    return now_us() + SEQ_FUTURE_SLACK_US;
}

int snap_name_is_reserved(const char *name)
{
    size_t n = strlen(name), pl = strlen(FILE_PREFIX), sl = strlen(FILE_SUFFIX);
    if (strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0)
        return 1;
    return n >= pl + sl && strncmp(name, FILE_PREFIX, pl) == 0 &&
           strcmp(name + n - sl, FILE_SUFFIX) == 0;
}

static int is_temp_name(const char *name)
{
    size_t n = strlen(name), pl = strlen(TMP_PREFIX), sl = strlen(TMP_SUFFIX);
    return n > pl + sl && strncmp(name, TMP_PREFIX, pl) == 0 &&
           strcmp(name + n - sl, TMP_SUFFIX) == 0;
}

static int cmp_name_desc(const void *a, const void *b)
{
    /* Fixed-width decimal sequences: string order is numeric order. */
    return -strcmp((const char *)a, (const char *)b);
}

int snap_list(const char *dir, char (*names)[SNAP_FILE_NAME_LEN], size_t max, size_t *count)
{
    if (!dir || !count || (max > 0 && !names))
        return TSDF_EINVAL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? TSDF_ENOT_FOUND : TSDF_EIO;
    size_t found = 0, ignored = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_snapshot_name(de->d_name))
            continue;
        /* is_snapshot_name fixed the length well below SNAP_FILE_NAME_LEN. */
        if (found < max) {
            memcpy(names[found++], de->d_name, strlen(de->d_name) + 1);
            continue;
        }
        /* Full: readdir's order is arbitrary, so keep the newest max names
         * (replace the oldest kept one) rather than the first max seen;
         * otherwise load and prune would work on a random subset. */
        ignored++;
        size_t oldest = 0;
        for (size_t i = 1; i < found; i++) {
            if (strcmp(names[i], names[oldest]) < 0)
                oldest = i;
        }
        if (found > 0 && strcmp(de->d_name, names[oldest]) > 0)
            memcpy(names[oldest], de->d_name, strlen(de->d_name) + 1);
    }
    closedir(d);
    if (found > 1) /* qsort's base must not be NULL, even for 0 elements */
        qsort(names, found, SNAP_FILE_NAME_LEN, cmp_name_desc);
    /* Newest first, but sequences from the far future go last (in their
     * order): they are not what this daemon wrote most recently. Sorted
     * descending, they form the head of the list. */
    uint64_t horizon = plausible_horizon();
    size_t future = 0;
    while (future < found && name_sequence(names[future]) > horizon)
        future++;
    if (future > 0 && future < found) {
        char(*head)[SNAP_FILE_NAME_LEN] = malloc(future * SNAP_FILE_NAME_LEN);
        if (head == NULL) {
            *count = 0;
            return TSDF_ENOMEM;
        }
        memcpy(head, names, future * SNAP_FILE_NAME_LEN);
        memmove(names, names + future, (found - future) * SNAP_FILE_NAME_LEN);
        memcpy(names + (found - future), head, future * SNAP_FILE_NAME_LEN);
        free(head);
    }
    if (future > 0)
        TSDF_LOG(TSDF_LOG_WARN,
                 "snapshot: %s holds %zu snapshot name(s) dated more than a day ahead of the "
                 "clock (e.g. %s); they rank below every other snapshot",
                 dir, future, names[found - future]);
    if (ignored)
        TSDF_LOG(TSDF_LOG_WARN,
                 "snapshot: %s holds more than %zu snapshots; %zu older ones ignored", dir, max,
                 ignored);
    *count = found;
    return TSDF_OK;
}

/* The newest plausible sequence number in dir (see SEQ_FUTURE_SLACK_US),
 * 0 when none. */
static uint64_t newest_sequence(const char *dir, uint64_t horizon)
{
    uint64_t newest = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_snapshot_name(de->d_name))
            continue;
        uint64_t seq = name_sequence(de->d_name);
        if (seq > newest && seq <= horizon)
            newest = seq;
    }
    closedir(d);
    return newest;
}

/* ---- writing ---------------------------------------------------------- */

/* The last sequence this process handed out: two saves in the same
 * microsecond (an autosave and a client's save) still get distinct names. */
static _Atomic uint64_t last_sequence;

/* A sequence above the clock, every plausible file in dir and every earlier
 * one of this process. Plausible sequences lie at most a day ahead of the
 * clock, so this stays far below SEQ_MAX_DIGITS: it never wraps and never
 * makes a name that snap_list would refuse. */
static uint64_t next_sequence(const char *dir)
{
    uint64_t seq = now_us();
    uint64_t newest = newest_sequence(dir, seq + SEQ_FUTURE_SLACK_US);
    if (seq <= newest)
        seq = newest + 1;
    uint64_t last = atomic_load(&last_sequence);
    for (;;) {
        uint64_t want = seq > last ? seq : last + 1;
        if (atomic_compare_exchange_weak(&last_sequence, &last, want))
            return want;
    }
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return TSDF_EIO;
    int r = fsync(fd);
    close(fd);
    return r == 0 ? TSDF_OK : TSDF_EIO;
}

/* Checks the maps and creates dir (mode 0750) when missing. */
static int prepare_write(const char *dir, const snap_map *maps, size_t n)
{
    int r = snapfmt_check_maps(maps, n);
    if (r != TSDF_OK) {
        TSDF_LOG(TSDF_LOG_ERROR, "snapshot: refusing to write %zu maps: bad names or block sets",
                 n);
        return r;
    }
    if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
        TSDF_LOG(TSDF_LOG_ERROR, "snapshot: cannot create %s: %s", dir, strerror(errno));
        return TSDF_EIO;
    }
    return TSDF_OK;
}

/* Writes maps into a temporary file of dir and renames it onto final (a
 * path in dir), durably: see "Crash safety" in snapshot.h. */
static int write_atomic(const char *dir, const char *final, const snap_map *maps, size_t n)
{
    char tmp[4096];
    int r;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "XXXXXX" TMP_SUFFIX, dir) >= sizeof tmp)
        return TSDF_ETOO_LARGE;

    int fd = mkostemps(tmp, (int)strlen(TMP_SUFFIX), O_CLOEXEC);
    if (fd < 0) {
        TSDF_LOG(TSDF_LOG_ERROR, "snapshot: cannot create a file in %s: %s", dir, strerror(errno));
        return TSDF_EIO;
    }
    /* The lock marks the temporary file as in use: snap_prune, which
     * deletes temporary files left by a crash, skips locked ones, so a save
     * running at the same time (an autosave and a client's save) keeps its
     * file. The lock dies with the process, so a crash's file is unlocked. */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        TSDF_LOG(TSDF_LOG_WARN, "snapshot: cannot lock %s: %s", tmp, strerror(errno));
    /* Snapshots are readable by the daemon's group (backups, tsdfctl on
     * the host), never by the world: the map is the robot's surroundings. */
    if (fchmod(fd, 0640) != 0)
        TSDF_LOG(TSDF_LOG_WARN, "snapshot: cannot chmod %s: %s", tmp, strerror(errno));
    FILE *f = fdopen(fd, "w+b");
    if (!f) {
        close(fd);
        unlink(tmp);
        return TSDF_EIO;
    }
    setvbuf(f, NULL, _IOFBF, 1u << 20);

    const char *step = "write";
    r = snapfmt_write(f, maps, n);
    if (r == TSDF_OK && fflush(f) != 0) {
        step = "flush";
        r = TSDF_EIO;
    }
    /* The data must be on disk before the rename makes it the snapshot,
     * or a power cut could leave a renamed but empty file. */
    if (r == TSDF_OK && fsync(fileno(f)) != 0) {
        step = "fsync";
        r = TSDF_EIO;
    }
    int saved_errno = errno;
    /* Renamed while still open, so that the lock keeps snap_prune away
     * from the file until it has its final name. */
    if (r == TSDF_OK && rename(tmp, final) != 0) {
        saved_errno = errno;
        step = "rename";
        r = TSDF_EIO;
    }
    if (r != TSDF_OK) {
        TSDF_LOG(TSDF_LOG_ERROR, "snapshot: %s of %s failed: %s (%s)", step, tmp,
                 r == TSDF_EIO ? strerror(saved_errno) : tsdf_strerror(r), tsdf_strerror(r));
        unlink(tmp);
        fclose(f);
        return r;
    }
    /* Everything was flushed and synced above; a failing close loses nothing. */
    if (fclose(f) != 0)
        TSDF_LOG(TSDF_LOG_WARN, "snapshot: close of %s: %s", final, strerror(errno));
    /* The rename itself is durable only once the directory is synced. */
    if (fsync_dir(dir) != TSDF_OK) {
        TSDF_LOG(TSDF_LOG_ERROR, "snapshot: fsync of directory %s failed: %s", dir,
                 strerror(errno));
        return TSDF_EIO;
    }
    TSDF_LOG(TSDF_LOG_INFO, "snapshot: wrote %s (%zu maps, %" PRIu64 " bytes)", final, n,
             snap_file_size(maps, n));
    return TSDF_OK;
}

int snap_write(const char *dir, const snap_map *maps, size_t n, char *path_out, size_t path_len)
{
    if (!dir || !*dir)
        return TSDF_EINVAL;
    int r = prepare_write(dir, maps, n);
    if (r != TSDF_OK)
        return r;
    char final[4096];
    uint64_t seq = next_sequence(dir);
    if ((size_t)snprintf(final, sizeof final, "%s/" FILE_PREFIX "%020" PRIu64 FILE_SUFFIX, dir,
                         seq) >= sizeof final)
        return TSDF_ETOO_LARGE;
    if (path_out && strlen(final) >= path_len)
        return TSDF_ETOO_LARGE;
    r = write_atomic(dir, final, maps, n);
    if (r == TSDF_OK && path_out)
        snprintf(path_out, path_len, "%s", final);
    return r;
}

int snap_write_file(const char *path, const snap_map *maps, size_t n)
{
    if (!path || !*path)
        return TSDF_EINVAL;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (*base == '\0' || snap_name_is_reserved(base))
        return TSDF_EINVAL;
    if (slash == NULL) {
        snprintf(dir, sizeof dir, ".");
    } else if ((size_t)(slash - path) >= sizeof dir) {
        return TSDF_ETOO_LARGE;
    } else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        if (dir[0] == '\0')
            snprintf(dir, sizeof dir, "/");
    }
    int r = prepare_write(dir, maps, n);
    return r == TSDF_OK ? write_atomic(dir, path, maps, n) : r;
}

int snap_save(const char *dir, const snap_map *maps, size_t n, size_t keep, char *path_out,
              size_t path_len)
{
    int r = snap_write(dir, maps, n, path_out, path_len);
    if (r != TSDF_OK)
        return r;
    int pr = snap_prune(dir, keep);
    if (pr < 0)
        TSDF_LOG(TSDF_LOG_WARN, "snapshot: pruning %s failed: %s", dir, tsdf_strerror(pr));
    return TSDF_OK;
}

/* ---- reading ---------------------------------------------------------- */

int snap_read(const char *path, snap_map **maps, size_t *n)
{
    if (!path || !maps || !n)
        return TSDF_EINVAL;
    *maps = NULL;
    *n = 0;
    /* O_NONBLOCK: opening a FIFO (a client's load names any path in the
     * state directory) would otherwise block the request forever, before
     * the regular-file check below could refuse it. Reads of a regular
     * file ignore the flag. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int err = errno == ENOENT ? TSDF_ENOT_FOUND : TSDF_EIO;
        return snapfmt_refuse(path, err, "cannot open: %s", strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return snapfmt_refuse(path, TSDF_EIO, "not a regular file");
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return snapfmt_refuse(path, TSDF_ENOMEM, "cannot open a stream: %s", strerror(e));
    }
    setvbuf(f, NULL, _IOFBF, 1u << 20);
    int r = snapfmt_read(path, f, (uint64_t)st.st_size, maps, n);
    fclose(f);
    return r;
}

/* ---- directory maintenance -------------------------------------------- */

int snap_prune(const char *dir, size_t keep)
{
    if (!dir)
        return TSDF_EINVAL;
    int removed = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : TSDF_EIO;
    /* Temporary files are written and renamed within one snap_write,
     * which holds a lock on its file; an unlocked one was left by a crash. */
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_temp_name(de->d_name))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue; /* renamed or removed meanwhile */
        /* A file modified in the last minute may belong to a save that has
         * created it but not locked it yet: it is left for a later prune. */
        struct stat st;
        int in_use = fstat(fd, &st) != 0 || st.st_mtime + SNAP_TMP_GRACE_S > time(NULL) ||
                     flock(fd, LOCK_EX | LOCK_NB) != 0;
        if (!in_use && unlink(path) == 0) {
            removed++;
            TSDF_LOG(TSDF_LOG_INFO, "snapshot: removed stale temporary file %s", path);
        }
        close(fd);
    }
    closedir(d);
    if (keep == 0)
        return removed;

    char(*names)[SNAP_FILE_NAME_LEN] = malloc((size_t)SNAP_MAX_FILES * SNAP_FILE_NAME_LEN);
    if (!names)
        return TSDF_ENOMEM;
    size_t count = 0;
    int r = snap_list(dir, names, SNAP_MAX_FILES, &count);
    if (r == TSDF_OK) {
        for (size_t i = keep; i < count; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (unlink(path) == 0)
                removed++;
            else
                TSDF_LOG(TSDF_LOG_WARN, "snapshot: cannot remove %s: %s", path, strerror(errno));
        }
    }
    free(names);
    if (removed > 0)
        fsync_dir(dir);
    return r == TSDF_OK ? removed : r;
}

int snap_find_latest_valid(const char *dir, char *path_out, size_t len, snap_map **maps, size_t *n)
{
    if (!dir || !maps || !n)
        return TSDF_EINVAL;
    *maps = NULL;
    *n = 0;
    char(*names)[SNAP_FILE_NAME_LEN] = malloc((size_t)SNAP_MAX_FILES * SNAP_FILE_NAME_LEN);
    if (!names)
        return TSDF_ENOMEM;
    size_t count = 0;
    int r = snap_list(dir, names, SNAP_MAX_FILES, &count);
    if (r != TSDF_OK) {
        free(names);
        return r == TSDF_ENOT_FOUND ? TSDF_ENOT_FOUND : r;
    }
    r = TSDF_ENOT_FOUND;
    for (size_t i = 0; i < count; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        int rr = snap_read(path, maps, n);
        if (rr == TSDF_OK) {
            if (path_out && strlen(path) >= len) {
                snap_maps_free(*maps, *n);
                *maps = NULL;
                *n = 0;
                r = TSDF_ETOO_LARGE;
            } else {
                if (path_out)
                    snprintf(path_out, len, "%s", path);
                if (i > 0)
                    TSDF_LOG(TSDF_LOG_WARN, "snapshot: using %s, %zu newer one(s) refused", path,
                             i);
                r = TSDF_OK;
            }
            break;
        }
        if (rr == TSDF_ENOMEM) {
            r = rr;
            break;
        }
        /* snap_read has logged why; an older snapshot may still be good. */
    }
    free(names);
    return r;
}

#define _GNU_SOURCE

#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "log.h"
#include "tsdf_error.h"

/* Layout constants of format version 1 (see docs/OPERATIONS.md). */
#define FILE_MAGIC "TSDFSNAP"
#define TAIL_MAGIC "TSDFTAIL"
#define FIXED_HEADER_BYTES 32u
#define MAP_ENTRY_BYTES 136u
#define HEADER_CRC_BYTES 4u
#define VOXEL_BYTES 12u
#define BLOCK_RECORD_BYTES (12u + 8u + TSDF_BLOCK_VOXELS * VOXEL_BYTES) /* 6164 */
#define TRAILER_BYTES 20u

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

/* ---- little-endian encoding ------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_f32(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put_u32(p, v);
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static float get_f32(const uint8_t *p)
{
    uint32_t v = get_u32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

/* zlib's crc32 takes a uInt length; feed large buffers in pieces. */
static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len > 0) {
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return crc;
}

static size_t header_bytes(size_t n)
{
    return FIXED_HEADER_BYTES + n * MAP_ENTRY_BYTES + HEADER_CRC_BYTES;
}

static void encode_block(uint8_t *rec, const tsdf_block_set *s, size_t i)
{
    for (int k = 0; k < 3; k++)
        put_u32(rec + 4 * k, (uint32_t)s->coords[3 * i + k]);
    put_u64(rec + 12, s->versions ? s->versions[i] : 0);
    const tsdf_voxel *v = s->voxels + i * TSDF_BLOCK_VOXELS;
    uint8_t *p = rec + 20;
    for (size_t j = 0; j < TSDF_BLOCK_VOXELS; j++, p += VOXEL_BYTES) {
        put_f32(p, v[j].sdf_m);
        put_f32(p + 4, v[j].weight);
        p[8] = v[j].rgb[0];
        p[9] = v[j].rgb[1];
        p[10] = v[j].rgb[2];
        p[11] = v[j].pad;
    }
}

static void decode_block(const uint8_t *rec, tsdf_block_set *s, size_t i)
{
    for (int k = 0; k < 3; k++)
        s->coords[3 * i + k] = (int32_t)get_u32(rec + 4 * k);
    s->versions[i] = get_u64(rec + 12);
    tsdf_voxel *v = s->voxels + i * TSDF_BLOCK_VOXELS;
    const uint8_t *p = rec + 20;
    for (size_t j = 0; j < TSDF_BLOCK_VOXELS; j++, p += VOXEL_BYTES) {
        v[j].sdf_m = get_f32(p);
        v[j].weight = get_f32(p + 4);
        v[j].rgb[0] = p[8];
        v[j].rgb[1] = p[9];
        v[j].rgb[2] = p[10];
        v[j].pad = p[11];
    }
}

/* One directory entry of the header. */
static void encode_entry(uint8_t *e, const snap_map *m, uint32_t payload_crc)
{
    memset(e, 0, MAP_ENTRY_BYTES);
    memcpy(e, m->name, strnlen(m->name, SNAP_NAME_LEN - 1));
    const tsdf_volume_params *p = &m->params;
    put_f32(e + 64, p->voxel_size_m);
    put_f32(e + 68, p->trunc_vox);
    put_f32(e + 72, p->max_weight);
    put_u32(e + 76, p->initial_capacity_blocks);
    put_f32(e + 80, p->max_load_factor);
    put_u32(e + 84, (uint32_t)p->backend);
    put_u64(e + 88, p->memory_cap_bytes);
    put_u32(e + 96, (uint32_t)p->cuda_device);
    /* e + 100: reserved, zero */
    put_u64(e + 104, m->version);
    put_u64(e + 112, (uint64_t)m->blocks.count);
    put_u64(e + 120, (uint64_t)m->blocks.count * BLOCK_RECORD_BYTES);
    put_u32(e + 128, payload_crc);
    /* e + 132: reserved, zero */
}

uint64_t snap_file_size(const snap_map *maps, size_t n)
{
    uint64_t size = header_bytes(n) + TRAILER_BYTES;
    for (size_t i = 0; i < n; i++)
        size += (uint64_t)maps[i].blocks.count * BLOCK_RECORD_BYTES;
    return size;
}

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

static int check_maps(const snap_map *maps, size_t n)
{
    if (n > SNAP_MAX_MAPS || (n > 0 && !maps))
        return TSDF_EINVAL;
    for (size_t i = 0; i < n; i++) {
        size_t len = strnlen(maps[i].name, SNAP_NAME_LEN);
        if (len == 0 || len >= SNAP_NAME_LEN)
            return TSDF_EINVAL;
        const tsdf_block_set *s = &maps[i].blocks;
        if (s->count > 0 && (!s->coords || !s->voxels))
            return TSDF_EINVAL;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(maps[i].name, maps[j].name) == 0)
                return TSDF_EINVAL;
        }
    }
    return TSDF_OK;
}

static int write_all(FILE *f, const void *p, size_t len)
{
    return fwrite(p, 1, len, f) == len ? TSDF_OK : TSDF_EIO;
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

/* Writes the whole file to f (positioned at 0). The header goes first as a
 * placeholder: the payload checksums it holds are known only after the
 * payloads are written, so it is rewritten in place at the end, and the
 * whole-file checksum is put together from the pieces with crc32_combine. */
static int write_file(FILE *f, const snap_map *maps, size_t n)
{
    size_t hdr_len = header_bytes(n);
    uint8_t *hdr = calloc(1, hdr_len);
    uint8_t *rec = malloc(BLOCK_RECORD_BYTES);
    uint32_t *payload_crc = calloc(n ? n : 1, sizeof *payload_crc);
    int r = TSDF_ENOMEM;
    if (!hdr || !rec || !payload_crc)
        goto done;

    r = write_all(f, hdr, hdr_len);
    uint32_t all_payload_crc = (uint32_t)crc32(0, NULL, 0);
    uint64_t all_payload_len = 0;
    for (size_t i = 0; i < n && r == TSDF_OK; i++) {
        uint32_t crc = (uint32_t)crc32(0, NULL, 0);
        const tsdf_block_set *s = &maps[i].blocks;
        for (size_t b = 0; b < s->count && r == TSDF_OK; b++) {
            encode_block(rec, s, b);
            crc = crc_update(crc, rec, BLOCK_RECORD_BYTES);
            all_payload_crc = crc_update(all_payload_crc, rec, BLOCK_RECORD_BYTES);
            r = write_all(f, rec, BLOCK_RECORD_BYTES);
        }
        payload_crc[i] = crc;
        all_payload_len += (uint64_t)s->count * BLOCK_RECORD_BYTES;
    }
    if (r != TSDF_OK)
        goto done;

    memcpy(hdr, FILE_MAGIC, 8);
    put_u32(hdr + 8, SNAP_FORMAT_VERSION);
    put_u32(hdr + 12, (uint32_t)n);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    put_u64(hdr + 16, (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u);
    /* hdr + 24 .. 31: reserved, zero */
    for (size_t i = 0; i < n; i++)
        encode_entry(hdr + FIXED_HEADER_BYTES + i * MAP_ENTRY_BYTES, &maps[i], payload_crc[i]);
    size_t crc_at = hdr_len - HEADER_CRC_BYTES;
    put_u32(hdr + crc_at, crc_update((uint32_t)crc32(0, NULL, 0), hdr, crc_at));

    if (fseek(f, 0, SEEK_SET) != 0 || write_all(f, hdr, hdr_len) != TSDF_OK ||
        fseek(f, 0, SEEK_END) != 0) {
        r = TSDF_EIO;
        goto done;
    }

    uint8_t tail[TRAILER_BYTES];
    uint64_t total = hdr_len + all_payload_len + TRAILER_BYTES;
    memcpy(tail, TAIL_MAGIC, 8);
    put_u64(tail + 8, total);
    uint32_t file_crc = crc_update((uint32_t)crc32(0, NULL, 0), hdr, hdr_len);
    file_crc = (uint32_t)crc32_combine(file_crc, all_payload_crc, (z_off_t)all_payload_len);
    file_crc = crc_update(file_crc, tail, 16);
    put_u32(tail + 16, file_crc);
    r = write_all(f, tail, TRAILER_BYTES);

done:
    free(hdr);
    free(rec);
    free(payload_crc);
    return r;
}

/* Checks the maps and creates dir (mode 0750) when missing. */
static int prepare_write(const char *dir, const snap_map *maps, size_t n)
{
    int r = check_maps(maps, n);
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
    r = write_file(f, maps, n);
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

void snap_maps_free(snap_map *maps, size_t n)
{
    if (!maps)
        return;
    for (size_t i = 0; i < n; i++) {
        free(maps[i].blocks.coords);
        free(maps[i].blocks.versions);
        free(maps[i].blocks.voxels);
    }
    free(maps);
}

static int refuse(const char *path, int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int refuse(const char *path, int err, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    TSDF_LOG(TSDF_LOG_WARN, "snapshot: %s refused (%s): %s", path, tsdf_errname(err), why);
    return err;
}

static int read_exact(FILE *f, void *p, size_t len)
{
    return fread(p, 1, len, f) == len ? TSDF_OK : TSDF_EIO;
}

/* Decodes and checks one directory entry. */
static int decode_entry(const char *path, const uint8_t *e, snap_map *m, uint64_t *payload_len,
                        uint32_t *payload_crc)
{
    if (memchr(e, '\0', SNAP_NAME_LEN) == NULL || e[0] == '\0')
        return refuse(path, TSDF_EFORMAT, "map name empty or not terminated");
    memcpy(m->name, e, SNAP_NAME_LEN);
    tsdf_volume_params *p = &m->params;
    p->voxel_size_m = get_f32(e + 64);
    p->trunc_vox = get_f32(e + 68);
    p->max_weight = get_f32(e + 72);
    p->initial_capacity_blocks = get_u32(e + 76);
    p->max_load_factor = get_f32(e + 80);
    uint32_t backend = get_u32(e + 84);
    p->memory_cap_bytes = get_u64(e + 88);
    p->cuda_device = (int32_t)get_u32(e + 96);
    m->version = get_u64(e + 104);
    /* An import continues the map's versions above the snapshot's. */
    m->blocks.version = m->version;
    uint64_t blocks = get_u64(e + 112);
    *payload_len = get_u64(e + 120);
    *payload_crc = get_u32(e + 128);
    if (backend > TSDF_BACKEND_CUDA)
        return refuse(path, TSDF_EFORMAT, "map %s: unknown backend %u", m->name, backend);
    p->backend = (tsdf_backend)backend;
    if (!(isfinite(p->voxel_size_m) && p->voxel_size_m > 0) ||
        !(isfinite(p->trunc_vox) && p->trunc_vox > 0) ||
        !(isfinite(p->max_weight) && p->max_weight > 0) ||
        !(isfinite(p->max_load_factor) && p->max_load_factor > 0))
        return refuse(path, TSDF_EFORMAT, "map %s: volume parameters out of range", m->name);
    if (blocks > UINT64_MAX / BLOCK_RECORD_BYTES || *payload_len != blocks * BLOCK_RECORD_BYTES)
        return refuse(path, TSDF_EFORMAT,
                      "map %s: %" PRIu64 " blocks do not fill %" PRIu64 " payload bytes", m->name,
                      blocks, *payload_len);
    m->blocks.count = (size_t)blocks;
    return TSDF_OK;
}

static int read_file(const char *path, FILE *f, uint64_t file_size, snap_map **out, size_t *out_n)
{
    uint8_t fixed[FIXED_HEADER_BYTES];
    if (file_size < FIXED_HEADER_BYTES + HEADER_CRC_BYTES + TRAILER_BYTES)
        return refuse(path, TSDF_EFORMAT, "%" PRIu64 " bytes: too short for a snapshot", file_size);
    if (read_exact(f, fixed, sizeof fixed) != TSDF_OK)
        return refuse(path, TSDF_EIO, "cannot read the header: %s", strerror(errno));
    if (memcmp(fixed, FILE_MAGIC, 8) != 0)
        return refuse(path, TSDF_EFORMAT, "no TSDFSNAP magic");
    uint32_t version = get_u32(fixed + 8);
    if (version != SNAP_FORMAT_VERSION)
        return refuse(path, TSDF_EVERSION, "format version %u, this build reads %u", version,
                      SNAP_FORMAT_VERSION);
    uint32_t n = get_u32(fixed + 12);
    if (n > SNAP_MAX_MAPS)
        return refuse(path, TSDF_EFORMAT, "%u maps, more than %u", n, SNAP_MAX_MAPS);
    size_t hdr_len = header_bytes(n);
    if (file_size < hdr_len + TRAILER_BYTES)
        return refuse(path, TSDF_EFORMAT, "truncated inside the header");

    int r = TSDF_ENOMEM;
    uint8_t *hdr = malloc(hdr_len);
    uint8_t *rec = malloc(BLOCK_RECORD_BYTES);
    snap_map *maps = calloc(n ? n : 1, sizeof *maps);
    uint64_t *payload_len = calloc(n ? n : 1, sizeof *payload_len);
    uint32_t *payload_crc = calloc(n ? n : 1, sizeof *payload_crc);
    if (!hdr || !rec || !maps || !payload_len || !payload_crc)
        goto fail;
    memcpy(hdr, fixed, FIXED_HEADER_BYTES);
    if (read_exact(f, hdr + FIXED_HEADER_BYTES, hdr_len - FIXED_HEADER_BYTES) != TSDF_OK) {
        r = refuse(path, TSDF_EIO, "cannot read the header: %s", strerror(errno));
        goto fail;
    }
    size_t crc_at = hdr_len - HEADER_CRC_BYTES;
    uint32_t crc = crc_update((uint32_t)crc32(0, NULL, 0), hdr, crc_at);
    if (crc != get_u32(hdr + crc_at)) {
        r = refuse(path, TSDF_ECHECKSUM, "header crc32 %08x, expected %08x", crc,
                   get_u32(hdr + crc_at));
        goto fail;
    }

    /* The header is intact; now its sizes must add up to the file's size
     * exactly, before anything is allocated from them. */
    uint64_t expect = hdr_len + TRAILER_BYTES;
    for (uint32_t i = 0; i < n; i++) {
        r = decode_entry(path, hdr + FIXED_HEADER_BYTES + (size_t)i * MAP_ENTRY_BYTES, &maps[i],
                         &payload_len[i], &payload_crc[i]);
        if (r != TSDF_OK)
            goto fail;
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(maps[i].name, maps[j].name) == 0) {
                r = refuse(path, TSDF_EFORMAT, "map %s appears twice", maps[i].name);
                goto fail;
            }
        }
        if (payload_len[i] > file_size || expect > file_size - payload_len[i]) {
            r = refuse(path, TSDF_EFORMAT,
                       "truncated: the header describes more bytes than the "
                       "file's %" PRIu64,
                       file_size);
            goto fail;
        }
        expect += payload_len[i];
    }
    if (expect != file_size) {
        r = refuse(path, TSDF_EFORMAT, "file has %" PRIu64 " bytes, header describes %" PRIu64,
                   file_size, expect);
        goto fail;
    }

    uint32_t file_crc = crc_update((uint32_t)crc32(0, NULL, 0), hdr, hdr_len);
    for (uint32_t i = 0; i < n; i++) {
        tsdf_block_set *s = &maps[i].blocks;
        size_t count = s->count;
        if (count > 0) {
            s->coords = malloc(count * 3 * sizeof *s->coords);
            s->versions = malloc(count * sizeof *s->versions);
            s->voxels = malloc(count * TSDF_BLOCK_VOXELS * sizeof *s->voxels);
            if (!s->coords || !s->versions || !s->voxels) {
                r = TSDF_ENOMEM;
                goto fail;
            }
        }
        uint32_t pcrc = (uint32_t)crc32(0, NULL, 0);
        for (size_t b = 0; b < count; b++) {
            if (read_exact(f, rec, BLOCK_RECORD_BYTES) != TSDF_OK) {
                r = refuse(path, TSDF_EIO, "read failed in map %s", maps[i].name);
                goto fail;
            }
            pcrc = crc_update(pcrc, rec, BLOCK_RECORD_BYTES);
            file_crc = crc_update(file_crc, rec, BLOCK_RECORD_BYTES);
            decode_block(rec, s, b);
        }
        if (pcrc != payload_crc[i]) {
            r = refuse(path, TSDF_ECHECKSUM, "map %s: payload crc32 %08x, expected %08x",
                       maps[i].name, pcrc, payload_crc[i]);
            goto fail;
        }
    }

    uint8_t tail[TRAILER_BYTES];
    if (read_exact(f, tail, TRAILER_BYTES) != TSDF_OK) {
        r = refuse(path, TSDF_EIO, "cannot read the trailer");
        goto fail;
    }
    if (memcmp(tail, TAIL_MAGIC, 8) != 0 || get_u64(tail + 8) != file_size) {
        r = refuse(path, TSDF_EFORMAT, "trailer missing or of the wrong size");
        goto fail;
    }
    file_crc = crc_update(file_crc, tail, 16);
    if (file_crc != get_u32(tail + 16)) {
        r = refuse(path, TSDF_ECHECKSUM, "file crc32 %08x, expected %08x", file_crc,
                   get_u32(tail + 16));
        goto fail;
    }

    free(hdr);
    free(rec);
    free(payload_len);
    free(payload_crc);
    *out = maps;
    *out_n = n;
    return TSDF_OK;

fail:
    if (maps)
        snap_maps_free(maps, n);
    free(hdr);
    free(rec);
    free(payload_len);
    free(payload_crc);
    return r;
}

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
        return refuse(path, err, "cannot open: %s", strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return refuse(path, TSDF_EIO, "not a regular file");
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return refuse(path, TSDF_ENOMEM, "cannot open a stream: %s", strerror(e));
    }
    setvbuf(f, NULL, _IOFBF, 1u << 20);
    int r = read_file(path, f, (uint64_t)st.st_size, maps, n);
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

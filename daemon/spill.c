/*
 * spill.c - a map's evicted blocks on disk, one snapshot-format file per
 * chunk of blocks (see spill.h).
 */
#define _GNU_SOURCE

#include "spill.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "snapshot.h"
#include "snapshot_format.h"
#include "tsdf_error.h"
#include "tsdf_math.h"

#define SPILL_SUFFIX ".tsdfspill"
#define SPILL_TMP_PREFIX ".spill-"
#define SPILL_PATH_LEN 4096

typedef struct {
    uint64_t key; /* tsdf_block_key of the chunk's coordinates */
    uint32_t blocks;
    /* The tsdf_block_key of each of its blocks, ascending: which blocks a
     * frame can reach is decided here, without reading the file. */
    uint64_t *bkeys;
} chunk_entry;

struct spill_store {
    char dir[SPILL_PATH_LEN];
    /* The directory, opened once: every file is opened, created, renamed
     * and removed relative to it, never through a path that a link placed
     * later could redirect. */
    int dirfd;
    uint64_t tmp_seq;        /* names the next temporary file */
    uint64_t damaged_untold; /* chunks found damaged since spill_take_damaged */
    tsdf_volume_params params;
    float sdf_unit_m;
    float block_m;       /* the edge of a block, metres */
    float chunk_m;       /* the edge of a chunk, metres */
    chunk_entry *chunks; /* ascending key */
    size_t count, cap;
    uint64_t blocks;
};

/* A block's chunk: its coordinates floor-divided by SPILL_CHUNK_BLOCKS. */
static uint64_t chunk_of(const int32_t b[3])
{
    return tsdf_block_key(b[0] >> 4, b[1] >> 4, b[2] >> 4);
}

_Static_assert(SPILL_CHUNK_BLOCKS == 16, "chunk_of shifts by 4");

/* The file name of chunk key, inside the store's directory. */
static void chunk_name(uint64_t key, char out[64])
{
    int32_t c[3];
    tsdf_block_key_unpack(key, &c[0], &c[1], &c[2]);
    snprintf(out, 64, "c%d_%d_%d" SPILL_SUFFIX, c[0], c[1], c[2]);
}

/* The index entry of key, or where it would go. */
static size_t chunk_find(const spill_store *s, uint64_t key)
{
    size_t lo = 0, hi = s->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->chunks[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int chunk_present(const spill_store *s, uint64_t key, size_t *at)
{
    *at = chunk_find(s, key);
    return *at < s->count && s->chunks[*at].key == key;
}

/* Records chunk key as holding the blocks bkeys[0 .. n) (ascending; the
 * array becomes the index's, or is freed on failure). */
static int chunk_set(spill_store *s, uint64_t key, uint64_t *bkeys, uint32_t n)
{
    size_t at;
    if (chunk_present(s, key, &at)) {
        s->blocks = s->blocks - s->chunks[at].blocks + n;
        free(s->chunks[at].bkeys);
        s->chunks[at].blocks = n;
        s->chunks[at].bkeys = bkeys;
        return TSDF_OK;
    }
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        chunk_entry *c = realloc(s->chunks, cap * sizeof(*c));
        if (c == NULL) {
            free(bkeys);
            return TSDF_ENOMEM;
        }
        s->chunks = c;
        s->cap = cap;
    }
    memmove(&s->chunks[at + 1], &s->chunks[at], (s->count - at) * sizeof(*s->chunks));
    s->chunks[at] = (chunk_entry){key, n, bkeys};
    s->count++;
    s->blocks += n;
    return TSDF_OK;
}

static void chunk_drop(spill_store *s, size_t at)
{
    s->blocks -= s->chunks[at].blocks;
    free(s->chunks[at].bkeys);
    memmove(&s->chunks[at], &s->chunks[at + 1], (s->count - at - 1) * sizeof(*s->chunks));
    s->count--;
}

static void chunks_free(spill_store *s)
{
    for (size_t i = 0; i < s->count; i++)
        free(s->chunks[i].bkeys);
    s->count = 0;
    s->blocks = 0;
}

/* ---- chunk files ----------------------------------------------------------- */

/* The snapshot-format map a chunk file holds. */
static void chunk_map(const spill_store *s, const tsdf_block_set *blocks, snap_map *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof m->name, "spill");
    m->params = s->params;
    m->blocks = *blocks;
    m->spilled.layout = blocks->layout;
    m->spilled.sdf_unit_m = blocks->sdf_unit_m;
    m->version = blocks->version;
}

/* Creates a temporary file in the store's directory (never through a
 * link: O_EXCL); its name into tmp. */
static int create_tmp(spill_store *s, char tmp[64])
{
    for (int tries = 0; tries < 16; tries++) {
        snprintf(tmp, 64, SPILL_TMP_PREFIX "%ld-%" PRIu64, (long)getpid(), s->tmp_seq++);
        int fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

static int write_chunk(spill_store *s, uint64_t key, const tsdf_block_set *blocks)
{
    char name[64], tmp[64];
    snap_map m;
    int rc;
    chunk_name(key, name);
    chunk_map(s, blocks, &m);
    if ((rc = snapfmt_check_maps(&m, 1)) != TSDF_OK)
        return rc;
    int fd = create_tmp(s, tmp);
    if (fd < 0) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "spill write", "spill: cannot create a file in %s: %s",
                             s->dir, strerror(errno));
        return TSDF_EIO;
    }
    FILE *f = fdopen(fd, "wb");
    if (f == NULL) {
        close(fd);
        unlinkat(s->dirfd, tmp, 0);
        return TSDF_EIO;
    }
    rc = snapfmt_write(f, &m, 1);
    if (fclose(f) != 0 && rc == TSDF_OK)
        rc = TSDF_EIO;
    /* No fsync: a snapshot, not this file, is the map's record. A rename
     * over a link replaces the link, not what it points to. */
    if (rc == TSDF_OK && renameat(s->dirfd, tmp, s->dirfd, name) != 0)
        rc = TSDF_EIO;
    if (rc != TSDF_OK) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "spill write", "spill: writing %s/%s failed: %s",
                             s->dir, name, rc == TSDF_EIO ? strerror(errno) : tsdf_strerror(rc));
        unlinkat(s->dirfd, tmp, 0);
    }
    return rc;
}

/* Whether an error of read_chunk means the file is damaged (anything but
 * a shortage of memory or of descriptors, which a later try may not meet). */
static int is_damage(int rc)
{
    return rc != TSDF_OK && rc != TSDF_ENOMEM && rc != TSDF_EBUSY;
}

/* The blocks of a chunk file are the ones the index lists for it: a file
 * that is valid but holds other blocks (another chunk's, an older copy) is
 * as damaged as one that fails its checksum. */
static int blocks_match(const tsdf_block_set *b, const chunk_entry *e)
{
    if (b->count != e->blocks)
        return 0;
    for (size_t i = 0; i < b->count; i++)
        if (tsdf_block_key(b->coords[3 * i], b->coords[3 * i + 1], b->coords[3 * i + 2]) !=
            e->bkeys[i])
            return 0;
    return 1;
}

/*
 * Reads the blocks of chunk e into *out. The file is opened inside the
 * store's directory, never through a link, and must be a regular file that
 * reads back whole (its length, its checksums: snapfmt_read) as exactly
 * the blocks the index lists. TSDF_OK; TSDF_ENOMEM, or TSDF_EBUSY (out of
 * descriptors) for a try that may succeed later; any other error is a
 * damaged file (is_damage), logged with its path and the reason.
 */
static int read_chunk(const spill_store *s, const chunk_entry *e, tsdf_block_set *out)
{
    char name[64], path[SPILL_PATH_LEN + 64];
    chunk_name(e->key, name);
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    /* O_NONBLOCK: a FIFO put in its place must not hang the worker. */
    int fd = openat(s->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "spill read", "spill: cannot open %s: %s", path,
                             err == ELOOP ? "it is a symbolic link" : strerror(err));
        return err == EMFILE || err == ENFILE ? TSDF_EBUSY : err == ENOMEM ? TSDF_ENOMEM : TSDF_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return snapfmt_refuse(path, TSDF_EFORMAT, "not a regular file");
    }
    FILE *f = fdopen(fd, "rb");
    if (f == NULL) {
        close(fd);
        return TSDF_ENOMEM;
    }
    snap_map *maps = NULL;
    size_t n = 0;
    int rc = snapfmt_read(path, f, (uint64_t)st.st_size, &maps, &n);
    fclose(f);
    if (rc == TSDF_OK && (n != 1 || maps[0].blocks.layout != s->params.layout))
        rc = snapfmt_refuse(path, TSDF_EFORMAT, "not a chunk of this map's layout");
    if (rc == TSDF_OK && (maps[0].spilled.count != 0 || !blocks_match(&maps[0].blocks, e)))
        rc = snapfmt_refuse(path, TSDF_EFORMAT, "not the blocks this chunk holds");
    if (rc == TSDF_OK) {
        tsdf_block_set_fini(out);
        *out = maps[0].blocks;
        tsdf_block_set_init(&maps[0].blocks);
    }
    snap_maps_free(maps, n);
    return rc;
}

static void remove_chunk_file(const spill_store *s, uint64_t key)
{
    char name[64];
    chunk_name(key, name);
    if (unlinkat(s->dirfd, name, 0) != 0 && errno != ENOENT)
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "spill unlink", "spill: cannot remove %s/%s: %s",
                             s->dir, name, strerror(errno));
}

/* The chunk at index entry `at` did not read back: its blocks are lost,
 * and the space they held is unobserved again (a frame there integrates as
 * into space never seen). Its file goes, so that a later put of that chunk
 * starts afresh; counted (spill_take_damaged) and logged. */
static void drop_damaged(spill_store *s, size_t at)
{
    char name[64];
    chunk_name(s->chunks[at].key, name);
    TSDF_LOG_RATELIMITED(TSDF_LOG_ERROR, "spill damaged",
                         "spill: chunk %s/%s is damaged: its %u blocks are lost and their space "
                         "is unobserved; the map's other blocks are unaffected",
                         s->dir, name, s->chunks[at].blocks);
    remove_chunk_file(s, s->chunks[at].key);
    chunk_drop(s, at);
    s->damaged_untold++;
}

/* ---- block sets ------------------------------------------------------------ */

/* Block i of a set, by reference. */
typedef struct {
    const tsdf_block_set *set;
    size_t i;
    uint64_t key;
} block_ref;

static int cmp_ref(const void *a, const void *b)
{
    uint64_t x = ((const block_ref *)a)->key, y = ((const block_ref *)b)->key;
    return x < y ? -1 : x > y;
}

static uint64_t ref_key(const tsdf_block_set *s, size_t i)
{
    return tsdf_block_key(s->coords[3 * i], s->coords[3 * i + 1], s->coords[3 * i + 2]);
}

/* Allocates *out for up to n blocks of s's layout (with a colour channel
 * when with_rgb); fill sets its count. */
static int set_alloc(const spill_store *s, size_t n, int with_rgb, tsdf_block_set *out)
{
    return tsdf_block_set_alloc(out, n, s->params.layout, s->sdf_unit_m, with_rgb);
}

/* Copies the referenced blocks, in the order given, into out (allocated by
 * set_alloc for at least n blocks): it cannot fail. */
static void fill(const spill_store *s, const block_ref *refs, size_t n, tsdf_block_set *out)
{
    const size_t gb = tsdf_layout_block_bytes(s->params.layout);
    for (size_t k = 0; k < n; k++) {
        const tsdf_block_set *src = refs[k].set;
        const size_t i = refs[k].i;
        memcpy(&out->coords[3 * k], &src->coords[3 * i], 3 * sizeof(int32_t));
        out->versions[k] = src->versions[i];
        memcpy((uint8_t *)out->geom + k * gb, (const uint8_t *)src->geom + i * gb, gb);
        if (out->rgb != NULL) {
            if (src->rgb != NULL)
                memcpy(out->rgb + k * TSDF_BLOCK_RGB_BYTES, src->rgb + i * TSDF_BLOCK_RGB_BYTES,
                       TSDF_BLOCK_RGB_BYTES);
            else
                memset(out->rgb + k * TSDF_BLOCK_RGB_BYTES, 0, TSDF_BLOCK_RGB_BYTES);
        }
    }
    out->count = n;
}

static int refs_have_rgb(const block_ref *refs, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (refs[k].set->rgb != NULL)
            return 1;
    return 0;
}

/* A set of the referenced blocks, in the order given, with a colour channel
 * when any of them has one. */
static int gather(const spill_store *s, const block_ref *refs, size_t n, tsdf_block_set *out)
{
    int rc = set_alloc(s, n, refs_have_rgb(refs, n), out);
    if (rc == TSDF_OK)
        fill(s, refs, n, out);
    return rc;
}

/* The block keys of refs[0 .. n) (ascending when refs are), for the index. */
static uint64_t *refs_keys(const block_ref *refs, size_t n)
{
    uint64_t *k = malloc((n ? n : 1) * sizeof(*k));
    if (k != NULL)
        for (size_t i = 0; i < n; i++)
            k[i] = refs[i].key;
    return k;
}

/* ---- the store --------------------------------------------------------------- */

static int mkdirs(const char *dir)
{
    char p[SPILL_PATH_LEN];
    if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
        return TSDF_ETOO_LARGE;
    for (char *c = p + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(p, 0750) != 0 && errno != EEXIST)
            return TSDF_EIO;
        *c = '/';
    }
    return mkdir(p, 0750) != 0 && errno != EEXIST ? TSDF_EIO : TSDF_OK;
}

/* Removes the store's files (chunks and stray temporary files). */
static int remove_files(const spill_store *s)
{
    int fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return TSDF_EIO;
    }
    struct dirent *de;
    int rc = TSDF_OK;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name), sl = strlen(SPILL_SUFFIX);
        int ours = strncmp(de->d_name, SPILL_TMP_PREFIX, strlen(SPILL_TMP_PREFIX)) == 0 ||
                   (len > sl && strcmp(de->d_name + len - sl, SPILL_SUFFIX) == 0);
        if (ours && unlinkat(s->dirfd, de->d_name, 0) != 0 && errno != ENOENT)
            rc = TSDF_EIO;
    }
    closedir(d);
    return rc;
}

int spill_open(const char *dir, const tsdf_volume_params *params, spill_store **out)
{
    *out = NULL;
    spill_store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return TSDF_ENOMEM;
    s->dirfd = -1;
    if ((size_t)snprintf(s->dir, sizeof s->dir, "%s", dir) >= sizeof s->dir) {
        free(s);
        return TSDF_ETOO_LARGE;
    }
    s->params = *params;
    s->sdf_unit_m = tsdf_quant_for(params->trunc_vox * params->voxel_size_m).unit_m;
    s->block_m = (float)TSDF_BLOCK_DIM * params->voxel_size_m;
    s->chunk_m = (float)SPILL_CHUNK_BLOCKS * s->block_m;
    int rc = mkdirs(dir);
    /* The store's own directory is never a link (its parents may be: an
     * operator's state_dir on another disk). */
    if (rc == TSDF_OK &&
        (s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        rc = TSDF_EIO;
    if (rc == TSDF_OK)
        rc = remove_files(s);
    if (rc != TSDF_OK) {
        TSDF_LOG(TSDF_LOG_ERROR, "spill: cannot prepare %s: %s", dir, strerror(errno));
        if (s->dirfd >= 0)
            close(s->dirfd);
        free(s);
        return rc;
    }
    *out = s;
    return TSDF_OK;
}

void spill_close(spill_store *s)
{
    if (s == NULL)
        return;
    chunks_free(s);
    free(s->chunks);
    close(s->dirfd);
    free(s);
}

uint64_t spill_blocks(const spill_store *s)
{
    return s != NULL ? s->blocks : 0;
}

size_t spill_chunks(const spill_store *s)
{
    return s != NULL ? s->count : 0;
}

uint64_t spill_take_damaged(spill_store *s)
{
    if (s == NULL)
        return 0;
    uint64_t n = s->damaged_untold;
    s->damaged_untold = 0;
    return n;
}

/* Writes chunk key as the blocks of refs[0 .. n) (the new ones, of one
 * chunk) over what its file holds. */
static int put_chunk(spill_store *s, uint64_t key, block_ref *refs, size_t n)
{
    tsdf_block_set old, merged;
    block_ref *all = NULL;
    size_t at, m = 0;
    int rc = TSDF_OK;

    tsdf_block_set_init(&old);
    tsdf_block_set_init(&merged);
    if (chunk_present(s, key, &at) && (rc = read_chunk(s, &s->chunks[at], &old)) != TSDF_OK) {
        if (!is_damage(rc))
            return rc;
        /* What the file held is lost; the new blocks still go in. */
        drop_damaged(s, at);
        rc = TSDF_OK;
    }
    all = malloc((n + old.count) * sizeof(*all));
    if (all == NULL) {
        tsdf_block_set_fini(&old);
        return TSDF_ENOMEM;
    }
    /* The new blocks and the old ones, sorted by key: a key that is in
     * both comes twice, side by side, and the new block wins. */
    for (size_t k = 0; k < n; k++)
        all[m++] = refs[k];
    for (size_t i = 0; i < old.count; i++)
        all[m++] = (block_ref){&old, i, ref_key(&old, i)};
    qsort(all, m, sizeof(*all), cmp_ref);
    size_t u = 0;
    for (size_t k = 0; k < m; k++) {
        if (u > 0 && all[u - 1].key == all[k].key) {
            /* Keep the new block of the two. */
            if (all[k].set != &old)
                all[u - 1] = all[k];
            continue;
        }
        all[u++] = all[k];
    }
    uint64_t *bkeys = refs_keys(all, u);
    rc = bkeys != NULL ? gather(s, all, u, &merged) : TSDF_ENOMEM;
    if (rc == TSDF_OK)
        rc = write_chunk(s, key, &merged);
    if (rc == TSDF_OK) {
        rc = chunk_set(s, key, bkeys, (uint32_t)u);
        bkeys = NULL;
    }
    free(bkeys);
    free(all);
    tsdf_block_set_fini(&merged);
    tsdf_block_set_fini(&old);
    return rc;
}

int spill_put(spill_store *s, const tsdf_block_set *in)
{
    if (in->count == 0)
        return TSDF_OK;
    if (in->layout != s->params.layout)
        return TSDF_EINVAL;
    block_ref *refs = malloc(in->count * sizeof(*refs));
    if (refs == NULL)
        return TSDF_ENOMEM;
    for (size_t i = 0; i < in->count; i++) {
        refs[i].set = in;
        refs[i].i = i;
        /* Sorted by chunk, then by block within it. */
        refs[i].key = chunk_of(&in->coords[3 * i]);
    }
    qsort(refs, in->count, sizeof(*refs), cmp_ref);
    int rc = TSDF_OK;
    for (size_t a = 0; a < in->count && rc == TSDF_OK;) {
        size_t b = a;
        const uint64_t chunk = refs[a].key;
        while (b < in->count && refs[b].key == chunk)
            b++;
        for (size_t k = a; k < b; k++)
            refs[k].key = ref_key(in, refs[k].i);
        rc = put_chunk(s, chunk, refs + a, b - a);
        a = b;
    }
    free(refs);
    return rc;
}

/* The squared distance from c to the box of chunk key. */
static float chunk_dist2(const spill_store *s, uint64_t key, const float c[3])
{
    int32_t k[3];
    tsdf_block_key_unpack(key, &k[0], &k[1], &k[2]);
    return tsdf_block_dist2(k, s->chunk_m, c);
}

/* Whether block b is within radius_m of c (near NULL: every block is). The
 * metric of the volume's TSDF_SELECT_*_RADIUS rules, so a block evicted as
 * beyond a radius is beyond every smaller one here. */
static int block_near(const spill_store *s, const int32_t b[3], const float *near, float radius_m)
{
    return near == NULL || tsdf_block_dist2(b, s->block_m, near) <= radius_m * radius_m;
}

static int key_near(const spill_store *s, uint64_t key, const float *near, float radius_m)
{
    int32_t b[3];
    tsdf_block_key_unpack(key, &b[0], &b[1], &b[2]);
    return block_near(s, b, near, radius_m);
}

/* A chunk collect reads: part of it, or all of it (whole). */
typedef struct {
    uint64_t key;
    int whole;
    tsdf_block_set blocks; /* its file */
    uint64_t *kept_keys;   /* partly taken: the index of what stays */
    size_t kept;
} chunk_pick;

/* Rewrites a chunk partly taken as what stays of it. A failure leaves its
 * file as it was, and the chunk is then taken whole: more blocks come
 * back than were asked for, and none is lost or left twice. */
static void keep_rest(spill_store *s, chunk_pick *c, const float *near, float radius_m)
{
    block_ref *rest = malloc(c->blocks.count * sizeof(*rest));
    tsdf_block_set set;
    int rc = rest != NULL ? TSDF_OK : TSDF_ENOMEM;

    tsdf_block_set_init(&set);
    c->kept = 0;
    for (size_t i = 0; rc == TSDF_OK && i < c->blocks.count; i++)
        if (!block_near(s, &c->blocks.coords[3 * i], near, radius_m))
            rest[c->kept++] = (block_ref){&c->blocks, i, ref_key(&c->blocks, i)};
    if (rc == TSDF_OK) {
        qsort(rest, c->kept, sizeof(*rest), cmp_ref);
        c->kept_keys = refs_keys(rest, c->kept);
        rc = c->kept_keys != NULL ? gather(s, rest, c->kept, &set) : TSDF_ENOMEM;
    }
    if (rc == TSDF_OK)
        rc = write_chunk(s, c->key, &set);
    if (rc != TSDF_OK) {
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "spill split",
                             "spill: cannot rewrite part of a chunk (%s); it comes back whole",
                             tsdf_strerror(rc));
        free(c->kept_keys);
        c->kept_keys = NULL;
        c->whole = 1;
    }
    tsdf_block_set_fini(&set);
    free(rest);
}

/*
 * The blocks within radius_m of near (all when near is NULL) into *out,
 * sorted by key; with take, they leave the store. The index says which
 * chunks hold such blocks, so a chunk file is read only when some of its
 * blocks are wanted. A damaged chunk file is dropped from the store
 * (drop_damaged) and the rest collected. On any other failure the store is
 * unchanged, but for the damaged chunks dropped, and *out untouched.
 */
static int collect(spill_store *s, const float *near, float radius_m, int take, tsdf_block_set *out)
{
    chunk_pick *picks = NULL;
    block_ref *refs = NULL;
    tsdf_block_set set;
    size_t np = 0, total = 0, m = 0;
    int rc = TSDF_OK, with_rgb = 0;

    tsdf_block_set_init(&set);
    if (s->count != 0 && (picks = calloc(s->count, sizeof(*picks))) == NULL)
        return TSDF_ENOMEM;
    for (size_t i = 0; i < s->count && rc == TSDF_OK;) {
        const chunk_entry *e = &s->chunks[i];
        size_t wanted = 0;
        if (near != NULL && chunk_dist2(s, e->key, near) > radius_m * radius_m) {
            i++;
            continue;
        }
        for (uint32_t k = 0; k < e->blocks; k++)
            wanted += key_near(s, e->bkeys[k], near, radius_m);
        if (wanted == 0) {
            i++;
            continue;
        }
        chunk_pick *c = &picks[np];
        c->key = e->key;
        c->whole = wanted == e->blocks;
        tsdf_block_set_init(&c->blocks);
        rc = read_chunk(s, e, &c->blocks);
        if (is_damage(rc)) {
            /* Only this chunk is lost: the walk goes on with the next,
             * which drop_damaged moved to index i. */
            drop_damaged(s, i);
            rc = TSDF_OK;
            continue;
        }
        np++;
        i++;
        if (rc == TSDF_OK) {
            total += c->blocks.count;
            with_rgb |= c->blocks.rgb != NULL;
        }
    }
    /* Room for every block read, before anything changes: from here on
     * nothing fails but a rewrite, which takes its chunk whole instead. */
    if (rc == TSDF_OK && total != 0 && (refs = malloc(total * sizeof(*refs))) == NULL)
        rc = TSDF_ENOMEM;
    if (rc == TSDF_OK)
        rc = set_alloc(s, total, with_rgb, &set);
    for (size_t p = 0; rc == TSDF_OK && take && p < np; p++)
        if (!picks[p].whole)
            keep_rest(s, &picks[p], near, radius_m);
    if (rc == TSDF_OK) {
        for (size_t p = 0; p < np; p++) {
            const tsdf_block_set *b = &picks[p].blocks;
            for (size_t i = 0; i < b->count; i++)
                if (picks[p].whole || block_near(s, &b->coords[3 * i], near, radius_m))
                    refs[m++] = (block_ref){b, i, ref_key(b, i)};
        }
        if (m > 1) /* refs is NULL when nothing was read */
            qsort(refs, m, sizeof(*refs), cmp_ref);
        fill(s, refs, m, &set);
        tsdf_block_set_fini(out);
        *out = set;
        tsdf_block_set_init(&set);
    }
    for (size_t p = 0; rc == TSDF_OK && take && p < np; p++) {
        size_t at;
        chunk_pick *c = &picks[p];
        if (!chunk_present(s, c->key, &at))
            continue;
        if (c->whole) {
            remove_chunk_file(s, c->key);
            chunk_drop(s, at);
        } else {
            /* Cannot fail: the entry is there, so nothing is allocated. */
            (void)chunk_set(s, c->key, c->kept_keys, (uint32_t)c->kept);
            c->kept_keys = NULL;
        }
    }
    for (size_t p = 0; p < np; p++) {
        free(picks[p].kept_keys);
        tsdf_block_set_fini(&picks[p].blocks);
    }
    tsdf_block_set_fini(&set);
    free(picks);
    free(refs);
    return rc;
}

int spill_take_near(spill_store *s, const float center_m[3], float radius_m, tsdf_block_set *out)
{
    return collect(s, center_m, radius_m, 1, out);
}

int spill_read_all(spill_store *s, tsdf_block_set *out)
{
    return collect(s, NULL, 0.0f, 0, out);
}

int spill_clear(spill_store *s)
{
    chunks_free(s);
    return remove_files(s);
}

void spill_destroy(spill_store *s)
{
    if (s == NULL)
        return;
    (void)spill_clear(s);
    if (rmdir(s->dir) != 0 && errno != ENOENT)
        TSDF_LOG(TSDF_LOG_WARN, "spill: cannot remove %s: %s", s->dir, strerror(errno));
    spill_close(s);
}

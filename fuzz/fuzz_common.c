/*
 * fuzz_common.c - the fuzz targets' shared helpers (see fuzz_common.h).
 */
#define _GNU_SOURCE

#include "fuzz_common.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tsdf_error.h"

/* Scratch files a target names: few, so a small table does. */
#define FUZZ_MAX_FILES 16

static char g_dir[256];
static struct {
    char name[64];
    char path[sizeof g_dir + 64];
} g_files[FUZZ_MAX_FILES];
static size_t g_nfiles;

void fuzz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
    abort();
}

static void remove_scratch(void)
{
    for (size_t i = 0; i < g_nfiles; i++)
        unlink(g_files[i].path);
    if (g_dir[0] != '\0')
        rmdir(g_dir);
}

static void make_scratch_dir(void)
{
    const char *base = getenv("TSDF_FUZZ_TMPDIR");
    struct stat st;
    if (base == NULL || base[0] == '\0')
        base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/tsdf-fuzz-XXXXXX", base);
    if (mkdtemp(g_dir) == NULL) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(remove_scratch);
}

const char *fuzz_path(const char *name)
{
    if (g_dir[0] == '\0')
        make_scratch_dir();
    for (size_t i = 0; i < g_nfiles; i++)
        if (strcmp(g_files[i].name, name) == 0)
            return g_files[i].path;
    if (g_nfiles == FUZZ_MAX_FILES || strlen(name) >= sizeof g_files[0].name) {
        fprintf(stderr, "fuzz: scratch name %s: table full or name too long\n", name);
        abort();
    }
    snprintf(g_files[g_nfiles].name, sizeof g_files[0].name, "%s", name);
    snprintf(g_files[g_nfiles].path, sizeof g_files[0].path, "%s/%s", g_dir, name);
    return g_files[g_nfiles++].path;
}

const char *fuzz_write(const char *name, const void *data, size_t len)
{
    const char *path = fuzz_path(name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w;
        len -= (size_t)w;
    }
    close(fd);
    return path;
}

/* ---- checksum repairs ------------------------------------------------- */

static uint32_t get_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64le(const uint8_t *p)
{
    return (uint64_t)get_u32le(p) | (uint64_t)get_u32le(p + 4) << 32;
}

static void put_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64le(uint8_t *p, uint64_t v)
{
    put_u32le(p, (uint32_t)v);
    put_u32le(p + 4, (uint32_t)(v >> 32));
}

static uint32_t crc_of(const uint8_t *p, size_t len)
{
    uint32_t crc = (uint32_t)crc32(0, NULL, 0);
    while (len > 0) {
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return crc;
}

/* The layout constants of snapshot formats 1 and 2 (docs/OPERATIONS.md). */
#define SNAP_FIXED_BYTES 32u
#define SNAP_TRAILER_BYTES 20u
/* The map entry's size by format version (1: 136 bytes, 2: 160). */
#define SNAP_ENTRY_BYTES (get_u32le(p + 8) == 1 ? 136u : 160u)
#define SNAP_MAX_ENTRIES 1024u

void fuzz_snap_repair(uint8_t *p, size_t len)
{
    if (len < SNAP_FIXED_BYTES + 4 + SNAP_TRAILER_BYTES)
        return;
    uint32_t n = get_u32le(p + 12);
    if (n > SNAP_MAX_ENTRIES)
        return;
    size_t hdr_len = SNAP_FIXED_BYTES + (size_t)n * SNAP_ENTRY_BYTES + 4;
    if (len < hdr_len + SNAP_TRAILER_BYTES)
        return;
    /* Payloads follow the header in entry order; repair those that fit. */
    size_t at = hdr_len, end = len - SNAP_TRAILER_BYTES;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = p + SNAP_FIXED_BYTES + (size_t)i * SNAP_ENTRY_BYTES;
        uint64_t plen = get_u64le(e + 120);
        if (plen > end - at)
            break;
        put_u32le(e + 128, crc_of(p + at, (size_t)plen));
        at += (size_t)plen;
    }
    put_u32le(p + hdr_len - 4, crc_of(p, hdr_len - 4));
    put_u64le(p + len - 12, (uint64_t)len);
    put_u32le(p + len - 4, crc_of(p, len - 4));
}

void fuzz_png_repair(uint8_t *p, size_t len)
{
    size_t at = 8; /* after the signature */
    if (len < at)
        return;
    while (len - at >= 12) {
        uint32_t n = (uint32_t)p[at] << 24 | (uint32_t)p[at + 1] << 16 | (uint32_t)p[at + 2] << 8 |
                     p[at + 3];
        if (n > len - at - 12)
            return;
        /* The crc covers the type and the data, not the length. */
        uint32_t crc = crc_of(p + at + 4, 4 + (size_t)n);
        uint8_t *c = p + at + 8 + n;
        c[0] = (uint8_t)(crc >> 24);
        c[1] = (uint8_t)(crc >> 16);
        c[2] = (uint8_t)(crc >> 8);
        c[3] = (uint8_t)crc;
        at += 12 + (size_t)n;
    }
}

int fuzz_known_code(int rc)
{
    return rc == TSDF_OK || (rc < 0 && strcmp(tsdf_errname(rc), "UNKNOWN") != 0);
}

int fuzz_check_result(int rc, const char *key, size_t key_size, const char *message,
                      size_t message_size)
{
    FUZZ_CHECK(fuzz_known_code(rc));
    FUZZ_CHECK(memchr(key, '\0', key_size) != NULL);
    FUZZ_CHECK(memchr(message, '\0', message_size) != NULL);
    if (rc == TSDF_OK)
        return 0;
    FUZZ_CHECK(message[0] != '\0');
    return 1;
}

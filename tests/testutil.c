#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.h>

#ifndef TSDF_SOURCE_DIR
#define TSDF_SOURCE_DIR "."
#endif

const char *tsdf_test_data_dir(void)
{
    static char path[4096];
    const char *env = getenv("TSDF_DATA_DIR");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "%s/../shared/data/7scenes-redkitchen",
                 getenv("TSDF_SOURCE_DIR") ? getenv("TSDF_SOURCE_DIR") : TSDF_SOURCE_DIR);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "7-Scenes data not found at %s (set TSDF_DATA_DIR)\n", path);
        return NULL;
    }
    return path;
}

const char *tsdf_test_source_path(const char *rel)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s",
             getenv("TSDF_SOURCE_DIR") ? getenv("TSDF_SOURCE_DIR") : TSDF_SOURCE_DIR, rel);
    return path;
}

void tsdf_test_skip_program(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIPPED: ", stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
    exit(TSDF_TEST_SKIP_CODE);
}

const char *tsdf_test_tmpdir(void)
{
    static char dir[4096];
    if (dir[0])
        return dir;
    const char *base = getenv("TMPDIR");
    /* Fresh, not just named after the pid: a folder left by an earlier
     * process with the same pid (they are reused, and a failed run leaves
     * its folder) held files a test then tripped over (a symlink that
     * already existed in test_daemon_protocol). */
    snprintf(dir, sizeof dir, "%s/tsdf-test-%ld-XXXXXX", base && *base ? base : "/tmp",
             (long)getpid());
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "tsdf_test_tmpdir: mkdtemp %s: %s\n", dir, strerror(errno));
        abort();
    }
    return dir;
}

int tsdf_test_utf8_valid(const void *s, size_t n)
{
    const unsigned char *p = s;
    size_t i = 0;
    while (i < n) {
        unsigned char b = p[i];
        size_t len = b < 0x80             ? 1
                     : (b & 0xe0) == 0xc0 ? 2
                     : (b & 0xf0) == 0xe0 ? 3
                     : (b & 0xf8) == 0xf0 ? 4
                                          : 0;
        if (len == 0 || len > n - i)
            return 0;
        uint32_t cp = len == 1 ? b : (uint32_t)(b & (0x7f >> len));
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i + k] & 0x3fu);
        }
        /* The smallest code point each length may encode. */
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return 0;
        i += len;
    }
    return 1;
}

static int strs_valid(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_STR:
        return tsdf_test_utf8_valid(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY:
        for (uint32_t i = 0; i < o->via.array.size; i++)
            if (!strs_valid(&o->via.array.ptr[i]))
                return 0;
        return 1;
    case MSGPACK_OBJECT_MAP:
        for (uint32_t i = 0; i < o->via.map.size; i++)
            if (!strs_valid(&o->via.map.ptr[i].key) || !strs_valid(&o->via.map.ptr[i].val))
                return 0;
        return 1;
    default:
        return 1;
    }
}

int tsdf_test_msgpack_strs_valid(const void *data, size_t len)
{
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    size_t off = 0;
    int ok = msgpack_unpack_next(&res, data, len, &off) == MSGPACK_UNPACK_SUCCESS &&
             strs_valid(&res.data);
    msgpack_unpacked_destroy(&res);
    return ok;
}

static uint64_t test_rng_state = 0x9e3779b97f4a7c15ull;

uint64_t tsdf_test_rng(void)
{
    test_rng_state ^= test_rng_state >> 12;
    test_rng_state ^= test_rng_state << 25;
    test_rng_state ^= test_rng_state >> 27;
    return test_rng_state * 0x2545f4914f6cdd1dull;
}

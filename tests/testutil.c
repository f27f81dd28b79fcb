#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    snprintf(dir, sizeof dir, "%s/tsdf-test-%ld", base && *base ? base : "/tmp", (long)getpid());
    mkdir(dir, 0700);
    return dir;
}

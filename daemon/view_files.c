/*
 * view_files.c - the live view's static files (see view_files.h).
 */
#define _XOPEN_SOURCE 700

#include "view_files.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tsdf_error.h"

static const struct {
    const char *ext;
    const char *type;
} types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".png", "image/png"},
    {".svg", "image/svg+xml"},
    {".ico", "image/x-icon"},
};

/* The type of a plain page file name, or NULL when it is not one. */
static const char *page_file_type(const char *name)
{
    const char *dot = strchr(name, '.');
    if (dot == NULL || dot == name)
        return NULL;
    for (const char *p = name; p < dot; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-'))
            return NULL;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return NULL;
}

int view_files_resolve(const char *url_path, const char *web_dir, const char *three_dir, char *path,
                       size_t path_len, const char **content_type)
{
    const char *dir = web_dir, *file = NULL;
    const char *type = NULL;
    if (strcmp(url_path, "/") == 0) {
        file = "index.html";
        type = types[0].type;
    } else if (strcmp(url_path, "/three/three.min.js") == 0) {
        dir = three_dir;
        file = "three.min.js";
        type = types[1].type;
    } else if (strcmp(url_path, "/three/OrbitControls.js") == 0) {
        dir = three_dir;
        file = "examples/js/controls/OrbitControls.js";
        type = types[1].type;
    } else if (url_path[0] == '/' && (type = page_file_type(url_path + 1)) != NULL) {
        file = url_path + 1;
    } else {
        return 0;
    }
    int n = snprintf(path, path_len, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= path_len)
        return 0;
    *content_type = type;
    return 1;
}

int view_files_read(const char *path, size_t max_bytes, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR ? TSDF_ENOT_FOUND : TSDF_EIO;
    struct stat st;
    int rc = TSDF_OK;
    if (fstat(fd, &st) != 0)
        rc = TSDF_EIO;
    else if (!S_ISREG(st.st_mode))
        rc = TSDF_ENOT_FOUND;
    else if ((uint64_t)st.st_size > max_bytes)
        rc = TSDF_ETOO_LARGE;
    char *buf = rc == TSDF_OK ? malloc((size_t)st.st_size + 1) : NULL;
    if (rc == TSDF_OK && buf == NULL)
        rc = TSDF_ENOMEM;
    size_t got = 0;
    while (rc == TSDF_OK && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rc = TSDF_EIO; /* an error, or a file that shrank under us */
        else
            got += (size_t)r;
    }
    close(fd);
    if (rc != TSDF_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = got;
    return TSDF_OK;
}

/* Whether dir holds the page. */
static int has_page(const char *dir)
{
    char p[4096];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/index.html", dir) >= sizeof p)
        return 0;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Appends dir to the list of folders looked in. */
static void note_tried(char *tried, size_t len, const char *dir)
{
    size_t used = strlen(tried);
    if (used < len)
        snprintf(tried + used, len - used, "%s%s", used ? ", " : "", dir);
}

int view_files_find_web_dir(const char *configured, const char *prefix_dir, const char *source_dir,
                            char *out, size_t out_len, char *tried, size_t tried_len)
{
    char exe[4096], beside[4096 + 32];
    const char *dirs[3];
    size_t n = 0;

    if (tried_len > 0)
        tried[0] = '\0';
    if (configured != NULL && configured[0] != '\0') {
        dirs[n++] = configured;
    } else {
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (len > 0) {
            exe[len] = '\0';
            char *slash = strrchr(exe, '/');
            if (slash != NULL) {
                *slash = '\0';
                snprintf(beside, sizeof beside, "%s/../share/tsdfd/web", exe);
                dirs[n++] = beside;
            }
        }
        dirs[n++] = prefix_dir;
        dirs[n++] = source_dir;
    }
    for (size_t i = 0; i < n; i++) {
        if (dirs[i] == NULL || dirs[i][0] == '\0')
            continue;
        if (has_page(dirs[i]) && strlen(dirs[i]) < out_len) {
            /* The folder as a person would write it, when it resolves. */
            char real[PATH_MAX];
            const char *d = realpath(dirs[i], real) != NULL ? real : dirs[i];
            snprintf(out, out_len, "%s", strlen(d) < out_len ? d : dirs[i]);
            return 1;
        }
        note_tried(tried, tried_len, dirs[i]);
    }
    return 0;
}

/*
 * tsdf_dataset.c - 7-Scenes and TUM RGB-D readers.
 *
 * Text files are read whole (bounded) and parsed with strtod under strict
 * checks: every token must be a complete number, every line must have the
 * expected count. Anything else is TSDF_EFORMAT.
 */
#include "tsdf_dataset.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tsdf_png.h"
#include "tsdf_pose.h"

#define DS_PATH_MAX 4096
#define DS_LINE_MAX 4096
/* Big enough for a TUM ground-truth file of hours (about 100 bytes per
 * line at 100 Hz), small enough that a wrong file cannot exhaust memory. */
#define DS_TEXT_MAX (256u * 1024u * 1024u)
/* The association window of the TUM tools (associate.py's max_difference). */
#define DS_TUM_MAX_DT_S 0.02

struct tsdf_dataset {
    tsdf_dataset_kind kind;
    char root[DS_PATH_MAX];       /* the folder given to open */
    char frames_dir[DS_PATH_MAX]; /* 7-Scenes: where frame-* files are */
    uint32_t count;
    uint32_t skipped;
    uint32_t width, height;
    tsdf_intrinsics K;
    float depth_scale;
    uint32_t *indices; /* 7-Scenes: the frame numbers on disk, ascending */
    /* TUM: per associated frame, the depth image path (offset into
     * path_pool), its timestamp and its ground-truth pose. */
    char *path_pool;
    size_t *path_offsets;
    double *timestamps;
    float *poses; /* 16 per frame */
};

/* ---- text helpers ------------------------------------------------------ */

static int errno_to_tsdf(int e)
{
    if (e == ENOENT || e == ENOTDIR)
        return TSDF_ENOT_FOUND;
    if (e == ENOMEM)
        return TSDF_ENOMEM;
    return TSDF_EIO;
}

/* Reads the whole file into a NUL-terminated malloc'ed buffer. A file with
 * an embedded NUL byte is not text: TSDF_EFORMAT. */
static int read_text_file(const char *path, size_t max_bytes, char **out, size_t *len_out)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return errno_to_tsdf(errno);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(fp);
        return TSDF_ENOMEM;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= max_bytes) {
                free(buf);
                fclose(fp);
                return TSDF_ETOO_LARGE;
            }
            size_t ncap = cap * 2 > max_bytes ? max_bytes : cap * 2;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                fclose(fp);
                return TSDF_ENOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, fp);
        len += got;
        if (got == 0)
            break;
    }
    int io_err = ferror(fp);
    fclose(fp);
    if (io_err) {
        free(buf);
        return TSDF_EIO;
    }
    buf[len] = '\0';
    if (memchr(buf, '\0', len) != NULL) {
        free(buf);
        return TSDF_EFORMAT;
    }
    *out = buf;
    if (len_out)
        *len_out = len;
    return TSDF_OK;
}

/* Cuts the next line out of *cursor (NUL-terminating it in place) and
 * advances; NULL at the end. Lines longer than DS_LINE_MAX set *too_long. */
static char *next_line(char **cursor, int *too_long)
{
    char *s = *cursor;
    if (!s || !*s)
        return NULL;
    char *nl = strchr(s, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = s + strlen(s);
    }
    size_t n = strlen(s);
    if (n > DS_LINE_MAX)
        *too_long = 1;
    if (n > 0 && s[n - 1] == '\r')
        s[n - 1] = '\0';
    return s;
}

static int is_blank_or_comment(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return *s == '\0' || *s == '#';
}

/* The next line that carries data (blank lines and # comments skipped) into
 * *line: 1, 0 at the end, or TSDF_EFORMAT for a line longer than
 * DS_LINE_MAX. */
static int next_data_line(char **cursor, char **line)
{
    int too_long = 0;
    while ((*line = next_line(cursor, &too_long)) != NULL) {
        if (too_long)
            return TSDF_EFORMAT;
        if (!is_blank_or_comment(*line))
            return 1;
    }
    return 0;
}

/* Doubles the capacity of the array arr of *cap elements of elem_size bytes
 * (first: the capacity of an empty one). Returns the grown array with *cap
 * updated, or NULL (arr and *cap untouched) when memory runs out. */
static void *grow_array(void *arr, size_t *cap, size_t elem_size, size_t first)
{
    size_t ncap = *cap ? *cap * 2 : first;
    void *p = realloc(arr, ncap * elem_size);
    if (p != NULL)
        *cap = ncap;
    return p;
}

/* Parses up to max numbers from s; *n receives how many. Returns
 * TSDF_EFORMAT when a token is not a complete number or there are more
 * than max tokens. Non-finite values ("nan", "inf") parse; callers decide. */
static int parse_numbers(const char *s, double *vals, int max, int *n)
{
    int k = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == ',')
            p++;
        if (!*p)
            break;
        if (k >= max)
            return TSDF_EFORMAT;
        char *end = NULL;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p ||
            (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n' && *end != ','))
            return TSDF_EFORMAT;
        /* Underflow to a tiny value is harmless; overflow gives inf, which
         * the finiteness checks downstream reject. */
        vals[k++] = v;
        p = end;
    }
    *n = k;
    return TSDF_OK;
}

static int path_join(char *out, const char *a, const char *b)
{
    int n = snprintf(out, DS_PATH_MAX, "%s/%s", a, b);
    return (n < 0 || n >= DS_PATH_MAX) ? TSDF_ETOO_LARGE : TSDF_OK;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Reads the small text file at path (64 KiB at most: a larger one is not a
 * pose or intrinsics file, so TSDF_EFORMAT) and parses up to max numbers of
 * it into v (*n: how many). Returns the read error, else what parse_numbers
 * returns (TSDF_OK or TSDF_EFORMAT). */
static int read_numbers_file(const char *path, double *v, int max, int *n)
{
    char *text = NULL;
    int rc = read_text_file(path, 64 * 1024, &text, NULL);
    if (rc != TSDF_OK)
        return rc == TSDF_ETOO_LARGE ? TSDF_EFORMAT : rc;
    rc = parse_numbers(text, v, max, n);
    free(text);
    return rc;
}

/* ---- poses ------------------------------------------------------------- */

int tsdf_dataset_read_pose_file(const char *path, float T[16])
{
    if (!path || !T)
        return TSDF_EINVAL;
    double v[16];
    int n = 0;
    int rc = read_numbers_file(path, v, 16, &n);
    if (rc != TSDF_OK)
        return rc;
    if (n != 16)
        return TSDF_EFORMAT;
    for (int i = 0; i < 16; i++) {
        if (!isfinite(v[i]) || fabs(v[i]) > 1e30)
            return TSDF_EBAD_POSE;
        T[i] = (float)v[i];
    }
    return tsdf_pose_is_rigid(T) ? TSDF_OK : TSDF_EBAD_POSE;
}

int tsdf_dataset_pose_from_tum(const double t[3], const double q_xyzw[4], float T[16])
{
    if (!t || !q_xyzw || !T)
        return TSDF_EINVAL;
    for (int k = 0; k < 3; k++)
        if (!isfinite(t[k]) || fabs(t[k]) > 1e30)
            return TSDF_EBAD_POSE;
    for (int k = 0; k < 4; k++)
        if (!isfinite(q_xyzw[k]))
            return TSDF_EBAD_POSE;
    double norm = sqrt(q_xyzw[0] * q_xyzw[0] + q_xyzw[1] * q_xyzw[1] + q_xyzw[2] * q_xyzw[2] +
                       q_xyzw[3] * q_xyzw[3]);
    /* Ground-truth files print quaternions with 4 decimals, so they are
     * unit only to about 1e-4; anything far off is not a rotation. */
    if (!(fabs(norm - 1.0) <= 1e-2))
        return TSDF_EBAD_POSE;
    double x = q_xyzw[0] / norm, y = q_xyzw[1] / norm, z = q_xyzw[2] / norm, w = q_xyzw[3] / norm;
    double R[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - z * w),     2 * (x * z + y * w),
                   2 * (x * y + z * w),     1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                   2 * (x * z - y * w),     2 * (y * z + x * w),     1 - 2 * (x * x + y * y)};
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 3; c++)
            T[r * 4 + c] = (float)R[r * 3 + c];
        T[r * 4 + 3] = (float)t[r];
    }
    T[12] = T[13] = T[14] = 0.0f;
    T[15] = 1.0f;
    return TSDF_OK;
}

/* ---- intrinsics -------------------------------------------------------- */

int tsdf_dataset_read_intrinsics_file(const char *path, tsdf_intrinsics *K)
{
    if (!path || !K)
        return TSDF_EINVAL;
    double v[9];
    int n = 0;
    int rc = read_numbers_file(path, v, 9, &n);
    if (rc != TSDF_OK)
        return rc;
    tsdf_intrinsics k;
    if (n == 9) {
        /* A pinhole K: no skew, last row 0 0 1. */
        if (v[1] != 0.0 || v[3] != 0.0 || v[6] != 0.0 || v[7] != 0.0 || v[8] != 1.0)
            return TSDF_EBAD_INTRINSICS;
        k.fx = (float)v[0];
        k.fy = (float)v[4];
        k.cx = (float)v[2];
        k.cy = (float)v[5];
    } else if (n == 4) {
        k.fx = (float)v[0];
        k.fy = (float)v[1];
        k.cx = (float)v[2];
        k.cy = (float)v[3];
    } else {
        return TSDF_EFORMAT;
    }
    if (!isfinite(k.fx) || !isfinite(k.fy) || !isfinite(k.cx) || !isfinite(k.cy) || k.fx <= 0.0f ||
        k.fy <= 0.0f)
        return TSDF_EBAD_INTRINSICS;
    *K = k;
    return TSDF_OK;
}

/* Reads dir/camera-intrinsics.txt if it exists (a 3x3 K or "fx fy cx cy");
 * keeps *K (the layout's default) when it does not. */
static int read_intrinsics(const char *dir, tsdf_intrinsics *K)
{
    char path[DS_PATH_MAX];
    int rc = path_join(path, dir, "camera-intrinsics.txt");
    if (rc != TSDF_OK)
        return rc;
    if (!is_file(path))
        return TSDF_OK;
    return tsdf_dataset_read_intrinsics_file(path, K);
}

/* ---- 7-Scenes ---------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Parses "frame-XXXXXX.depth.png" (exactly six digits); 1 on a match. */
static int match_depth_name(const char *name, uint32_t *index)
{
    static const char prefix[] = "frame-", suffix[] = ".depth.png";
    if (strlen(name) != 6 + 6 + 10 || strncmp(name, prefix, 6) != 0 ||
        strcmp(name + 12, suffix) != 0)
        return 0;
    uint32_t v = 0;
    for (int i = 6; i < 12; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        v = v * 10 + (uint32_t)(name[i] - '0');
    }
    *index = v;
    return 1;
}

/* Lists the frame numbers in dir into ds->indices; count 0 when there are none. */
static int scan_7scenes(tsdf_dataset *ds, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno_to_tsdf(errno);
    size_t cap = 0, n = 0;
    uint32_t *idx = NULL;
    int rc = TSDF_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        uint32_t i;
        if (!match_depth_name(e->d_name, &i))
            continue;
        if (n >= TSDF_DATASET_MAX_FRAMES) {
            rc = TSDF_ETOO_LARGE;
            break;
        }
        if (n == cap) {
            uint32_t *ni = grow_array(idx, &cap, sizeof *ni, 256);
            if (!ni) {
                rc = TSDF_ENOMEM;
                break;
            }
            idx = ni;
        }
        idx[n++] = i;
    }
    closedir(d);
    if (rc != TSDF_OK) {
        free(idx);
        return rc;
    }
    if (n > 0)
        qsort(idx, n, sizeof *idx, cmp_u32);
    ds->indices = idx;
    ds->count = (uint32_t)n;
    return TSDF_OK;
}

static int frame_path_7scenes(const tsdf_dataset *ds, uint32_t i, const char *suffix, char *out)
{
    int n = snprintf(out, DS_PATH_MAX, "%s/frame-%06u.%s", ds->frames_dir, ds->indices[i], suffix);
    return (n < 0 || n >= DS_PATH_MAX) ? TSDF_ETOO_LARGE : TSDF_OK;
}

static int open_7scenes(tsdf_dataset *ds)
{
    /* The redistributed layout keeps frames in frames/; the original
     * 7-Scenes sequences (seq-01/...) hold them directly. */
    char sub[DS_PATH_MAX];
    int rc = path_join(sub, ds->root, "frames");
    if (rc != TSDF_OK)
        return rc;
    struct stat st;
    const char *cand[2] = {sub, ds->root};
    for (int c = 0; c < 2; c++) {
        if (stat(cand[c], &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        rc = scan_7scenes(ds, cand[c]);
        if (rc != TSDF_OK)
            return rc;
        if (ds->count > 0) {
            snprintf(ds->frames_dir, sizeof ds->frames_dir, "%s", cand[c]);
            break;
        }
        free(ds->indices);
        ds->indices = NULL;
    }
    if (ds->count == 0)
        return TSDF_ENOT_FOUND;
    ds->kind = TSDF_DATASET_7SCENES;
    ds->depth_scale = 0.001f;
    ds->K = (tsdf_intrinsics){585.0f, 585.0f, 320.0f, 240.0f};
    return read_intrinsics(ds->root, &ds->K);
}

/* ---- TUM RGB-D --------------------------------------------------------- */

typedef struct {
    double t;
    double v[7]; /* tx ty tz qx qy qz qw */
} tum_gt;

static int cmp_gt(const void *a, const void *b)
{
    double x = ((const tum_gt *)a)->t, y = ((const tum_gt *)b)->t;
    return x < y ? -1 : x > y;
}

static int read_groundtruth(const char *root, tum_gt **out, size_t *n_out)
{
    char path[DS_PATH_MAX];
    int rc = path_join(path, root, "groundtruth.txt");
    if (rc != TSDF_OK)
        return rc;
    char *text = NULL;
    rc = read_text_file(path, DS_TEXT_MAX, &text, NULL);
    if (rc != TSDF_OK)
        return rc;
    tum_gt *gt = NULL;
    size_t n = 0, cap = 0;
    char *cursor = text, *line;
    int more;
    while ((more = next_data_line(&cursor, &line)) > 0) {
        double v[8];
        int k = 0;
        rc = parse_numbers(line, v, 8, &k);
        if (rc != TSDF_OK || k != 8 || !isfinite(v[0])) {
            rc = TSDF_EFORMAT;
            break;
        }
        if (n >= 16u * TSDF_DATASET_MAX_FRAMES) {
            rc = TSDF_ETOO_LARGE;
            break;
        }
        if (n == cap) {
            tum_gt *ng = grow_array(gt, &cap, sizeof *ng, 1024);
            if (!ng) {
                rc = TSDF_ENOMEM;
                break;
            }
            gt = ng;
        }
        gt[n].t = v[0];
        memcpy(gt[n].v, v + 1, sizeof gt[n].v);
        n++;
    }
    if (more < 0)
        rc = more;
    free(text);
    if (rc != TSDF_OK) {
        free(gt);
        return rc;
    }
    if (n == 0) {
        free(gt);
        return TSDF_EFORMAT;
    }
    qsort(gt, n, sizeof *gt, cmp_gt);
    *out = gt;
    *n_out = n;
    return TSDF_OK;
}

/* The ground-truth entry nearest to t (gt sorted by time, n > 0). */
static const tum_gt *nearest_gt(const tum_gt *gt, size_t n, double t)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (gt[mid].t < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* gt[lo] is the first entry >= t; its predecessor may be nearer. */
    if (lo == n)
        return &gt[n - 1];
    if (lo > 0 && t - gt[lo - 1].t <= gt[lo].t - t)
        return &gt[lo - 1];
    return &gt[lo];
}

static int open_tum(tsdf_dataset *ds)
{
    tum_gt *gt = NULL;
    size_t ngt = 0;
    int rc = read_groundtruth(ds->root, &gt, &ngt);
    if (rc != TSDF_OK)
        return rc;

    char path[DS_PATH_MAX];
    char *text = NULL;
    size_t text_len = 0;
    rc = path_join(path, ds->root, "depth.txt");
    if (rc == TSDF_OK)
        rc = read_text_file(path, DS_TEXT_MAX, &text, &text_len);
    if (rc != TSDF_OK) {
        free(gt);
        return rc;
    }
    /* One pass to size the arrays: at most one frame per line. */
    size_t max_frames = 1;
    for (size_t i = 0; i < text_len; i++)
        max_frames += text[i] == '\n';
    if (max_frames > TSDF_DATASET_MAX_FRAMES)
        max_frames = TSDF_DATASET_MAX_FRAMES;
    ds->path_pool = malloc(text_len + 1);
    ds->path_offsets = malloc(max_frames * sizeof *ds->path_offsets);
    ds->timestamps = malloc(max_frames * sizeof *ds->timestamps);
    ds->poses = malloc(max_frames * 16 * sizeof *ds->poses);
    if (!ds->path_pool || !ds->path_offsets || !ds->timestamps || !ds->poses) {
        free(gt);
        free(text);
        return TSDF_ENOMEM;
    }
    size_t pool_len = 0;
    char *cursor = text, *line;
    int more;
    while ((more = next_data_line(&cursor, &line)) > 0) {
        /* "timestamp path": the timestamp is a number, the path one token. */
        char *end = NULL;
        double t = strtod(line, &end);
        if (end == line || (*end != ' ' && *end != '\t') || !isfinite(t)) {
            rc = TSDF_EFORMAT;
            break;
        }
        while (*end == ' ' || *end == '\t')
            end++;
        char *name = end;
        size_t name_len = strcspn(name, " \t");
        char *rest = name + name_len;
        while (*rest == ' ' || *rest == '\t')
            rest++;
        if (name_len == 0 || *rest != '\0' || name_len >= DS_PATH_MAX) {
            rc = TSDF_EFORMAT;
            break;
        }
        const tum_gt *g = nearest_gt(gt, ngt, t);
        if (fabs(g->t - t) > DS_TUM_MAX_DT_S) {
            ds->skipped++;
            continue;
        }
        if (ds->count >= max_frames) {
            rc = TSDF_ETOO_LARGE;
            break;
        }
        rc = tsdf_dataset_pose_from_tum(g->v, g->v + 3, ds->poses + 16 * (size_t)ds->count);
        if (rc != TSDF_OK)
            break;
        memcpy(ds->path_pool + pool_len, name, name_len);
        ds->path_pool[pool_len + name_len] = '\0';
        ds->path_offsets[ds->count] = pool_len;
        ds->timestamps[ds->count] = t;
        pool_len += name_len + 1;
        ds->count++;
    }
    if (more < 0)
        rc = more;
    free(text);
    free(gt);
    if (rc != TSDF_OK)
        return rc;
    /* A TUM folder in which no depth image has a pose is not a usable
     * sequence: most likely the wrong ground-truth file. */
    if (ds->count == 0)
        return TSDF_EFORMAT;
    ds->kind = TSDF_DATASET_TUM;
    ds->depth_scale = 1.0f / 5000.0f;
    ds->K = (tsdf_intrinsics){525.0f, 525.0f, 319.5f, 239.5f};
    return read_intrinsics(ds->root, &ds->K);
}

static int tum_depth_path(const tsdf_dataset *ds, uint32_t i, char *out)
{
    return path_join(out, ds->root, ds->path_pool + ds->path_offsets[i]);
}

/* ---- the reader -------------------------------------------------------- */

void tsdf_dataset_close(tsdf_dataset *ds)
{
    if (!ds)
        return;
    free(ds->indices);
    free(ds->path_pool);
    free(ds->path_offsets);
    free(ds->timestamps);
    free(ds->poses);
    free(ds);
}

int tsdf_dataset_open(const char *dir, tsdf_dataset **out)
{
    if (!dir || !out)
        return TSDF_EINVAL;
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno_to_tsdf(errno);
    if (!S_ISDIR(st.st_mode))
        return TSDF_ENOT_FOUND;
    tsdf_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return TSDF_ENOMEM;
    int n = snprintf(ds->root, sizeof ds->root, "%s", dir);
    if (n < 0 || (size_t)n >= sizeof ds->root) {
        free(ds);
        return TSDF_ETOO_LARGE;
    }

    char p1[DS_PATH_MAX], p2[DS_PATH_MAX];
    int rc = path_join(p1, dir, "depth.txt");
    if (rc == TSDF_OK)
        rc = path_join(p2, dir, "groundtruth.txt");
    if (rc == TSDF_OK) {
        if (is_file(p1) && is_file(p2))
            rc = open_tum(ds);
        else
            rc = open_7scenes(ds);
    }
    if (rc == TSDF_OK) {
        /* The first frame's header fixes the sequence's image size. */
        char path[DS_PATH_MAX];
        rc = ds->kind == TSDF_DATASET_TUM ? tum_depth_path(ds, 0, path)
                                          : frame_path_7scenes(ds, 0, "depth.png", path);
        int bit_depth = 0, channels = 0;
        if (rc == TSDF_OK)
            rc = tsdf_png_info(path, &ds->width, &ds->height, &bit_depth, &channels);
        if (rc == TSDF_OK && (bit_depth != 16 || channels != 1))
            rc = TSDF_EFORMAT;
        if (rc == TSDF_OK && (ds->width > TSDF_MAX_IMAGE_DIM || ds->height > TSDF_MAX_IMAGE_DIM ||
                              (uint64_t)ds->width * ds->height > TSDF_MAX_IMAGE_PIXELS))
            rc = TSDF_ETOO_LARGE;
    }
    if (rc != TSDF_OK) {
        tsdf_dataset_close(ds);
        return rc;
    }
    *out = ds;
    return TSDF_OK;
}

int tsdf_dataset_get_info(const tsdf_dataset *ds, tsdf_dataset_info *out)
{
    if (!ds || !out)
        return TSDF_EINVAL;
    memset(out, 0, sizeof *out);
    out->kind = ds->kind;
    out->frame_count = ds->count;
    out->skipped = ds->skipped;
    out->width = ds->width;
    out->height = ds->height;
    out->K = ds->K;
    out->depth_scale = ds->depth_scale;
    return TSDF_OK;
}

uint32_t tsdf_dataset_count(const tsdf_dataset *ds)
{
    return ds ? ds->count : 0;
}

int tsdf_dataset_load(const tsdf_dataset *ds, uint32_t i, uint16_t *depth, size_t capacity_pixels,
                      tsdf_dataset_frame *out)
{
    if (!ds || !depth || !out || i >= ds->count)
        return TSDF_EINVAL;
    char path[DS_PATH_MAX];
    tsdf_dataset_frame f;
    memset(&f, 0, sizeof f);
    f.index = i;
    f.K = ds->K;
    f.depth_scale = ds->depth_scale;
    int rc;
    if (ds->kind == TSDF_DATASET_7SCENES) {
        rc = frame_path_7scenes(ds, i, "pose.txt", path);
        if (rc == TSDF_OK)
            rc = tsdf_dataset_read_pose_file(path, f.T_world_cam);
        if (rc == TSDF_OK)
            rc = frame_path_7scenes(ds, i, "depth.png", path);
        f.timestamp_s = ds->indices[i] / 30.0;
    } else {
        memcpy(f.T_world_cam, ds->poses + 16 * (size_t)i, sizeof f.T_world_cam);
        rc = tum_depth_path(ds, i, path);
        f.timestamp_s = ds->timestamps[i];
    }
    if (rc == TSDF_OK)
        rc = tsdf_png_read_gray16(path, depth, capacity_pixels, &f.width, &f.height);
    if (rc != TSDF_OK)
        return rc;
    if (ds->kind == TSDF_DATASET_7SCENES) {
        /* The Kinect driver of 7-Scenes writes 65535 for "no reading". */
        size_t n = (size_t)f.width * f.height;
        for (size_t k = 0; k < n; k++)
            if (depth[k] == 65535)
                depth[k] = 0;
    }
    *out = f;
    return TSDF_OK;
}

void tsdf_dataset_frame_to_tsdf(const tsdf_dataset_frame *f, const uint16_t *depth,
                                float min_depth_m, float max_depth_m, tsdf_frame *out)
{
    if (!f || !out)
        return;
    memset(out, 0, sizeof *out);
    out->width = f->width;
    out->height = f->height;
    out->K = f->K;
    memcpy(out->T_world_cam, f->T_world_cam, sizeof out->T_world_cam);
    out->depth_format = TSDF_DEPTH_U16;
    out->depth = depth;
    out->depth_scale = f->depth_scale;
    out->min_depth_m = min_depth_m;
    out->max_depth_m = max_depth_m;
    out->rgb = NULL;
}

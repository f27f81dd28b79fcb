/*
 * bench_depth_codec.c - bytes per frame and encode / decode cost of each
 * depth encoding of the wire (proto/tsdf_depth_codec.h) on real depth.
 *
 *   bench_depth_codec [--data DIR] [--frames N] [--repeat R]
 *
 * Reads the 7-Scenes depth PNGs of DIR (--data, else $TSDF_DATA_DIR, else
 * ../shared/data/7scenes-redkitchen), holds them in memory, and for every
 * encoding and level below encodes each frame and decodes it again, R
 * times (default 3), keeping each frame's fastest encode and decode (the
 * least disturbed by other work on the machine). It checks that every
 * decode gives back exactly the frame's samples and refuses to print any
 * time otherwise (exit 1). Prints one Markdown table: mean bytes per
 * frame, the ratio to raw, what 30 frames a second need, and the median
 * over frames of the encode and decode times (ms, one thread).
 * The f32 rows send the same frames as float metres (depth x 0.001).
 * Exit 77 when the data is not there.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tsdf_dataset.h"
#include "tsdf_depth_codec.h"
#include "bench_clock.h"

typedef struct {
    const char *label;
    tsdf_depth_encoding e;
    int level;
    tsdf_depth_format fmt;
} codec_case;

static const codec_case cases[] = {
    {"raw", TSDF_DEPTH_ENC_RAW, 0, TSDF_DEPTH_U16},
    {"png (level 1, default)", TSDF_DEPTH_ENC_PNG, 0, TSDF_DEPTH_U16},
    {"png (level 6)", TSDF_DEPTH_ENC_PNG, 6, TSDF_DEPTH_U16},
    {"zstd (level 1)", TSDF_DEPTH_ENC_ZSTD, 1, TSDF_DEPTH_U16},
    {"zstd (level 3, default)", TSDF_DEPTH_ENC_ZSTD, 0, TSDF_DEPTH_U16},
    {"rvl", TSDF_DEPTH_ENC_RVL, 0, TSDF_DEPTH_U16},
    {"raw f32", TSDF_DEPTH_ENC_RAW, 0, TSDF_DEPTH_F32},
    {"zstd f32 (level 3, default)", TSDF_DEPTH_ENC_ZSTD, 0, TSDF_DEPTH_F32},
};
#define NCASES (sizeof cases / sizeof cases[0])

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int is_dir(const char *p)
{
    struct stat st;
    return p != NULL && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static const char *resolve_data_dir(const char *given)
{
    if (given != NULL)
        return given;
    const char *env = getenv("TSDF_DATA_DIR");
    if (env != NULL && *env)
        return env;
    if (is_dir("../shared/data/7scenes-redkitchen"))
        return "../shared/data/7scenes-redkitchen";
    return TSDF_SOURCE_DIR "/../shared/data/7scenes-redkitchen";
}

int main(int argc, char **argv)
{
    const char *data = NULL;
    unsigned long max_frames = 0, repeat = 3;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--data") == 0 && v) {
            data = v;
            i++;
        } else if (strcmp(argv[i], "--frames") == 0 && v) {
            max_frames = strtoul(v, NULL, 10);
            i++;
        } else if (strcmp(argv[i], "--repeat") == 0 && v) {
            repeat = strtoul(v, NULL, 10);
            i++;
        } else {
            fprintf(stderr, "usage: bench_depth_codec [--data DIR] [--frames N] [--repeat R]\n");
            return 2;
        }
    }
    if (repeat < 1 || repeat > 100) {
        fprintf(stderr, "bench_depth_codec: --repeat takes 1..100\n");
        return 2;
    }
    data = resolve_data_dir(data);
    tsdf_dataset *ds = NULL;
    int rc = tsdf_dataset_open(data, &ds);
    if (rc != TSDF_OK) {
        printf("SKIPPED: no 7-Scenes data at %s (%s); set --data or TSDF_DATA_DIR\n", data,
               tsdf_strerror(rc));
        return 77;
    }
    tsdf_dataset_info info;
    tsdf_dataset_get_info(ds, &info);
    size_t n = info.frame_count;
    if (max_frames != 0 && max_frames < n)
        n = max_frames;
    size_t px = (size_t)info.width * info.height;
    uint16_t **u16 = calloc(n, sizeof *u16);
    float **f32 = calloc(n, sizeof *f32);
    uint8_t *back = malloc(px * 4);
    double *enc_ms = malloc(n * sizeof *enc_ms), *dec_ms = malloc(n * sizeof *dec_ms);
    if (u16 == NULL || f32 == NULL || back == NULL || enc_ms == NULL || dec_ms == NULL)
        return 1;
    for (size_t i = 0; i < n; i++) {
        tsdf_dataset_frame df;
        u16[i] = malloc(px * 2);
        f32[i] = malloc(px * 4);
        if (u16[i] == NULL || f32[i] == NULL)
            return 1;
        rc = tsdf_dataset_load(ds, (uint32_t)i, u16[i], px, &df);
        if (rc != TSDF_OK) {
            fprintf(stderr, "bench_depth_codec: frame %zu: %s\n", i, tsdf_strerror(rc));
            return 1;
        }
        for (size_t k = 0; k < px; k++)
            f32[i][k] = (float)u16[i][k] * df.depth_scale;
    }
    tsdf_dataset_close(ds);
    printf("bench_depth_codec: %zu frames of %ux%u from %s, best of %lu runs per frame\n\n", n,
           info.width, info.height, data, repeat);
    printf("| encoding | bytes/frame (mean) | ratio to raw | MB/s at 30 Hz | encode ms (median) | "
           "decode ms (median) |\n|---|---:|---:|---:|---:|---:|\n");

    tsdf_buf b;
    tsdf_buf_init(&b);
    double raw_bytes[2] = {(double)px * 2, (double)px * 4};
    for (size_t c = 0; c < NCASES; c++) {
        const codec_case *cc = &cases[c];
        size_t bytes = px * (cc->fmt == TSDF_DEPTH_U16 ? 2u : 4u);
        double total = 0;
        for (size_t i = 0; i < n; i++) {
            const void *in =
                cc->fmt == TSDF_DEPTH_U16 ? (const void *)u16[i] : (const void *)f32[i];
            enc_ms[i] = dec_ms[i] = 1e30;
            /* One untimed round first: page faults and cold caches are not
             * the codec's steady-state cost. */
            for (unsigned long r = 0; r <= repeat; r++) {
                tsdf_buf_clear(&b);
                double t0 = now_ms();
                rc = tsdf_depth_encode(cc->e, cc->level, cc->fmt, info.width, info.height, in, &b);
                double t1 = now_ms();
                if (rc != TSDF_OK) {
                    fprintf(stderr, "bench_depth_codec: %s: encode of frame %zu: %s\n", cc->label,
                            i, tsdf_strerror(rc));
                    return 1;
                }
                memset(back, 0, bytes);
                tsdf_proto_error err;
                double t2 = now_ms();
                rc = tsdf_depth_decode(cc->e, cc->fmt, info.width, info.height, b.data, b.len, back,
                                       bytes, &err);
                double t3 = now_ms();
                if (rc != TSDF_OK || memcmp(back, in, bytes) != 0) {
                    fprintf(stderr,
                            "bench_depth_codec: %s: frame %zu does not decode to its samples "
                            "(%s %s): no times printed\n",
                            cc->label, i, tsdf_strerror(rc), err.message);
                    return 1;
                }
                if (r > 0) {
                    enc_ms[i] = t1 - t0 < enc_ms[i] ? t1 - t0 : enc_ms[i];
                    dec_ms[i] = t3 - t2 < dec_ms[i] ? t3 - t2 : dec_ms[i];
                }
            }
            total += (double)b.len;
        }
        double mean = total / (double)n;
        printf("| %s | %.0f | %.3f | %.2f | %.3f | %.3f |\n", cc->label, mean,
               mean / raw_bytes[cc->fmt == TSDF_DEPTH_U16 ? 0 : 1], mean * 30.0 / 1e6,
               median(enc_ms, n), median(dec_ms, n));
        fflush(stdout);
    }
    tsdf_buf_fini(&b);
    for (size_t i = 0; i < n; i++) {
        free(u16[i]);
        free(f32[i]);
    }
    free(u16);
    free(f32);
    free(back);
    free(enc_ms);
    free(dec_ms);
    return 0;
}

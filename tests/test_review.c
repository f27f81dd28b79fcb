/*
 * test_review.c - regression tests for defects found in the code review:
 * each case failed before its fix.
 *
 * - Snapshot sequence names beyond UINT64_MAX - 1 (a client may `save`
 *   under any name in the state directory) made the daemon's next sequence
 *   wrap, so that stale file stayed the "newest" snapshot and every restart
 *   restored it instead of the daemon's later saves.
 * - snap_list kept the first `max` snapshot names in readdir order instead
 *   of the newest ones when a directory held more than `max`.
 * - The stats reply left out every counter of a sensor whose name made a
 *   key longer than TSDF_PROTO_MAX_STATS_KEY_LEN (names over 29 bytes).
 * - snap_read (a client's `load PATH`) opened a FIFO before checking that
 *   it is a regular file, and so blocked its request context forever.
 *
 * Plus fuzz-style loops over the file readers of scenes/ (PNG, pose files,
 * TUM lists) that must never crash or misreport on any input; they are
 * meant to run under the ASan/UBSan build (-DTSDF_ASAN=ON).
 */
#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "daemon_harness.h"
#include "snapshot.h"
#include "testutil.h"
#include "tsdf_client.h"
#include "tsdf_dataset.h"
#include "tsdf_error.h"
#include "tsdf_png.h"
#include "tsdf_volume.h"

static const char *fresh_dir(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", tsdf_test_tmpdir(), name);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(mkdir(path, 0750), 0);
    return path;
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb");
    FILE *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    assert_int_equal(ferror(in), 0);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void one_map(snap_map *m, uint64_t version)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "default");
    tsdf_volume_params_default(&m->params);
    m->version = version;
    tsdf_block_set_init(&m->blocks);
}

/* A stale snapshot whose name carries a sequence with no successor in 64
 * bits must neither win "newest" over later saves nor survive as such. */
static void check_overflowing_name(const char *big_name)
{
    const char *dir = fresh_dir("seqwrap");
    snap_map m, *got = NULL;
    size_t n = 0;
    char first[4096], second[4096], latest[4096], stale[4200];

    one_map(&m, 1);
    assert_int_equal(snap_write(dir, &m, 1, first, sizeof first), TSDF_OK);
    snprintf(stale, sizeof stale, "%s/%s", dir, big_name);
    copy_file(first, stale);
    assert_int_equal(unlink(first), 0);

    one_map(&m, 2);
    assert_int_equal(snap_write(dir, &m, 1, second, sizeof second), TSDF_OK);
    assert_int_equal(snap_find_latest_valid(dir, latest, sizeof latest, &got, &n), TSDF_OK);
    assert_int_equal(n, 1);
    assert_string_equal(latest, second);
    assert_int_equal(got[0].version, 2);
    snap_maps_free(got, n);

    /* Pruning to one file keeps the daemon's own newest save. */
    assert_true(snap_prune(dir, 1) >= 0);
    assert_int_equal(access(second, F_OK), 0);

    /* The largest sequence that still has a successor is a snapshot. */
    char edge[4200];
    snprintf(edge, sizeof edge, "%s/snap-18446744073709551614.tsdfsnap", dir);
    copy_file(second, edge);
    assert_int_equal(snap_find_latest_valid(dir, latest, sizeof latest, &got, &n), TSDF_OK);
    assert_string_equal(latest, edge);
    snap_maps_free(got, n);
}

static void test_snapshot_sequence_beyond_u64_is_not_newest(void **state)
{
    (void)state;
    check_overflowing_name("snap-99999999999999999999.tsdfsnap");
    check_overflowing_name("snap-18446744073709551615.tsdfsnap");
}

static void test_snap_list_keeps_the_newest_when_full(void **state)
{
    (void)state;
    const char *dir = fresh_dir("listfull");
    /* 40 files created in a scrambled order, so that no directory order
     * happens to put the newest first. */
    enum { FILES = 40, MAX = 8 };
    for (int k = 0; k < FILES; k++) {
        int seq = 1 + (k * 17) % FILES;
        char p[4200];
        snprintf(p, sizeof p, "%s/snap-%020d.tsdfsnap", dir, seq);
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        fclose(f);
    }
    char names[MAX][SNAP_FILE_NAME_LEN];
    size_t count = 0;
    assert_int_equal(snap_list(dir, names, MAX, &count), TSDF_OK);
    assert_int_equal(count, MAX);
    for (int i = 0; i < MAX; i++) {
        char want[SNAP_FILE_NAME_LEN];
        snprintf(want, sizeof want, "snap-%020d.tsdfsnap", FILES - i);
        assert_string_equal(names[i], want);
    }
    /* max 0 lists nothing and touches no buffer. */
    assert_int_equal(snap_list(dir, NULL, 0, &count), TSDF_OK);
    assert_int_equal(count, 0);
}

static void test_snap_read_refuses_a_fifo_at_once(void **state)
{
    (void)state;
    const char *dir = fresh_dir("fifo");
    char fifo[4200];
    snprintf(fifo, sizeof fifo, "%s/snap-00000000000000000001.tsdfsnap", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snap_map *got = NULL;
    size_t n = 0;
    /* Before the fix open(2) blocked until a writer came: the alarm turns
     * that hang into a failure (SIGALRM ends the program). */
    alarm(10);
    assert_int_equal(snap_read(fifo, &got, &n), TSDF_EIO);
    assert_null(got);
    /* The directory scan refuses it too, and reports "none". */
    char latest[4096];
    assert_int_equal(snap_find_latest_valid(dir, latest, sizeof latest, &got, &n), TSDF_ENOT_FOUND);
    alarm(0);
}

/* ---- fuzz-style loops over the scenes/ readers -------------------------- */

/* A deterministic generator (xorshift64*), so failures reproduce. */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    unsigned char *p = malloc((size_t)n);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void spit(const char *path, const void *p, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len > 0)
        assert_int_equal(fwrite(p, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Recomputes every chunk's CRC, so that a mutation reaches libpng's
 * decoding (and ours) instead of stopping at the checksum. */
static void fix_png_crcs(unsigned char *p, size_t len)
{
    size_t at = 8;
    while (at + 12 <= len) {
        uint32_t n = be32(p + at);
        if (n > len - at - 12)
            return;
        uint32_t crc = (uint32_t)crc32(0L, p + at + 4, 4 + n);
        put_be32(p + at + 8 + n, crc);
        at += 12 + (size_t)n;
    }
}

/* Reads path every way the readers offer; checks only what must hold for
 * any input: a code from the table, and sizes within the caller's buffer. */
static void read_png_every_way(const char *path, uint16_t *buf, size_t cap)
{
    uint32_t w = 0, h = 0;
    int depth = 0, ch = 0;
    int rc = tsdf_png_info(path, &w, &h, &depth, &ch);
    assert_true(rc <= 0);
    rc = tsdf_png_read_gray16(path, buf, cap, &w, &h);
    assert_true(rc <= 0);
    if (rc == TSDF_OK) {
        assert_true(w > 0 && h > 0);
        assert_true((size_t)w * h <= cap);
    } else {
        assert_true(rc == TSDF_EFORMAT || rc == TSDF_EBAD_SIZE || rc == TSDF_ETOO_LARGE ||
                    rc == TSDF_EINVAL || rc == TSDF_EIO || rc == TSDF_ENOMEM);
    }
}

static void test_png_reader_survives_mutations(void **state)
{
    (void)state;
    const char *dir = fresh_dir("pngfuzz");
    char good[4200], bad[4200];
    snprintf(good, sizeof good, "%s/good.png", dir);
    snprintf(bad, sizeof bad, "%s/bad.png", dir);
    enum { W = 13, H = 7, CAP = 64 * 64 };
    uint16_t px[W * H];
    for (int i = 0; i < W * H; i++)
        px[i] = (uint16_t)(i * 977);
    assert_int_equal(tsdf_png_write_gray16(good, px, W, H), TSDF_OK);
    size_t len = 0;
    unsigned char *orig = slurp(good, &len);
    unsigned char *m = malloc(len + 64);
    uint16_t *buf = malloc(CAP * sizeof *buf);
    assert_non_null(m);
    assert_non_null(buf);

    /* Every IHDR field (width, height, bit depth, colour type, compression,
     * filter, interlace) set to boundary values, CRC repaired. */
    static const uint32_t dims[] = {0, 1, 2, 64, 65, 8192, 8193, 0x7fffffffu, 0xffffffffu};
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++) {
        for (size_t b = 0; b < sizeof dims / sizeof dims[0]; b++) {
            memcpy(m, orig, len);
            put_be32(m + 16, dims[a]);
            put_be32(m + 20, dims[b]);
            fix_png_crcs(m, len);
            spit(bad, m, len);
            read_png_every_way(bad, buf, CAP);
        }
    }
    for (int field = 24; field <= 28; field++) {
        for (int v = 0; v < 256; v++) {
            memcpy(m, orig, len);
            m[field] = (unsigned char)v;
            fix_png_crcs(m, len);
            spit(bad, m, len);
            read_png_every_way(bad, buf, CAP);
        }
    }
    /* Every prefix length (0-byte and truncated files). */
    for (size_t n = 0; n < len; n++) {
        spit(bad, orig, n);
        int rc = tsdf_png_read_gray16(bad, buf, CAP, &(uint32_t){0}, &(uint32_t){0});
        assert_true(rc < 0);
    }
    /* Random byte changes anywhere, CRCs repaired half of the time. */
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(m, orig, len);
        int edits = 1 + (int)(rng() % 4);
        for (int e = 0; e < edits; e++)
            m[rng() % len] = (unsigned char)rng();
        if (iter % 2 == 0)
            fix_png_crcs(m, len);
        spit(bad, m, len);
        read_png_every_way(bad, buf, CAP);
    }
    /* Formats that are not 16-bit grey are refused, never misread. */
    uint8_t rgb[W * H * 3];
    memset(rgb, 7, sizeof rgb);
    assert_int_equal(tsdf_png_write_rgb8(bad, rgb, W, H), TSDF_OK);
    assert_int_equal(tsdf_png_read_gray16(bad, buf, CAP, &(uint32_t){0}, &(uint32_t){0}),
                     TSDF_EFORMAT);
    /* A buffer one pixel short is refused before anything is written. */
    assert_int_equal(tsdf_png_read_gray16(good, buf, W * H - 1, &(uint32_t){0}, &(uint32_t){0}),
                     TSDF_EBAD_SIZE);
    free(buf);
    free(m);
    free(orig);
}

static void test_text_readers_survive_garbage(void **state)
{
    (void)state;
    const char *dir = fresh_dir("textfuzz");
    char pose[4200];
    snprintf(pose, sizeof pose, "%s/frame-000000.pose.txt", dir);
    static const char *const tokens[] = {
        "1",   "0",    "-0",   "1e309", "-1e309", "nan", "inf",  "0x1p3", "1e-320", "  ",
        "\t",  "\n",   "\r\n", ",",     "#",      "a",   "1.0.", "+",     "-",      "1e",
        "\0x", "9999", "\xff", "1,",    "0.5",    "e5",  "--1",  "1 ",    ".",      "0 0 0 1"};
    enum { NTOK = sizeof tokens / sizeof tokens[0] };
    char text[1024];
    float T[16];
    for (int iter = 0; iter < 4000; iter++) {
        size_t n = 0;
        int count = (int)(rng() % 40);
        for (int k = 0; k < count; k++) {
            const char *t = tokens[rng() % NTOK];
            size_t tl = strlen(t);
            if (n + tl + 2 >= sizeof text)
                break;
            memcpy(text + n, t, tl);
            n += tl;
            text[n++] = rng() % 3 ? ' ' : '\n';
        }
        spit(pose, text, n);
        int rc = tsdf_dataset_read_pose_file(pose, T);
        assert_true(rc == TSDF_OK || rc == TSDF_EFORMAT || rc == TSDF_EBAD_POSE);
        if (rc == TSDF_OK) {
            for (int i = 0; i < 16; i++)
                assert_true(isfinite(T[i]));
            assert_true(T[12] == 0.0f && T[13] == 0.0f && T[14] == 0.0f && T[15] == 1.0f);
        }
    }
    /* A pose file that is a directory, empty, or huge is refused. */
    assert_true(tsdf_dataset_read_pose_file(dir, T) < 0);
    spit(pose, "", 0);
    assert_int_equal(tsdf_dataset_read_pose_file(pose, T), TSDF_EFORMAT);
    char *big = malloc(200000);
    assert_non_null(big);
    memset(big, ' ', 200000);
    memcpy(big, "1 0 0 0 0 1 0 0 0 0 1 0 0 0 0 1", 31);
    spit(pose, big, 200000);
    assert_int_equal(tsdf_dataset_read_pose_file(pose, T), TSDF_EFORMAT);
    free(big);

    /* TUM lists with garbage lines: open refuses or opens, never crashes,
     * and an opened list only names frames with a finite pose. */
    char depth_txt[4200], gt_txt[4200];
    snprintf(depth_txt, sizeof depth_txt, "%s/depth.txt", dir);
    snprintf(gt_txt, sizeof gt_txt, "%s/groundtruth.txt", dir);
    uint16_t px[4 * 3] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000};
    char png_path[4200];
    snprintf(png_path, sizeof png_path, "%s/d.png", dir);
    assert_int_equal(tsdf_png_write_gray16(png_path, px, 4, 3), TSDF_OK);
    static const char *const depth_lines[] = {"1.0 d.png",  "# comment",    "",
                                              "1.0",        "x d.png",      "1.0 d.png extra",
                                              "nan d.png",  "1e308 d.png",  "\t\t",
                                              "1.01 d.png", "2.0 ../d.png", "1.0\td.png",
                                              "-5 d.png",   "1.0 \r",       "1.0 missing.png"};
    static const char *const gt_lines[] = {"1.0 0 0 0 0 0 0 1",
                                           "1.0 0 0 0 0 0 0 2",
                                           "nan 0 0 0 0 0 0 1",
                                           "1.0 0 0 0",
                                           "# t x y z",
                                           "1.005 1e30 0 0 0 0 0 1",
                                           "1.0 0 0 0 nan 0 0 1",
                                           "2.0 0 0 0 0.7071 0 0 0.7071",
                                           "garbage"};
    for (int iter = 0; iter < 400; iter++) {
        char dt[2048] = "", gt[2048] = "";
        int nd = 1 + (int)(rng() % 6), ng = 1 + (int)(rng() % 5);
        for (int k = 0; k < nd; k++) {
            strcat(dt, depth_lines[rng() % (sizeof depth_lines / sizeof depth_lines[0])]);
            strcat(dt, "\n");
        }
        for (int k = 0; k < ng; k++) {
            strcat(gt, gt_lines[rng() % (sizeof gt_lines / sizeof gt_lines[0])]);
            strcat(gt, "\n");
        }
        spit(depth_txt, dt, strlen(dt));
        spit(gt_txt, gt, strlen(gt));
        tsdf_dataset *ds = NULL;
        int rc = tsdf_dataset_open(dir, &ds);
        assert_true(rc <= 0);
        if (rc != TSDF_OK) {
            assert_null(ds);
            continue;
        }
        uint32_t count = tsdf_dataset_count(ds);
        assert_true(count > 0);
        for (uint32_t i = 0; i < count; i++) {
            tsdf_dataset_frame f;
            uint16_t d[4 * 3];
            rc = tsdf_dataset_load(ds, i, d, 4 * 3, &f);
            assert_true(rc <= 0);
            if (rc == TSDF_OK) {
                for (int k = 0; k < 16; k++)
                    assert_true(isfinite(f.T_world_cam[k]));
            }
        }
        tsdf_dataset_close(ds);
    }
}

/* ---- stats keys of long sensor names (against a real daemon) ------------ */

static int integrate_as(tsdf_client *c, const char *sensor)
{
    enum { W = 16, H = 12 };
    static float depth[W * H];
    for (int i = 0; i < W * H; i++)
        depth[i] = 1.0f;
    tsdf_frame f;
    memset(&f, 0, sizeof f);
    f.width = W;
    f.height = H;
    f.K = (tsdf_intrinsics){20.0f, 20.0f, W / 2.0f, H / 2.0f};
    const float T[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    memcpy(f.T_world_cam, T, sizeof T);
    f.depth_format = TSDF_DEPTH_F32;
    f.depth = depth;
    f.depth_size_bytes = sizeof depth;
    f.depth_scale = 1.0f;
    f.min_depth_m = 0.1f;
    f.max_depth_m = 5.0f;
    tsdf_client_frame cf = {NULL, sensor, 0, 1, 0, &f};
    return tsdf_client_integrate(c, &cf, 20000, NULL);
}

/* The value of the "daemon" counter key, or -1 when absent. */
static int64_t counter(const tsdf_rep_stats *s, const char *key)
{
    for (uint32_t i = 0; i < s->extra_count; i++)
        if (strcmp(s->extra[i].key, key) == 0)
            return s->extra[i].i;
    return -1;
}

static void test_stats_keep_long_sensor_names(void **state)
{
    (void)state;
    tsdfd_harness h;
    if (tsdfd_harness_start(&h, NULL, NULL) != 0)
        fail_msg("the daemon did not start");
    tsdf_client *c = NULL;
    assert_int_equal(tsdf_client_open(h.req_url, NULL, NULL, &c), TSDF_OK);

    /* 29 bytes: the longest name that fits every key in full. */
    const char *fits = "robot-07.front-depth-camera-x";
    /* Two long names that differ only after their 20th byte. */
    const char *long1 = "warehouse-east-robot-0001.front-depth-camera";
    const char *long2 = "warehouse-east-robot-0002.front-depth-camera-with-a-64-byte-nam";
    assert_int_equal(strlen(fits), 29);
    assert_int_equal(strlen(long2), 63);
    assert_int_equal(integrate_as(c, fits), TSDF_OK);
    assert_int_equal(integrate_as(c, long1), TSDF_OK);
    assert_int_equal(integrate_as(c, long2), TSDF_OK);
    assert_int_equal(integrate_as(c, long2), TSDF_OK);

    tsdf_rep_stats *s = malloc(sizeof *s);
    assert_non_null(s);
    assert_int_equal(tsdf_client_stats(c, NULL, s, 20000), TSDF_OK);

    char key[96];
    snprintf(key, sizeof key, "sensor.%s.integrated", fits);
    assert_int_equal(counter(s, key), 1);
    /* Each long sensor has its own four counters under a shortened,
     * distinct label that starts with the name. */
    int long_labels = 0;
    int64_t received[2] = {0, 0};
    for (uint32_t i = 0; i < s->extra_count; i++) {
        const char *k = s->extra[i].key;
        const char *suffix = ".received";
        size_t kl = strlen(k), sl = strlen(suffix);
        if (strncmp(k, "sensor.warehouse-east-robot", 27) != 0 || kl < sl ||
            strcmp(k + kl - sl, suffix) != 0)
            continue;
        assert_non_null(strchr(k, '~'));
        char base[64];
        snprintf(base, sizeof base, "%.*s", (int)(kl - sl), k);
        static const char *const rest[] = {"integrated", "dropped", "rejected"};
        for (int r = 0; r < 3; r++) {
            snprintf(key, sizeof key, "%s.%s", base, rest[r]);
            assert_true(counter(s, key) >= 0);
        }
        assert_true(long_labels < 2);
        received[long_labels++] = s->extra[i].i;
    }
    assert_int_equal(long_labels, 2);
    assert_int_equal(received[0] + received[1], 3);
    assert_true(received[0] != received[1]);
    free(s);

    tsdf_client_close(c);
    assert_int_equal(tsdfd_harness_stop(&h, 20000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_sequence_beyond_u64_is_not_newest),
        cmocka_unit_test(test_snap_list_keeps_the_newest_when_full),
        cmocka_unit_test(test_snap_read_refuses_a_fifo_at_once),
        cmocka_unit_test(test_png_reader_survives_mutations),
        cmocka_unit_test(test_text_readers_survive_garbage),
        cmocka_unit_test(test_stats_keep_long_sensor_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

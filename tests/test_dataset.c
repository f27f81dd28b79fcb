/*
 * test_dataset.c - PNG I/O and the 7-Scenes / TUM readers: tiny sequences
 * written into a scratch folder are read back exactly; malformed files give
 * error codes; the real 7-Scenes data, when present, opens as documented;
 * fuzz-style loops (mutated PNGs, garbage pose files and TUM lists) never
 * crash a reader or make it misreport. PNGs made in memory match the files,
 * and raycast shading tells surface from background.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "tsdf_dataset.h"
#include "tsdf_png.h"
#include "tsdf_pose.h"
#include "tsdf_shade.h"
#include "tsdf_synth.h"

static char scratch[1024];

/* A fresh sub-folder of the test's scratch folder. */
static const char *fresh_dir(const char *name)
{
    snprintf(scratch, sizeof scratch, "%s/%s", tsdf_test_tmpdir(), name);
    mkdir(scratch, 0700);
    return scratch;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fputs(text, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);
}

static void write_pose(const char *path, const float T[16])
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    /* 9 significant digits round-trip a float exactly. */
    for (int r = 0; r < 4; r++)
        fprintf(fp, "%.9e %.9e %.9e %.9e\n", T[r * 4], T[r * 4 + 1], T[r * 4 + 2], T[r * 4 + 3]);
    assert_int_equal(fclose(fp), 0);
}

/* ---- PNG --------------------------------------------------------------- */

static void test_png_gray16_roundtrip(void **state)
{
    const uint32_t w = 7, h = 5;
    uint16_t img[35], back[35];
    for (uint32_t i = 0; i < w * h; i++)
        img[i] = (uint16_t)(i * 1871u + 3u);
    img[0] = 0;
    img[1] = 1;
    img[2] = 255;
    img[3] = 256;
    img[4] = 0x1234;
    img[5] = 65535;
    char path[4096];
    snprintf(path, sizeof path, "%s/g16.png", tsdf_test_tmpdir());
    assert_int_equal(tsdf_png_write_gray16(path, img, w, h), TSDF_OK);

    uint32_t rw = 0, rh = 0;
    int bd = 0, ch = 0;
    assert_int_equal(tsdf_png_info(path, &rw, &rh, &bd, &ch), TSDF_OK);
    assert_int_equal(rw, w);
    assert_int_equal(rh, h);
    assert_int_equal(bd, 16);
    assert_int_equal(ch, 1);

    memset(back, 0xab, sizeof back);
    assert_int_equal(tsdf_png_read_gray16(path, back, 35, &rw, &rh), TSDF_OK);
    assert_memory_equal(back, img, sizeof img);

    /* A buffer one sample short is refused, and the size still reported. */
    rw = rh = 0;
    assert_int_equal(tsdf_png_read_gray16(path, back, 34, &rw, &rh), TSDF_EBAD_SIZE);
    assert_int_equal(rw, w);
    assert_int_equal(rh, h);
}

static void test_png_rgb8_and_errors(void **state)
{
    const uint32_t w = 4, h = 3;
    uint8_t rgb[36];
    for (int i = 0; i < 36; i++)
        rgb[i] = (uint8_t)(i * 7);
    char path[4096];
    snprintf(path, sizeof path, "%s/rgb.png", tsdf_test_tmpdir());
    assert_int_equal(tsdf_png_write_rgb8(path, rgb, w, h), TSDF_OK);
    uint32_t rw, rh;
    int bd, ch;
    assert_int_equal(tsdf_png_info(path, &rw, &rh, &bd, &ch), TSDF_OK);
    assert_int_equal(rw, w);
    assert_int_equal(rh, h);
    assert_int_equal(bd, 8);
    assert_int_equal(ch, 3);
    /* Depth is never read out of a colour image. */
    uint16_t buf[64];
    assert_int_equal(tsdf_png_read_gray16(path, buf, 64, &rw, &rh), TSDF_EFORMAT);

    char missing[4096];
    snprintf(missing, sizeof missing, "%s/nope.png", tsdf_test_tmpdir());
    assert_int_equal(tsdf_png_read_gray16(missing, buf, 64, &rw, &rh), TSDF_ENOT_FOUND);
    assert_int_equal(tsdf_png_info(missing, &rw, &rh, NULL, NULL), TSDF_ENOT_FOUND);

    /* Not a PNG at all. */
    write_text(tsdf_test_tmpdir(), "junk.png", "this is not a png file, just text\n");
    char junk[4096];
    snprintf(junk, sizeof junk, "%s/junk.png", tsdf_test_tmpdir());
    assert_int_equal(tsdf_png_read_gray16(junk, buf, 64, &rw, &rh), TSDF_EFORMAT);

    /* A valid PNG cut in half: libpng's error is caught, not fatal. */
    uint16_t img[64 * 48];
    for (int i = 0; i < 64 * 48; i++)
        img[i] = (uint16_t)(i * 2654435761u >> 16);
    char whole[4096];
    snprintf(whole, sizeof whole, "%s/whole.png", tsdf_test_tmpdir());
    assert_int_equal(tsdf_png_write_gray16(whole, img, 64, 48), TSDF_OK);
    FILE *fp = fopen(whole, "rb");
    assert_non_null(fp);
    static unsigned char bytes[65536];
    size_t n = fread(bytes, 1, sizeof bytes, fp);
    fclose(fp);
    assert_true(n > 100 && n < sizeof bytes);
    char cut[4096];
    snprintf(cut, sizeof cut, "%s/cut.png", tsdf_test_tmpdir());
    fp = fopen(cut, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(bytes, 1, n / 2, fp), n / 2);
    fclose(fp);
    uint16_t back[64 * 48];
    assert_int_equal(tsdf_png_read_gray16(cut, back, 64 * 48, &rw, &rh), TSDF_EFORMAT);
    /* The same with a flipped byte in the image data (CRC mismatch). */
    bytes[n / 2] ^= 0x5a;
    fp = fopen(cut, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(bytes, 1, n, fp), n);
    fclose(fp);
    assert_int_equal(tsdf_png_read_gray16(cut, back, 64 * 48, &rw, &rh), TSDF_EFORMAT);

    /* Writes: bad sizes, bad folders. */
    assert_int_equal(tsdf_png_write_rgb8(path, rgb, 0, 3), TSDF_EINVAL);
    assert_int_equal(tsdf_png_write_rgb8(path, rgb, 9000, 1), TSDF_ETOO_LARGE);
    assert_int_equal(tsdf_png_write_rgb8(path, NULL, 4, 3), TSDF_EINVAL);
    char nodir[4096];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.png", tsdf_test_tmpdir());
    assert_int_equal(tsdf_png_write_rgb8(nodir, rgb, w, h), TSDF_ENOT_FOUND);
}

/* The PNG made in memory (the live view's raycast images) is byte for byte
 * the file's, and refuses what the file writer refuses. */
static void test_png_rgb8_in_memory(void **state)
{
    const uint32_t w = 40, h = 30;
    uint8_t rgb[40 * 30 * 3];
    for (size_t i = 0; i < sizeof rgb; i++)
        rgb[i] = (uint8_t)(i * 2654435761u >> 24);
    char path[4096];
    snprintf(path, sizeof path, "%s/mem.png", tsdf_test_tmpdir());
    assert_int_equal(tsdf_png_write_rgb8(path, rgb, w, h), TSDF_OK);
    static unsigned char file[65536];
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t n = fread(file, 1, sizeof file, fp);
    fclose(fp);
    uint8_t *mem = NULL;
    size_t len = 0;
    assert_int_equal(tsdf_png_encode_rgb8(rgb, w, h, &mem, &len), TSDF_OK);
    assert_int_equal(len, n);
    assert_memory_equal(mem, file, n);
    free(mem);
    assert_int_equal(tsdf_png_encode_rgb8(rgb, 9000, 1, &mem, &len), TSDF_ETOO_LARGE);
    assert_null(mem);
    assert_int_equal(tsdf_png_encode_rgb8(NULL, w, h, &mem, &len), TSDF_EINVAL);
}

/* Shading: a surface facing the camera is bright, one seen edge-on dark,
 * no surface is the background; depth maps near to warm, far to cold. */
static void test_shading(void **state)
{
    float depth[3] = {1.0f, 1.0f, NAN};
    /* Facing the camera (normal towards it: -z), edge-on (+x), none. */
    float normals[9] = {0, 0, -1, 1, 0, 0, NAN, NAN, NAN};
    float T[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    tsdf_intrinsics K = {100.0f, 100.0f, 1.0f, 0.0f};
    uint8_t rgb[9];
    tsdf_shade_surface(depth, normals, T, &K, 3, 1, rgb);
    assert_true(rgb[0] > 150 && rgb[1] > 150);
    assert_true(rgb[3] < 100 && rgb[4] < 100);
    assert_int_equal(rgb[6], 32);
    assert_int_equal(rgb[8], 40);
    float d[3] = {0.5f, 4.0f, NAN};
    tsdf_shade_depth(d, 3, 1, 0.5f, 4.0f, rgb);
    assert_true(rgb[0] > rgb[2]);
    assert_true(rgb[5] > rgb[3]);
    assert_int_equal(rgb[7], 32);
}

/* ---- 7-Scenes layout --------------------------------------------------- */

/* Renders frame k of the synthetic sphere sequence at 64 x 48 in mm. */
static void synth_frame_mm(const tsdf_synth_sequence *seq, uint32_t k, uint16_t *mm, float T[16])
{
    float depth[64 * 48];
    tsdf_frame f;
    assert_int_equal(tsdf_synth_sequence_frame(seq, k, depth, NULL, &f), TSDF_OK);
    tsdf_depth_m_to_mm(depth, 64 * 48, mm);
    memcpy(T, f.T_world_cam, sizeof f.T_world_cam);
}

static void test_7scenes_roundtrip(void **state)
{
    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "sphere"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, 64, 48), TSDF_OK);

    char root[1024], frames[2048], path[4096];
    snprintf(root, sizeof root, "%s", fresh_dir("7scenes"));
    snprintf(frames, sizeof frames, "%s/frames", root);
    mkdir(frames, 0700);
    char ktext[256];
    snprintf(ktext, sizeof ktext, "%.9e 0 %.9e\n0 %.9e %.9e\n0 0 1\n", seq.K.fx, seq.K.cx, seq.K.fy,
             seq.K.cy);
    write_text(root, "camera-intrinsics.txt", ktext);

    /* Frames 0, 1 and 5 (a gap), each a different view. */
    const uint32_t numbers[3] = {0, 1, 5};
    static uint16_t mm[3][64 * 48];
    float T[3][16];
    for (int k = 0; k < 3; k++) {
        synth_frame_mm(&seq, 7 * (uint32_t)k, mm[k], T[k]);
        mm[k][10] = 65535; /* the sensor's "no reading" */
        snprintf(path, sizeof path, "%s/frame-%06u.depth.png", frames, numbers[k]);
        assert_int_equal(tsdf_png_write_gray16(path, mm[k], 64, 48), TSDF_OK);
        snprintf(path, sizeof path, "%s/frame-%06u.pose.txt", frames, numbers[k]);
        write_pose(path, T[k]);
    }
    /* Files that are not frames are ignored. */
    write_text(frames, "frame-000002.color.png", "x");
    write_text(frames, "frame-12.depth.png", "x");

    tsdf_dataset *ds = NULL;
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_OK);
    tsdf_dataset_info info;
    assert_int_equal(tsdf_dataset_get_info(ds, &info), TSDF_OK);
    assert_int_equal(info.kind, TSDF_DATASET_7SCENES);
    assert_int_equal(info.frame_count, 3);
    assert_int_equal(tsdf_dataset_count(ds), 3);
    assert_int_equal(info.width, 64);
    assert_int_equal(info.height, 48);
    assert_float_equal(info.depth_scale, 0.001f, 0.0f);
    assert_float_equal(info.K.fx, seq.K.fx, 0.0f);
    assert_float_equal(info.K.fy, seq.K.fy, 0.0f);
    assert_float_equal(info.K.cx, seq.K.cx, 0.0f);
    assert_float_equal(info.K.cy, seq.K.cy, 0.0f);

    uint16_t buf[64 * 48];
    for (uint32_t k = 0; k < 3; k++) {
        tsdf_dataset_frame f;
        assert_int_equal(tsdf_dataset_load(ds, k, buf, 64 * 48, &f), TSDF_OK);
        assert_int_equal(f.index, k);
        assert_int_equal(f.width, 64);
        assert_int_equal(f.height, 48);
        assert_memory_equal(f.T_world_cam, T[k], sizeof T[k]);
        assert_float_equal(f.timestamp_s, numbers[k] / 30.0, 1e-12);
        assert_int_equal(buf[10], 0); /* 65535 came back as no measurement */
        mm[k][10] = 0;
        assert_memory_equal(buf, mm[k], sizeof buf);
        uint32_t valid = 0;
        for (int i = 0; i < 64 * 48; i++)
            valid += buf[i] != 0;
        assert_true(valid > 100);

        tsdf_frame tf;
        tsdf_dataset_frame_to_tsdf(&f, buf, 0.1f, 4.0f, &tf);
        assert_int_equal(tf.depth_format, TSDF_DEPTH_U16);
        assert_ptr_equal(tf.depth, buf);
        assert_float_equal(tf.depth_scale, 0.001f, 0.0f);
        assert_float_equal(tf.max_depth_m, 4.0f, 0.0f);
        assert_float_equal(tf.K.fx, seq.K.fx, 0.0f);
    }
    assert_int_equal(tsdf_dataset_load(ds, 3, buf, 64 * 48, &(tsdf_dataset_frame){0}), TSDF_EINVAL);
    assert_int_equal(tsdf_dataset_load(ds, 0, buf, 100, &(tsdf_dataset_frame){0}), TSDF_EBAD_SIZE);

    /* Malformed pose files: too few numbers, junk, NaN, not rigid. Each is
     * an error code from load, and the next good frame still loads. */
    tsdf_dataset_frame f;
    snprintf(path, sizeof path, "%s/frame-000001.pose.txt", frames);
    write_text(frames, "frame-000001.pose.txt", "1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0\n");
    assert_int_equal(tsdf_dataset_load(ds, 1, buf, 64 * 48, &f), TSDF_EFORMAT);
    write_text(frames, "frame-000001.pose.txt", "1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1 2\n");
    assert_int_equal(tsdf_dataset_load(ds, 1, buf, 64 * 48, &f), TSDF_EFORMAT);
    write_text(frames, "frame-000001.pose.txt", "1 0 0 0\n0 1 0 x\n0 0 1 0\n0 0 0 1\n");
    assert_int_equal(tsdf_dataset_load(ds, 1, buf, 64 * 48, &f), TSDF_EFORMAT);
    write_text(frames, "frame-000001.pose.txt", "1 0 0 nan\n0 1 0 0\n0 0 1 0\n0 0 0 1\n");
    assert_int_equal(tsdf_dataset_load(ds, 1, buf, 64 * 48, &f), TSDF_EBAD_POSE);
    write_text(frames, "frame-000001.pose.txt", "2 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n");
    assert_int_equal(tsdf_dataset_load(ds, 1, buf, 64 * 48, &f), TSDF_EBAD_POSE);
    write_text(frames, "frame-000001.pose.txt", "");
    assert_int_equal(tsdf_dataset_load(ds, 1, buf, 64 * 48, &f), TSDF_EFORMAT);
    remove(path);
    assert_int_equal(tsdf_dataset_load(ds, 1, buf, 64 * 48, &f), TSDF_ENOT_FOUND);
    assert_int_equal(tsdf_dataset_read_pose_file(path, f.T_world_cam), TSDF_ENOT_FOUND);
    /* A corrupt depth image. */
    write_text(frames, "frame-000005.depth.png", "\x89PNG\r\n\x1a\n garbage after the signature");
    assert_int_equal(tsdf_dataset_load(ds, 2, buf, 64 * 48, &f), TSDF_EFORMAT);
    assert_int_equal(tsdf_dataset_load(ds, 0, buf, 64 * 48, &f), TSDF_OK);
    tsdf_dataset_close(ds);

    /* Malformed intrinsics make open fail. */
    write_text(root, "camera-intrinsics.txt", "585 0 320\n0 585 240\n");
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_EFORMAT);
    assert_null(ds);
    write_text(root, "camera-intrinsics.txt", "-585 0 320\n0 585 240\n0 0 1\n");
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_EBAD_INTRINSICS);
    write_text(root, "camera-intrinsics.txt", "500 510 300 200\n");
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_OK);
    assert_int_equal(tsdf_dataset_get_info(ds, &info), TSDF_OK);
    assert_float_equal(info.K.fy, 510.0f, 0.0f);
    assert_float_equal(info.K.cy, 200.0f, 0.0f);
    tsdf_dataset_close(ds);
}

static void test_open_errors(void **state)
{
    tsdf_dataset *ds = (tsdf_dataset *)&ds; /* open must reset it */
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/not-there", tsdf_test_tmpdir());
    assert_int_equal(tsdf_dataset_open(missing, &ds), TSDF_ENOT_FOUND);
    assert_int_equal(tsdf_dataset_open(fresh_dir("empty"), &ds), TSDF_ENOT_FOUND);
    assert_null(ds);
    assert_int_equal(tsdf_dataset_open(NULL, &ds), TSDF_EINVAL);
    assert_int_equal(tsdf_dataset_count(NULL), 0);
    tsdf_dataset_close(NULL);
}

/* ---- TUM layout -------------------------------------------------------- */

/* The unit quaternion (x, y, z, w) of a rotation matrix (row-major 3x3 in
 * a 4x4), by the largest-diagonal branch for accuracy. */
static void quat_of(const float *T, double q[4])
{
    double m00 = T[0], m11 = T[5], m22 = T[10], tr = m00 + m11 + m22;
    if (tr > 0) {
        double s = sqrt(tr + 1.0) * 2;
        q[3] = 0.25 * s;
        q[0] = (T[9] - T[6]) / s;
        q[1] = (T[2] - T[8]) / s;
        q[2] = (T[4] - T[1]) / s;
    } else if (m00 > m11 && m00 > m22) {
        double s = sqrt(1.0 + m00 - m11 - m22) * 2;
        q[3] = (T[9] - T[6]) / s;
        q[0] = 0.25 * s;
        q[1] = (T[1] + T[4]) / s;
        q[2] = (T[2] + T[8]) / s;
    } else if (m11 > m22) {
        double s = sqrt(1.0 + m11 - m00 - m22) * 2;
        q[3] = (T[2] - T[8]) / s;
        q[0] = (T[1] + T[4]) / s;
        q[1] = 0.25 * s;
        q[2] = (T[6] + T[9]) / s;
    } else {
        double s = sqrt(1.0 + m22 - m00 - m11) * 2;
        q[3] = (T[4] - T[1]) / s;
        q[0] = (T[2] + T[8]) / s;
        q[1] = (T[6] + T[9]) / s;
        q[2] = 0.25 * s;
    }
}

static void test_tum_roundtrip(void **state)
{
    tsdf_synth_sequence seq;
    assert_int_equal(tsdf_synth_sequence_init(&seq, "sphere"), TSDF_OK);
    assert_int_equal(tsdf_synth_sequence_set_resolution(&seq, 64, 48), TSDF_OK);
    char root[1024], depthdir[2048], path[4096];
    snprintf(root, sizeof root, "%s", fresh_dir("tum"));
    snprintf(depthdir, sizeof depthdir, "%s/depth", root);
    mkdir(depthdir, 0700);

    /* Ground truth at 100 Hz from t = 1.000 s, each pose a synthetic view. */
    FILE *gt = NULL;
    snprintf(path, sizeof path, "%s/groundtruth.txt", root);
    gt = fopen(path, "w");
    assert_non_null(gt);
    fprintf(gt, "# ground truth trajectory\n# timestamp tx ty tz qx qy qz qw\n");
    float poses[40][16];
    for (uint32_t k = 0; k < 40; k++) {
        assert_int_equal(tsdf_synth_sequence_pose(&seq, k, poses[k]), TSDF_OK);
        double q[4];
        quat_of(poses[k], q);
        fprintf(gt, "%.4f %.9f %.9f %.9f %.12f %.12f %.12f %.12f\n", 1.0 + 0.01 * k, poses[k][3],
                poses[k][7], poses[k][11], q[0], q[1], q[2], q[3]);
    }
    assert_int_equal(fclose(gt), 0);

    /* Depth at 1.0031 (nearest gt 1.00: frame 0), 1.0868 (1.09: 9), 1.2 (20),
     * and 2.0 (no ground truth within 20 ms: skipped). */
    const double ts[4] = {1.0031, 1.0868, 1.2, 2.0};
    const uint32_t want_gt[3] = {0, 9, 20};
    static uint16_t img[4][64 * 48];
    snprintf(path, sizeof path, "%s/depth.txt", root);
    FILE *dt = fopen(path, "w");
    assert_non_null(dt);
    fprintf(dt, "# depth maps\n# file: 'rgbd_dataset_freiburg1_xyz.bag'\n# timestamp filename\n");
    for (int k = 0; k < 4; k++) {
        float depth[64 * 48];
        tsdf_frame f;
        assert_int_equal(tsdf_synth_sequence_frame(&seq, k < 3 ? want_gt[k] : 0, depth, NULL, &f),
                         TSDF_OK);
        for (int i = 0; i < 64 * 48; i++)
            img[k][i] = (uint16_t)lrintf(depth[i] * 5000.0f);
        char name[64];
        snprintf(name, sizeof name, "depth/%.6f.png", ts[k]);
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", root, name);
        assert_int_equal(tsdf_png_write_gray16(full, img[k], 64, 48), TSDF_OK);
        fprintf(dt, "%.6f %s\n", ts[k], name);
    }
    assert_int_equal(fclose(dt), 0);

    tsdf_dataset *ds = NULL;
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_OK);
    tsdf_dataset_info info;
    assert_int_equal(tsdf_dataset_get_info(ds, &info), TSDF_OK);
    assert_int_equal(info.kind, TSDF_DATASET_TUM);
    assert_int_equal(info.frame_count, 3);
    assert_int_equal(info.skipped, 1);
    assert_float_equal(info.depth_scale, 1.0f / 5000.0f, 0.0f);
    /* No intrinsics file: the fr1 defaults. */
    assert_float_equal(info.K.fx, 525.0f, 0.0f);
    assert_float_equal(info.K.fy, 525.0f, 0.0f);
    assert_float_equal(info.K.cx, 319.5f, 0.0f);
    assert_float_equal(info.K.cy, 239.5f, 0.0f);
    uint16_t buf[64 * 48];
    for (uint32_t k = 0; k < 3; k++) {
        tsdf_dataset_frame f;
        assert_int_equal(tsdf_dataset_load(ds, k, buf, 64 * 48, &f), TSDF_OK);
        assert_memory_equal(buf, img[k], sizeof buf);
        assert_float_equal(f.timestamp_s, ts[k], 1e-9);
        assert_true(tsdf_pose_is_rigid(f.T_world_cam));
        for (int i = 0; i < 16; i++)
            assert_float_equal(f.T_world_cam[i], poses[want_gt[k]][i], 2e-6);
    }
    tsdf_dataset_close(ds);

    /* An intrinsics file overrides the defaults. */
    write_text(root, "camera-intrinsics.txt", "517.3 516.5 318.6 255.3\n");
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_OK);
    assert_int_equal(tsdf_dataset_get_info(ds, &info), TSDF_OK);
    assert_float_equal(info.K.fx, 517.3f, 0.0f);
    assert_float_equal(info.K.cy, 255.3f, 0.0f);
    tsdf_dataset_close(ds);
    snprintf(path, sizeof path, "%s/camera-intrinsics.txt", root);
    assert_int_equal(remove(path), 0);

    /* Malformed ground truth: a short line, junk, a non-unit quaternion, NaN. */
    static const char *const bad_gt[] = {
        "1.0 0 0 0 0 0 0\n",   "1.0 0 0 0 0 0 0 1 9\n", "1.0 0 0 zero 0 0 0 1\n",
        "1.0 0 0 0 0 0 0 2\n", "1.0 0 0 0 nan 0 0 1\n", "",
    };
    static const int bad_rc[] = {TSDF_EFORMAT,   TSDF_EFORMAT,   TSDF_EFORMAT,
                                 TSDF_EBAD_POSE, TSDF_EBAD_POSE, TSDF_EFORMAT};
    for (int k = 0; k < 6; k++) {
        write_text(root, "groundtruth.txt", bad_gt[k]);
        ds = NULL;
        assert_int_equal(tsdf_dataset_open(root, &ds), bad_rc[k]);
        assert_null(ds);
    }
    /* A good ground truth but a malformed depth.txt. */
    write_text(root, "groundtruth.txt", "1.0 0 0 0 0 0 0 1\n");
    write_text(root, "depth.txt", "1.0\n");
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_EFORMAT);
    write_text(root, "depth.txt", "1.0 depth/a.png extra\n");
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_EFORMAT);
    write_text(root, "depth.txt", "one depth/a.png\n");
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_EFORMAT);
    /* A listed depth image that does not exist. */
    write_text(root, "depth.txt", "1.0 depth/missing.png\n");
    assert_int_equal(tsdf_dataset_open(root, &ds), TSDF_ENOT_FOUND);
}

/* ---- the real 7-Scenes data -------------------------------------------- */

static void test_real_7scenes(void **state)
{
    const char *dir = tsdf_test_data_dir();
    if (!dir) {
        printf("7-Scenes data absent: this test is skipped\n");
        skip();
    }
    tsdf_dataset *ds = NULL;
    assert_int_equal(tsdf_dataset_open(dir, &ds), TSDF_OK);
    tsdf_dataset_info info;
    assert_int_equal(tsdf_dataset_get_info(ds, &info), TSDF_OK);
    assert_int_equal(info.kind, TSDF_DATASET_7SCENES);
    assert_int_equal(info.frame_count, 450);
    assert_int_equal(info.width, 640);
    assert_int_equal(info.height, 480);
    assert_float_equal(info.K.fx, 585.0f, 0.0f);
    assert_float_equal(info.K.fy, 585.0f, 0.0f);
    assert_float_equal(info.K.cx, 320.0f, 0.0f);
    assert_float_equal(info.K.cy, 240.0f, 0.0f);

    uint16_t *buf = malloc(sizeof(uint16_t) * 640 * 480);
    assert_non_null(buf);
    tsdf_dataset_frame f;
    assert_int_equal(tsdf_dataset_load(ds, 0, buf, 640 * 480, &f), TSDF_OK);
    assert_int_equal(f.width, 640);
    assert_int_equal(f.height, 480);
    assert_true(tsdf_synth_pose_error(f.T_world_cam) < 1e-3);
    uint32_t valid = 0, lo = 65535, hi = 0;
    for (uint32_t i = 0; i < 640 * 480; i++) {
        if (!buf[i])
            continue;
        valid++;
        lo = buf[i] < lo ? buf[i] : lo;
        hi = buf[i] > hi ? buf[i] : hi;
    }
    printf("frame 0: %u valid pixels, depth %u..%u mm, pose error %.2g\n", valid, lo, hi,
           tsdf_synth_pose_error(f.T_world_cam));
    assert_true(valid > 640 * 480 / 2);
    assert_true(lo >= 300 && hi <= 6000);

    /* Every pose of the sequence is rigid enough for the engine. */
    double worst = 0.0;
    for (uint32_t i = 0; i < info.frame_count; i++) {
        char path[4096];
        float T[16];
        snprintf(path, sizeof path, "%s/frames/frame-%06u.pose.txt", dir, i);
        assert_int_equal(tsdf_dataset_read_pose_file(path, T), TSDF_OK);
        double e = tsdf_synth_pose_error(T);
        worst = e > worst ? e : worst;
    }
    printf("450 poses: worst rigidity error %.2g\n", worst);
    free(buf);
    tsdf_dataset_close(ds);
}

/* ---- fuzz-style loops over the readers ---------------------------------- */

/* Regressions from the code review: the readers must never crash or
 * misreport on any input. Meant to run under the ASan/UBSan build
 * (-DTSDF_ASAN=ON) as well. */

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_gray16_roundtrip),
        cmocka_unit_test(test_png_rgb8_and_errors),
        cmocka_unit_test(test_png_rgb8_in_memory),
        cmocka_unit_test(test_shading),
        cmocka_unit_test(test_7scenes_roundtrip),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_tum_roundtrip),
        cmocka_unit_test(test_real_7scenes),
        cmocka_unit_test(test_png_reader_survives_mutations),
        cmocka_unit_test(test_text_readers_survive_garbage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

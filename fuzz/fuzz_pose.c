/*
 * fuzz_pose.c - libFuzzer target: the text readers of scenes/tsdf_dataset.c,
 * the 7-Scenes pose file (tsdf_dataset_read_pose_file) and the TUM RGB-D
 * sequence files (groundtruth.txt, depth.txt, camera-intrinsics.txt, read by
 * tsdf_dataset_open and tsdf_dataset_load).
 *
 * One input holds the files, separated by NUL bytes (which no text file of
 * a sequence may hold: the reader refuses them):
 *   pose.txt \0 groundtruth.txt \0 depth.txt [\0 camera-intrinsics.txt]
 * With fewer than three parts only the pose file is read. Each part goes
 * into a scratch folder (tmpfs where there is one) that also holds one real
 * 16-bit depth image, d.png (4 x 3), for depth.txt to name.
 *
 * Invariants beyond "no crash": known codes only; a pose that reads is
 * finite and rigid, and prints and reads back to the same floats; a TUM
 * sequence that opens has frames, the image's size, the TUM depth scale,
 * valid intrinsics, and every frame loads with a finite rigid pose.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "tsdf_dataset.h"
#include "tsdf_error.h"
#include "tsdf_png.h"
#include "tsdf_pose.h"

#define IMG_W 4u
#define IMG_H 3u
/* Frames loaded per input; enough to cover the per-frame paths. */
#define MAX_LOADS 4u

static const char *g_dir;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    uint16_t px[IMG_W * IMG_H];
    for (unsigned i = 0; i < IMG_W * IMG_H; i++)
        px[i] = (uint16_t)(1000 + 250 * i);
    const char *png = fuzz_path("d.png");
    if (tsdf_png_write_gray16(png, px, IMG_W, IMG_H) != TSDF_OK) {
        fprintf(stderr, "fuzz_pose: cannot write %s\n", png);
        return 1;
    }
    /* The scratch folder is the sequence's folder. */
    static char dir[512];
    snprintf(dir, sizeof dir, "%s", png);
    *strrchr(dir, '/') = '\0';
    g_dir = dir;
    return 0;
}

/* Writes part i of the input to name, or removes name when it is absent. */
static void put_part(const char *name, const uint8_t *p, size_t n, int present)
{
    if (present)
        fuzz_write(name, p, n);
    else
        unlink(fuzz_path(name));
}

static int finite16(const float T[16])
{
    for (int i = 0; i < 16; i++)
        if (!isfinite(T[i]))
            return 0;
    return 1;
}

static void check_pose_file(const uint8_t *p, size_t n)
{
    const char *path = fuzz_write("pose.txt", p, n);
    float T[16];
    int rc = tsdf_dataset_read_pose_file(path, T);
    FUZZ_CHECK(fuzz_known_code(rc));
    if (rc != TSDF_OK)
        return;
    FUZZ_CHECK(finite16(T) && tsdf_pose_is_rigid(T));
    /* %.9g prints a float exactly enough to read back the same value. */
    char text[16 * 20];
    size_t len = 0;
    for (int i = 0; i < 16; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%.9g%c", T[i],
                                i % 4 == 3 ? '\n' : ' ');
    float again[16];
    FUZZ_CHECK(tsdf_dataset_read_pose_file(fuzz_write("pose2.txt", text, len), again) == TSDF_OK);
    FUZZ_CHECK(memcmp(again, T, sizeof T) == 0);
}

static void check_tum(void)
{
    tsdf_dataset *ds = NULL;
    int rc = tsdf_dataset_open(g_dir, &ds);
    FUZZ_CHECK(fuzz_known_code(rc));
    if (rc != TSDF_OK) {
        FUZZ_CHECK(ds == NULL);
        return;
    }
    tsdf_dataset_info info;
    FUZZ_CHECK(tsdf_dataset_get_info(ds, &info) == TSDF_OK);
    FUZZ_CHECK(info.kind == TSDF_DATASET_TUM);
    FUZZ_CHECK(info.frame_count >= 1 && info.frame_count == tsdf_dataset_count(ds));
    FUZZ_CHECK(info.width == IMG_W && info.height == IMG_H);
    FUZZ_CHECK(info.depth_scale == 1.0f / 5000.0f);
    FUZZ_CHECK(isfinite(info.K.fx) && isfinite(info.K.fy) && info.K.fx > 0 && info.K.fy > 0);
    FUZZ_CHECK(isfinite(info.K.cx) && isfinite(info.K.cy));
    uint16_t depth[IMG_W * IMG_H];
    for (uint32_t i = 0; i < info.frame_count && i < MAX_LOADS; i++) {
        tsdf_dataset_frame f;
        rc = tsdf_dataset_load(ds, i, depth, IMG_W * IMG_H, &f);
        /* Every frame names d.png or another file; only d.png is a PNG. */
        FUZZ_CHECK(fuzz_known_code(rc));
        if (rc != TSDF_OK)
            continue;
        FUZZ_CHECK(f.index == i && f.width == IMG_W && f.height == IMG_H);
        FUZZ_CHECK(finite16(f.T_world_cam) && tsdf_pose_is_rigid(f.T_world_cam));
        FUZZ_CHECK(isfinite(f.timestamp_s));
    }
    tsdf_dataset_frame f;
    FUZZ_CHECK(tsdf_dataset_load(ds, info.frame_count, depth, IMG_W * IMG_H, &f) == TSDF_EINVAL);
    tsdf_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_dir == NULL)
        return 0;
    const uint8_t *part[4] = {0};
    size_t len[4] = {0};
    int parts = 0;
    const uint8_t *p = data, *end = data + size;
    while (parts < 4) {
        const uint8_t *nul = memchr(p, '\0', (size_t)(end - p));
        part[parts] = p;
        len[parts] = nul ? (size_t)(nul - p) : (size_t)(end - p);
        parts++;
        if (!nul)
            break;
        p = nul + 1;
    }
    check_pose_file(part[0], len[0]);
    if (parts < 3)
        return 0;
    /* depth.txt names image files relative to the folder; a path with a
     * slash could lead the reader anywhere (a FIFO, a device) and make the
     * run hang on the file system instead of testing the parser. */
    if (memchr(part[2], '/', len[2]) != NULL)
        return 0;
    put_part("groundtruth.txt", part[1], len[1], 1);
    put_part("depth.txt", part[2], len[2], 1);
    put_part("camera-intrinsics.txt", part[3], len[3], parts == 4);
    check_tum();
    return 0;
}

/*
 * make_corpus.c - writes the seed corpora of the fuzz targets into
 * fuzz/corpus/<target>/ from real encodings: every request and reply type
 * through the codec, the shipped config file and variants of it, snapshots
 * written by snap_write_file, depth images written by tsdf_png_write_gray16,
 * and 7-Scenes / TUM pose files.
 *
 *   make_corpus CORPUS_DIR CONFIG_FILE
 *
 * The output is deterministic (the snapshots' write time is zeroed and their
 * checksums recomputed), so rerunning it changes no committed file. Run by
 * scripts/fuzz.sh --seeds.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "tsdf_depth_codec.h"
#include "log.h"
#include "proto_samples.h"
#include "snapshot.h"
#include "tsdf_voxel_layout.h"
#include "tsdf_png.h"
#include "tsdf_pose.h"
#include "tsdf_proto.h"

static const char *g_root;

static void die(const char *what)
{
    fprintf(stderr, "make_corpus: %s\n", what);
    exit(1);
}

static const char *out_path(const char *target, const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die(path);
    snprintf(path, sizeof path, "%s/%s/%s", g_root, target, name);
    return path;
}

static void put(const char *target, const char *name, const void *p, size_t n)
{
    const char *path = out_path(target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
        die(path);
}

static void put_text(const char *target, const char *name, const char *text)
{
    put(target, name, text, strlen(text));
}

/* ---- requests and replies --------------------------------------------- */

#define W 8
#define H 6

static uint16_t g_u16[W * H];
static float g_f32[W * H], g_normals[W * H * 3];
static uint8_t g_rgb[W * H * 3];

static void test_pose(float T[16])
{
    float c = cosf(0.5235988f), s = sinf(0.5235988f);
    float M[16] = {c, -s, 0, 1.5f, s, c, 0, -0.25f, 0, 0, 1, 0.75f, 0, 0, 0, 1};
    memcpy(T, M, sizeof M);
}

static void put_request(const char *name, const tsdf_request *q)
{
    tsdf_buf b;
    tsdf_buf_init(&b);
    if (tsdf_proto_encode_request(q, &b) != TSDF_OK)
        die(name);
    put("request", name, b.data, b.len);
    tsdf_buf_fini(&b);
}

static void put_reply(const char *name, const tsdf_reply *r)
{
    tsdf_buf b;
    tsdf_buf_init(&b);
    if (tsdf_proto_encode_reply(r, &b) != TSDF_OK)
        die(name);
    put("reply", name, b.data, b.len);
    tsdf_buf_fini(&b);
}

static void make_requests(void)
{
    tsdf_request q;
    tsdf_request_init(&q, TSDF_MSG_FRAME);
    strcpy(q.map, "kitchen_1");
    q.u.frame.sensor.id = 7;
    q.u.frame.seq = 12345;
    q.u.frame.stamp_ns = 1700000000123456789ull;
    tsdf_frame *f = &q.u.frame.frame;
    f->width = W;
    f->height = H;
    f->K = (tsdf_intrinsics){5.5f, 6.5f, 3.5f, 2.5f};
    test_pose(f->T_world_cam);
    f->depth = g_u16;
    f->depth_scale = 0.0002f;
    put_request("frame-u16", &q);

    q.type = TSDF_MSG_INTEGRATE;
    q.id = 42;
    q.u.frame.sensor.is_id = 0;
    strcpy(q.u.frame.sensor.name, "front/cam0");
    f->depth_format = TSDF_DEPTH_F32;
    f->depth = g_f32;
    f->rgb = g_rgb;
    f->min_depth_m = 0.2f;
    f->max_depth_m = 4.0f;
    put_request("integrate-f32-rgb", &q);

    tsdf_request_init(&q, TSDF_MSG_RAYCAST);
    q.id = 9;
    q.u.raycast.width = 64;
    q.u.raycast.height = 48;
    q.u.raycast.K = (tsdf_intrinsics){50, 51, 31.5f, 23.5f};
    test_pose(q.u.raycast.T_world_cam);
    q.u.raycast.want_rgb = 1;
    put_request("raycast", &q);

    tsdf_request_init(&q, TSDF_MSG_MESH);
    q.id = 10;
    q.u.mesh.use_box = 1;
    q.u.mesh.box = (tsdf_aabb){{-1, -2, -3}, {1, 2, 3.5f}};
    q.u.mesh.since_version = 77;
    put_request("mesh-box", &q);
    q.u.mesh.use_box = 0;
    q.u.mesh.by_block = 1;
    put_request("mesh-by-block-since", &q);

    tsdf_request_init(&q, TSDF_MSG_SAVE);
    q.id = 12;
    strcpy(q.map, "m2");
    strcpy(q.u.path.path, "/var/lib/tsdfd/m2.tsdf");
    put_request("save-path", &q);

    tsdf_request_init(&q, TSDF_MSG_LOAD);
    q.id = 13;
    put_request("load", &q);

    static const struct {
        tsdf_msg_type type;
        const char *name;
    } plain[] = {{TSDF_MSG_MESH, "mesh"},
                 {TSDF_MSG_STATS, "stats"},
                 {TSDF_MSG_RESET, "reset"},
                 {TSDF_MSG_MAPS, "maps"},
                 {TSDF_MSG_PING, "ping"}};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        tsdf_request_init(&q, plain[i].type);
        q.id = 100 + i;
        put_request(plain[i].name, &q);
    }
}

static void make_replies(void)
{
    static tsdf_reply r;
    tsdf_reply_init(&r, TSDF_MSG_INTEGRATE, 5);
    r.u.integrate = (tsdf_rep_integrate){99, 1234, 2.5};
    put_reply("integrate", &r);

    tsdf_reply_init(&r, TSDF_MSG_RAYCAST, 6);
    r.u.raycast = (tsdf_rep_raycast){
        .width = W, .height = H, .depth_m = g_f32, .normals = g_normals, .rgb = g_rgb};
    put_reply("raycast-rgb", &r);

    proto_sample_mesh_quad(&r, 7);
    put_reply("mesh", &r);
    tsdf_reply_init(&r, TSDF_MSG_MESH, 8);
    r.u.mesh.version = 3;
    put_reply("mesh-empty", &r);

    /* By block and since a version (the sample test_proto_roundtrip.c decodes). */
    proto_sample_mesh_parts(&r, 15);
    put_reply("mesh-parts-since", &r);
    /* No parts at all, and full: what an incremental mesh of a reset map says. */
    tsdf_reply_init(&r, TSDF_MSG_MESH, 16);
    r.u.mesh = (tsdf_rep_mesh){.version = 61, .has_blocks = 1, .has_removed = 1, .full = 1};
    put_reply("mesh-parts-full", &r);

    tsdf_reply_init(&r, TSDF_MSG_STATS, 9);
    r.u.stats.has_engine = 1;
    tsdf_volume_stats *st = &r.u.stats.engine;
    st->backend = TSDF_BACKEND_CUDA;
    st->blocks_allocated = 1000;
    st->capacity_slots = 65536;
    st->load_factor = 1000.0 / 65536.0;
    st->max_probe = 4;
    st->mean_probe = 0.25;
    for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
        st->probe_hist[i] = (uint64_t)(100 - i);
    st->frames_integrated = 300;
    st->memory_bytes = 1ull << 33;
    st->version = 301;
    st->has_color = 1;
    st->last_update_ms = 0.3;
    st->layout = TSDF_LAYOUT_S16;
    st->pool_capacity_blocks = 1088;
    st->blocks_erased = 12;
    r.u.stats.has_params = 1;
    r.u.stats.params = (tsdf_map_params){0.01f, 4.0f, 64.0f, 1ull << 30, TSDF_LAYOUT_S16};
    r.u.stats.extra_count = 3;
    r.u.stats.extra[0] = (tsdf_stat_entry){"frames_received", 0, 777, 0};
    r.u.stats.extra[1] = (tsdf_stat_entry){"queue_latency_p99_ms", 1, 0, 12.75};
    r.u.stats.extra[2] = (tsdf_stat_entry){"signed", 0, -5, 0};
    put_reply("stats", &r);
    r.u.stats.timeline_count = 2;
    for (uint32_t i = 0; i < 2; i++)
        r.u.stats.timeline[i] =
            (tsdf_frame_timeline){100 + i,      10.0 * i,       10.0 * i + 1, 10.0 * i + 1.5,
                                  10.0 * i + 2, 10.0 * i + 2.5, 10.0 * i + 12};
    put_reply("stats-timeline", &r);

    tsdf_reply_init(&r, TSDF_MSG_SAVE, 10);
    strcpy(r.u.path.path, "/var/lib/tsdfd/snap-00000000000000000001.tsdfsnap");
    r.u.path.version = 17;
    put_reply("save", &r);
    r.type = TSDF_MSG_LOAD;
    put_reply("load", &r);

    tsdf_reply_init(&r, TSDF_MSG_MAPS, 11);
    r.u.maps.count = 3;
    strcpy(r.u.maps.names[0], "default");
    strcpy(r.u.maps.names[1], "kitchen");
    strcpy(r.u.maps.names[2], "lab-2.b");
    put_reply("maps", &r);

    tsdf_reply_init(&r, TSDF_MSG_PING, 12);
    strcpy(r.u.ping.server, "tsdfd 0.1.0");
    r.u.ping.uptime_ms = 123456;
    put_reply("ping", &r);

    tsdf_reply_init(&r, TSDF_MSG_RESET, 13);
    put_reply("reset", &r);

    tsdf_reply_init(&r, TSDF_MSG_INTEGRATE, 14);
    tsdf_reply_set_error(&r, TSDF_EBAD_POSE, "pose row %d is off", 2);
    put_reply("error-bad-pose", &r);
    tsdf_reply_init(&r, TSDF_MSG_ERROR, 0);
    tsdf_reply_set_error(&r, TSDF_EFORMAT, NULL);
    put_reply("error-unreadable", &r);
}

/* ---- config ----------------------------------------------------------- */

static void make_configs(const char *shipped)
{
    FILE *f = fopen(shipped, "rb");
    if (!f)
        die(shipped);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    put("config", "tsdfd.conf", text, n);
    put_text("config", "minimal.conf", "[server]\nlisten = tcp://127.0.0.1:7000\n");
    put_text("config", "every-kind.conf",
             "; every value kind, not the defaults\n"
             "[server]\n"
             "listen = inproc://a, ipc:///tmp/x.sock, tcp4://0.0.0.0:1\n"
             "frames_listen = tcp6://[::1]:5556\n"
             "request_contexts = 64\n"
             "state_dir = /tmp/state\n"
             "[queue]\n"
             "policy = drop_oldest\n"
             "max_bytes_mb = 16\n"
             "[volume]\n"
             "backend = cpu\n"
             "voxel_size_m = 0.005\n"
             "trunc_vox = 1e1\n"
             "memory_cap_mb = 4096\n"
             "auto_create_maps = off\n"
             "maps = a, b.c, d-e_f\n"
             "[snapshot]\n"
             "save_on_stop = no\n"
             "[metrics]\n"
             "enabled = 0\n"
             "[log]\n"
             "level = debug\n");
    put_text("config", "bad-key.conf", "[volume]\nvoxel_size = 0.01\n");
}

/* ---- snapshots -------------------------------------------------------- */

static void fill_map(snap_map *m, const char *name, size_t blocks, uint64_t version,
                     tsdf_layout layout, int with_rgb)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    tsdf_volume_params_default(&m->params);
    m->params.backend = TSDF_BACKEND_CPU;
    m->params.initial_capacity_blocks = 1024;
    m->params.layout = layout;
    m->version = version;
    float trunc_m = m->params.trunc_vox * m->params.voxel_size_m;
    tsdf_block_set_init(&m->blocks);
    tsdf_block_set_init(&m->spilled);
    if (tsdf_block_set_alloc(&m->blocks, blocks, layout, tsdf_quant_for(trunc_m).unit_m,
                             with_rgb) != TSDF_OK)
        die("out of memory");
    m->spilled.layout = layout;
    m->spilled.sdf_unit_m = m->blocks.sdf_unit_m;
    for (size_t i = 0; i < blocks; i++) {
        m->blocks.coords[3 * i] = (int32_t)i - 1;
        m->blocks.coords[3 * i + 2] = 2;
        m->blocks.versions[i] = version;
        for (unsigned j = 0; j < TSDF_BLOCK_VOXELS; j++) {
            tsdf_vox v = {trunc_m * ((float)(j % 17) / 8.0f - 1.0f), (float)(j % 5)};
            tsdf_block_set_put(&m->blocks, i, j, v);
            if (with_rgb) {
                uint8_t *c = &m->blocks.rgb[3 * ((size_t)i * TSDF_BLOCK_VOXELS + j)];
                c[0] = (uint8_t)j;
                c[1] = (uint8_t)(j * 3);
                c[2] = (uint8_t)(j * 7);
            }
        }
    }
}

static void put_snapshot(const char *name, const snap_map *maps, size_t n)
{
    const char *path = out_path("snapshot", name);
    if (snap_write_file(path, maps, n) != TSDF_OK)
        die(path);
    /* Zero the write time and redo the checksums: the same seed each run. */
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 16];
    size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (!f || len < 24 || len == sizeof buf)
        die(path);
    fclose(f);
    memset(buf + 16, 0, 8);
    fuzz_snap_repair(buf, len);
    put("snapshot", name, buf, len);
}

/* Format version 2 seeds (the committed v1-*.tsdf seeds, written by the
 * format version 1 writer, keep the old reader covered). */
static void make_snapshots(void)
{
    snap_map m[2];
    put_snapshot("empty.tsdf", m, 0);
    fill_map(&m[0], "default", 1, 5, TSDF_LAYOUT_S16, 0);
    put_snapshot("one-block.tsdf", m, 1);
    fill_map(&m[1], "kitchen", 0, 0, TSDF_LAYOUT_F32, 1);
    put_snapshot("two-maps.tsdf", m, 2);
    tsdf_block_set_fini(&m[0].blocks);
    tsdf_block_set_fini(&m[1].blocks);
    fill_map(&m[0], "lab", 2, 9, TSDF_LAYOUT_F32, 1);
    put_snapshot("two-blocks.tsdf", m, 1);
    tsdf_block_set_fini(&m[0].blocks);
    fill_map(&m[0], "lab", 2, 9, TSDF_LAYOUT_S16, 1);
    /* One block of the map spilled out of its volume. */
    if (tsdf_block_set_alloc(&m[0].spilled, 1, TSDF_LAYOUT_S16, m[0].blocks.sdf_unit_m, 1) !=
        TSDF_OK)
        die("out of memory");
    m[0].spilled.coords[0] = 40;
    put_snapshot("s16-spilled.tsdf", m, 1);
    tsdf_block_set_fini(&m[0].blocks);
    tsdf_block_set_fini(&m[0].spilled);
}

/* ---- PNG -------------------------------------------------------------- */

static void copy_png(const char *name, const char *tmp)
{
    FILE *f = fopen(tmp, "rb");
    static uint8_t buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (!f || n == 0 || n == sizeof buf)
        die(tmp);
    fclose(f);
    put("png", name, buf, n);
}

static void make_pngs(void)
{
    const char *tmp = fuzz_path("seed.png");
    uint16_t px[16 * 16];
    for (int i = 0; i < 16 * 16; i++)
        px[i] = (uint16_t)(i % 7 == 0 ? 0 : 500 + 37 * i);
    if (tsdf_png_write_gray16(tmp, px, 4, 3) != TSDF_OK)
        die("png 4x3");
    copy_png("gray16-4x3.png", tmp);
    if (tsdf_png_write_gray16(tmp, px, 1, 1) != TSDF_OK)
        die("png 1x1");
    copy_png("gray16-1x1.png", tmp);
    if (tsdf_png_write_gray16(tmp, px, 16, 16) != TSDF_OK)
        die("png 16x16");
    copy_png("gray16-16x16.png", tmp);
    /* A colour image: the reader must refuse it as depth. */
    if (tsdf_png_write_rgb8(tmp, g_rgb, 4, 4) != TSDF_OK)
        die("png rgb");
    copy_png("rgb8-4x4.png", tmp);
}

/* ---- pose files ------------------------------------------------------- */

static void make_poses(void)
{
    /* frame-000000.pose.txt of 7-Scenes' redkitchen, seq-01. */
    static const char kitchen[] =
        "7.024107600000000229e-01 3.383622199999999913e-01 -6.261051899999999781e-01 "
        "-8.660451799999999700e-01\n"
        "-3.293164100000000039e-01 9.343857800000000546e-01 1.355109100000000122e-01 "
        "-1.324670599999999976e-01\n"
        "6.309105799999999986e-01 1.110082399999999941e-01 7.677796500000000357e-01 "
        "6.193738600000000538e-01\n"
        "0.000000000000000000e+00 0.000000000000000000e+00 0.000000000000000000e+00 "
        "1.000000000000000000e+00\n";
    put_text("pose", "7scenes-pose.txt", kitchen);

    /* pose \0 groundtruth.txt \0 depth.txt [\0 camera-intrinsics.txt], in
     * the TUM fr1 layout (see fuzz_pose.c). */
    static const char gt[] = "# ground truth trajectory\n"
                             "# timestamp tx ty tz qx qy qz qw\n"
                             "1305031102.1758 1.3405 0.6266 1.6575 0.6574 0.6126 -0.2949 -0.3248\n"
                             "1305031102.1858 1.3303 0.6256 1.6464 0.6579 0.6161 -0.2932 -0.3189\n"
                             "1305031102.1954 1.3193 0.6245 1.6326 0.6582 0.6186 -0.2920 -0.3148\n";
    static const char depth[] = "# depth maps\n"
                                "1305031102.160407 d.png\n"
                                "1305031102.194330 d.png\r\n"
                                "1305031109.000000 d.png\n";
    static const char k9[] = "517.3 0 318.6\n0 516.5 255.3\n0 0 1\n";
    static const char k4[] = "525.0 525.0 319.5 239.5\n";
    char buf[4096];
    size_t n = 0;
#define APPEND(s, with_nul)                                                                        \
    do {                                                                                           \
        memcpy(buf + n, s, sizeof(s) - 1);                                                         \
        n += sizeof(s) - 1;                                                                        \
        if (with_nul)                                                                              \
            buf[n++] = '\0';                                                                       \
    } while (0)
    APPEND(kitchen, 1);
    APPEND(gt, 1);
    APPEND(depth, 0);
    put("pose", "tum-default-k.txt", buf, n);
    buf[n++] = '\0';
    size_t at = n;
    APPEND(k9, 0);
    put("pose", "tum-k3x3.txt", buf, n);
    n = at;
    APPEND(k4, 0);
    put("pose", "tum-k4.txt", buf, n);
#undef APPEND
}

/* Depth payloads of every encoding, behind fuzz_depth's 6-byte header
 * (encoding, format, width - 1, height - 1): the 8 x 4 test image, and a
 * run of zeros (what RVL and zstd meet most: pixels without a measurement). */
static void make_depth(void)
{
    static uint16_t zeros[8 * 4];
    const void *images[2] = {g_u16, zeros};
    for (int img = 0; img < 2; img++) {
        for (int e = 0; e < TSDF_DEPTH_ENC_COUNT; e++) {
            for (int f = 0; f < 2; f++) {
                tsdf_depth_format fmt = f ? TSDF_DEPTH_F32 : TSDF_DEPTH_U16;
                if (!tsdf_depth_encoding_allows((tsdf_depth_encoding)e, fmt))
                    continue;
                const void *src = f ? (const void *)g_f32 : images[img];
                if (f && img == 1)
                    continue;
                tsdf_buf b;
                tsdf_buf_init(&b);
                const uint8_t hdr[6] = {(uint8_t)e, (uint8_t)f, 7, 0, 3, 0};
                if (tsdf_buf_append(&b, hdr, sizeof hdr) != TSDF_OK ||
                    tsdf_depth_encode((tsdf_depth_encoding)e, 0, fmt, 8, 4, src, &b) != TSDF_OK)
                    die("depth seed");
                char name[64];
                snprintf(name, sizeof name, "%s-%s-%s.bin",
                         tsdf_depth_encoding_name((tsdf_depth_encoding)e), f ? "f32" : "u16",
                         img ? "zeros" : "ramp");
                put("depth", name, b.data, b.len);
                tsdf_buf_fini(&b);
            }
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: make_corpus CORPUS_DIR CONFIG_FILE\n");
        return 2;
    }
    g_root = argv[1];
    tsdf_log_set_level(TSDF_LOG_WARN);
    if (mkdir(g_root, 0755) != 0 && errno != EEXIST)
        die(g_root);
    for (int i = 0; i < W * H; i++) {
        g_u16[i] = (uint16_t)(1000 + i);
        g_f32[i] = 1.0f + 0.01f * (float)i;
        g_normals[3 * i + 2] = -1.0f;
        g_rgb[3 * i] = (uint8_t)i;
        g_rgb[3 * i + 1] = (uint8_t)(2 * i);
        g_rgb[3 * i + 2] = (uint8_t)(3 * i);
    }
    make_requests();
    make_replies();
    make_configs(argv[2]);
    make_snapshots();
    make_pngs();
    make_poses();
    make_depth();
    return 0;
}

/*
 * tsdfctl_query.c - tsdfctl mesh, raycast and stats: what the daemon has built.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdfctl.h"
#include "tsdf_dataset.h"
#include "tsdf_png.h"
#include "tsdf_shade.h"
#include "tsdf_pose.h"

static const char mesh_help[] =
    "usage: tsdfctl mesh OUT.ply [--map NAME] [--box X0 Y0 Z0 X1 Y1 Z1] [--since VERSION]\n"
    "\n"
    "Extracts the map's surface (marching cubes) and writes it as binary PLY.\n"
    "  --box      only blocks that intersect this axis-aligned box (metres, world frame)\n"
    "  --since    only blocks changed after map version VERSION (printed by earlier runs);\n"
    "             also prints how many blocks went since then, and whether the mesh is full\n"
    "             (it then replaces the one of VERSION instead of adding to it)\n";

int ctl_mesh(const global_opts *g, int argc, char **argv)
{
    const char *out = NULL, *map = NULL;
    tsdf_mesh_params mp;
    memset(&mp, 0, sizeof(mp));
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (ctl_is_help(a)) {
            fputs(mesh_help, stdout);
            return 0;
        } else if (strcmp(a, "--map") == 0 && i + 1 < argc) {
            map = argv[++i];
        } else if (strcmp(a, "--box") == 0 && i + 6 < argc) {
            float b[6];
            for (int k = 0; k < 6; k++) {
                if (ctl_parse_float(argv[i + 1 + k], &b[k]) != 0)
                    return ctl_usage_error("mesh", "--box: \"%s\" is not a number",
                                           argv[i + 1 + k]);
            }
            for (int k = 0; k < 3; k++) {
                mp.box.min[k] = b[k];
                mp.box.max[k] = b[k + 3];
                if (b[k + 3] < b[k]) {
                    char why[128];
                    snprintf(why, sizeof why,
                             "--box is inverted: max%c %g is below min%c %g (the order is X0 "
                             "Y0 Z0 X1 Y1 Z1, min corner first)",
                             "xyz"[k], (double)b[k + 3], "xyz"[k], (double)b[k]);
                    return ctl_usage_error("mesh", "%s", why);
                }
            }
            mp.use_box = 1;
            i += 6;
        } else if (strcmp(a, "--since") == 0 && i + 1 < argc) {
            if (ctl_parse_u64(argv[++i], UINT64_MAX, &mp.since_version) != 0)
                return ctl_usage_error("mesh", "--since needs a version number, not \"%s\"",
                                       argv[i]);
        } else if (a[0] == '-') {
            return ctl_usage_error("mesh", "unknown option or missing value: %s", a);
        } else if (out == NULL) {
            out = a;
        } else {
            return ctl_usage_error("mesh", "unexpected argument \"%s\"", a);
        }
    }
    if (out == NULL)
        return ctl_usage_error("mesh", "missing OUT.ply%s", "");
    /* Before the mesh is fetched, which for a large map takes a while. */
    if (ctl_check_writable("mesh", out) != 0)
        return EXIT_FAILURE;
    tsdf_client *c;
    if (ctl_open_client(g, 0, &c) != TSDF_OK)
        return EXIT_FAILURE;
    tsdf_mesh m;
    memset(&m, 0, sizeof(m));
    uint64_t version = 0;
    double t0 = ctl_now_s();
    int rc = tsdf_client_mesh(c, map, &mp, &m, &version, TSDF_CLIENT_TIMEOUT_DEFAULT);
    tsdf_client_close(c);
    if (rc != TSDF_OK)
        return ctl_call_error("mesh", rc);
    double dt = ctl_now_s() - t0;
    rc = tsdf_mesh_write_ply(&m, out);
    if (rc != TSDF_OK) {
        fprintf(stderr, "tsdfctl: mesh: cannot write %s: %s\n", out, tsdf_strerror(rc));
        tsdf_client_mesh_release(&m);
        return EXIT_FAILURE;
    }
    printf("%s: %zu vertices, %zu triangles%s, map version %llu (%.0f ms)\n", out, m.vertex_count,
           m.triangle_count, m.colors ? ", coloured" : "", (unsigned long long)version,
           dt * 1000.0);
    /* What the PLY cannot say: the blocks to drop from a mesh made at the
     * --since version, or that this one replaces it whole. */
    if (mp.since_version > 0)
        printf("%s: since version %llu: %zu blocks removed%s\n", out,
               (unsigned long long)mp.since_version, m.removed_count,
               m.full ? "; full: the map changed past what the daemon can tell since that "
                        "version (reset, load or too old), so this mesh replaces the old one whole"
                      : "");
    /* An empty file is a valid PLY, and with --since the normal answer;
     * otherwise the user most likely meshed the wrong map. */
    if (m.vertex_count == 0 && mp.since_version == 0)
        fprintf(stderr,
                "tsdfctl: mesh: warning: the mesh is empty: map '%s' has no surface%s yet "
                "(wrong --map? frames still queued?)\n",
                map ? map : TSDF_PROTO_DEFAULT_MAP, mp.use_box ? " in the box" : "");
    tsdf_client_mesh_release(&m);
    return EXIT_SUCCESS;
}

/* ---- raycast ------------------------------------------------------------ */

static const char raycast_help[] =
    "usage: tsdfctl raycast --pose FILE [options] OUT.png\n"
    "\n"
    "Renders the map from a camera pose and writes a shaded image of its surface.\n"
    "  --pose FILE          4x4 row-major camera-to-world matrix (16 numbers; 7-Scenes\n"
    "                       .pose.txt files work)\n"
    "  --width W, --height H   image size (default 640 x 480)\n"
    "  --intrinsics FILE    the camera's intrinsics: a 3x3 K (7-Scenes\n"
    "                       camera-intrinsics.txt) or \"fx fy cx cy\", for a W x H image\n"
    "  --fx F --fy F --cx C --cy C   intrinsics (override --intrinsics; default\n"
    "                       fx = fy = 525 * W / 640, principal point at the image centre)\n"
    "  --min-depth M --max-depth M   ray range in metres (default 0.1, 5.0)\n"
    "  --map NAME           (default \"default\")\n"
    "  --color              write the fused colour instead of shading (a map without\n"
    "                       colour gets shading and a warning)\n"
    "  --depth-only         ask for depth alone (no normals: a quarter of the reply) and\n"
    "                       write it as a 16-bit PNG of millimetres, 0 where no surface\n"
    "  --scale N            render W/N x H/N pixels of the same view (1..8, default 1)\n"
    "  --after-queued       render only after the frames queued for the map when the\n"
    "                       request arrives (default: ahead of them)\n";

/* Depth in metres as millimetres for a 16-bit PNG: 0 where no surface,
 * 65535 beyond 65.5 m. */
static void depth_to_mm(const float *depth, size_t px, uint16_t *mm)
{
    for (size_t i = 0; i < px; i++) {
        float d = depth[i] * 1000.0f;
        mm[i] = !(d > 0.0f) ? 0 : d >= 65535.0f ? 65535 : (uint16_t)(d + 0.5f);
    }
}

int ctl_raycast(const global_opts *g, int argc, char **argv)
{
    const char *pose_file = NULL, *out = NULL, *map = NULL, *intrinsics_file = NULL;
    tsdf_raycast_params p;
    memset(&p, 0, sizeof(p));
    p.width = 640;
    p.height = 480;
    p.min_depth_m = TSDF_PROTO_DEFAULT_MIN_DEPTH_M;
    p.max_depth_m = TSDF_PROTO_DEFAULT_MAX_DEPTH_M;
    float fx = 0, fy = 0, cx = NAN, cy = NAN;
    int color = 0, depth_only = 0, after_queued = 0;
    uint32_t scale = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        float *fdst = NULL;
        uint32_t *udst = NULL;
        if (ctl_is_help(a)) {
            fputs(raycast_help, stdout);
            return 0;
        } else if (strcmp(a, "--pose") == 0 && v) {
            pose_file = v;
            i++;
            continue;
        } else if (strcmp(a, "--map") == 0 && v) {
            map = v;
            i++;
            continue;
        } else if (strcmp(a, "--intrinsics") == 0 && v) {
            intrinsics_file = v;
            i++;
            continue;
        } else if (strcmp(a, "--color") == 0) {
            color = 1;
            continue;
        } else if (strcmp(a, "--depth-only") == 0) {
            depth_only = 1;
            continue;
        } else if (strcmp(a, "--after-queued") == 0) {
            after_queued = 1;
            continue;
        } else if (strcmp(a, "--scale") == 0) {
            udst = &scale;
        } else if (strcmp(a, "--width") == 0) {
            udst = &p.width;
        } else if (strcmp(a, "--height") == 0) {
            udst = &p.height;
        } else if (strcmp(a, "--fx") == 0) {
            fdst = &fx;
        } else if (strcmp(a, "--fy") == 0) {
            fdst = &fy;
        } else if (strcmp(a, "--cx") == 0) {
            fdst = &cx;
        } else if (strcmp(a, "--cy") == 0) {
            fdst = &cy;
        } else if (strcmp(a, "--min-depth") == 0) {
            fdst = &p.min_depth_m;
        } else if (strcmp(a, "--max-depth") == 0) {
            fdst = &p.max_depth_m;
        } else if (a[0] == '-') {
            return ctl_usage_error("raycast", "unknown option: %s", a);
        } else if (out == NULL) {
            out = a;
            continue;
        } else {
            return ctl_usage_error("raycast", "unexpected argument \"%s\"", a);
        }
        if (v == NULL)
            return ctl_usage_error("raycast", "%s needs a value", a);
        if ((fdst && ctl_parse_float(v, fdst) != 0) || (udst && ctl_parse_u32(v, udst) != 0))
            return ctl_usage_error("raycast", "bad value \"%s\"", v);
        i++;
    }
    if (pose_file == NULL || out == NULL)
        return ctl_usage_error("raycast", "need --pose FILE and OUT.png%s", "");
    if (p.width == 0 || p.height == 0 || p.width > TSDF_MAX_IMAGE_DIM ||
        p.height > TSDF_MAX_IMAGE_DIM)
        return ctl_usage_error("raycast", "image size out of range%s", "");
    if (scale < 1 || scale > TSDF_CLIENT_MAX_RAYCAST_SCALE || p.width / scale == 0 ||
        p.height / scale == 0)
        return ctl_usage_error("raycast", "--scale: 1..8, leaving at least one pixel%s", "");
    if (depth_only && color)
        return ctl_usage_error("raycast", "--depth-only and --color exclude each other%s", "");
    tsdf_intrinsics K = {525.0f * (float)p.width / 640.0f, 525.0f * (float)p.height / 480.0f,
                         0.5f * (float)(p.width - 1), 0.5f * (float)(p.height - 1)};
    int rc;
    if (intrinsics_file != NULL) {
        rc = tsdf_dataset_read_intrinsics_file(intrinsics_file, &K);
        if (rc != TSDF_OK)
            return ctl_file_error("raycast", "intrinsics file", intrinsics_file, rc,
                                  "a 3x3 matrix K (9 numbers) or the 4 numbers fx fy cx cy");
    }
    p.K.fx = fx > 0 ? fx : K.fx;
    p.K.fy = fy > 0 ? fy : K.fy;
    p.K.cx = isfinite(cx) ? cx : K.cx;
    p.K.cy = isfinite(cy) ? cy : K.cy;
    rc = tsdf_dataset_read_pose_file(pose_file, p.T_world_cam);
    if (rc != TSDF_OK)
        return ctl_file_error("raycast", "pose file", pose_file, rc,
                              "16 numbers, a 4x4 row-major camera-to-world matrix");
    if (ctl_check_writable("raycast", out) != 0)
        return EXIT_FAILURE;

    /* The outputs hold the scaled image; full size is the most. */
    size_t px = (size_t)p.width * p.height;
    float *depth = malloc(px * sizeof(float));
    float *normals = malloc(px * 3 * sizeof(float));
    uint8_t *rgb = malloc(px * 3);
    uint8_t *img = malloc(px * 3);
    int exit_code = EXIT_FAILURE;
    tsdf_client *c = NULL;
    if (depth == NULL || normals == NULL || rgb == NULL || img == NULL) {
        fprintf(stderr, "tsdfctl: raycast: out of memory\n");
        goto out;
    }
    if (ctl_open_client(g, 0, &c) != TSDF_OK)
        goto out;
    tsdf_raycast_output ro = {depth, normals, rgb};
    tsdf_client_raycast_options o = {!depth_only, color, scale, after_queued};
    tsdf_client_raycast_info info;
    rc = tsdf_client_raycast_ex(c, map, &p, &o, &ro, &info, TSDF_CLIENT_TIMEOUT_DEFAULT);
    if (rc != TSDF_OK) {
        exit_code = ctl_call_error("raycast", rc);
        goto out;
    }
    px = (size_t)info.width * info.height;
    size_t hits = 0;
    for (size_t i = 0; i < px; i++)
        hits += isfinite(depth[i]) ? 1 : 0;
    if (color && !info.has_rgb)
        fprintf(stderr,
                "tsdfctl: raycast: warning: --color, but map '%s' has no colour (its "
                "frames came without rgb): writing shading instead\n",
                map ? map : TSDF_PROTO_DEFAULT_MAP);
    if (depth_only) {
        /* img holds 3 bytes a pixel: room for 2 of millimetres. */
        depth_to_mm(depth, px, (uint16_t *)(void *)img);
        rc = tsdf_png_write_gray16(out, (uint16_t *)(void *)img, info.width, info.height);
    } else {
        tsdf_intrinsics Ks = p.K;
        if (scale > 1) {
            Ks.fx /= (float)scale;
            Ks.fy /= (float)scale;
            Ks.cx = (Ks.cx + 0.5f) / (float)scale - 0.5f;
            Ks.cy = (Ks.cy + 0.5f) / (float)scale - 0.5f;
        }
        if (color && info.has_rgb)
            memcpy(img, rgb, px * 3);
        else
            tsdf_shade_surface(depth, normals, p.T_world_cam, &Ks, info.width, info.height, img);
        rc = tsdf_png_write_rgb8(out, img, info.width, info.height);
    }
    if (rc != TSDF_OK) {
        fprintf(stderr, "tsdfctl: raycast: cannot write %s: %s\n", out, tsdf_strerror(rc));
        goto out;
    }
    printf("%s: %ux%u, surface in %.1f%% of the pixels (map version %llu)\n", out, info.width,
           info.height, 100.0 * (double)hits / (double)px, (unsigned long long)info.version);
    exit_code = EXIT_SUCCESS;
out:
    tsdf_client_close(c);
    free(depth);
    free(normals);
    free(rgb);
    free(img);
    return exit_code;
}

/* ---- stats -------------------------------------------------------------- */

static const char stats_help[] =
    "usage: tsdfctl stats [--map NAME] [--json]\n"
    "\n"
    "Prints the map's volume statistics and the daemon's counters, as a table or as JSON,\n"
    "and, on the CUDA backend, the device timeline of the map's last frames.\n";

typedef struct {
    const char *key;
    int kind; /* 0 u64, 1 u32, 2 double */
    size_t offset;
} stat_row;

#define ROW(k, kind)                                                                               \
    {                                                                                              \
#k, kind, offsetof(tsdf_volume_stats, k)                                                   \
    }
static const stat_row engine_rows[] = {
    ROW(blocks_allocated, 0),     ROW(capacity_slots, 0),
    ROW(load_factor, 2),          ROW(max_probe, 1),
    ROW(mean_probe, 2),           ROW(growth_events, 0),
    ROW(frames_integrated, 0),    ROW(frames_rejected, 0),
    ROW(insert_failures, 0),      ROW(memory_bytes, 0),
    ROW(memory_cap_bytes, 0),     ROW(version, 0),
    ROW(pool_capacity_blocks, 0), ROW(blocks_erased, 0),
    ROW(last_upload_ms, 2),       ROW(last_alloc_ms, 2),
    ROW(last_update_ms, 2),       ROW(last_raycast_ms, 2),
    ROW(last_mesh_ms, 2),
};
#undef ROW

static void print_row_value(const stat_row *r, const tsdf_volume_stats *st, int json)
{
    const char *p = (const char *)st + r->offset;
    if (r->kind == 0) {
        uint64_t v;
        memcpy(&v, p, sizeof(v));
        printf("%llu", (unsigned long long)v);
    } else if (r->kind == 1) {
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        printf("%u", v);
    } else {
        double v;
        memcpy(&v, p, sizeof(v));
        if (json && !isfinite(v))
            printf("null");
        else
            printf(json ? "%.17g" : "%.4f", v);
    }
}

static const char *backend_str(tsdf_backend b)
{
    return b == TSDF_BACKEND_CUDA ? "cuda" : b == TSDF_BACKEND_CPU ? "cpu" : "auto";
}

int ctl_stats(const global_opts *g, int argc, char **argv)
{
    const char *map = NULL;
    int json = 0;
    for (int i = 0; i < argc; i++) {
        if (ctl_is_help(argv[i])) {
            fputs(stats_help, stdout);
            return 0;
        } else if (strcmp(argv[i], "--map") == 0 && i + 1 < argc) {
            map = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else {
            return ctl_usage_error("stats", "unexpected argument \"%s\"", argv[i]);
        }
    }
    tsdf_client *c;
    if (ctl_open_client(g, 0, &c) != TSDF_OK)
        return EXIT_FAILURE;
    tsdf_rep_stats *s = malloc(sizeof(*s));
    if (s == NULL) {
        tsdf_client_close(c);
        return EXIT_FAILURE;
    }
    int rc = tsdf_client_stats(c, map, s, TSDF_CLIENT_TIMEOUT_DEFAULT);
    tsdf_client_close(c);
    if (rc != TSDF_OK) {
        free(s);
        return ctl_call_error("stats", rc);
    }
    const tsdf_volume_stats *st = &s->engine;
    /* Map and stats keys are restricted to characters that need no JSON
     * escaping, except the daemon's free-form keys: escape those. */
    if (json) {
        printf("{\"map\": \"%s\"", map ? map : TSDF_PROTO_DEFAULT_MAP);
        if (s->has_engine) {
            printf(", \"engine\": {\"backend\": \"%s\", \"layout\": \"%s\"",
                   backend_str(st->backend), tsdf_layout_name(st->layout));
            for (size_t i = 0; i < sizeof(engine_rows) / sizeof(engine_rows[0]); i++) {
                printf(", \"%s\": ", engine_rows[i].key);
                print_row_value(&engine_rows[i], st, 1);
            }
            printf(", \"has_color\": %s, \"probe_hist\": [", st->has_color ? "true" : "false");
            for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
                printf("%s%llu", i ? ", " : "", (unsigned long long)st->probe_hist[i]);
            printf("]}");
        }
        if (s->has_params)
            printf(", \"params\": {\"voxel_size_m\": %.9g, \"trunc_vox\": %.9g, "
                   "\"max_weight\": %.9g, \"memory_cap_bytes\": %llu, \"layout\": \"%s\"}",
                   (double)s->params.voxel_size_m, (double)s->params.trunc_vox,
                   (double)s->params.max_weight, (unsigned long long)s->params.memory_cap_bytes,
                   tsdf_layout_name(s->params.layout));
        printf(", \"daemon\": {");
        for (uint32_t i = 0; i < s->extra_count; i++) {
            const tsdf_stat_entry *e = &s->extra[i];
            printf("%s\"", i ? ", " : "");
            for (const char *k = e->key; *k; k++) {
                if (*k == '"' || *k == '\\')
                    putchar('\\');
                if ((unsigned char)*k < 0x20)
                    printf("\\u%04x", (unsigned)*k);
                else
                    putchar(*k);
            }
            printf("\": ");
            if (e->is_float && !isfinite(e->f))
                printf("null");
            else if (e->is_float)
                printf("%.17g", e->f);
            else
                printf("%lld", (long long)e->i);
        }
        printf("}");
        if (s->timeline_count > 0) {
            printf(", \"timeline\": [");
            for (uint32_t i = 0; i < s->timeline_count; i++) {
                const tsdf_frame_timeline *t = &s->timeline[i];
                printf("%s{\"frame\": %llu, \"upload_start_ms\": %.6f, \"upload_end_ms\": %.6f, "
                       "\"alloc_start_ms\": %.6f, \"alloc_end_ms\": %.6f, "
                       "\"update_start_ms\": %.6f, \"update_end_ms\": %.6f}",
                       i ? ", " : "", (unsigned long long)t->frame, t->upload_start_ms,
                       t->upload_end_ms, t->alloc_start_ms, t->alloc_end_ms, t->update_start_ms,
                       t->update_end_ms);
            }
            printf("]");
        }
        printf("}\n");
    } else {
        printf("map %s\n", map ? map : TSDF_PROTO_DEFAULT_MAP);
        if (s->has_engine) {
            printf("engine:\n  %-24s %s\n  %-24s %s\n", "backend", backend_str(st->backend),
                   "layout", tsdf_layout_name(st->layout));
            for (size_t i = 0; i < sizeof(engine_rows) / sizeof(engine_rows[0]); i++) {
                printf("  %-24s ", engine_rows[i].key);
                print_row_value(&engine_rows[i], st, 0);
                putchar('\n');
            }
            printf("  %-24s %s\n  %-24s", "has_color", st->has_color ? "yes" : "no", "probe_hist");
            for (int i = 0; i < TSDF_PROBE_HIST_BINS; i++)
                printf(" %llu", (unsigned long long)st->probe_hist[i]);
            putchar('\n');
        } else {
            printf("engine: (no such map yet)\n");
        }
        /* What the map was created with or a load gave it. */
        if (s->has_params)
            printf("params:\n  %-24s %g\n  %-24s %g\n  %-24s %g\n  %-24s %llu%s\n  %-24s %s\n",
                   "voxel_size_m", (double)s->params.voxel_size_m, "trunc_vox",
                   (double)s->params.trunc_vox, "max_weight", (double)s->params.max_weight,
                   "memory_cap_bytes", (unsigned long long)s->params.memory_cap_bytes,
                   s->params.memory_cap_bytes == 0 ? " (no cap)" : "", "layout",
                   tsdf_layout_name(s->params.layout));
        printf("daemon:\n");
        for (uint32_t i = 0; i < s->extra_count; i++) {
            const tsdf_stat_entry *e = &s->extra[i];
            if (e->is_float)
                printf("  %-32s %.4f\n", e->key, e->f);
            else
                printf("  %-32s %lld\n", e->key, (long long)e->i);
        }
        /* The CUDA backend's device event times: the upload of frame N+1
         * starting before the update of frame N ends shows the overlap. */
        if (s->timeline_count > 0) {
            printf("timeline (ms since the volume's epoch):\n"
                   "  %6s %21s %21s %21s\n",
                   "frame", "upload", "alloc", "update");
            for (uint32_t i = 0; i < s->timeline_count; i++) {
                const tsdf_frame_timeline *t = &s->timeline[i];
                printf("  %6llu %10.3f-%-10.3f %10.3f-%-10.3f %10.3f-%-10.3f\n",
                       (unsigned long long)t->frame, t->upload_start_ms, t->upload_end_ms,
                       t->alloc_start_ms, t->alloc_end_ms, t->update_start_ms, t->update_end_ms);
            }
        }
    }
    free(s);
    return EXIT_SUCCESS;
}

/* ---- save, load, reset, maps, ping -------------------------------------- */

/*
 * tsdf_synth.c - analytic scenes: exact signed distances, exact ray casting,
 * rigid trajectories and the named test sequences.
 *
 * Ray casting runs in double precision and only the final z-depth is
 * rounded to float, so a rendered depth differs from the true surface by
 * float rounding alone (about 1e-7 relative), far below anything a test of
 * the TSDF engine measures.
 */
#include "tsdf_synth.h"
#include "tsdf_pose.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Hits closer than this along a ray (in units of camera z) are ignored, so
 * a camera exactly on a surface does not see that surface at depth 0. */
#define SYNTH_T_MIN 1e-9

static const uint8_t synth_grey[3] = {160, 160, 160};

/* ---- small vector helpers (double) ------------------------------------ */

static double dot3(const double *a, const double *b)
{
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

static void cross3(const double *a, const double *b, double *out)
{
    out[0] = a[1] * b[2] - a[2] * b[1];
    out[1] = a[2] * b[0] - a[0] * b[2];
    out[2] = a[0] * b[1] - a[1] * b[0];
}

static int finite3f(const float *v)
{
    return isfinite(v[0]) && isfinite(v[1]) && isfinite(v[2]);
}

/* ---- building scenes --------------------------------------------------- */

void tsdf_scene_init(tsdf_scene *s)
{
    if (s)
        memset(s, 0, sizeof *s);
}

/* Reserves the next primitive slot, cleared, with identity rotation and the
 * given colour; NULL when the scene is full. */
static tsdf_primitive *scene_push(tsdf_scene *s, tsdf_prim_type type, const uint8_t rgb[3])
{
    if (s->count >= TSDF_SCENE_MAX_PRIMS)
        return NULL;
    tsdf_primitive *p = &s->prims[s->count];
    memset(p, 0, sizeof *p);
    p->type = type;
    p->R_world_box[0] = p->R_world_box[4] = p->R_world_box[8] = 1.0f;
    memcpy(p->rgb, rgb ? rgb : synth_grey, 3);
    return p;
}

static int half_extents_valid(const float half_m[3])
{
    return half_m && finite3f(half_m) && half_m[0] > 0.0f && half_m[1] > 0.0f && half_m[2] > 0.0f;
}

int tsdf_scene_add_sphere(tsdf_scene *s, const float center_m[3], float radius_m,
                          const uint8_t rgb[3])
{
    if (!s || !center_m || !finite3f(center_m) || !isfinite(radius_m) || radius_m <= 0.0f)
        return TSDF_EINVAL;
    tsdf_primitive *p = scene_push(s, TSDF_PRIM_SPHERE, rgb);
    if (!p)
        return TSDF_ETOO_LARGE;
    memcpy(p->center_m, center_m, sizeof p->center_m);
    p->radius_m = radius_m;
    s->count++;
    return TSDF_OK;
}

int tsdf_scene_add_box_yaw(tsdf_scene *s, const float center_m[3], const float half_m[3],
                           float yaw_rad, const uint8_t rgb[3])
{
    if (!s || !center_m || !finite3f(center_m) || !half_extents_valid(half_m) || !isfinite(yaw_rad))
        return TSDF_EINVAL;
    tsdf_primitive *p = scene_push(s, TSDF_PRIM_BOX, rgb);
    if (!p)
        return TSDF_ETOO_LARGE;
    memcpy(p->center_m, center_m, sizeof p->center_m);
    memcpy(p->half_m, half_m, sizeof p->half_m);
    if (yaw_rad != 0.0f) {
        float c = (float)cos((double)yaw_rad), sn = (float)sin((double)yaw_rad);
        float R[9] = {c, -sn, 0.0f, sn, c, 0.0f, 0.0f, 0.0f, 1.0f};
        memcpy(p->R_world_box, R, sizeof R);
    }
    s->count++;
    return TSDF_OK;
}

int tsdf_scene_add_box(tsdf_scene *s, const float center_m[3], const float half_m[3],
                       const uint8_t rgb[3])
{
    return tsdf_scene_add_box_yaw(s, center_m, half_m, 0.0f, rgb);
}

int tsdf_scene_add_room(tsdf_scene *s, const float center_m[3], const float half_m[3],
                        const uint8_t rgb[3])
{
    if (!s || !center_m || !finite3f(center_m) || !half_extents_valid(half_m))
        return TSDF_EINVAL;
    tsdf_primitive *p = scene_push(s, TSDF_PRIM_ROOM, rgb);
    if (!p)
        return TSDF_ETOO_LARGE;
    memcpy(p->center_m, center_m, sizeof p->center_m);
    memcpy(p->half_m, half_m, sizeof p->half_m);
    s->count++;
    return TSDF_OK;
}

int tsdf_scene_add_plane(tsdf_scene *s, const float point_m[3], const float normal[3],
                         const uint8_t rgb[3])
{
    if (!s || !point_m || !normal || !finite3f(point_m) || !finite3f(normal))
        return TSDF_EINVAL;
    double n[3] = {normal[0], normal[1], normal[2]};
    double len = sqrt(dot3(n, n));
    if (!(len > 1e-12))
        return TSDF_EINVAL;
    tsdf_primitive *p = scene_push(s, TSDF_PRIM_PLANE, rgb);
    if (!p)
        return TSDF_ETOO_LARGE;
    memcpy(p->center_m, point_m, sizeof p->center_m);
    for (int k = 0; k < 3; k++)
        p->normal[k] = (float)(n[k] / len);
    s->count++;
    return TSDF_OK;
}

/* ---- signed distances -------------------------------------------------- */

/* World point -> box frame: R^T (p - c). */
static void to_box_frame(const tsdf_primitive *pr, const double *p, double *out)
{
    double d[3] = {p[0] - pr->center_m[0], p[1] - pr->center_m[1], p[2] - pr->center_m[2]};
    const float *R = pr->R_world_box;
    for (int k = 0; k < 3; k++)
        out[k] = R[0 * 3 + k] * d[0] + R[1 * 3 + k] * d[1] + R[2 * 3 + k] * d[2];
}

/* Exact signed distance to an axis-aligned box centred at the origin:
 * outside, the length of the part of |p| - h that sticks out; inside, minus
 * the distance to the nearest face. */
static double box_sdf_local(const double *q_local, const float *half)
{
    double q[3], out2 = 0.0, inside = -INFINITY;
    for (int k = 0; k < 3; k++) {
        q[k] = fabs(q_local[k]) - half[k];
        if (q[k] > 0.0)
            out2 += q[k] * q[k];
        if (q[k] > inside)
            inside = q[k];
    }
    return sqrt(out2) + (inside < 0.0 ? inside : 0.0);
}

static double prim_sdf(const tsdf_primitive *pr, const double *p)
{
    double d[3], local[3];
    switch (pr->type) {
    case TSDF_PRIM_SPHERE:
        for (int k = 0; k < 3; k++)
            d[k] = p[k] - pr->center_m[k];
        return sqrt(dot3(d, d)) - pr->radius_m;
    case TSDF_PRIM_BOX:
        to_box_frame(pr, p, local);
        return box_sdf_local(local, pr->half_m);
    case TSDF_PRIM_ROOM:
        /* The room's free space is the box's inside, so its distance is the
         * box's with the sign flipped; exact on both sides of the walls. */
        for (int k = 0; k < 3; k++)
            local[k] = p[k] - pr->center_m[k];
        return -box_sdf_local(local, pr->half_m);
    case TSDF_PRIM_PLANE:
        for (int k = 0; k < 3; k++)
            d[k] = p[k] - pr->center_m[k];
        return d[0] * pr->normal[0] + d[1] * pr->normal[1] + d[2] * pr->normal[2];
    }
    return INFINITY;
}

float tsdf_scene_sdf(const tsdf_scene *s, const float p_world[3])
{
    if (!s || !p_world)
        return INFINITY;
    double p[3] = {p_world[0], p_world[1], p_world[2]};
    double best = INFINITY;
    for (uint32_t i = 0; i < s->count && i < TSDF_SCENE_MAX_PRIMS; i++) {
        double v = prim_sdf(&s->prims[i], p);
        if (v < best)
            best = v;
    }
    return (float)best;
}

int tsdf_scene_nearest_prim(const tsdf_scene *s, const float p_world[3])
{
    if (!s || !p_world)
        return -1;
    double p[3] = {p_world[0], p_world[1], p_world[2]};
    double best = INFINITY;
    int best_i = -1;
    for (uint32_t i = 0; i < s->count && i < TSDF_SCENE_MAX_PRIMS; i++) {
        double v = prim_sdf(&s->prims[i], p);
        if (best_i < 0 || v < best) {
            best = v;
            best_i = (int)i;
        }
    }
    return best_i;
}

/* ---- ray intersection ---------------------------------------------------
 * A ray is o + t d with d = R (x, y, 1) for the pixel's normalised image
 * point, so t is the camera-frame z of the point: the z-depth directly.
 * Each function returns the smallest t > SYNTH_T_MIN at which the ray
 * crosses the primitive's boundary, or INFINITY. */

static double ray_sphere(const tsdf_primitive *pr, const double *o, const double *d)
{
    double oc[3] = {o[0] - pr->center_m[0], o[1] - pr->center_m[1], o[2] - pr->center_m[2]};
    double a = dot3(d, d);
    double b = dot3(d, oc);
    double c = dot3(oc, oc) - (double)pr->radius_m * pr->radius_m;
    double disc = b * b - a * c;
    if (disc < 0.0)
        return INFINITY;
    /* The cancellation-free pair of roots: q / a and c / q. */
    double q = -(b + copysign(sqrt(disc), b));
    double t0 = q / a, t1 = q != 0.0 ? c / q : t0;
    if (t0 > t1) {
        double tmp = t0;
        t0 = t1;
        t1 = tmp;
    }
    if (t0 > SYNTH_T_MIN)
        return t0;
    if (t1 > SYNTH_T_MIN)
        return t1;
    return INFINITY;
}

/* Slab test in the box frame. Seen from outside, the hit is the entry; seen
 * from inside (a room, or a camera inside a solid box), the exit. */
static double ray_box(const tsdf_primitive *pr, const double *o, const double *d)
{
    double ol[3], dl[3];
    to_box_frame(pr, o, ol);
    const float *R = pr->R_world_box;
    for (int k = 0; k < 3; k++)
        dl[k] = R[0 * 3 + k] * d[0] + R[1 * 3 + k] * d[1] + R[2 * 3 + k] * d[2];
    double tn = -INFINITY, tf = INFINITY;
    for (int k = 0; k < 3; k++) {
        double h = pr->half_m[k];
        if (fabs(dl[k]) < 1e-15) {
            if (fabs(ol[k]) > h)
                return INFINITY;
            continue;
        }
        double t1 = (-h - ol[k]) / dl[k], t2 = (h - ol[k]) / dl[k];
        if (t1 > t2) {
            double tmp = t1;
            t1 = t2;
            t2 = tmp;
        }
        if (t1 > tn)
            tn = t1;
        if (t2 < tf)
            tf = t2;
    }
    if (tn > tf)
        return INFINITY;
    if (tn > SYNTH_T_MIN)
        return tn;
    if (tf > SYNTH_T_MIN)
        return tf;
    return INFINITY;
}

static double ray_plane(const tsdf_primitive *pr, const double *o, const double *d)
{
    double n[3] = {pr->normal[0], pr->normal[1], pr->normal[2]};
    double denom = dot3(n, d);
    if (fabs(denom) < 1e-15)
        return INFINITY;
    double po[3] = {pr->center_m[0] - o[0], pr->center_m[1] - o[1], pr->center_m[2] - o[2]};
    double t = dot3(n, po) / denom;
    return t > SYNTH_T_MIN ? t : INFINITY;
}

static double prim_ray(const tsdf_primitive *pr, const double *o, const double *d)
{
    switch (pr->type) {
    case TSDF_PRIM_SPHERE:
        return ray_sphere(pr, o, d);
    case TSDF_PRIM_BOX:
    case TSDF_PRIM_ROOM:
        return ray_box(pr, o, d);
    case TSDF_PRIM_PLANE:
        return ray_plane(pr, o, d);
    }
    return INFINITY;
}

/* ---- poses ------------------------------------------------------------- */

double tsdf_synth_pose_error(const float T[16])
{
    if (!T)
        return INFINITY;
    for (int i = 0; i < 16; i++)
        if (!isfinite(T[i]))
            return INFINITY;
    double err = fabs(T[12]);
    err = fmax(err, fabs(T[13]));
    err = fmax(err, fabs(T[14]));
    err = fmax(err, fabs(T[15] - 1.0));
    /* R^T R = I column by column, and det R = +1 (not a reflection). */
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            double s = 0.0;
            for (int r = 0; r < 3; r++)
                s += (double)T[r * 4 + a] * T[r * 4 + b];
            err = fmax(err, fabs(s - (a == b ? 1.0 : 0.0)));
        }
    double det = T[0] * ((double)T[5] * T[10] - (double)T[6] * T[9]) -
                 T[1] * ((double)T[4] * T[10] - (double)T[6] * T[8]) +
                 T[2] * ((double)T[4] * T[9] - (double)T[5] * T[8]);
    return fmax(err, fabs(det - 1.0));
}

int tsdf_synth_look_at(const float eye_m[3], const float target_m[3], const float up[3],
                       float T_world_cam[16])
{
    static const float z_up[3] = {0.0f, 0.0f, 1.0f};
    if (!eye_m || !target_m || !T_world_cam)
        return TSDF_EINVAL;
    if (!up)
        up = z_up;
    if (!finite3f(eye_m) || !finite3f(target_m) || !finite3f(up))
        return TSDF_EINVAL;
    double f[3] = {(double)target_m[0] - eye_m[0], (double)target_m[1] - eye_m[1],
                   (double)target_m[2] - eye_m[2]};
    double fl = sqrt(dot3(f, f));
    if (!(fl > 1e-9))
        return TSDF_EINVAL;
    for (int k = 0; k < 3; k++)
        f[k] /= fl;
    /* With z forward and y down, x = forward x up points right. When forward
     * is (nearly) parallel to up, any other fixed axis keeps the pose
     * well defined. */
    double u[3] = {up[0], up[1], up[2]}, x[3], y[3];
    cross3(f, u, x);
    double xl = sqrt(dot3(x, x));
    double ul = sqrt(dot3(u, u));
    if (!(xl > 1e-6 * ul) || !(ul > 0.0)) {
        double alt[2][3] = {{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0}};
        int pick = fabs(f[0]) < 0.9 ? 0 : 1;
        cross3(f, alt[pick], x);
        xl = sqrt(dot3(x, x));
    }
    for (int k = 0; k < 3; k++)
        x[k] /= xl;
    cross3(f, x, y); /* z x x = y: unit, since f and x are orthonormal */
    for (int r = 0; r < 3; r++) {
        T_world_cam[r * 4 + 0] = (float)x[r];
        T_world_cam[r * 4 + 1] = (float)y[r];
        T_world_cam[r * 4 + 2] = (float)f[r];
        T_world_cam[r * 4 + 3] = eye_m[r];
    }
    T_world_cam[12] = T_world_cam[13] = T_world_cam[14] = 0.0f;
    T_world_cam[15] = 1.0f;
    return TSDF_OK;
}

int tsdf_synth_orbit_pose(const float center_m[3], float radius_m, float height_m,
                          uint32_t n_frames, uint32_t i, float T_world_cam[16])
{
    if (!center_m || !T_world_cam || n_frames == 0 || i >= n_frames || !finite3f(center_m) ||
        !isfinite(radius_m) || radius_m <= 0.0f || !isfinite(height_m))
        return TSDF_EINVAL;
    double az = 2.0 * M_PI * (double)i / (double)n_frames;
    float eye[3] = {(float)(center_m[0] + radius_m * cos(az)),
                    (float)(center_m[1] + radius_m * sin(az)), center_m[2] + height_m};
    return tsdf_synth_look_at(eye, center_m, NULL, T_world_cam);
}

/* ---- rendering --------------------------------------------------------- */

static int intrinsics_valid(const tsdf_intrinsics *K)
{
    return isfinite(K->fx) && isfinite(K->fy) && isfinite(K->cx) && isfinite(K->cy) &&
           K->fx > 0.0f && K->fy > 0.0f;
}

static int image_size_check(uint32_t width, uint32_t height)
{
    if (width == 0 || height == 0)
        return TSDF_EEMPTY_IMAGE;
    if (width > TSDF_MAX_IMAGE_DIM || height > TSDF_MAX_IMAGE_DIM ||
        (uint64_t)width * height > TSDF_MAX_IMAGE_PIXELS)
        return TSDF_ETOO_LARGE;
    return TSDF_OK;
}

int tsdf_scene_render(const tsdf_scene *s, uint32_t width, uint32_t height,
                      const tsdf_intrinsics *K, const float T_world_cam[16], float *depth_m,
                      uint8_t *rgb)
{
    if (!s || !K || !T_world_cam || !depth_m || s->count > TSDF_SCENE_MAX_PRIMS)
        return TSDF_EINVAL;
    int rc = image_size_check(width, height);
    if (rc != TSDF_OK)
        return rc;
    if (!intrinsics_valid(K))
        return TSDF_EBAD_INTRINSICS;
    if (!tsdf_pose_is_rigid(T_world_cam))
        return TSDF_EBAD_POSE;

    double o[3] = {T_world_cam[3], T_world_cam[7], T_world_cam[11]};
    double R[9];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            R[r * 3 + c] = T_world_cam[r * 4 + c];
    double inv_fx = 1.0 / K->fx, inv_fy = 1.0 / K->fy;

    for (uint32_t v = 0; v < height; v++) {
        double yc = ((double)v - K->cy) * inv_fy;
        for (uint32_t u = 0; u < width; u++) {
            double xc = ((double)u - K->cx) * inv_fx;
            double d[3];
            for (int r = 0; r < 3; r++)
                d[r] = R[r * 3 + 0] * xc + R[r * 3 + 1] * yc + R[r * 3 + 2];
            double best = INFINITY;
            int hit = -1;
            for (uint32_t i = 0; i < s->count; i++) {
                double t = prim_ray(&s->prims[i], o, d);
                if (t < best) {
                    best = t;
                    hit = (int)i;
                }
            }
            size_t idx = (size_t)v * width + u;
            depth_m[idx] = hit >= 0 ? (float)best : 0.0f;
            if (rgb) {
                for (int c = 0; c < 3; c++)
                    rgb[idx * 3 + c] = hit >= 0 ? s->prims[hit].rgb[c] : 0;
            }
        }
    }
    return TSDF_OK;
}

void tsdf_depth_m_to_mm(const float *depth_m, size_t count, uint16_t *depth_mm)
{
    if (!depth_m || !depth_mm)
        return;
    for (size_t i = 0; i < count; i++) {
        float d = depth_m[i];
        double mm = (double)d * 1000.0 + 0.5;
        /* NaN fails the comparison, so it becomes 0 too. */
        depth_mm[i] = (d > 0.0f && mm < 65536.0) ? (uint16_t)mm : 0;
    }
}

/* ---- standard scenes --------------------------------------------------- */

static const uint8_t col_red[3] = {200, 60, 50};
static const uint8_t col_green[3] = {70, 170, 80};
static const uint8_t col_blue[3] = {60, 90, 200};
static const uint8_t col_wall[3] = {210, 200, 180};
static const uint8_t col_wood[3] = {150, 100, 60};
static const uint8_t col_yellow[3] = {220, 190, 60};

int tsdf_scene_make_sphere(tsdf_scene *s)
{
    static const float c[3] = {0.0f, 0.0f, 0.0f};
    if (!s)
        return TSDF_EINVAL;
    tsdf_scene_init(s);
    return tsdf_scene_add_sphere(s, c, 0.3f, col_red);
}

int tsdf_scene_make_box(tsdf_scene *s)
{
    static const float c[3] = {0.0f, 0.0f, 0.0f}, h[3] = {0.25f, 0.15f, 0.1f};
    if (!s)
        return TSDF_EINVAL;
    tsdf_scene_init(s);
    return tsdf_scene_add_box(s, c, h, col_blue);
}

/* The 4 x 3 x 2.5 m room with its floor at z = 0. */
static int add_standard_room(tsdf_scene *s)
{
    static const float c[3] = {0.0f, 0.0f, 1.25f}, h[3] = {2.0f, 1.5f, 1.25f};
    return tsdf_scene_add_room(s, c, h, col_wall);
}

int tsdf_scene_make_room(tsdf_scene *s)
{
    static const float bc[3] = {0.6f, -0.3f, 0.25f}, bh[3] = {0.3f, 0.2f, 0.25f};
    static const float sc[3] = {-0.5f, 0.4f, 0.25f};
    if (!s)
        return TSDF_EINVAL;
    tsdf_scene_init(s);
    int rc = add_standard_room(s);
    if (rc == TSDF_OK)
        rc = tsdf_scene_add_box(s, bc, bh, col_blue);
    if (rc == TSDF_OK)
        rc = tsdf_scene_add_sphere(s, sc, 0.25f, col_red);
    return rc;
}

int tsdf_scene_make_demo(tsdf_scene *s)
{
    /* A table (a box turned by 30 degrees) with a ball on its top, a second
     * ball on the floor and a pillar from floor to ceiling in a corner. */
    static const float table_c[3] = {0.5f, 0.2f, 0.375f}, table_h[3] = {0.4f, 0.25f, 0.375f};
    static const float ball_c[3] = {0.5f, 0.2f, 0.9f};
    static const float ball2_c[3] = {-0.6f, -0.4f, 0.25f};
    static const float pillar_c[3] = {-1.5f, 1.0f, 1.25f}, pillar_h[3] = {0.1f, 0.1f, 1.25f};
    if (!s)
        return TSDF_EINVAL;
    tsdf_scene_init(s);
    int rc = add_standard_room(s);
    if (rc == TSDF_OK)
        rc = tsdf_scene_add_box_yaw(s, table_c, table_h, (float)(M_PI / 6.0), col_wood);
    if (rc == TSDF_OK)
        rc = tsdf_scene_add_sphere(s, ball_c, 0.15f, col_red);
    if (rc == TSDF_OK)
        rc = tsdf_scene_add_sphere(s, ball2_c, 0.25f, col_green);
    if (rc == TSDF_OK)
        rc = tsdf_scene_add_box(s, pillar_c, pillar_h, col_yellow);
    return rc;
}

int tsdf_scene_make_plane(tsdf_scene *s)
{
    static const float p0[3] = {0.0f, 0.0f, 0.0f}, n[3] = {0.0f, 0.0f, 1.0f};
    static const float sc[3] = {0.0f, 0.0f, 0.3f};
    if (!s)
        return TSDF_EINVAL;
    tsdf_scene_init(s);
    int rc = tsdf_scene_add_plane(s, p0, n, col_wall);
    if (rc == TSDF_OK)
        rc = tsdf_scene_add_sphere(s, sc, 0.3f, col_red);
    return rc;
}

/* ---- named sequences --------------------------------------------------- */

static const char *const synth_names[] = {"sphere", "box", "room", "demo", "plane", NULL};

const char *const *tsdf_synth_sequence_names(void)
{
    return synth_names;
}

int tsdf_synth_sequence_init(tsdf_synth_sequence *seq, const char *name)
{
    if (!seq || !name)
        return TSDF_EINVAL;
    memset(seq, 0, sizeof *seq);
    seq->width = 320;
    seq->height = 240;
    seq->K.fx = 262.5f;
    seq->K.fy = 262.5f;
    seq->K.cx = 159.5f;
    seq->K.cy = 119.5f;
    seq->min_depth_m = 0.1f;
    seq->max_depth_m = 8.0f;

    int rc;
    if (strcmp(name, "sphere") == 0 || strcmp(name, "box") == 0) {
        int is_sphere = name[0] == 's';
        rc = is_sphere ? tsdf_scene_make_sphere(&seq->scene) : tsdf_scene_make_box(&seq->scene);
        static const float elev[4] = {-70.0f, -25.0f, 25.0f, 70.0f};
        seq->ring_count = 4;
        seq->frames_per_ring = 12;
        for (int r = 0; r < 4; r++) {
            seq->elev_deg[r] = elev[r];
            seq->distance_m[r] = is_sphere ? 1.0f : 1.1f;
        }
    } else if (strcmp(name, "room") == 0 || strcmp(name, "demo") == 0) {
        rc = name[0] == 'r' ? tsdf_scene_make_room(&seq->scene) : tsdf_scene_make_demo(&seq->scene);
        seq->target_m[2] = 0.3f;
        seq->ring_count = 2;
        seq->frames_per_ring = 24;
        seq->elev_deg[0] = 40.0f;
        seq->distance_m[0] = 1.6f;
        seq->elev_deg[1] = 55.0f;
        seq->distance_m[1] = 1.8f;
    } else if (strcmp(name, "plane") == 0) {
        rc = tsdf_scene_make_plane(&seq->scene);
        seq->target_m[2] = 0.3f;
        seq->ring_count = 2;
        seq->frames_per_ring = 16;
        seq->elev_deg[0] = 20.0f;
        seq->distance_m[0] = 1.2f;
        seq->elev_deg[1] = 50.0f;
        seq->distance_m[1] = 1.2f;
    } else {
        return TSDF_ENOT_FOUND;
    }
    if (rc != TSDF_OK)
        return rc;
    snprintf(seq->name, sizeof seq->name, "%s", name);
    seq->frame_count = seq->ring_count * seq->frames_per_ring;
    return TSDF_OK;
}

int tsdf_synth_sequence_set_resolution(tsdf_synth_sequence *seq, uint32_t width, uint32_t height)
{
    if (!seq || seq->width == 0 || seq->height == 0)
        return TSDF_EINVAL;
    int rc = image_size_check(width, height);
    if (rc != TSDF_OK)
        return rc;
    seq->K.fx *= (float)width / (float)seq->width;
    seq->K.fy *= (float)height / (float)seq->height;
    seq->K.cx = 0.5f * (float)width - 0.5f;
    seq->K.cy = 0.5f * (float)height - 0.5f;
    seq->width = width;
    seq->height = height;
    return TSDF_OK;
}

int tsdf_synth_sequence_pose(const tsdf_synth_sequence *seq, uint32_t i, float T_world_cam[16])
{
    if (!seq || !T_world_cam || seq->frames_per_ring == 0 || i >= seq->frame_count ||
        seq->ring_count > TSDF_SYNTH_MAX_RINGS)
        return TSDF_EINVAL;
    uint32_t ring = i / seq->frames_per_ring, step = i % seq->frames_per_ring;
    /* Odd rings are turned by half a step so that neighbouring rings do not
     * look at the object along the same meridians. */
    double az = 2.0 * M_PI * ((double)step + 0.5 * (double)(ring & 1u)) / seq->frames_per_ring;
    double el = (double)seq->elev_deg[ring] * M_PI / 180.0;
    double dist = seq->distance_m[ring];
    float eye[3] = {(float)(seq->target_m[0] + dist * cos(el) * cos(az)),
                    (float)(seq->target_m[1] + dist * cos(el) * sin(az)),
                    (float)(seq->target_m[2] + dist * sin(el))};
    return tsdf_synth_look_at(eye, seq->target_m, NULL, T_world_cam);
}

int tsdf_synth_sequence_frame(const tsdf_synth_sequence *seq, uint32_t i, float *depth_m,
                              uint8_t *rgb, tsdf_frame *out)
{
    if (!seq || !depth_m || !out)
        return TSDF_EINVAL;
    float T[16];
    int rc = tsdf_synth_sequence_pose(seq, i, T);
    if (rc != TSDF_OK)
        return rc;
    rc = tsdf_scene_render(&seq->scene, seq->width, seq->height, &seq->K, T, depth_m, rgb);
    if (rc != TSDF_OK)
        return rc;
    memset(out, 0, sizeof *out);
    out->width = seq->width;
    out->height = seq->height;
    out->K = seq->K;
    memcpy(out->T_world_cam, T, sizeof T);
    out->depth_format = TSDF_DEPTH_F32;
    out->depth = depth_m;
    out->depth_scale = 1.0f;
    out->min_depth_m = seq->min_depth_m;
    out->max_depth_m = seq->max_depth_m;
    out->rgb = rgb;
    return TSDF_OK;
}

/*
 * cpu_integrate.c - the CPU reference integration of one depth frame:
 * collect the blocks of the frame's allocation band, make sure they exist
 * (checking the memory cap before anything changes), then update every
 * voxel of those blocks. All per-voxel maths comes from tsdf_math.h, shared
 * with the CUDA kernels, so this is the oracle the GPU is checked against.
 *
 * Work is spread over the volume's pool in three jobs, none of which
 * changes a result with the number of threads:
 *   1. per row: each pixel's sample in metres, then its usable depth
 *      (tsdf_depth_usable_from_m), once per frame instead of once per voxel;
 *   2. per band of rows: the band's blocks, deduplicated within the band
 *      in first-seen order; the bands are then merged in row order, so
 *      frame_keys comes out in the first-seen order of one thread walking
 *      the image, which is what decides the pool slots of new blocks;
 *   3. per block: the voxel update, each block its own voxels and version.
 * The allocation itself (the cap check and the new slots) stays on the
 * calling thread: it changes the table.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE4_1__
#include <smmintrin.h>
#endif

#include "cpu_backend.h"
#include "tsdf_band.h"
#include "tsdf_math.h"

/* Rows per band of job 2: large enough that a band's own dedupe table
 * absorbs the overlap of neighbouring rays, small enough to balance. */
#define COLLECT_ROWS 16
/* Blocks per chunk of job 3. */
#define UPDATE_BLOCKS 8
/* Rows per chunk of job 1. */
#define PREPARE_ROWS 16

static int grow_keys(uint64_t **keys, size_t *cap, size_t need)
{
    if (need <= *cap)
        return TSDF_OK;
    size_t c = *cap != 0 ? *cap : 1024;
    while (c < need)
        c *= 2;
    uint64_t *n = realloc(*keys, c * sizeof(*n));
    if (n == NULL)
        return TSDF_ENOMEM;
    *keys = n;
    *cap = c;
    return TSDF_OK;
}

static int frame_blocks_reserve(cpu_volume *v, size_t need)
{
    if (need <= v->frame_cap)
        return TSDF_OK;
    size_t cap = v->frame_cap;
    int rc = grow_keys(&v->frame_keys, &cap, need);
    if (rc != TSDF_OK)
        return rc;
    int64_t *blocks = realloc(v->frame_blocks, cap * sizeof(*blocks));
    if (blocks == NULL)
        return TSDF_ENOMEM;
    v->frame_blocks = blocks;
    v->frame_cap = cap;
    return TSDF_OK;
}

/* Sizes the per-frame scratch for a w x h frame and the pool's threads. */
static int scratch_reserve(cpu_volume *v, uint32_t w, uint32_t h)
{
    cpu_frame_scratch *s = &v->scratch;
    size_t npix = (size_t)w * h, nbands = (h + COLLECT_ROWS - 1) / COLLECT_ROWS;
    unsigned threads = cpu_pool_threads(v->pool);

    if (npix > s->pix_cap) {
        float *a = realloc(s->alloc_depth_m, npix * sizeof(*a));
        if (a == NULL)
            return TSDF_ENOMEM;
        s->alloc_depth_m = a;
        float *u = realloc(s->usable_m, npix * sizeof(*u));
        if (u == NULL)
            return TSDF_ENOMEM;
        s->usable_m = u;
        s->pix_cap = npix;
    }
    if (w > s->cols_cap) {
        float *c = realloc(s->ray_cols, 3 * (size_t)w * sizeof(*c));
        if (c == NULL)
            return TSDF_ENOMEM;
        s->ray_cols = c;
        s->cols_cap = w;
    }
    if (nbands > s->bands_cap) {
        cpu_key_list *b = realloc(s->bands, nbands * sizeof(*b));
        if (b == NULL)
            return TSDF_ENOMEM;
        memset(b + s->bands_cap, 0, (nbands - s->bands_cap) * sizeof(*b));
        s->bands = b;
        s->bands_cap = nbands;
    }
    if ((size_t)w > s->row_ends_cols) {
        float *e = realloc(s->row_ends, (size_t)threads * 6 * (size_t)w * sizeof(*e));
        if (e == NULL)
            return TSDF_ENOMEM;
        s->row_ends = e;
        int32_t *bk = realloc(s->row_blocks, (size_t)threads * 6 * (size_t)w * sizeof(*bk));
        if (bk == NULL)
            return TSDF_ENOMEM;
        s->row_blocks = bk;
        s->row_ends_cols = w;
    }
    if (s->sets == NULL) {
        if ((s->sets = calloc(threads, sizeof(*s->sets))) == NULL)
            return TSDF_ENOMEM;
        for (unsigned i = 0; i < threads; i++) {
            int rc = cpu_hash_init(&s->sets[i], 4096, 0.5f);
            if (rc != TSDF_OK)
                return rc;
        }
        s->nsets = threads;
    }
    return TSDF_OK;
}

void cpu_frame_scratch_fini(cpu_frame_scratch *s)
{
    free(s->alloc_depth_m);
    free(s->usable_m);
    free(s->ray_cols);
    free(s->row_ends);
    free(s->row_blocks);
    for (size_t i = 0; i < s->bands_cap; i++)
        free(s->bands[i].keys);
    free(s->bands);
    for (unsigned i = 0; s->sets != NULL && i < s->nsets; i++)
        cpu_hash_fini(&s->sets[i]);
    free(s->sets);
    memset(s, 0, sizeof(*s));
}

typedef struct {
    cpu_volume *v;
    const tsdf_frame *f;
    float T_cam_world[16];
} frame_job;

/* Job 1a: the samples of rows [b, e) in metres. 16-bit samples go four at
 * a time with SSE4.1: tsdf_depth_sample_m's product and range test, in
 * the same order and sense (NaN cannot come from a 16-bit sample). */
static int sample_rows(void *arg, size_t b, size_t e, unsigned worker)
{
    const frame_job *j = arg;
    const tsdf_frame *f = j->f;
    cpu_frame_scratch *s = &j->v->scratch;
    size_t i = b * f->width;
    const size_t end = e * f->width;
    (void)worker;
#ifdef __SSE4_1__
    if (f->depth_format == TSDF_DEPTH_U16) {
        const uint16_t *src = f->depth;
        const __m128 scale = _mm_set1_ps(f->depth_scale), lo = _mm_set1_ps(f->min_depth_m),
                     hi = _mm_set1_ps(f->max_depth_m), zero = _mm_setzero_ps();
        for (; i + 4 <= end; i += 4) {
            const __m128i raw = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(src + i)));
            const __m128 d = _mm_mul_ps(_mm_cvtepi32_ps(raw), scale);
            const __m128 ok = _mm_and_ps(_mm_and_ps(_mm_cmpge_ps(d, lo), _mm_cmple_ps(d, hi)),
                                         _mm_cmpnle_ps(d, zero));
            _mm_storeu_ps(s->alloc_depth_m + i, _mm_and_ps(d, ok));
        }
    }
#endif
    for (; i < end; i++)
        s->alloc_depth_m[i] = tsdf_depth_sample_m(f->depth_format, f->depth, (uint32_t)i,
                                                  f->depth_scale, f->min_depth_m, f->max_depth_m);
    return TSDF_OK;
}

/* tsdf_depth_usable_from_m of pixels [u0, u1) of row py, which have both
 * row neighbours (u0 >= 1, u1 <= w - 1), four at a time: the same
 * comparisons on the same values (fabsf is the sign bit cleared; a NaN
 * difference fails "> trunc" in both). Returns where it stopped. */
#ifdef __SSE4_1__
static uint32_t usable_run(const float *depth_m, uint32_t w, uint32_t h, uint32_t py, uint32_t u0,
                           uint32_t u1, float trunc_m, float *out)
{
    uint32_t u = u0;
    const float *row = depth_m + (size_t)py * w;
    const float *up = py > 0 ? row - w : NULL, *down = py + 1 < h ? row + w : NULL;
    const __m128 zero = _mm_setzero_ps(), trunc = _mm_set1_ps(trunc_m);
    const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
#define USABLE_EDGE(n)                                                                             \
    _mm_and_ps(_mm_cmpgt_ps(n, zero), _mm_cmpgt_ps(_mm_and_ps(_mm_sub_ps(n, d), abs_mask), trunc))
    for (; u + 4 <= u1; u += 4) {
        const __m128 d = _mm_loadu_ps(row + u);
        __m128 edge = _mm_or_ps(USABLE_EDGE(_mm_loadu_ps(row + u - 1)),
                                USABLE_EDGE(_mm_loadu_ps(row + u + 1)));
        if (up != NULL)
            edge = _mm_or_ps(edge, USABLE_EDGE(_mm_loadu_ps(up + u)));
        if (down != NULL)
            edge = _mm_or_ps(edge, USABLE_EDGE(_mm_loadu_ps(down + u)));
        /* d > 0 and an edge: 0; else d itself. */
        _mm_storeu_ps(out + u, _mm_andnot_ps(_mm_and_ps(_mm_cmpgt_ps(d, zero), edge), d));
    }
#undef USABLE_EDGE
    return u;
}
#endif

/* Job 1b: the usable depths of rows [b, e), from every row's samples. */
static int usable_rows(void *arg, size_t b, size_t e, unsigned worker)
{
    const frame_job *j = arg;
    const tsdf_frame *f = j->f;
    cpu_frame_scratch *s = &j->v->scratch;
    const uint32_t w = f->width, h = f->height;
    (void)worker;
    for (uint32_t py = (uint32_t)b; py < (uint32_t)e; py++) {
        float *out = s->usable_m + (size_t)py * w;
        uint32_t px = 0;
#ifdef __SSE4_1__
        if (w >= 2) {
            out[0] = tsdf_depth_usable_from_m(s->alloc_depth_m, w, h, 0, py, j->v->trunc_m);
            px = usable_run(s->alloc_depth_m, w, h, py, 1, w - 1, j->v->trunc_m, out);
        }
#endif
        for (; px < w; px++)
            out[px] = tsdf_depth_usable_from_m(s->alloc_depth_m, w, h, px, py, j->v->trunc_m);
    }
    return TSDF_OK;
}

/* Adds key to a band's list unless the band has it. */
static int band_add(cpu_key_list *list, cpu_hash *seen, uint64_t key)
{
    int inserted, rc = cpu_hash_insert(seen, key, 0, NULL, &inserted);
    if (rc != TSDF_OK || !inserted)
        return rc;
    if ((rc = grow_keys(&list->keys, &list->cap, list->n + 1)) != TSDF_OK)
        return rc;
    list->keys[list->n++] = key;
    return TSDF_OK;
}

/* One pixel of band_ends_kernel: tsdf_band_segment, then the ends in
 * block units as tsdf_block_dda_init forms them; NaN for no band. */
static inline void band_ends_pixel(const float c[11], float dm, float c0, float c1, float c2,
                                   float e[6])
{
    const float origin[3] = {c[6], c[7], c[8]};
    const float dir[3] = {(c0 + c[0]) + c[3], (c1 + c[1]) + c[4], (c2 + c[2]) + c[5]};
    float a[3], b[3];
    if (!tsdf_band_segment(origin, dir, dm, c[9], a, b)) {
        for (int k = 0; k < 6; k++)
            e[k] = NAN;
        return;
    }
    for (int k = 0; k < 3; k++) {
        e[k] = a[k] * c[10];
        e[3 + k] = b[k] * c[10];
    }
}

/* A row_blocks entry for an end outside the key range (or no band). */
#define TSDF_NO_BLOCK INT32_MIN

/* The blocks of band ends A (e[0..2]) and B (e[3..5]) into bk[k w]: what
 * tsdf_band_walk_init takes from them, or TSDF_NO_BLOCK where it returns
 * 0 (tsdf_block_of_units fails). */
static inline void band_blocks_pixel(const float e[6], size_t w, int32_t *bk)
{
    int32_t cur[3], end[3];
    if (!tsdf_block_of_units(e, cur) || !tsdf_block_of_units(e + 3, end)) {
        bk[0] = TSDF_NO_BLOCK;
        return;
    }
    for (int k = 0; k < 3; k++) {
        bk[(size_t)k * w] = cur[k];
        bk[(size_t)(3 + k) * w] = end[k];
    }
}

/* row_band_ends' loop. c: the row's three y terms, T[2], T[6], T[10], the
 * origin, trunc_m and 1 / block size. With SSE4.1, four pixels at a time:
 * sqrtps and divps round exactly as sqrtss and divss do, and every
 * expression keeps tsdf_band_segment's order, so the ends are the same
 * bits but for the sign of a zero (see below); floorps floors as floorf,
 * so the blocks are tsdf_block_of_units'. */
static void band_ends_kernel(size_t w, const float c[11], const float *depth, const float *cols,
                             size_t cols_stride, float *ends, int32_t *blocks)
{
    const float *c0 = cols, *c1 = cols + cols_stride, *c2 = cols + 2 * cols_stride;
    size_t px = 0;
#ifdef __SSE4_1__
    const __m128 r0 = _mm_set1_ps(c[0]), r1 = _mm_set1_ps(c[1]), r2 = _mm_set1_ps(c[2]);
    const __m128 t0 = _mm_set1_ps(c[3]), t1 = _mm_set1_ps(c[4]), t2 = _mm_set1_ps(c[5]);
    const __m128 o0 = _mm_set1_ps(c[6]), o1 = _mm_set1_ps(c[7]), o2 = _mm_set1_ps(c[8]);
    const __m128 trunc_m = _mm_set1_ps(c[9]), inv_b = _mm_set1_ps(c[10]);
    const __m128 zero = _mm_setzero_ps(), nan = _mm_set1_ps(NAN);
    const __m128 bmin = _mm_set1_ps((float)TSDF_BLOCK_COORD_MIN),
                 bmax = _mm_set1_ps((float)TSDF_BLOCK_COORD_MAX);
    for (; px + 4 <= w; px += 4) {
        __m128 d0 = _mm_add_ps(_mm_add_ps(_mm_loadu_ps(c0 + px), r0), t0);
        __m128 d1 = _mm_add_ps(_mm_add_ps(_mm_loadu_ps(c1 + px), r1), t1);
        __m128 d2 = _mm_add_ps(_mm_add_ps(_mm_loadu_ps(c2 + px), r2), t2);
        __m128 dm = _mm_loadu_ps(depth + px);
        __m128 len2 =
            _mm_add_ps(_mm_add_ps(_mm_mul_ps(d0, d0), _mm_mul_ps(d1, d1)), _mm_mul_ps(d2, d2));
        __m128 half_z = _mm_div_ps(trunc_m, _mm_sqrt_ps(len2));
        __m128 z0 = _mm_max_ps(_mm_sub_ps(dm, half_z), zero);
        __m128 z1 = _mm_add_ps(dm, half_z);
        /* maxps(z0, 0) is z0 < 0 ? 0 : z0 but for the sign of a zero
         * (maxps returns its second operand when both are zero, or either
         * is NaN, and a NaN z0 makes `none` NaN anyway): +0 for -0, which
         * nothing after can tell apart (o + 0 d, floors, differences). */
        __m128 ok = _mm_and_ps(_mm_cmpgt_ps(dm, zero), _mm_cmpgt_ps(half_z, zero));
        __m128 none = _mm_andnot_ps(ok, nan);
        const __m128 e[6] = {
            _mm_add_ps(_mm_mul_ps(_mm_add_ps(o0, _mm_mul_ps(z0, d0)), inv_b), none),
            _mm_add_ps(_mm_mul_ps(_mm_add_ps(o1, _mm_mul_ps(z0, d1)), inv_b), none),
            _mm_add_ps(_mm_mul_ps(_mm_add_ps(o2, _mm_mul_ps(z0, d2)), inv_b), none),
            _mm_add_ps(_mm_mul_ps(_mm_add_ps(o0, _mm_mul_ps(z1, d0)), inv_b), none),
            _mm_add_ps(_mm_mul_ps(_mm_add_ps(o1, _mm_mul_ps(z1, d1)), inv_b), none),
            _mm_add_ps(_mm_mul_ps(_mm_add_ps(o2, _mm_mul_ps(z1, d2)), inv_b), none)};
        /* NaN fails both range tests, as in tsdf_block_of_units. */
        __m128 in_range = _mm_castsi128_ps(_mm_set1_epi32(-1));
        __m128i bk[6];
        for (int k = 0; k < 6; k++) {
            _mm_storeu_ps(ends + (size_t)k * w + px, e[k]);
            const __m128 f = _mm_floor_ps(e[k]);
            in_range =
                _mm_and_ps(in_range, _mm_and_ps(_mm_cmpge_ps(f, bmin), _mm_cmple_ps(f, bmax)));
            bk[k] = _mm_cvttps_epi32(f);
        }
        bk[0] = _mm_blendv_epi8(_mm_set1_epi32(TSDF_NO_BLOCK), bk[0], _mm_castps_si128(in_range));
        for (int k = 0; k < 6; k++)
            _mm_storeu_si128((__m128i *)(blocks + (size_t)k * w + px), bk[k]);
    }
#endif
    for (; px < w; px++) {
        float e[6];
        band_ends_pixel(c, depth[px], c0[px], c1[px], c2[px], e);
        for (int k = 0; k < 6; k++)
            ends[(size_t)k * w + px] = e[k];
        band_blocks_pixel(e, w, blocks + px);
    }
}

/* The two ends of the allocation band of every pixel of row py in block
 * units (ends[k w + px], k = 0..5: A's x, y, z then B's, w the row's
 * width; tsdf_band_segment, then the products tsdf_block_dda_init forms),
 * NaN for a pixel without a band: in a loop without branches, four pixels
 * at a time (band_ends_kernel). collect_band walks them with
 * tsdf_band_walk, which needs no division for most of them. */
static void row_band_ends(const frame_job *j, uint32_t py, const float rows[3], float *ends,
                          int32_t *blocks)
{
    const tsdf_frame *f = j->f;
    const cpu_volume *v = j->v;
    const cpu_frame_scratch *s = &v->scratch;
    const float *T = f->T_world_cam;
    const size_t w = f->width;
    const float c[11] = {rows[0], rows[1],    rows[2],          T[2], T[6], T[10], T[3], T[7],
                         T[11],   v->trunc_m, v->inv_block_size};
    band_ends_kernel(w, c, &s->alloc_depth_m[(size_t)py * w], s->ray_cols, s->cols_cap, ends,
                     blocks);
}

/* Entries of a band's cache of keys it has (2^BAND_RECENT_BITS). */
#define BAND_RECENT_BITS 8
#define BAND_RECENT (1u << BAND_RECENT_BITS)

/* A band of rows' blocks as collect_band meets them. */
typedef struct {
    cpu_key_list *list;
    cpu_hash *seen; /* the keys of list */
    /* Keys the band has, direct mapped (TSDF_KEY_EMPTY: a free entry).
     * A band has a few hundred distinct blocks that its rows meet again
     * and again; with the last four keys only, 160,000 of a 7-Scenes
     * frame's walk steps went on to the hash set. */
    uint64_t recent[BAND_RECENT];
} band_collector;

/* Adds block blk unless the band has it: the cache first, then the
 * band's set (which alone decides, so the cache saves probes only). */
static inline int band_collect(band_collector *bc, const int32_t blk[3])
{
    uint64_t key = tsdf_block_key(blk[0], blk[1], blk[2]);
    /* The top bits of a multiplicative hash, so that neighbouring
     * blocks, whose keys differ in their low bits per axis, spread. */
    const uint32_t e = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - BAND_RECENT_BITS));
    if (bc->recent[e] == key)
        return TSDF_OK;
    bc->recent[e] = key;
    return band_add(bc->list, bc->seen, key);
}

/* Job 2: the blocks of the bands of rows [b, e) (band = b / COLLECT_ROWS),
 * each in the order one thread walking its rows first meets them. */
static int collect_band(void *arg, size_t b, size_t e, unsigned worker)
{
    const frame_job *j = arg;
    const tsdf_frame *f = j->f;
    const cpu_volume *v = j->v;
    const cpu_frame_scratch *s = &v->scratch;
    const float *T = f->T_world_cam;
    float *ends = &s->row_ends[(size_t)worker * 6 * f->width];
    int32_t *blocks = &s->row_blocks[(size_t)worker * 6 * f->width];
    band_collector bc;
    bc.list = &s->bands[b / COLLECT_ROWS];
    bc.seen = &s->sets[worker];
    for (uint32_t k = 0; k < BAND_RECENT; k++)
        bc.recent[k] = TSDF_KEY_EMPTY;
    /* The end blocks of the band's last line walk (none yet: no pixel's
     * first is TSDF_NO_BLOCK past the test below). */
    int32_t line[6] = {TSDF_NO_BLOCK, 0, 0, 0, 0, 0};
    int rc;

    bc.list->n = 0;
    cpu_hash_clear(bc.seen);
    for (uint32_t py = (uint32_t)b; py < (uint32_t)e; py++) {
        /* tsdf_pixel_ray_world's dir, row r: (T[4r] x + T[4r+1] y) + T[4r+2] * 1
         * with x, y the camera ray's; T * 1 is T exactly, and the x terms are
         * per column, so only the y terms are per row. */
        float ry = ((float)py - f->K.cy) / f->K.fy, rows[3];
        for (int r = 0; r < 3; r++)
            rows[r] = T[4 * r + 1] * ry;
        row_band_ends(j, py, rows, ends, blocks);
        for (uint32_t px = 0; px < f->width; px++) {
            const size_t w = f->width;
            /* tsdf_band_walk_init would return 0. */
            if (blocks[px] == TSDF_NO_BLOCK)
                continue;
            const int32_t bk[6] = {blocks[px],         blocks[w + px],     blocks[2 * w + px],
                                   blocks[3 * w + px], blocks[4 * w + px], blocks[5 * w + px]};
            /* A line walk (end blocks differing on one axis at most) is
             * its end blocks' line; the same as the band's last one, it
             * yields blocks the band has. Neighbouring pixels mostly
             * repeat it. */
            if (((bk[0] ^ line[0]) | (bk[1] ^ line[1]) | (bk[2] ^ line[2]) | (bk[3] ^ line[3]) |
                 (bk[4] ^ line[4]) | (bk[5] ^ line[5])) == 0)
                continue;
            /* A line walk from the end blocks alone, as tsdf_band_walk
             * yields it (TSDF_WALK_LINE: from A's block along the one axis
             * that differs, if any, to B's), without recomputing the
             * blocks from the ends: over half of a frame's pixels. */
            const int dx = bk[3] != bk[0], dy = bk[4] != bk[1], dz = bk[5] != bk[2];
            if (dx + dy + dz <= 1) {
                const int axis = dx ? 0 : (dy ? 1 : 2);
                const int32_t to = bk[3 + axis], step = to > bk[axis] ? 1 : -1;
                int32_t blk[3] = {bk[0], bk[1], bk[2]};
                memcpy(line, bk, sizeof(line));
                for (;;) {
                    if ((rc = band_collect(&bc, blk)) != TSDF_OK)
                        return rc;
                    if (blk[axis] == to)
                        break;
                    blk[axis] += step;
                }
                continue;
            }
            const float A[3] = {ends[px], ends[w + px], ends[2 * w + px]};
            const float B[3] = {ends[3 * w + px], ends[4 * w + px], ends[5 * w + px]};
            int32_t blk[3];
            tsdf_band_walk walk;
            if (!tsdf_band_walk_init(&walk, A, B))
                continue;
            if (walk.mode == TSDF_WALK_DDA) {
                tsdf_block_dda dda;
                if (!tsdf_block_dda_init_units(&dda, A, B))
                    continue;
                while (tsdf_block_dda_next(&dda, blk))
                    if ((rc = band_collect(&bc, blk)) != TSDF_OK)
                        return rc;
                continue;
            }
            /* Two or three axes differ, by one block each
             * (TSDF_WALK_STEPS): A's block, then one step along each in
             * the walk's order, as tsdf_band_walk_next yields them. */
            const int32_t step[3] = {walk.sx, walk.sy, walk.sz},
                          order[3] = {walk.o0, walk.o1, walk.o2};
            blk[0] = walk.cx;
            blk[1] = walk.cy;
            blk[2] = walk.cz;
            for (int32_t k = 0;; k++) {
                if ((rc = band_collect(&bc, blk)) != TSDF_OK)
                    return rc;
                if (k + 1 >= walk.remaining)
                    break;
                blk[order[k]] += step[order[k]];
            }
        }
    }
    return TSDF_OK;
}

/* Pass 1: the set of blocks this frame needs, deduplicated, in first-seen
 * order, into frame_keys[0 .. frame_count). */
static int collect_frame_blocks(cpu_volume *v, frame_job *j)
{
    const tsdf_frame *f = j->f;
    cpu_frame_scratch *s = &v->scratch;
    int rc;

    if ((rc = scratch_reserve(v, f->width, f->height)) != TSDF_OK)
        return rc;
    for (uint32_t px = 0; px < f->width; px++) {
        float rx = ((float)px - f->K.cx) / f->K.fx;
        for (int r = 0; r < 3; r++)
            s->ray_cols[r * s->cols_cap + px] = f->T_world_cam[4 * r] * rx;
    }
    if ((rc = cpu_pool_run(v->pool, f->height, PREPARE_ROWS, sample_rows, j)) != TSDF_OK ||
        (rc = cpu_pool_run(v->pool, f->height, PREPARE_ROWS, usable_rows, j)) != TSDF_OK ||
        (rc = cpu_pool_run(v->pool, f->height, COLLECT_ROWS, collect_band, j)) != TSDF_OK)
        return rc;

    /* The merge: first-seen order over the bands in row order is the
     * first-seen order of the whole image. */
    v->frame_count = 0;
    cpu_hash_clear(&v->frame_set);
    size_t nbands = (f->height + COLLECT_ROWS - 1) / COLLECT_ROWS;
    for (size_t bi = 0; bi < nbands; bi++) {
        const cpu_key_list *list = &s->bands[bi];
        for (size_t k = 0; k < list->n; k++) {
            int inserted;
            if ((rc = cpu_hash_insert(&v->frame_set, list->keys[k], 0, NULL, &inserted)) != TSDF_OK)
                return rc;
            if (!inserted)
                continue;
            if ((rc = frame_blocks_reserve(v, v->frame_count + 1)) != TSDF_OK)
                return rc;
            v->frame_keys[v->frame_count++] = list->keys[k];
        }
    }
    return TSDF_OK;
}

static int find_blocks(void *arg, size_t b, size_t e, unsigned worker)
{
    cpu_volume *v = arg;
    (void)worker;
    for (size_t i = b; i < e; i++) {
        uint32_t idx;
        v->frame_blocks[i] =
            cpu_hash_lookup(&v->store.table, v->frame_keys[i], &idx) ? (int64_t)idx : -1;
    }
    return TSDF_OK;
}

/* Pass 1b: makes sure every needed block exists, checking the memory cap
 * before changing anything; afterwards frame_blocks[i] is the pool index
 * of frame_keys[i]. New blocks carry `version`. */
static int allocate_frame_blocks(cpu_volume *v, int with_rgb, uint64_t version)
{
    uint64_t missing = 0;
    int rc;

    if ((rc = cpu_pool_run(v->pool, v->frame_count, 256, find_blocks, v)) != TSDF_OK)
        return rc;
    for (size_t i = 0; i < v->frame_count; i++)
        missing += v->frame_blocks[i] < 0;
    v->peak_missing = tsdf_peak_update(v->peak_missing, missing);
    if (missing == 0 && !(with_rgb && v->store.rgb == NULL))
        return TSDF_OK;
    rc = cpu_store_reserve(&v->store, missing, with_rgb, v->params.memory_cap_bytes,
                           2 * v->peak_missing);
    if (rc == TSDF_ECAPACITY)
        v->insert_failures += missing;
    if (rc != TSDF_OK)
        return rc;
    for (size_t i = 0; i < v->frame_count; i++) {
        if (v->frame_blocks[i] >= 0)
            continue;
        /* Room is reserved, so this fails only on a broken invariant,
         * which it reports. */
        int64_t idx = cpu_store_add(&v->store, v->frame_keys[i], version);
        if (idx < 0)
            return (int)idx;
        v->frame_blocks[i] = idx;
    }
    return TSDF_OK;
}

#ifdef __SSE4_1__
/* The per-voxel half of update_block for one slice of 64 voxels of an
 * s16 block, four voxels at a time, the same bits as the scalar loop
 * (tsdf_voxel_sample_uv, then tsdf_integrate_sample): every test keeps
 * the scalar's sense for NaN (cmpnle / cmpnlt for the negated ones),
 * floorps / roundps / divps round as floorf / rintf / divss do, and
 * nothing is fused. The four voxels are contiguous, so they are loaded
 * and stored as one 16-byte word; a voxel without a sample is stored
 * back unchanged. With colour (rgb: the block's channel, src: the
 * frame's) each sampled voxel's colour is blended by tsdf_rgb_update
 * with its weight before the update, as tsdf_integrate_loaded does.
 * Returns 1 when one changed. */
static int slice_update_s16(void *geom, uint8_t *rgb, const uint8_t *src, size_t first,
                            const float *pz, const float *uf, const float *vf, uint32_t w,
                            uint32_t h, const float *usable, float trunc_m, float max_weight,
                            tsdf_quant q)
{
    const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f);
    const __m128 wf = _mm_set1_ps((float)w), hf = _mm_set1_ps((float)h);
    const __m128i wi = _mm_set1_epi32((int32_t)w), hi = _mm_set1_epi32((int32_t)h);
    const __m128 trunc = _mm_set1_ps(trunc_m), ntrunc = _mm_set1_ps(-trunc_m);
    const __m128 maxw = _mm_set1_ps(max_weight), unit = _mm_set1_ps(q.unit_m);
    const __m128 inv_unit = _mm_set1_ps(q.inv_unit);
    const __m128 slim = _mm_set1_ps((float)TSDF_S16_MAX), nslim = _mm_set1_ps(-(float)TSDF_S16_MAX);
    __m128i *vox = (__m128i *)((tsdf_geom_s16 *)geom + first);
    int changed = 0;
    for (int xy = 0; xy < TSDF_BLOCK_DIM * TSDF_BLOCK_DIM; xy += 4) {
        const __m128 z = _mm_loadu_ps(pz + xy), u = _mm_loadu_ps(uf + xy),
                     v = _mm_loadu_ps(vf + xy);
        /* tsdf_project_check */
        __m128 ok = _mm_and_ps(_mm_cmpgt_ps(z, zero),
                               _mm_and_ps(_mm_and_ps(_mm_cmpge_ps(u, zero), _mm_cmplt_ps(u, wf)),
                                          _mm_and_ps(_mm_cmpge_ps(v, zero), _mm_cmplt_ps(v, hf))));
        if (_mm_movemask_ps(ok) == 0)
            continue;
        const __m128i ui = _mm_cvttps_epi32(_mm_floor_ps(u)),
                      vi = _mm_cvttps_epi32(_mm_floor_ps(v));
        /* The indices of the lanes that passed are in [0, 2^31). */
        ok = _mm_and_ps(
            ok, _mm_castsi128_ps(_mm_and_si128(_mm_cmplt_epi32(ui, wi), _mm_cmplt_epi32(vi, hi))));
        int m = _mm_movemask_ps(ok);
        if (m == 0)
            continue;
        uint32_t idx[4];
        _mm_storeu_si128((__m128i *)idx, _mm_and_si128(_mm_add_epi32(_mm_mullo_epi32(vi, wi), ui),
                                                       _mm_castps_si128(ok)));
        /* tsdf_projective_sdf */
        const __m128 d =
            _mm_setr_ps(usable[idx[0]], usable[idx[1]], usable[idx[2]], usable[idx[3]]);
        const __m128 sd = _mm_sub_ps(d, z);
        ok = _mm_and_ps(ok, _mm_and_ps(_mm_cmpnle_ps(d, zero), _mm_cmpnlt_ps(sd, ntrunc)));
        m = _mm_movemask_ps(ok);
        if (m == 0)
            continue;
        const __m128 sample = _mm_blendv_ps(sd, trunc, _mm_cmpgt_ps(sd, trunc));
        /* tsdf_vox_load, tsdf_vox_update, tsdf_vox_store */
        const __m128i old = _mm_loadu_si128(&vox[xy / 4]);
        const __m128 o_sdf =
            _mm_mul_ps(_mm_cvtepi32_ps(_mm_srai_epi32(_mm_slli_epi32(old, 16), 16)), unit);
        const __m128 o_w = _mm_cvtepi32_ps(_mm_srli_epi32(old, 16));
        if (rgb != NULL) {
            float wo[4];
            _mm_storeu_ps(wo, o_w);
            for (int l = 0; l < 4; l++)
                if (m & (1 << l))
                    tsdf_rgb_update(rgb + TSDF_RGB_BYTES * (first + (size_t)xy + (size_t)l), wo[l],
                                    src + 3u * idx[l]);
        }
        const __m128 w1 = _mm_add_ps(o_w, one);
        const __m128 n_sdf = _mm_div_ps(_mm_add_ps(_mm_mul_ps(o_sdf, o_w), sample), w1);
        const __m128 n_w = _mm_blendv_ps(maxw, w1, _mm_cmplt_ps(w1, maxw));
        /* tsdf_layout_round_clamp: NaN and below -lim fail r >= -lim and
         * become 0 or -lim; above lim becomes lim. */
        __m128 rs = _mm_round_ps(_mm_mul_ps(n_sdf, inv_unit), _MM_FROUND_TO_NEAREST_INT);
        rs = _mm_blendv_ps(_mm_and_ps(_mm_cmplt_ps(rs, zero), nslim), rs, _mm_cmpge_ps(rs, nslim));
        rs = _mm_blendv_ps(rs, slim, _mm_cmpgt_ps(rs, slim));
        /* The weight needs no rounding or clamp: a stored weight is an
         * integer in [0, max_weight] (import checks it) and an s16
         * volume's max_weight an integer in [1, 65535] (volume.c), so n_w
         * is an integer in [1, max_weight], which tsdf_vox_store's
         * round, clamp and "> 0" leave as it is. */
        const __m128i word =
            _mm_or_si128(_mm_and_si128(_mm_cvtps_epi32(rs), _mm_set1_epi32(0xffff)),
                         _mm_slli_epi32(_mm_cvtps_epi32(n_w), 16));
        _mm_storeu_si128(&vox[xy / 4], _mm_blendv_epi8(old, word, _mm_castps_si128(ok)));
        changed = 1;
    }
    return changed;
}
#endif

/* Every voxel of block b (pool index idx); 1 when one changed. Inlined
 * into callers with a constant layout and colour flag, so that the
 * layout's switch and the colour test leave the voxel loop, as they do in
 * the CUDA kernels' templates. */
static inline int update_block(const frame_job *j, const int32_t b[3], uint32_t idx,
                               tsdf_layout layout, int color)
{
    const cpu_volume *v = j->v;
    const cpu_store *st = &v->store;
    const tsdf_frame *f = j->f;
    const float *usable = v->scratch.usable_m;
    void *geom = cpu_store_geom(st, idx);
    uint8_t *rgb = color ? cpu_store_rgb(st, idx) : NULL;
    tsdf_block_cam bc;
    int changed = 0;

    tsdf_block_cam_init(&bc, b, v->params.voxel_size_m, j->T_cam_world);
    for (int z = 0; z < TSDF_BLOCK_DIM; z++) {
        /* A slice's camera points and pixel coordinates first, in a loop
         * without branches that the compiler turns into vector code; then
         * the checks and the updates, voxel by voxel. */
        float pz[TSDF_BLOCK_DIM * TSDF_BLOCK_DIM], uf[TSDF_BLOCK_DIM * TSDF_BLOCK_DIM],
            vf[TSDF_BLOCK_DIM * TSDF_BLOCK_DIM];
        for (int xy = 0; xy < TSDF_BLOCK_DIM * TSDF_BLOCK_DIM; xy++) {
            float pc[3];
            for (int r = 0; r < 3; r++)
                pc[r] = (bc.xy[r][xy] + bc.z[r][z]) + bc.t[r];
            tsdf_project_uv(&f->K, pc, &uf[xy], &vf[xy]);
            pz[xy] = pc[2];
        }
#ifdef __SSE4_1__
        if (layout == TSDF_LAYOUT_S16) {
            changed |= slice_update_s16(geom, color ? rgb : NULL, color ? f->rgb : NULL,
                                        (size_t)(64 * z), pz, uf, vf, f->width, f->height, usable,
                                        v->trunc_m, v->params.max_weight, st->quant);
            continue;
        }
#endif
        for (int xy = 0; xy < TSDF_BLOCK_DIM * TSDF_BLOCK_DIM; xy++) {
            float sdf;
            uint32_t pixel;
            if (!tsdf_voxel_sample_uv(pz[xy], uf[xy], vf[xy], f->width, f->height, usable,
                                      v->trunc_m, &sdf, &pixel))
                continue;
            tsdf_integrate_sample(layout, geom, rgb, (size_t)(xy + 64 * z), sdf, pixel, f,
                                  v->params.max_weight, st->quant);
            changed = 1;
        }
    }
    return changed;
}

/* Job 3: blocks [b, e) of frame_keys. */
static int update_blocks(void *arg, size_t b, size_t e, unsigned worker)
{
    const frame_job *j = arg;
    const cpu_volume *v = j->v;
    const cpu_store *st = &v->store;
    const int color = j->f->rgb != NULL && st->rgb != NULL;
    (void)worker;
    for (size_t i = b; i < e; i++) {
        uint32_t idx = (uint32_t)v->frame_blocks[i];
        int32_t blk[3];
        int changed;
        tsdf_block_key_unpack(v->frame_keys[i], &blk[0], &blk[1], &blk[2]);
        if (st->layout == TSDF_LAYOUT_S16)
            changed = color ? update_block(j, blk, idx, TSDF_LAYOUT_S16, 1)
                            : update_block(j, blk, idx, TSDF_LAYOUT_S16, 0);
        else
            changed = color ? update_block(j, blk, idx, TSDF_LAYOUT_F32, 1)
                            : update_block(j, blk, idx, TSDF_LAYOUT_F32, 0);
        if (changed)
            st->versions[idx] = v->version;
    }
    return TSDF_OK;
}

int cpu_integrate(void *impl, const tsdf_frame *f)
{
    cpu_volume *v = impl;
    double t0 = cpu_now_ms(), t1;
    frame_job j;
    int rc;

    j.v = v;
    j.f = f;
    tsdf_rigid_inverse(f->T_world_cam, j.T_cam_world);
    if ((rc = collect_frame_blocks(v, &j)) != TSDF_OK ||
        (rc = allocate_frame_blocks(v, f->rgb != NULL, v->version + 1)) != TSDF_OK) {
        v->frames_rejected++;
        return rc;
    }
    t1 = cpu_now_ms();
    v->version++;
    /* Cannot fail: the update allocates nothing. */
    (void)cpu_pool_run(v->pool, v->frame_count, UPDATE_BLOCKS, update_blocks, &j);
    v->frames_integrated++;
    v->last_upload_ms = 0.0;
    v->last_alloc_ms = t1 - t0;
    v->last_update_ms = cpu_now_ms() - t1;
    return TSDF_OK;
}

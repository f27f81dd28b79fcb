/*
 * test_depth_codec.c - the lossless depth encodings (proto/tsdf_depth_codec.h):
 * every encoding round-trips every kind of image exactly, and every kind of
 * malformed payload (truncated, trailing bytes, another size, another PNG
 * format, garbage, a zstd bomb, a PNG claiming huge dimensions, a PNG
 * whose image data inflates far beyond the frame, broken RVL runs) is
 * refused with TSDF_EDEPTH_DECODE without crashing; an interlaced PNG
 * decodes as a plain one.
 */
#include "testutil.h"

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#include <zstd.h>

#include "tsdf_depth_codec.h"

/* xorshift: reproducible "random" samples and garbage. */
static uint32_t rng_state = 2463534242u;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static size_t bps(tsdf_depth_format f)
{
    return f == TSDF_DEPTH_U16 ? 2u : 4u;
}

/* Sample patterns: what depth cameras produce, and the corners. */
enum { PAT_ZERO, PAT_MAX, PAT_RANDOM, PAT_DEPTHLIKE, PAT_COUNT };

static void fill(void *buf, tsdf_depth_format f, uint32_t w, uint32_t h, int pat)
{
    size_t px = (size_t)w * h;
    for (size_t i = 0; i < px; i++) {
        uint32_t x = (uint32_t)(i % w), y = (uint32_t)(i / w);
        if (f == TSDF_DEPTH_U16) {
            uint16_t v = 0;
            if (pat == PAT_MAX)
                v = 0xffff;
            else if (pat == PAT_RANDOM)
                v = (uint16_t)rnd();
            else if (pat == PAT_DEPTHLIKE) /* a slanted wall with holes */
                v = (x * 7 + y * 3) % 23 == 0 ? 0 : (uint16_t)(800 + 3 * x + 2 * y + (rnd() & 3));
            memcpy((uint8_t *)buf + i * 2, &v, 2);
        } else {
            uint32_t bits = 0;
            if (pat == PAT_MAX)
                bits = i % 3 == 0 ? 0x7f7fffffu : i % 3 == 1 ? 0x7fc00001u : 0xff800000u;
            else if (pat == PAT_RANDOM)
                bits = rnd();
            else if (pat == PAT_DEPTHLIKE) {
                float v = (x + y) % 17 == 0 ? NAN : 0.8f + 0.003f * (float)x + 0.002f * (float)y;
                memcpy(&bits, &v, 4);
            }
            memcpy((uint8_t *)buf + i * 4, &bits, 4);
        }
    }
}

/* Encodes and decodes, and checks the samples come back bit for bit. */
static void roundtrip(tsdf_depth_encoding e, int level, tsdf_depth_format f, uint32_t w, uint32_t h,
                      int pat)
{
    size_t bytes = (size_t)w * h * bps(f);
    uint8_t *in = malloc(bytes), *outp = malloc(bytes);
    assert_non_null(in);
    assert_non_null(outp);
    fill(in, f, w, h, pat);
    tsdf_buf b;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_buf_append(&b, "xy", 2), TSDF_OK); /* appends after what is there */
    int rc = tsdf_depth_encode(e, level, f, w, h, in, &b);
    if (rc != TSDF_OK)
        fail_msg("encode %s %ux%u pattern %d: %s", tsdf_depth_encoding_name(e), w, h, pat,
                 tsdf_strerror(rc));
    assert_memory_equal(b.data, "xy", 2);
    memset(outp, 0xa5, bytes);
    tsdf_proto_error err;
    rc = tsdf_depth_decode(e, f, w, h, b.data + 2, b.len - 2, outp, bytes, &err);
    if (rc != TSDF_OK)
        fail_msg("decode %s %ux%u pattern %d: %s (%s)", tsdf_depth_encoding_name(e), w, h, pat,
                 tsdf_strerror(rc), err.message);
    assert_memory_equal(in, outp, bytes);
    tsdf_buf_fini(&b);
    free(in);
    free(outp);
}

static void test_roundtrip_every_encoding(void **state)
{
    (void)state;
    static const uint32_t sizes[][2] = {{1, 1}, {3, 5}, {17, 9}, {1, 301}, {640, 480}};
    for (int e = 0; e < TSDF_DEPTH_ENC_COUNT; e++) {
        for (int f = TSDF_DEPTH_U16; f <= TSDF_DEPTH_F32; f++) {
            if (!tsdf_depth_encoding_allows((tsdf_depth_encoding)e, (tsdf_depth_format)f))
                continue;
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int pat = 0; pat < PAT_COUNT; pat++)
                    roundtrip((tsdf_depth_encoding)e, 0, (tsdf_depth_format)f, sizes[s][0],
                              sizes[s][1], pat);
        }
    }
    /* Levels, including out-of-range ones (clamped). */
    for (int level = -3; level <= 25; level += 7) {
        roundtrip(TSDF_DEPTH_ENC_PNG, level, TSDF_DEPTH_U16, 64, 48, PAT_DEPTHLIKE);
        roundtrip(TSDF_DEPTH_ENC_ZSTD, level, TSDF_DEPTH_F32, 64, 48, PAT_DEPTHLIKE);
    }
}

static void test_names_and_arguments(void **state)
{
    (void)state;
    tsdf_depth_encoding e;
    for (int i = 0; i < TSDF_DEPTH_ENC_COUNT; i++) {
        const char *n = tsdf_depth_encoding_name((tsdf_depth_encoding)i);
        assert_int_equal(tsdf_depth_encoding_parse(n, strlen(n), &e), TSDF_OK);
        assert_int_equal((int)e, i);
    }
    assert_string_equal(tsdf_depth_encoding_name(TSDF_DEPTH_ENC_ZSTD), "zstd");
    assert_string_equal(tsdf_depth_encoding_name((tsdf_depth_encoding)99), "unknown");
    assert_int_equal(tsdf_depth_encoding_parse("lz4", 3, &e), TSDF_EPROTO_KEY);
    assert_int_equal(tsdf_depth_encoding_parse("pngx", 3, &e), TSDF_OK); /* len counts */
    assert_int_equal(tsdf_depth_encoding_parse("PNG", 3, &e), TSDF_EPROTO_KEY);
    assert_false(tsdf_depth_encoding_allows(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_F32));
    assert_false(tsdf_depth_encoding_allows(TSDF_DEPTH_ENC_RVL, TSDF_DEPTH_F32));
    assert_true(tsdf_depth_encoding_allows(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_F32));

    uint16_t px[12] = {0};
    tsdf_buf b;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_depth_encode(TSDF_DEPTH_ENC_PNG, 0, TSDF_DEPTH_F32, 2, 3, px, &b),
                     TSDF_EINVAL);
    assert_int_equal(tsdf_depth_encode(TSDF_DEPTH_ENC_ZSTD, 0, TSDF_DEPTH_U16, 0, 3, px, &b),
                     TSDF_EEMPTY_IMAGE);
    assert_int_equal(tsdf_depth_encode(TSDF_DEPTH_ENC_ZSTD, 0, TSDF_DEPTH_U16, 9000, 1, px, &b),
                     TSDF_ETOO_LARGE);
    assert_int_equal(tsdf_depth_encode((tsdf_depth_encoding)7, 0, TSDF_DEPTH_U16, 2, 3, px, &b),
                     TSDF_EINVAL);
    assert_int_equal(tsdf_depth_encode(TSDF_DEPTH_ENC_RVL, 0, TSDF_DEPTH_U16, 2, 3, NULL, &b),
                     TSDF_EINVAL);
    assert_int_equal(b.len, 0);
    /* An output limit is honoured, and leaves the buffer as it was. */
    b.max_len = 10;
    fill(px, TSDF_DEPTH_U16, 4, 3, PAT_RANDOM);
    for (int i = 1; i < TSDF_DEPTH_ENC_COUNT; i++)
        assert_int_equal(tsdf_depth_encode((tsdf_depth_encoding)i, 0, TSDF_DEPTH_U16, 4, 3, px, &b),
                         TSDF_ETOO_LARGE);
    assert_int_equal(b.len, 0);
    tsdf_buf_fini(&b);

    uint8_t dst[24];
    assert_int_equal(
        tsdf_depth_decode(TSDF_DEPTH_ENC_RAW, TSDF_DEPTH_U16, 2, 3, px, 12, dst, 12, NULL),
        TSDF_OK);
    assert_int_equal(
        tsdf_depth_decode(TSDF_DEPTH_ENC_RAW, TSDF_DEPTH_U16, 2, 3, px, 11, dst, 12, NULL),
        TSDF_EBAD_SIZE);
    /* The caller's buffer must be exactly the image. */
    assert_int_equal(
        tsdf_depth_decode(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 2, 3, px, 12, dst, 24, NULL),
        TSDF_EBAD_SIZE);
    assert_int_equal(
        tsdf_depth_decode(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_F32, 2, 3, px, 12, dst, 24, NULL),
        TSDF_EINVAL);
    assert_int_equal(
        tsdf_depth_decode(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 2, 3, NULL, 0, dst, 12, NULL),
        TSDF_EINVAL);
}

/* An encoded w x h image of pattern pat in *b (initialised here). */
static void encoded(tsdf_depth_encoding e, tsdf_depth_format f, uint32_t w, uint32_t h, int pat,
                    tsdf_buf *b)
{
    void *in = malloc((size_t)w * h * bps(f));
    assert_non_null(in);
    fill(in, f, w, h, pat);
    tsdf_buf_init(b);
    assert_int_equal(tsdf_depth_encode(e, 0, f, w, h, in, b), TSDF_OK);
    free(in);
}

static int decode_as(tsdf_depth_encoding e, tsdf_depth_format f, uint32_t w, uint32_t h,
                     const void *src, size_t n, tsdf_proto_error *err)
{
    size_t bytes = (size_t)w * h * bps(f);
    void *dst = malloc(bytes);
    assert_non_null(dst);
    int rc = tsdf_depth_decode(e, f, w, h, src, n, dst, bytes, err);
    free(dst);
    return rc;
}

static void expect_refused(tsdf_depth_encoding e, tsdf_depth_format f, uint32_t w, uint32_t h,
                           const void *src, size_t n, const char *what)
{
    tsdf_proto_error err;
    int rc = decode_as(e, f, w, h, src, n, &err);
    if (rc != TSDF_EDEPTH_DECODE)
        fail_msg("%s (%s, %zu bytes): %s, not DEPTH_DECODE", what, tsdf_depth_encoding_name(e), n,
                 tsdf_errname(rc));
    assert_string_equal(err.key, "depth");
    assert_true(strlen(err.message) > 0);
}

static void test_truncated_trailing_and_resized(void **state)
{
    (void)state;
    for (int e = TSDF_DEPTH_ENC_PNG; e < TSDF_DEPTH_ENC_COUNT; e++) {
        tsdf_buf b;
        encoded((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 13, 7, PAT_DEPTHLIKE, &b);
        /* Every prefix. */
        for (size_t n = 0; n < b.len; n++)
            expect_refused((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 13, 7, b.data, n, "a prefix");
        /* One byte more (a zero: RVL padding alone is not enough either). */
        uint8_t *more = calloc(b.len + 4, 1);
        memcpy(more, b.data, b.len);
        expect_refused((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 13, 7, more, b.len + 1,
                       "a trailing byte");
        expect_refused((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 13, 7, more, b.len + 4,
                       "a trailing word");
        free(more);
        /* Another number of samples; png also checks the shape itself. */
        expect_refused((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 13, 8, b.data, b.len, "13x8");
        expect_refused((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 12, 7, b.data, b.len, "12x7");
        if (e == TSDF_DEPTH_ENC_PNG)
            expect_refused((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 7, 13, b.data, b.len, "7x13");
        tsdf_buf_fini(&b);
    }
    /* zstd of f32 read as u16 of the same pixels: twice the bytes. */
    tsdf_buf b;
    encoded(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_F32, 13, 7, PAT_RANDOM, &b);
    expect_refused(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 13, 7, b.data, b.len, "f32 as u16");
    assert_int_equal(decode_as(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 26, 7, b.data, b.len, NULL),
                     TSDF_OK);
    tsdf_buf_fini(&b);
}

/* Garbage, and every single-byte change of valid payloads: refused or
 * decoded, never a crash (the sanitizer build makes "never" strict). */
static void test_garbage_and_mutations(void **state)
{
    (void)state;
    uint8_t junk[4096];
    for (int round = 0; round < 200; round++) {
        size_t n = 1 + rnd() % sizeof junk;
        for (size_t i = 0; i < n; i++)
            junk[i] = (uint8_t)rnd();
        /* Give some rounds a valid signature or magic, so the decoders get
         * past their first check. */
        if (round % 4 == 1 && n >= 8)
            memcpy(junk, "\x89PNG\r\n\x1a\n", 8);
        if (round % 4 == 2 && n >= 4)
            memcpy(junk, "\x28\xb5\x2f\xfd", 4);
        for (int e = TSDF_DEPTH_ENC_PNG; e < TSDF_DEPTH_ENC_COUNT; e++)
            expect_refused((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 64, 48, junk, n, "garbage");
    }
    for (int e = TSDF_DEPTH_ENC_PNG; e < TSDF_DEPTH_ENC_COUNT; e++) {
        tsdf_buf b;
        encoded((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 16, 8, PAT_DEPTHLIKE, &b);
        for (size_t i = 0; i < b.len; i++) {
            for (int bit = 0; bit < 8; bit += 3) {
                b.data[i] ^= (uint8_t)(1u << bit);
                int rc =
                    decode_as((tsdf_depth_encoding)e, TSDF_DEPTH_U16, 16, 8, b.data, b.len, NULL);
                assert_true(rc == TSDF_OK || rc == TSDF_EDEPTH_DECODE);
                b.data[i] ^= (uint8_t)(1u << bit);
            }
        }
        tsdf_buf_fini(&b);
    }
}

/* zstd frames that lie about their size, or tell none. */
static void test_zstd_bombs(void **state)
{
    (void)state;
    /* A real bomb: 32 MiB of zeros in a few hundred bytes. */
    size_t big = 32u << 20;
    void *zeros = calloc(big, 1);
    size_t cap = ZSTD_compressBound(big);
    uint8_t *z = malloc(cap);
    assert_non_null(zeros);
    assert_non_null(z);
    size_t zn = ZSTD_compress(z, cap, zeros, big, 3);
    assert_false(ZSTD_isError(zn));
    assert_true(zn < 4096);
    expect_refused(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 640, 480, z, zn, "a 32 MiB zstd frame");
    free(zeros);

    /* A hand-made frame header claiming 2^62 bytes (single segment, 8-byte
     * content size), then one empty last raw block. */
    uint8_t liar[] = {0x28, 0xb5, 0x2f, 0xfd, 0xe0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x01, 0x00, 0x00};
    expect_refused(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 640, 480, liar, sizeof liar,
                   "a 2^62-byte claim");

    /* Frames without a content size: larger and smaller than the image. */
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    assert_non_null(cc);
    assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0)));
    uint8_t src[4096];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 7);
    for (size_t n = 2046; n <= 2050; n += 2) {
        ZSTD_outBuffer ob = {z, cap, 0};
        ZSTD_inBuffer ib = {src, n, 0};
        size_t left = ZSTD_compressStream2(cc, &ob, &ib, ZSTD_e_end);
        assert_int_equal(left, 0);
        assert_true(ZSTD_getFrameContentSize(z, ob.pos) == ZSTD_CONTENTSIZE_UNKNOWN);
        /* 32 x 32 u16 = 2048 bytes */
        int rc = decode_as(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 32, 32, z, ob.pos, NULL);
        assert_int_equal(rc, n == 2048 ? TSDF_OK : TSDF_EDEPTH_DECODE);
    }
    ZSTD_freeCCtx(cc);
    /* Two frames back to back: one frame only. */
    tsdf_buf b;
    encoded(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 4, 4, PAT_RANDOM, &b);
    size_t one = b.len;
    assert_int_equal(tsdf_buf_append(&b, b.data, one), TSDF_OK);
    expect_refused(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 4, 4, b.data, b.len, "two frames");
    expect_refused(TSDF_DEPTH_ENC_ZSTD, TSDF_DEPTH_U16, 4, 8, b.data, b.len, "two frames as one");
    tsdf_buf_fini(&b);
    free(z);
}

/* ---- png of other formats ----------------------------------------------- */

static void png_write_buf(png_structp png, png_bytep data, size_t len)
{
    assert_int_equal(tsdf_buf_append(png_get_io_ptr(png), data, len), TSDF_OK);
}

static void png_no_flush(png_structp png)
{
    (void)png;
}

/* A w x h PNG of the given bit depth, colour type and interlace into *b. */
static void make_png(uint32_t w, uint32_t h, int depth, int color, int interlace,
                     const uint16_t *gray16, tsdf_buf *b)
{
    tsdf_buf_init(b);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_non_null(info);
    if (setjmp(png_jmpbuf(png)))
        fail_msg("libpng failed to write the test image");
    png_set_write_fn(png, b, png_write_buf, png_no_flush);
    png_set_IHDR(png, info, w, h, depth, color, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (color == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[2] = {{0, 0, 0}, {255, 255, 255}};
        png_set_PLTE(png, info, pal, 2);
    }
    png_write_info(png, info);
    if (depth == 16)
        png_set_swap(png);
    int channels = color == PNG_COLOR_TYPE_RGB          ? 3
                   : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                   : color == PNG_COLOR_TYPE_RGB_ALPHA  ? 4
                                                        : 1;
    size_t row_bytes = (size_t)w * channels * (depth == 16 ? 2 : 1);
    uint8_t *rows = calloc(h, row_bytes);
    assert_non_null(rows);
    if (gray16 != NULL)
        memcpy(rows, gray16, (size_t)w * h * 2);
    png_bytep *rp = malloc(h * sizeof *rp);
    for (uint32_t y = 0; y < h; y++)
        rp[y] = rows + y * row_bytes;
    png_write_image(png, rp);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rp);
    free(rows);
}

static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

static void put32be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void test_png_formats(void **state)
{
    (void)state;
    uint16_t px[40 * 30];
    fill(px, TSDF_DEPTH_U16, 40, 30, PAT_DEPTHLIKE);
    tsdf_buf b;
    /* Interlaced 16-bit gray is still 16-bit gray: decoded. */
    make_png(40, 30, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_ADAM7, px, &b);
    uint16_t got[40 * 30];
    assert_int_equal(tsdf_depth_decode(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_U16, 40, 30, b.data, b.len,
                                       got, sizeof got, NULL),
                     TSDF_OK);
    assert_memory_equal(got, px, sizeof px);
    tsdf_buf_fini(&b);

    static const int formats[][2] = {
        {8, PNG_COLOR_TYPE_GRAY},    {16, PNG_COLOR_TYPE_RGB}, {16, PNG_COLOR_TYPE_GRAY_ALPHA},
        {8, PNG_COLOR_TYPE_PALETTE}, {1, PNG_COLOR_TYPE_GRAY}, {16, PNG_COLOR_TYPE_RGB_ALPHA},
    };
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        make_png(40, 30, formats[i][0], formats[i][1], PNG_INTERLACE_NONE, NULL, &b);
        expect_refused(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_U16, 40, 30, b.data, b.len, "other format");
        tsdf_buf_fini(&b);
    }

    /* A header claiming 100000 x 100000 (and 640x480 with no image data):
     * refused from the header, nothing allocated for it. */
    static const uint32_t dims[][2] = {{100000, 100000}, {640, 480}, {0, 0}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        uint8_t f[8 + 25 + 12];
        memcpy(f, "\x89PNG\r\n\x1a\n", 8);
        put32be(f + 8, 13);
        memcpy(f + 12, "IHDR", 4);
        put32be(f + 16, dims[i][0]);
        put32be(f + 20, dims[i][1]);
        f[24] = 16; /* bit depth */
        f[25] = 0;  /* gray */
        f[26] = f[27] = f[28] = 0;
        put32be(f + 29, crc32_png(f + 12, 17));
        put32be(f + 33, 0);
        memcpy(f + 37, "IEND", 4);
        put32be(f + 41, crc32_png(f + 37, 4));
        expect_refused(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_U16, 640, 480, f, sizeof f, "a bare header");
    }
}

/* ---- PNG bombs ------------------------------------------------------------ */

/* Appends a chunk of type and data to b, with its CRC. */
static void put_chunk(tsdf_buf *b, const char *type, const uint8_t *data, uint32_t len)
{
    assert_int_equal(tsdf_buf_reserve(b, 12u + len), TSDF_OK);
    uint8_t *p = b->data + b->len;
    put32be(p, len);
    memcpy(p + 4, type, 4);
    if (len != 0)
        memcpy(p + 8, data, len);
    put32be(p + 8 + len, crc32_png(p + 4, 4u + len));
    b->len += 12u + len;
}

/* A w x h 16-bit grayscale PNG, valid in every byte (CRCs, adler32), whose
 * one zlib stream holds the image's rows (all zero, filter 0) and then
 * `extra` bytes more of zeros: what libpng used to inflate whole to reach
 * IEND. */
static void png_bomb(uint32_t w, uint32_t h, uint64_t extra, tsdf_buf *out)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t ihdr[13] = {0};
    put32be(ihdr, w);
    put32be(ihdr + 4, h);
    ihdr[8] = 16; /* bit depth; colour type 0 (grey), no interlace */
    tsdf_buf_init(out);
    assert_int_equal(tsdf_buf_reserve(out, 8), TSDF_OK);
    memcpy(out->data, sig, 8);
    out->len = 8;
    put_chunk(out, "IHDR", ihdr, sizeof ihdr);

    const size_t piece = 1u << 20;
    uint8_t *zeros = calloc(piece, 1), *z = malloc(piece);
    assert_non_null(zeros);
    assert_non_null(z);
    z_stream s;
    memset(&s, 0, sizeof s);
    assert_int_equal(deflateInit(&s, 9), Z_OK);
    uint64_t left = (uint64_t)h * (1u + 2ull * w) + extra;
    tsdf_buf idat;
    tsdf_buf_init(&idat);
    int zr;
    do {
        size_t n = left < piece ? (size_t)left : piece;
        left -= n;
        s.next_in = zeros;
        s.avail_in = (uInt)n;
        do {
            s.next_out = z;
            s.avail_out = (uInt)piece;
            zr = deflate(&s, left == 0 ? Z_FINISH : Z_NO_FLUSH);
            size_t got = piece - s.avail_out;
            assert_int_equal(tsdf_buf_reserve(&idat, got), TSDF_OK);
            memcpy(idat.data + idat.len, z, got);
            idat.len += got;
        } while (s.avail_out == 0);
    } while (left > 0);
    assert_int_equal(zr, Z_STREAM_END);
    deflateEnd(&s);
    put_chunk(out, "IDAT", idat.data, (uint32_t)idat.len);
    put_chunk(out, "IEND", NULL, 0);
    tsdf_buf_fini(&idat);
    free(zeros);
    free(z);
}

static double cpu_ms(void)
{
    return (double)clock() * 1000.0 / CLOCKS_PER_SEC;
}

/* A PNG whose image data inflates to 1 GiB more than a 640 x 480 frame
 * needs: refused once it passes the frame's size, so its cost is the
 * frame's, not the sender's. Before, libpng inflated all of it (2.2 s of
 * CPU) to reach IEND, and the frame was taken. */
static void test_png_bombs(void **state)
{
    (void)state;
    tsdf_buf b;
    png_bomb(640, 480, 1ull << 30, &b);
    print_message("png bomb: %zu bytes inflating to 1 GiB past the frame\n", b.len);
    assert_true(b.len < (2u << 20));
    tsdf_proto_error err;
    double t0 = cpu_ms();
    int rc = decode_as(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_U16, 640, 480, b.data, b.len, &err);
    double ms = cpu_ms() - t0;
    print_message("png bomb: %s in %.1f ms of CPU: %s\n", tsdf_errname(rc), ms, err.message);
    assert_int_equal(rc, TSDF_EDEPTH_DECODE);
    assert_non_null(strstr(err.message, "goes on past the frame"));
    tsdf_buf_fini(&b);
    /* The smallest stream that is refused: a little more than the 2 KiB
     * of compressed data libpng may read past the rows. */
    png_bomb(640, 480, 64u << 20, &b);
    expect_refused(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_U16, 640, 480, b.data, b.len, "64 MiB more");
    tsdf_buf_fini(&b);
    /* A stream of exactly the frame decodes, and so does one with a few
     * bytes more, which libpng reads past with a warning as before. */
    for (uint64_t extra = 0; extra <= 64; extra += 64) {
        png_bomb(33, 7, extra, &b);
        assert_int_equal(decode_as(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_U16, 33, 7, b.data, b.len, NULL),
                         TSDF_OK);
        tsdf_buf_fini(&b);
    }
}

/* Adam7-interlaced images of sizes whose small passes are empty: their
 * streams are longer than a plain image's, and so is their bound. */
static void test_png_interlaced_sizes(void **state)
{
    (void)state;
    static const uint32_t sizes[][2] = {{1, 1}, {3, 2}, {13, 7}, {9, 17}, {640, 480}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const uint32_t w = sizes[k][0], h = sizes[k][1];
        uint16_t *px = malloc((size_t)w * h * 2), *got = malloc((size_t)w * h * 2);
        assert_non_null(px);
        assert_non_null(got);
        fill(px, TSDF_DEPTH_U16, w, h, PAT_RANDOM);
        tsdf_buf b;
        make_png(w, h, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_ADAM7, px, &b);
        assert_int_equal(tsdf_depth_decode(TSDF_DEPTH_ENC_PNG, TSDF_DEPTH_U16, w, h, b.data, b.len,
                                           got, (size_t)w * h * 2, NULL),
                         TSDF_OK);
        assert_memory_equal(got, px, (size_t)w * h * 2);
        tsdf_buf_fini(&b);
        free(px);
        free(got);
    }
}

/* RVL words written by hand: nibbles from the top of each LE word. */
static void test_rvl_runs(void **state)
{
    (void)state;
    uint16_t one[4] = {0};
    /* 4 zeros, 0 non-zeros: a valid all-zero 2x2 image. Nibbles 4, 0. */
    uint8_t ok[4] = {0, 0, 0, 0x40};
    assert_int_equal(
        tsdf_depth_decode(TSDF_DEPTH_ENC_RVL, TSDF_DEPTH_U16, 2, 2, ok, 4, one, sizeof one, NULL),
        TSDF_OK);
    /* All zero nibbles: empty runs, which must not loop. */
    uint8_t empty[8] = {0};
    expect_refused(TSDF_DEPTH_ENC_RVL, TSDF_DEPTH_U16, 2, 2, empty, 8, "empty runs");
    /* 5 zeros in a 2x2 image. */
    uint8_t beyond[4] = {0, 0, 0, 0x50};
    expect_refused(TSDF_DEPTH_ENC_RVL, TSDF_DEPTH_U16, 2, 2, beyond, 4, "a run beyond");
    /* 0 zeros, 1 non-zero of delta -1 (zigzag 1): the sample would be -1. */
    uint8_t negative[4] = {0, 0, 0x10, 0x01};
    expect_refused(TSDF_DEPTH_ENC_RVL, TSDF_DEPTH_U16, 1, 1, negative, 4, "a sample below 1");
    /* A number of 11 groups: every nibble with its continuation bit. */
    uint8_t endless[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    expect_refused(TSDF_DEPTH_ENC_RVL, TSDF_DEPTH_U16, 2, 2, endless, 8, "an endless number");
    /* The all-zero and all-max corners, and the worst case the bound
     * allows: alternating zero and extreme samples. */
    uint16_t alt[64];
    for (int i = 0; i < 64; i++)
        alt[i] = i % 2 ? 0 : (i % 4 ? 1 : 65535);
    tsdf_buf b;
    tsdf_buf_init(&b);
    assert_int_equal(tsdf_depth_encode(TSDF_DEPTH_ENC_RVL, 0, TSDF_DEPTH_U16, 64, 1, alt, &b),
                     TSDF_OK);
    assert_true(b.len <= 64 * 4 + 8);
    uint16_t back[64];
    assert_int_equal(tsdf_depth_decode(TSDF_DEPTH_ENC_RVL, TSDF_DEPTH_U16, 64, 1, b.data, b.len,
                                       back, sizeof back, NULL),
                     TSDF_OK);
    assert_memory_equal(alt, back, sizeof alt);
    tsdf_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_every_encoding),
        cmocka_unit_test(test_names_and_arguments),
        cmocka_unit_test(test_truncated_trailing_and_resized),
        cmocka_unit_test(test_garbage_and_mutations),
        cmocka_unit_test(test_zstd_bombs),
        cmocka_unit_test(test_png_bombs),
        cmocka_unit_test(test_png_interlaced_sizes),
        cmocka_unit_test(test_png_formats),
        cmocka_unit_test(test_rvl_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

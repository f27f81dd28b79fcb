/*
 * tsdf_depth_codec.c - the depth encodings of the wire (see tsdf_depth_codec.h).
 *
 * libpng reports errors through a callback that must not return; ours
 * longjmps back to the setjmp of the call in progress, where libpng's
 * state is released. What the error path reads after the jump lives in a
 * png_ctx whose address libpng holds, so it is in memory, not in a
 * register that the jump could restore to a stale value.
 */
#include "tsdf_depth_codec.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "proto_read.h" /* proto_fail */

/* Ancillary chunks a depth PNG may carry before libpng refuses it, and the
 * memory one of them may take (a decompressed iCCP or zTXt): enough for
 * what encoders write (gAMA, sBIT, a short tEXt), far below anything that
 * could hurt the daemon. */
#define PNG_MAX_ANCILLARY_CHUNKS 32u
#define PNG_MAX_CHUNK_BYTES (64u * 1024u)

/* The rows of TSDF_DEPTH_ENCODINGS, by value. */
static const struct {
    const char *name;
    int u16, f32;
    int level_min, level_max, level_default;
} encodings[TSDF_DEPTH_ENC_COUNT] = {
#define ENC_ROW(name, value, wire, u16, f32, lo, hi, dflt) [value] = {wire, u16, f32, lo, hi, dflt},
    TSDF_DEPTH_ENCODINGS(ENC_ROW)
#undef ENC_ROW
};

#define ENC_COUNT_CHECK(name, value, wire, u16, f32, lo, hi, dflt)                                 \
    _Static_assert((value) < TSDF_DEPTH_ENC_COUNT, "TSDF_DEPTH_ENC_COUNT covers " wire);
TSDF_DEPTH_ENCODINGS(ENC_COUNT_CHECK)
#undef ENC_COUNT_CHECK

int tsdf_depth_encoding_levels(tsdf_depth_encoding e, int *lo, int *hi, int *dflt)
{
    if ((unsigned)e >= TSDF_DEPTH_ENC_COUNT)
        return TSDF_EINVAL;
    *lo = encodings[e].level_min;
    *hi = encodings[e].level_max;
    *dflt = encodings[e].level_default;
    return TSDF_OK;
}

const char *tsdf_depth_encoding_name(tsdf_depth_encoding e)
{
    if ((unsigned)e >= TSDF_DEPTH_ENC_COUNT)
        return "unknown";
    return encodings[e].name;
}

int tsdf_depth_encoding_parse(const char *name, size_t len, tsdf_depth_encoding *out)
{
    if (name == NULL || out == NULL)
        return TSDF_EINVAL;
    for (unsigned e = 0; e < TSDF_DEPTH_ENC_COUNT; e++) {
        if (strlen(encodings[e].name) == len && memcmp(encodings[e].name, name, len) == 0) {
            *out = (tsdf_depth_encoding)e;
            return TSDF_OK;
        }
    }
    return TSDF_EPROTO_KEY;
}

int tsdf_depth_encoding_allows(tsdf_depth_encoding e, tsdf_depth_format f)
{
    if ((unsigned)e >= TSDF_DEPTH_ENC_COUNT)
        return 0;
    return f == TSDF_DEPTH_U16 ? encodings[e].u16 : f == TSDF_DEPTH_F32 ? encodings[e].f32 : 0;
}

/* The checks both directions start with; *bytes: the raw image's size. */
static int check_image(tsdf_depth_encoding e, tsdf_depth_format fmt, uint32_t w, uint32_t h,
                       size_t *bytes)
{
    if ((unsigned)e >= TSDF_DEPTH_ENC_COUNT || !tsdf_depth_encoding_allows(e, fmt))
        return TSDF_EINVAL;
    if (w == 0 || h == 0)
        return TSDF_EEMPTY_IMAGE;
    if (w > TSDF_MAX_IMAGE_DIM || h > TSDF_MAX_IMAGE_DIM || (uint64_t)w * h > TSDF_MAX_IMAGE_PIXELS)
        return TSDF_ETOO_LARGE;
    *bytes = (size_t)w * h * (fmt == TSDF_DEPTH_U16 ? 2u : 4u);
    return TSDF_OK;
}

/* ---- png ---------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

typedef struct {
    /* decode: the payload and the read position */
    const uint8_t *src;
    size_t n, pos;
    /* decode: the chunk the read position is in (its data's span, and
     * whether it is image data), the image data read so far, and how much
     * may be read before the row being read ends (png_row_idat_bound) */
    size_t chunk_data, chunk_end, chunk_next;
    int chunk_idat;
    uint64_t idat_read, idat_allowed;
    /* encode: the output and why it failed */
    tsdf_buf *out;
    int rc;
    char why[96];     /* libpng's message, for the error detail */
    char reason[128]; /* our own, set before a deliberate png_error */
} png_ctx;

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_ctx *c = png_get_error_ptr(png);
    if (c != NULL && c->why[0] == '\0')
        snprintf(c->why, sizeof c->why, "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings (an unknown or damaged ancillary chunk) change no sample. */
static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/*
 * The image data one png_read_row call may read. libpng inflates a row's
 * worth at a time; but after the last row, to reach the zlib stream's end,
 * it inflates whatever the stream still holds, with no bound of its own: a
 * 1 MiB PNG whose stream went on for 1 GiB past its rows cost 2.2 s of CPU
 * a frame, and was taken. So each row may read at most what any deflate
 * stream needs for one row (its bytes, 1/8 more for fixed-Huffman
 * literals, a block header) plus the piece libpng reads ahead: a stream
 * that goes on past the frame is refused within a few KiB of compressed
 * data, a few MiB of inflating (2.2 ms for 1 GiB on a 2-core Xeon), and a
 * valid one never meets the bound.
 */
#define PNG_IDAT_READ_BYTES 1024u /* the pieces libpng reads image data in */
#define PNG_IDAT_SLACK_BYTES 1024u

static uint64_t png_row_idat_bound(uint32_t w)
{
    const uint64_t row = 1u + 2ull * w;
    return row + row / 8u + PNG_IDAT_READ_BYTES + PNG_IDAT_SLACK_BYTES;
}

/* Follows the chunks up to the one that holds byte c->pos (libpng reads a
 * chunk's header, its data and its CRC in order, never across chunks). */
static void png_track_chunk(png_ctx *c)
{
    while (c->pos >= c->chunk_next && c->chunk_next <= c->n - 8) {
        const size_t at = c->chunk_next, len = be32(c->src + at);
        c->chunk_data = at + 8;
        c->chunk_end = len > c->n - c->chunk_data ? c->n : c->chunk_data + len;
        c->chunk_idat = memcmp(c->src + at + 4, "IDAT", 4) == 0;
        c->chunk_next = c->chunk_end + 4;
    }
}

static void png_read_mem(png_structp png, png_bytep data, size_t len)
{
    png_ctx *c = png_get_io_ptr(png);
    if (len > c->n - c->pos)
        png_error(png, "truncated");
    png_track_chunk(c);
    if (c->chunk_idat && c->pos < c->chunk_end && c->pos + len > c->chunk_data) {
        const size_t from = c->pos > c->chunk_data ? c->pos : c->chunk_data;
        const size_t to = c->pos + len < c->chunk_end ? c->pos + len : c->chunk_end;
        c->idat_read += to - from;
        if (c->idat_read > c->idat_allowed) {
            snprintf(c->reason, sizeof c->reason,
                     "image data goes on past the frame's samples (at byte %zu)", c->pos);
            png_error(png, c->reason);
        }
    }
    memcpy(data, c->src + c->pos, len);
    c->pos += len;
}

static void png_write_mem(png_structp png, png_bytep data, size_t len)
{
    png_ctx *c = png_get_io_ptr(png);
    int rc = tsdf_buf_append(c->out, data, len);
    if (rc != TSDF_OK) {
        c->rc = rc;
        png_error(png, "output limit");
    }
}

static void png_flush_mem(png_structp png)
{
    (void)png;
}

static int png_encode(int level, uint32_t w, uint32_t h, const uint8_t *samples, tsdf_buf *out)
{
    png_ctx c;
    memset(&c, 0, sizeof c);
    c.out = out;
    c.rc = TSDF_OK;
    size_t len0 = out->len;
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, &c, png_on_error, png_on_warning);
    png_infop info = png != NULL ? png_create_info_struct(png) : NULL;
    if (info == NULL) {
        png_destroy_write_struct(png != NULL ? &png : NULL, NULL);
        return TSDF_ENOMEM;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        out->len = len0;
        return c.rc != TSDF_OK ? c.rc : TSDF_ENOMEM;
    }
    png_set_write_fn(png, &c, png_write_mem, png_flush_mem);
    png_set_compression_level(png, level);
    png_set_IHDR(png, info, w, h, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    /* PNG samples are big-endian; ours are little-endian. */
    png_set_swap(png);
    for (uint32_t y = 0; y < h; y++)
        png_write_row(png, (png_const_bytep)(samples + (size_t)y * w * 2u));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return TSDF_OK;
}

static int png_decode(uint32_t w, uint32_t h, const uint8_t *src, size_t n, uint8_t *dst,
                      tsdf_proto_error *err)
{
    if (n < 8 || png_sig_cmp(src, 0, 8) != 0)
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth", "depth: not a PNG (no signature)");
    /* The size from IHDR (the first chunk), only to say why: libpng's user
     * limits below refuse a larger image anyway, but with a vaguer message. */
    if (n >= 24 && memcmp(src + 12, "IHDR", 4) == 0) {
        uint32_t pw = be32(src + 16), ph = be32(src + 20);
        if (pw != w || ph != h)
            return proto_fail(err, TSDF_EDEPTH_DECODE, "depth",
                              "depth: png is %ux%u, the frame is %ux%u", pw, ph, w, h);
    }
    png_ctx c;
    memset(&c, 0, sizeof c);
    c.src = src;
    c.n = n;
    c.pos = 8;
    c.chunk_next = 8; /* the first chunk, after the signature */
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, png_on_error, png_on_warning);
    png_infop info = png != NULL ? png_create_info_struct(png) : NULL;
    if (info == NULL) {
        png_destroy_read_struct(png != NULL ? &png : NULL, NULL, NULL);
        return TSDF_ENOMEM;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        if (c.reason[0] != '\0')
            return proto_fail(err, TSDF_EDEPTH_DECODE, "depth", "depth: png %s", c.reason);
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth", "depth: png refused (%s)",
                          c.why[0] ? c.why : "libpng error");
    }
    png_set_read_fn(png, &c, png_read_mem);
    png_set_sig_bytes(png, 8);
    /* libpng refuses an IHDR beyond these before it allocates for it. */
    png_set_user_limits(png, w, h);
    png_set_chunk_cache_max(png, PNG_MAX_ANCILLARY_CHUNKS);
    png_set_chunk_malloc_max(png, PNG_MAX_CHUNK_BYTES);
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, 0);
    /* On a read struct: the pieces libpng reads image data in. */
    png_set_compression_buffer_size(png, PNG_IDAT_READ_BYTES);
    png_read_info(png, info);

    png_uint_32 pw = 0, ph = 0;
    int depth = 0, color = 0, interlace = 0;
    png_get_IHDR(png, info, &pw, &ph, &depth, &color, &interlace, NULL, NULL);
    if (pw != w || ph != h)
        snprintf(c.reason, sizeof c.reason, "is %ux%u, the frame is %ux%u", (unsigned)pw,
                 (unsigned)ph, w, h);
    else if (depth != 16 || color != PNG_COLOR_TYPE_GRAY)
        snprintf(c.reason, sizeof c.reason, "is %d-bit colour type %d, not 16-bit grayscale", depth,
                 color);
    if (c.reason[0] != '\0')
        png_error(png, c.reason);
    png_set_swap(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 2u) {
        snprintf(c.reason, sizeof c.reason, "rows are %zu bytes, not %zu",
                 (size_t)png_get_rowbytes(png, info), (size_t)w * 2u);
        png_error(png, c.reason);
    }
    /* Row by row straight into dst (as png_read_image does, without its
     * array of row pointers); an interlaced image is combined in place over
     * its passes. */
    for (int p = 0; p < passes; p++)
        for (uint32_t y = 0; y < h; y++) {
            c.idat_allowed = c.idat_read + png_row_idat_bound(w);
            png_read_row(png, dst + (size_t)y * w * 2u, NULL);
        }
    /* Up to IEND, so a stream cut after the image data is refused too.
     * libpng inflates nothing more here (the last row ended the stream),
     * it only skips chunks: no bound on reading. */
    c.idat_allowed = UINT64_MAX;
    png_read_end(png, NULL);
    size_t trailing = c.n - c.pos;
    png_destroy_read_struct(&png, &info, NULL);
    if (trailing != 0)
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth", "depth: %zu bytes after the png's IEND",
                          trailing);
    return TSDF_OK;
}

/* ---- zstd --------------------------------------------------------------- */

static int zstd_encode(int level, const void *samples, size_t bytes, tsdf_buf *out)
{
    size_t room = out->max_len > out->len ? out->max_len - out->len : 0;
    size_t bound = ZSTD_compressBound(bytes);
    size_t cap = bound < room ? bound : room;
    int rc = tsdf_buf_reserve(out, cap);
    if (rc != TSDF_OK)
        return rc;
    /* ZSTD_compress writes the content size into the frame header, which
     * is what lets the receiver refuse a wrong size before decompressing. */
    size_t got = ZSTD_compress(out->data + out->len, cap, samples, bytes, level);
    if (ZSTD_isError(got))
        return ZSTD_getErrorCode(got) == ZSTD_error_dstSize_tooSmall ? TSDF_ETOO_LARGE
                                                                     : TSDF_ENOMEM;
    out->len += got;
    return TSDF_OK;
}

static int zstd_decode(const void *src, size_t n, void *dst, size_t bytes, tsdf_proto_error *err)
{
    unsigned long long stated = ZSTD_getFrameContentSize(src, n);
    if (stated == ZSTD_CONTENTSIZE_ERROR)
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth", "depth: not a zstd frame");
    if (stated != ZSTD_CONTENTSIZE_UNKNOWN && stated != bytes)
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth",
                          "depth: the zstd frame holds %llu bytes, the frame needs %zu", stated,
                          bytes);
    size_t frame = ZSTD_findFrameCompressedSize(src, n);
    if (ZSTD_isError(frame))
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth", "depth: zstd: %s",
                          ZSTD_getErrorName(frame));
    if (frame != n)
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth",
                          "depth: %zu bytes after the zstd frame (one frame only)", n - frame);
    /* A frame without a stated size still cannot write past dst: zstd stops
     * at the capacity and reports it. */
    size_t got = ZSTD_decompress(dst, bytes, src, n);
    if (ZSTD_isError(got)) {
        if (ZSTD_getErrorCode(got) == ZSTD_error_memory_allocation)
            return TSDF_ENOMEM;
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth", "depth: zstd: %s",
                          ZSTD_getErrorName(got));
    }
    if (got != bytes)
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth",
                          "depth: the zstd frame holds %zu bytes, the frame needs %zu", got, bytes);
    return TSDF_OK;
}

/* ---- rvl ---------------------------------------------------------------- */

/*
 * RVL as Wilson wrote it, with the layout pinned down for the wire:
 *   - the image is a sequence of runs: a count of zero samples, a count of
 *     non-zero samples, then each non-zero sample as the zigzag code of its
 *     difference to the previous non-zero sample (the first one's to 0):
 *     d >= 0 -> 2d, d < 0 -> -2d - 1 (d in -65535..65535, as uint16 values
 *     are subtracted in 32 bits: Wilson's int16 arithmetic is not used);
 *   - each number is written in 3-bit groups, least significant first, one
 *     nibble each, the nibble's high bit set when more groups follow;
 *   - nibbles fill 32-bit words from the most significant nibble down; the
 *     words are little-endian; the last word is padded with zero nibbles.
 * The runs cover the image exactly; an image that ends in zeros ends with
 * a zero count of non-zero samples. Size: at most 7 nibbles a sample plus
 * 2, i.e. never more than 2 x the raw size + 8 bytes.
 */

typedef struct {
    uint8_t *p, *end;
    uint32_t word;
    int nibbles;
    int overflow;
} rvl_writer;

/* Sample i of an unaligned u16 image. */
static uint16_t rd16(const uint8_t *samples, size_t i)
{
    uint16_t s;
    memcpy(&s, samples + i * 2u, 2);
    return s;
}

static void rvl_flush(rvl_writer *w)
{
    if (w->end - w->p < 4) {
        w->overflow = 1;
    } else {
        w->p[0] = (uint8_t)w->word;
        w->p[1] = (uint8_t)(w->word >> 8);
        w->p[2] = (uint8_t)(w->word >> 16);
        w->p[3] = (uint8_t)(w->word >> 24);
        w->p += 4;
    }
    w->word = 0;
    w->nibbles = 0;
}

static void rvl_put(rvl_writer *w, uint32_t v)
{
    do {
        uint32_t nib = v & 7u;
        v >>= 3;
        if (v != 0)
            nib |= 8u;
        w->word = (w->word << 4) | nib;
        if (++w->nibbles == 8)
            rvl_flush(w);
    } while (v != 0);
}

static int rvl_encode(uint32_t w, uint32_t h, const uint8_t *samples, tsdf_buf *out)
{
    size_t px = (size_t)w * h;
    size_t room = out->max_len > out->len ? out->max_len - out->len : 0;
    size_t bound = px * 4u + 8u;
    size_t cap = bound < room ? bound : room;
    int rc = tsdf_buf_reserve(out, cap);
    if (rc != TSDF_OK)
        return rc;
    rvl_writer wr = {out->data + out->len, out->data + out->len + cap, 0, 0, 0};
    uint32_t prev = 0;
    size_t i = 0;
    while (i < px && !wr.overflow) {
        size_t zeros = 0, nonzeros = 0;
        for (; i < px && rd16(samples, i) == 0; i++)
            zeros++;
        rvl_put(&wr, (uint32_t)zeros);
        for (size_t k = i; k < px && rd16(samples, k) != 0; k++)
            nonzeros++;
        rvl_put(&wr, (uint32_t)nonzeros);
        for (size_t k = 0; k < nonzeros; k++, i++) {
            uint16_t s = rd16(samples, i);
            int32_t d = (int32_t)s - (int32_t)prev;
            rvl_put(&wr, d >= 0 ? (uint32_t)d * 2u : (uint32_t)(-d) * 2u - 1u);
            prev = s;
        }
    }
    if (wr.nibbles != 0) {
        wr.word <<= 4 * (8 - wr.nibbles);
        rvl_flush(&wr);
    }
    if (wr.overflow)
        return TSDF_ETOO_LARGE;
    out->len = (size_t)(wr.p - out->data);
    return TSDF_OK;
}

typedef struct {
    const uint8_t *p, *end;
    uint32_t word;
    int nibbles;
} rvl_reader;

/* One number; -1 when the words run out or it has more than 10 groups (30
 * bits: no count or difference of a valid image comes near). */
static int rvl_get(rvl_reader *r, uint32_t *out)
{
    uint32_t v = 0;
    for (int shift = 0; shift < 30; shift += 3) {
        if (r->nibbles == 0) {
            if (r->end - r->p < 4)
                return -1;
            r->word = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
                      (uint32_t)r->p[3] << 24;
            r->p += 4;
            r->nibbles = 8;
        }
        uint32_t nib = r->word >> 28;
        r->word <<= 4;
        r->nibbles--;
        v |= (nib & 7u) << shift;
        if ((nib & 8u) == 0) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* A run's length, at most left samples: NULL, or why it cannot be read. */
static const char *rvl_run(rvl_reader *r, size_t left, uint32_t *n)
{
    if (rvl_get(r, n) != 0)
        return "ends early";
    if (*n > left)
        return "has a run beyond the image";
    return NULL;
}

static int rvl_decode(uint32_t w, uint32_t h, const uint8_t *src, size_t n, uint8_t *dst,
                      tsdf_proto_error *err)
{
    size_t px = (size_t)w * h;
    rvl_reader r = {src, src + n, 0, 0};
    uint32_t prev = 0;
    size_t i = 0;
    const char *why = NULL;

    if (n % 4u != 0)
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth",
                          "depth: rvl is %zu bytes, not whole 32-bit words", n);
    while (i < px && why == NULL) {
        uint32_t zeros, nonzeros;
        if ((why = rvl_run(&r, px - i, &zeros)) != NULL)
            break;
        memset(dst + i * 2u, 0, (size_t)zeros * 2u);
        i += zeros;
        if ((why = rvl_run(&r, px - i, &nonzeros)) != NULL)
            break;
        /* The encoder never writes an empty pair; accepting one would let
         * a payload of zero nibbles spin here without progress. */
        if (zeros == 0 && nonzeros == 0) {
            why = "has an empty run";
            break;
        }
        for (uint32_t k = 0; k < nonzeros; k++, i++) {
            uint32_t z;
            if (rvl_get(&r, &z) != 0) {
                why = "ends early";
                break;
            }
            int64_t d = (z & 1u) ? -(int64_t)((z >> 1) + 1u) : (int64_t)(z >> 1);
            int64_t cur = (int64_t)prev + d;
            if (cur < 1 || cur > 65535) {
                why = "has a sample outside 1..65535 in a non-zero run";
                break;
            }
            uint16_t s = (uint16_t)cur;
            memcpy(dst + i * 2u, &s, 2);
            prev = (uint32_t)cur;
        }
    }
    /* Exactly the words the image needs, padded with zero nibbles. */
    if (why == NULL && (r.p != r.end || r.word != 0))
        why = "has data after the image";
    if (why != NULL)
        return proto_fail(err, TSDF_EDEPTH_DECODE, "depth", "depth: rvl %s (%ux%u)", why, w, h);
    return TSDF_OK;
}

/* ---- entry points ------------------------------------------------------- */

/* level within e's range of the table; 0: its default. */
static int clamp_level(tsdf_depth_encoding e, int level)
{
    const int lo = encodings[e].level_min, hi = encodings[e].level_max;
    if (level == 0)
        return encodings[e].level_default;
    return level < lo ? lo : level > hi ? hi : level;
}

int tsdf_depth_encode(tsdf_depth_encoding e, int level, tsdf_depth_format fmt, uint32_t width,
                      uint32_t height, const void *samples, tsdf_buf *out)
{
    size_t bytes = 0;
    if (samples == NULL || out == NULL)
        return TSDF_EINVAL;
    int rc = check_image(e, fmt, width, height, &bytes);
    if (rc != TSDF_OK)
        return rc;
    size_t len0 = out->len;
    switch (e) {
    case TSDF_DEPTH_ENC_RAW:
        rc = tsdf_buf_append(out, samples, bytes);
        break;
    case TSDF_DEPTH_ENC_PNG:
        rc = png_encode(clamp_level(e, level), width, height, samples, out);
        break;
    case TSDF_DEPTH_ENC_ZSTD:
        rc = zstd_encode(clamp_level(e, level), samples, bytes, out);
        break;
    case TSDF_DEPTH_ENC_RVL:
        rc = rvl_encode(width, height, samples, out);
        break;
    default:
        rc = TSDF_EINVAL;
        break;
    }
    if (rc != TSDF_OK)
        out->len = len0;
    return rc;
}

int tsdf_depth_decode(tsdf_depth_encoding e, tsdf_depth_format fmt, uint32_t width, uint32_t height,
                      const void *src, size_t n, void *dst, size_t dst_bytes, tsdf_proto_error *err)
{
    size_t bytes = 0;
    if (err != NULL)
        memset(err, 0, sizeof *err);
    /* Every refusal says why in err: the daemon quotes it in the reply. */
    if (src == NULL || dst == NULL)
        return proto_fail(err, TSDF_EINVAL, "depth", "depth: no payload or no buffer");
    int rc = check_image(e, fmt, width, height, &bytes);
    if (rc != TSDF_OK)
        return proto_fail(err, rc, "depth", "depth: %s depth of a %ux%u image: %s",
                          tsdf_depth_encoding_name(e), width, height, tsdf_strerror(rc));
    if (dst_bytes != bytes)
        return proto_fail(err, TSDF_EBAD_SIZE, "depth",
                          "depth: a buffer of %zu bytes for %zu bytes of samples", dst_bytes,
                          bytes);
    switch (e) {
    case TSDF_DEPTH_ENC_RAW:
        if (n != bytes)
            return proto_fail(err, TSDF_EBAD_SIZE, "depth", "depth: %zu bytes, expected %zu", n,
                              bytes);
        memcpy(dst, src, bytes);
        return TSDF_OK;
    case TSDF_DEPTH_ENC_PNG:
        return png_decode(width, height, src, n, dst, err);
    case TSDF_DEPTH_ENC_ZSTD:
        return zstd_decode(src, n, dst, bytes, err);
    case TSDF_DEPTH_ENC_RVL:
        return rvl_decode(width, height, src, n, dst, err);
    default:
        return proto_fail(err, TSDF_EINVAL, "depth", "depth: unknown encoding %d", (int)e);
    }
}

/*
 * tsdf_png.c - 16-bit grayscale and 8-bit RGB PNG over libpng.
 *
 * libpng reports errors by calling an error callback that must not return;
 * ours longjmps straight back to the setjmp point of the call in progress
 * (png_jmpbuf), where everything allocated so far is released. Anything
 * that changes between setjmp and a longjmp and is read afterwards is
 * volatile, as C requires for locals across longjmp.
 */
#include "tsdf_png.h"

#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdf_types.h" /* TSDF_MAX_IMAGE_DIM, TSDF_MAX_IMAGE_PIXELS */

/* Stops libpng from printing: errors jump back to our setjmp, warnings
 * (e.g. about unknown ancillary chunks) are not ours to report. */
static void png_silent_error(png_structp png, png_const_charp msg)
{
    (void)msg;
    png_longjmp(png, 1);
}

static void png_silent_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

static int png_size_check(uint32_t width, uint32_t height)
{
    if (width == 0 || height == 0)
        return TSDF_EINVAL;
    if (width > TSDF_MAX_IMAGE_DIM || height > TSDF_MAX_IMAGE_DIM ||
        (uint64_t)width * height > TSDF_MAX_IMAGE_PIXELS)
        return TSDF_ETOO_LARGE;
    return TSDF_OK;
}

/* Opens path and checks the 8-byte PNG signature. */
static int png_open_read(const char *path, FILE **out)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return errno == ENOENT || errno == ENOTDIR ? TSDF_ENOT_FOUND : TSDF_EIO;
    png_byte sig[8];
    size_t got = fread(sig, 1, sizeof sig, fp);
    if (got != sizeof sig || png_sig_cmp(sig, 0, sizeof sig) != 0) {
        int rc = ferror(fp) ? TSDF_EIO : TSDF_EFORMAT;
        fclose(fp);
        return rc;
    }
    *out = fp;
    return TSDF_OK;
}

/* The shared reader: the header always; the pixels when pixels != NULL. */
static int png_read_any(const char *path, uint16_t *pixels, size_t capacity_pixels, uint32_t *width,
                        uint32_t *height, int *bit_depth, int *channels)
{
    if (!path)
        return TSDF_EINVAL;
    FILE *fp = NULL;
    int rc = png_open_read(path, &fp);
    if (rc != TSDF_OK)
        return rc;
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, png_silent_error, png_silent_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        fclose(fp);
        return TSDF_ENOMEM;
    }
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        /* A short read shows as a libpng error; tell it apart from a
         * corrupt file by the stream's error flag. */
        rc = ferror(fp) ? TSDF_EIO : TSDF_EFORMAT;
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        fclose(fp);
        return rc;
    }
    png_init_io(png, fp);
    png_set_sig_bytes(png, 8);
    png_read_info(png, info);

    png_uint_32 w = 0, h = 0;
    int depth = 0, color_type = 0, interlace = 0;
    png_get_IHDR(png, info, &w, &h, &depth, &color_type, &interlace, NULL, NULL);
    int nch = color_type == PNG_COLOR_TYPE_PALETTE ? 3 : png_get_channels(png, info);
    if (width)
        *width = w;
    if (height)
        *height = h;
    if (bit_depth)
        *bit_depth = depth;
    if (channels)
        *channels = nch;

    rc = png_size_check(w, h);
    if (rc == TSDF_OK && pixels) {
        if (depth != 16 || color_type != PNG_COLOR_TYPE_GRAY)
            rc = TSDF_EFORMAT;
        else if ((size_t)w * h > capacity_pixels)
            rc = TSDF_EBAD_SIZE;
    }
    if (rc != TSDF_OK || !pixels) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(fp);
        return rc;
    }

    /* PNG stores 16-bit samples big-endian. */
    if (host_is_little_endian())
        png_set_swap(png);
    if (interlace != PNG_INTERLACE_NONE)
        png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 2) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(fp);
        return TSDF_EFORMAT;
    }
    rows = malloc(sizeof *rows * h);
    if (!rows) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(fp);
        return TSDF_ENOMEM;
    }
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = (png_bytep)(pixels + (size_t)y * w);
    png_read_image(png, rows);
    /* Reads up to IEND, so a file cut short after the image data (or with a
     * corrupt trailing chunk) is reported, not silently accepted. */
    png_read_end(png, NULL);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return TSDF_OK;
}

int tsdf_png_info(const char *path, uint32_t *width, uint32_t *height, int *bit_depth,
                  int *channels)
{
    int rc = png_read_any(path, NULL, 0, width, height, bit_depth, channels);
    /* Only the header is asked for: a size beyond our limits is still a
     * valid answer here. */
    return rc == TSDF_ETOO_LARGE ? TSDF_OK : rc;
}

int tsdf_png_read_gray16(const char *path, uint16_t *pixels, size_t capacity_pixels,
                         uint32_t *width, uint32_t *height)
{
    if (!path || !pixels)
        return TSDF_EINVAL;
    return png_read_any(path, pixels, capacity_pixels, width, height, NULL, NULL);
}

/* A growing buffer libpng writes into (tsdf_png_encode_rgb8). */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} png_membuf;

static void png_mem_write(png_structp png, png_bytep bytes, png_size_t n)
{
    png_membuf *b = png_get_io_ptr(png);
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p)
            png_error(png, "out of memory");
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
}

static void png_mem_flush(png_structp png)
{
    (void)png;
}

/* The shared encoder: bit_depth 16 gray (samples in host order) or 8 RGB,
 * into fp or, when fp is NULL, into mem. TSDF_EIO when the file failed,
 * TSDF_EFORMAT or TSDF_ENOMEM otherwise. */
static int png_encode(const void *data, uint32_t width, uint32_t height, int bit_depth,
                      int color_type, size_t row_bytes, FILE *fp, png_membuf *mem)
{
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, png_silent_error, png_silent_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(png ? &png : NULL, NULL);
        return TSDF_ENOMEM;
    }
    png_bytep *volatile rows = malloc(sizeof(png_bytep) * height);
    if (!rows) {
        png_destroy_write_struct(&png, &info);
        return TSDF_ENOMEM;
    }
    if (setjmp(png_jmpbuf(png))) {
        int rc = fp ? (ferror(fp) ? TSDF_EIO : TSDF_EFORMAT) : TSDF_ENOMEM;
        free(rows);
        png_destroy_write_struct(&png, &info);
        return rc;
    }
    for (uint32_t y = 0; y < height; y++)
        rows[y] = (png_bytep)data + (size_t)y * row_bytes;
    if (fp)
        png_init_io(png, fp);
    else
        png_set_write_fn(png, mem, png_mem_write, png_mem_flush);
    png_set_IHDR(png, info, width, height, bit_depth, color_type, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    if (bit_depth == 16 && host_is_little_endian())
        png_set_swap(png);
    png_write_image(png, rows);
    png_write_end(png, NULL);
    free(rows);
    png_destroy_write_struct(&png, &info);
    return TSDF_OK;
}

/* The shared file writer; a failed write removes the partial file. */
static int png_write_any(const char *path, const void *data, uint32_t width, uint32_t height,
                         int bit_depth, int color_type, size_t row_bytes)
{
    if (!path || !data)
        return TSDF_EINVAL;
    int rc = png_size_check(width, height);
    if (rc != TSDF_OK)
        return rc;
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return errno == ENOENT || errno == ENOTDIR ? TSDF_ENOT_FOUND : TSDF_EIO;
    rc = png_encode(data, width, height, bit_depth, color_type, row_bytes, fp, NULL);
    /* A full disk may only show when the buffered tail is flushed. */
    if (fclose(fp) != 0 && rc == TSDF_OK)
        rc = TSDF_EIO;
    if (rc != TSDF_OK)
        remove(path);
    return rc;
}

int tsdf_png_write_gray16(const char *path, const uint16_t *pixels, uint32_t width, uint32_t height)
{
    return png_write_any(path, pixels, width, height, 16, PNG_COLOR_TYPE_GRAY, (size_t)width * 2);
}

int tsdf_png_write_rgb8(const char *path, const uint8_t *rgb, uint32_t width, uint32_t height)
{
    return png_write_any(path, rgb, width, height, 8, PNG_COLOR_TYPE_RGB, (size_t)width * 3);
}

int tsdf_png_encode_rgb8(const uint8_t *rgb, uint32_t width, uint32_t height, uint8_t **out,
                         size_t *out_len)
{
    if (!rgb || !out || !out_len)
        return TSDF_EINVAL;
    *out = NULL;
    *out_len = 0;
    int rc = png_size_check(width, height);
    if (rc != TSDF_OK)
        return rc;
    png_membuf mem = {NULL, 0, 0};
    rc = png_encode(rgb, width, height, 8, PNG_COLOR_TYPE_RGB, (size_t)width * 3, NULL, &mem);
    if (rc != TSDF_OK) {
        free(mem.data);
        return rc;
    }
    *out = mem.data;
    *out_len = mem.len;
    return TSDF_OK;
}

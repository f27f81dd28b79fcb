/*
 * tsdf_png.h - the few PNG formats tsdfd reads and writes, over libpng.
 *
 * - 16-bit grayscale (depth images of 7-Scenes and TUM RGB-D): read and write;
 *   samples are returned in host byte order.
 * - 8-bit RGB (raycast normal / colour images): write.
 *
 * Sizes are bounded: an image wider or taller than TSDF_MAX_IMAGE_DIM or
 * with more than TSDF_MAX_IMAGE_PIXELS pixels is refused with TSDF_ETOO_LARGE
 * before anything is allocated for it. libpng errors are caught
 * (setjmp/png_jmpbuf) and returned as codes; nothing is printed, nothing is
 * leaked, and a failed write removes the partial file.
 *
 * Ownership: the caller owns every buffer. Threads: reentrant (libpng keeps
 * its state per call).
 * Errors: TSDF_EINVAL (NULL or zero arguments), TSDF_ENOT_FOUND (no such
 * file), TSDF_EIO (cannot open, read or write), TSDF_EFORMAT (not a PNG, a
 * corrupt PNG, or a PNG of another format), TSDF_ETOO_LARGE, TSDF_EBAD_SIZE
 * (the caller's buffer is too small), TSDF_ENOMEM.
 */
#ifndef TSDF_PNG_H
#define TSDF_PNG_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads the header of the PNG at path: size, bit depth (1..16) and number of
 * channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA; palette images count 3).
 * Any of the outputs may be NULL. */
int tsdf_png_info(const char *path, uint32_t *width, uint32_t *height, int *bit_depth,
                  int *channels);

/* Reads a 16-bit single-channel (grayscale) PNG into pixels (row-major,
 * tightly packed, host byte order). capacity_pixels is the size of pixels
 * in samples; TSDF_EBAD_SIZE when width * height exceeds it (the header is
 * still reported). *width and *height receive the size (also on
 * TSDF_EBAD_SIZE). Any other format is TSDF_EFORMAT: depth must never be
 * guessed from an 8-bit or colour image. */
int tsdf_png_read_gray16(const char *path, uint16_t *pixels, size_t capacity_pixels,
                         uint32_t *width, uint32_t *height);

/* Writes pixels (width*height host-order samples) as a 16-bit grayscale PNG. */
int tsdf_png_write_gray16(const char *path, const uint16_t *pixels, uint32_t width,
                          uint32_t height);

/* Writes rgb (width*height*3 bytes, row-major RGB) as an 8-bit RGB PNG. */
int tsdf_png_write_rgb8(const char *path, const uint8_t *rgb, uint32_t width, uint32_t height);

/* The same PNG into memory: *out (malloc'ed; the caller frees it) of
 * *out_len bytes. For servers that answer with an image (the live view). */
int tsdf_png_encode_rgb8(const uint8_t *rgb, uint32_t width, uint32_t height, uint8_t **out,
                         size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_PNG_H */

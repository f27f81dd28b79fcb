/*
 * tsdf_depth_codec.h - lossless depth encodings of the wire format
 * ("depth_encoding", proto/PROTOCOL.md 6.1): encode on the sender, decode
 * on the receiver.
 *
 *   raw   the samples as they are (width x height x 2 or 4 bytes, LE)
 *   png   one 16-bit grayscale PNG of width x height (u16 only; PNG stores
 *         samples big-endian, the codec swaps)
 *   zstd  one zstd frame (RFC 8878) of the raw little-endian samples (u16
 *         or f32)
 *   rvl   RVL, the run-length and variable-length code of A. D. Wilson,
 *         "Fast Lossless Depth Image Compression" (ISS 2017), of u16
 *         samples; see tsdf_depth_codec.c for the exact bit layout
 *
 * Pure C, no I/O; uses libpng and libzstd.
 *
 * Bounds. A decoder never allocates on a payload's say-so: it writes into
 * the caller's buffer of exactly width x height x bytes-per-sample, which
 * the frame's own (bounded) size fixes. A zstd frame that states another
 * content size is refused before anything is decompressed; one that
 * decompresses to more than the buffer stops at its end. A PNG is read
 * with libpng's user limits set to the frame's size, a small cap on
 * ancillary chunks and their memory, and unknown chunks skipped, so its
 * header cannot make libpng allocate for a larger image. The only
 * allocations are the decoders' own fixed-size state (libpng's structs
 * and zlib window, zstd's decompression context).
 *
 * Errors: TSDF_OK; TSDF_EDEPTH_DECODE when a payload does not decode to
 * exactly the samples of the frame (truncated, corrupt, another size, bit
 * depth or colour type, trailing bytes); TSDF_EINVAL (NULL pointers, an
 * unknown encoding, png or rvl with f32); TSDF_EEMPTY_IMAGE, TSDF_ETOO_LARGE
 * (the image limits of tsdf_types.h); TSDF_EBAD_SIZE (the caller's
 * dst_bytes is not width x height x bytes-per-sample, or a raw payload of
 * another length); TSDF_ENOMEM; and from the encoder TSDF_ETOO_LARGE when
 * the output would pass out->max_len.
 *
 * Threads: every function is reentrant (no global state); distinct
 * buffers may be used from different threads at once.
 */
#ifndef TSDF_DEPTH_CODEC_H
#define TSDF_DEPTH_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "tsdf_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compression levels: the ranges of TSDF_DEPTH_ENCODINGS (tsdf_proto_types.h;
 * png: zlib 1..9, default 1: on 7-Scenes, zlib's own default 6 takes
 * 2.5-3x the time of level 1, 28-33 ms a 640x480 frame, most of a 30 Hz
 * sender's core, for 24% fewer bytes; see bench/RESULTS.md; zstd 1..19,
 * default 3); raw and rvl take none. 0 asks for the default; the encoder
 * clamps other out-of-range levels. tsdf_depth_encoding_levels gives e's
 * range and default (all 0 for none): TSDF_OK, or TSDF_EINVAL for an
 * unknown e. */
int tsdf_depth_encoding_levels(tsdf_depth_encoding e, int *lo, int *hi, int *dflt);

/* Appends the encoding e of width x height samples of format fmt (read
 * from samples, row-major, tightly packed, host = little-endian order; need
 * not be aligned) to out. On error out->len is unchanged. The caller owns
 * every buffer; samples is only read during the call. */
int tsdf_depth_encode(tsdf_depth_encoding e, int level, tsdf_depth_format fmt, uint32_t width,
                      uint32_t height, const void *samples, tsdf_buf *out);

/* Decodes the n-byte payload src of encoding e into dst, which holds
 * exactly dst_bytes = width x height x (2 or 4) bytes (need not be
 * aligned). TSDF_OK only when the payload gave exactly that many samples;
 * dst's content is unspecified otherwise. err (optional) receives the key
 * "depth" and why, e.g. "depth: png is 320x240, the frame is 640x480". */
int tsdf_depth_decode(tsdf_depth_encoding e, tsdf_depth_format fmt, uint32_t width, uint32_t height,
                      const void *src, size_t n, void *dst, size_t dst_bytes,
                      tsdf_proto_error *err);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_DEPTH_CODEC_H */

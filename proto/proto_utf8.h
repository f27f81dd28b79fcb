/*
 * proto_utf8.h - UTF-8 checks for the wire codec, internal to proto/.
 *
 * msgpack str values are UTF-8 by definition, and strict decoders (Python's
 * msgpack, for one) refuse a whole message when one of them is not. The
 * codec therefore never writes a str that is not valid UTF-8, refuses
 * identifiers (paths, counter names) that are not, and makes free text
 * (error messages) valid and printable before it is sent or shown.
 *
 * Valid means what RFC 3629 allows: no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing beyond U+10FFFF, no truncated sequence.
 */
#ifndef TSDF_PROTO_UTF8_H
#define TSDF_PROTO_UTF8_H

#include <stddef.h>

/* The codec's internals are hidden from libtsdf.so, which exports the tsdf_
 * API alone. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* 1 when the n bytes at s are valid UTF-8 (NUL bytes included), else 0. */
int proto_utf8_valid(const char *s, size_t n);

/* Rewrites the NUL-terminated string s in place into valid UTF-8 without
 * control characters: each invalid or truncated sequence (its maximal
 * subpart, as Unicode recommends) and each C0 control, DEL and C1 control
 * becomes one '?'. The string never grows, so it stays within its buffer.
 * Returns its new length in bytes. */
size_t proto_utf8_sanitize(char *s);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* TSDF_PROTO_UTF8_H */

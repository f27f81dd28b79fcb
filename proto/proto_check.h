/*
 * proto_check.h - the rules of the wire format that both halves of the
 * codec apply, internal to proto/: the decoder to the bytes it reads, the
 * encoder to the struct it is about to write (proto_check.c). Not
 * installed; nothing outside proto/ includes it.
 */
#ifndef TSDF_PROTO_CHECK_H
#define TSDF_PROTO_CHECK_H

#include <stddef.h>

#include "tsdf_proto.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* Sensor names: 1..TSDF_PROTO_MAX_SENSOR_NAME_LEN bytes of 0x21..0x7e.
 * TSDF_EINVAL, TSDF_ETOO_LARGE. */
int proto_check_sensor_name(const char *name, size_t len);

/* The raycast keys of PROTOCOL.md 6.2 beyond the camera: scale in
 * 1..TSDF_PROTO_MAX_RAYCAST_SCALE leaving at least one pixel each way
 * (TSDF_EINVAL), and a reply that fits in one message (TSDF_ETOO_LARGE).
 * key (may be NULL) receives the offending key. */
int proto_check_raycast_shape(const tsdf_req_raycast *q, const char **key);

/* "after" on the wire: "integrated" or "queued"; NULL for other values. */
const char *proto_after_name(tsdf_query_after a);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* TSDF_PROTO_CHECK_H */

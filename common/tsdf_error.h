/*
 * tsdf_error.h - the one error type of tsdfd.
 *
 * Every function of the engine, the wire codec, the daemon and the client
 * library that can fail returns an int: TSDF_OK (0) on success, or one of the
 * negative codes below. The numbers are stable: they travel on the wire in
 * error replies (see proto/PROTOCOL.md), so a code is never renumbered or
 * reused; new codes are appended.
 *
 * CUDA, nng, errno and msgpack failures are mapped onto these codes where
 * they happen, never printed and dropped.
 */
#ifndef TSDF_ERROR_H
#define TSDF_ERROR_H

#include "tsdf_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define TSDF_ERRNO_MAP(X)                                                                          \
    X(INVAL, -1, "invalid argument")                                                               \
    X(NOMEM, -2, "out of host memory")                                                             \
    X(BAD_INTRINSICS, -3,                                                                          \
      "intrinsics describe no real camera (zero, negative, not finite, or a field of view "        \
      "beyond 170 degrees)")                                                                       \
    X(BAD_POSE, -4, "pose is not a finite rigid transform")                                        \
    X(BAD_SIZE, -5, "sizes do not match")                                                          \
    X(EMPTY_IMAGE, -6, "image has zero width or height")                                           \
    X(BAD_DEPTH_RANGE, -7, "depth range or depth scale is invalid")                                \
    X(BAD_PARAMS, -8, "volume parameters are invalid")                                             \
    X(CAPACITY, -9, "memory cap reached: the hash table cannot grow")                              \
    X(CUDA, -10, "CUDA call failed")                                                               \
    X(NO_GPU, -11, "no usable CUDA device")                                                        \
    X(NOT_BUILT, -12, "backend not built into this binary")                                        \
    X(IO, -13, "input/output error")                                                               \
    X(FORMAT, -14, "malformed file or message")                                                    \
    X(CHECKSUM, -15, "checksum mismatch")                                                          \
    X(VERSION, -16, "unsupported format or protocol version")                                      \
    X(TOO_LARGE, -17, "message or image exceeds a configured limit")                               \
    X(PROTO_TYPE, -18, "unknown message type")                                                     \
    X(PROTO_KEY, -19, "required key missing or of the wrong msgpack type")                         \
    X(NOT_FOUND, -20, "no such map or file")                                                       \
    X(QUEUE_FULL, -21, "frame queue is full")                                                      \
    X(TIMEOUT, -22, "timed out")                                                                   \
    X(CLOSED, -23, "connection or object closed")                                                  \
    X(CONNREFUSED, -24, "connection refused")                                                      \
    X(NNG, -25, "messaging (nng) failure")                                                         \
    X(SHUTDOWN, -26, "daemon is shutting down")                                                    \
    X(BUSY, -27, "resource busy")                                                                  \
    X(INTERNAL, -28, "internal error")                                                             \
    X(LIMIT, -29, "too many maps or sensors")                                                      \
    X(DROPPED, -30, "frame dropped by backpressure policy")                                        \
    X(FORBIDDEN, -31, "not allowed for this client")                                               \
    X(AUTH, -32, "authentication failed (TLS)")                                                    \
    X(DEPTH_DECODE, -33, "compressed depth does not decode to width x height samples")

typedef enum {
    TSDF_OK = 0,
#define TSDF_ERR_ENUM_(name, value, msg) TSDF_E##name = value,
    TSDF_ERRNO_MAP(TSDF_ERR_ENUM_)
#undef TSDF_ERR_ENUM_
} tsdf_errno;

/* A static, human-readable message for err; never NULL, also for unknown codes. */
TSDF_API const char *tsdf_strerror(int err);

/* The symbolic name of err without the prefix ("INVAL", "CUDA"), or "UNKNOWN". */
TSDF_API const char *tsdf_errname(int err);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_ERROR_H */

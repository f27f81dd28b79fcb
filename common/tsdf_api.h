/*
 * tsdf_api.h - TSDF_API, the mark of a function that libtsdf exports.
 *
 * libtsdf is compiled with -fvisibility=hidden (client/CMakeLists.txt), so
 * a function is part of its ABI only where its declaration carries TSDF_API,
 * as nng does with NNG_DECL. Everything else it compiles in (the wire codec,
 * the transport) stays internal: callers cannot come to depend on it, and
 * it may change without a new soname. In the static libraries and in the
 * programs of this project the mark changes nothing.
 */
#ifndef TSDF_API_H
#define TSDF_API_H

#if defined(__GNUC__) || defined(__clang__)
#define TSDF_API __attribute__((visibility("default")))
#else
#define TSDF_API
#endif

#endif /* TSDF_API_H */

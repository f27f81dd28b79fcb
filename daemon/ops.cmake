# daemon/ops.cmake - the ops modules of the daemon (owned by the ops side):
# latency windows, the Prometheus text builder, the /metrics HTTP server,
# sd_notify and the snapshot files, in one static library, tsdf_ops.
#
# daemon/CMakeLists.txt must include this file:
#
#   include(${CMAKE_CURRENT_SOURCE_DIR}/ops.cmake)
#
# and link tsdf_ops into the daemon's core. The library carries the
# TSDFD_HAVE_<MODULE>=1 definitions the core's call sites test, so it can
# stand in for a locally defined tsdfd_ops (add_library(tsdfd_ops ALIAS
# tsdf_ops) keeps the old name working).
#
# Dependencies: libuv (PkgConfig::LIBUV), zlib (Debian zlib1g-dev, for the
# snapshots' crc32), libsystemd when found (TSDF_HAVE_SYSTEMD; without it
# the notify functions are no-ops), tsdf_engine (types of the block sets),
# tsdfd_log (TSDF_LOG).
if(NOT TARGET tsdf_ops)
  find_package(ZLIB REQUIRED)
  set(TSDF_OPS_DIR ${CMAKE_CURRENT_LIST_DIR})
  add_library(tsdf_ops STATIC
    ${TSDF_OPS_DIR}/latency.c
    ${TSDF_OPS_DIR}/prom.c
    ${TSDF_OPS_DIR}/metrics_http.c
    ${TSDF_OPS_DIR}/notify.c
    ${TSDF_OPS_DIR}/snapshot.c
    ${TSDF_OPS_DIR}/snapshot_format.c
    ${TSDF_OPS_DIR}/spill.c)
  target_include_directories(tsdf_ops PUBLIC ${TSDF_OPS_DIR})
  target_compile_definitions(tsdf_ops PUBLIC
    TSDFD_HAVE_LATENCY=1 TSDFD_HAVE_PROM=1 TSDFD_HAVE_METRICS_HTTP=1
    TSDFD_HAVE_NOTIFY=1 TSDFD_HAVE_SNAPSHOT=1)
  target_link_libraries(tsdf_ops
    PUBLIC tsdfd_log tsdf_engine tsdf_common PkgConfig::LIBUV ZLIB::ZLIB Threads::Threads m
    PRIVATE tsdf_warnings)
  if(SYSTEMD_FOUND)
    target_link_libraries(tsdf_ops PRIVATE PkgConfig::SYSTEMD)
    target_compile_definitions(tsdf_ops PUBLIC TSDF_HAVE_SYSTEMD=1)
  endif()
endif()

# daemon/ops.cmake - the daemon's modules that need nothing of its core:
# latency windows, the Prometheus text builder, the /metrics HTTP server,
# sd_notify, the snapshot files and the spill store, in one static
# library, tsdf_ops, which daemon/CMakeLists.txt includes and links into
# tsdfd_core.
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
  target_link_libraries(tsdf_ops
    PUBLIC tsdfd_log tsdf_engine tsdf_common PkgConfig::LIBUV ZLIB::ZLIB Threads::Threads m
    PRIVATE tsdf_warnings)
  if(SYSTEMD_FOUND)
    target_link_libraries(tsdf_ops PRIVATE PkgConfig::SYSTEMD)
    target_compile_definitions(tsdf_ops PUBLIC TSDF_HAVE_SYSTEMD=1)
  endif()
endif()

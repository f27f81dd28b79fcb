# Tests of the daemon's ops modules (latency windows, Prometheus text, the
# counter table behind the stats reply and /metrics, the /metrics server,
# snapshots) and of the systemd unit.
#
# The modules come from daemon/ops.cmake as tsdf_ops.
set(TSDF_OPS_LIB tsdf_ops)

tsdf_add_test(NAME latency SOURCES test_latency.c LIBS ${TSDF_OPS_LIB} Threads::Threads
  LABELS ops TIMEOUT 60)
tsdf_add_test(NAME prom SOURCES test_prom.c LIBS ${TSDF_OPS_LIB} LABELS ops TIMEOUT 60)
# The counter table (daemon/metrics.c, in tsdfd_core) that feeds both the
# stats reply and /metrics, and the populated context its test and the
# /metrics server's sample render share.
add_library(tsdf_metrics_sample STATIC metrics_sample.c)
target_include_directories(tsdf_metrics_sample PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(tsdf_metrics_sample PUBLIC tsdfd_core PRIVATE tsdf_warnings)
tsdf_add_test(NAME metrics SOURCES test_metrics.c
  LIBS tsdf_metrics_sample tsdfd_core LABELS ops TIMEOUT 60)
tsdf_add_test(NAME metrics_http SOURCES test_metrics_http.c
  LIBS tsdf_metrics_sample ${TSDF_OPS_LIB} PkgConfig::LIBUV Threads::Threads LABELS ops TIMEOUT 120)
tsdf_add_test(NAME snapshot SOURCES test_snapshot.c
  LIBS ${TSDF_OPS_LIB} tsdf_engine tsdf_scenes Threads::Threads LABELS ops TIMEOUT 300)
tsdf_add_test(NAME spill SOURCES test_spill.c
  LIBS ${TSDF_OPS_LIB} tsdf_engine tsdf_scenes LABELS ops TIMEOUT 120)
tsdf_add_test(NAME notify SOURCES test_notify.c LIBS ${TSDF_OPS_LIB} LABELS ops TIMEOUT 60)
if(TARGET tsdfd)
  # Its last case runs the daemon against a fake notify socket.
  target_compile_definitions(test_notify PRIVATE TSDFD_BIN="$<TARGET_FILE:tsdfd>")
  add_dependencies(test_notify tsdfd)
endif()

# Shell tests: exit 77 (skipped) when their tool is missing.
add_test(NAME systemd_unit
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_systemd_unit.sh ${PROJECT_SOURCE_DIR}/systemd/tsdfd.service
          ${CMAKE_BINARY_DIR})
add_test(NAME metrics_promtool
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_metrics_promtool.sh $<TARGET_FILE:test_metrics_http>)
set_tests_properties(systemd_unit metrics_promtool PROPERTIES
  TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS ops)
# The daemon's own /metrics against the documented list, and its numbers
# after tsdfctl integrates frames (skips without tsdfd).
add_test(NAME metrics_promtool_daemon
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_metrics_promtool.sh --daemon
          $<$<TARGET_EXISTS:tsdfd>:$<TARGET_FILE:tsdfd>>
          $<$<TARGET_EXISTS:tsdfctl>:$<TARGET_FILE:tsdfctl>>)
set_tests_properties(metrics_promtool_daemon PROPERTIES
  TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "ops;daemon")

# The crash test needs the daemon and the client library; it skips (77)
# when no tsdfd binary is executable.
if(TARGET tsdfd AND TARGET tsdf_client_static)
  tsdf_add_test(NAME snapshot_fault SOURCES test_snapshot_fault.c
    LIBS ${TSDF_OPS_LIB} tsdf_client_static tsdf_scenes Threads::Threads TIMEOUT 300)
  target_compile_definitions(test_snapshot_fault PRIVATE TSDFD_BIN="$<TARGET_FILE:tsdfd>")
  add_dependencies(test_snapshot_fault tsdfd)
  set_tests_properties(snapshot_fault PROPERTIES LABELS "ops;daemon")
endif()

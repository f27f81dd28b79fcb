# Tests of the daemon's core: the frame queue and counters, the
# configuration, and the end-to-end service tests against a real tsdfd.
if(NOT TARGET tsdfd_core)
  message(WARNING "tests/daemon.cmake: no tsdfd_core target; the daemon tests are not built")
  return()
endif()

tsdf_add_test(NAME queue SOURCES test_queue.c LIBS tsdfd_core Threads::Threads TIMEOUT 60)

tsdf_add_test(NAME worker SOURCES test_worker.c LIBS tsdfd_core Threads::Threads TIMEOUT 60)
tsdf_add_test(NAME frame_pool SOURCES test_frame_pool.c LIBS tsdfd_core Threads::Threads TIMEOUT 60)
tsdf_add_test(NAME watchdog SOURCES test_watchdog.c LIBS tsdfd_core Threads::Threads TIMEOUT 60)
tsdf_add_test(NAME conns SOURCES test_conns.c LIBS tsdfd_core Threads::Threads TIMEOUT 60)
# The rings' leases (a ring mapped as for the GPU, written where a lease
# points): fences and detaching wait for them (client_ring.c compiled in
# for its attach exchange).
tsdf_add_test(NAME rings_lease
  SOURCES test_rings_lease.c ${PROJECT_SOURCE_DIR}/client/client_ring.c
  LIBS tsdfd_core Threads::Threads TIMEOUT 60)
target_include_directories(test_rings_lease PRIVATE ${PROJECT_SOURCE_DIR}/client)

tsdf_add_test(NAME config SOURCES test_config.c LIBS tsdfd_core TIMEOUT 60)
target_compile_definitions(test_config PRIVATE
  TSDFD_BIN="$<TARGET_FILE:tsdfd>"
  TSDF_CONF="${PROJECT_SOURCE_DIR}/config/tsdfd.conf")
add_dependencies(test_config tsdfd)

# The harness starts the real tsdfd as a child process (other areas' tests
# may link it too). It needs the client library to ping the daemon.
if(TARGET tsdf_client)
  add_library(tsdfd_harness STATIC daemon_harness.c)
  target_include_directories(tsdfd_harness PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(tsdfd_harness PUBLIC tsdf_client tsdf_testutil PRIVATE tsdf_warnings)
  target_compile_definitions(tsdfd_harness PRIVATE TSDFD_BIN="$<TARGET_FILE:tsdfd>")
  add_dependencies(tsdfd_harness tsdfd)

  if(TARGET tsdf_scenes)
    # What the end-to-end daemon tests share (daemon_testlib.h).
    add_library(tsdfd_testlib STATIC daemon_testlib.c)
    target_link_libraries(tsdfd_testlib PUBLIC tsdfd_harness tsdf_client tsdf_proto tsdf_engine
      tsdf_scenes nng::nng PkgConfig::MSGPACK tsdf_testutil PRIVATE tsdf_warnings)
    # The end-to-end suite, one program a topic (test_daemon_<topic>.c):
    # the frame queue and its counters (streams), the daemon's mesh and
    # raycast against the engine's (results), malformed and mutated input
    # (malformed), snapshots (persist), the connection and memory limits
    # (limits), bounded queries and a bounded stop (bounded), raycasts of
    # the size asked for and the order of queries and frames (queries).
    # Each keeps the 600 s limit of the one program they were split from.
    set(TSDF_DAEMON_E2E_TOPICS streams results malformed persist limits bounded queries)
    foreach(topic IN LISTS TSDF_DAEMON_E2E_TOPICS)
      tsdf_add_test(NAME daemon_${topic} SOURCES test_daemon_${topic}.c
        LIBS tsdfd_testlib Threads::Threads LABELS daemon TIMEOUT 600)
    endforeach()
    # nng 1.5.2's own leaks after connections closed during the handshake
    # (see the file), in the test and in the daemons it starts.
    if(TSDF_ASAN)
      set_property(TEST daemon_limits APPEND PROPERTY ENVIRONMENT
        "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-nng-handshake.supp")
    endif()
    # Load and faults: many clients, vanishing clients, a full or read-only
    # state directory, CUDA asked for without a GPU.
    tsdf_add_test(NAME daemon_faults SOURCES test_daemon_faults.c
      LIBS tsdfd_testlib Threads::Threads LABELS daemon TIMEOUT 300)
    # The bad-input suite: every kind of hostile message while a good
    # client streams.
    tsdf_add_test(NAME daemon_hostile SOURCES test_daemon_hostile.c
      LIBS tsdfd_testlib Threads::Threads LABELS daemon TIMEOUT 300)
    # Alone on the machine: it compares the good client's rate with and
    # without the attack, which another test running beside it would skew.
    set_tests_properties(daemon_hostile PROPERTIES RUN_SERIAL TRUE)
    # The life of a map: the limit, delete, no auto-create.
    tsdf_add_test(NAME daemon_maps SOURCES test_daemon_maps.c
      LIBS tsdfd_testlib Threads::Threads LABELS daemon TIMEOUT 300)
    # Compressed depth (png, zstd, rvl) end to end: the same volume as raw
    # frames, and payloads that do not decode refused and counted.
    tsdf_add_test(NAME daemon_depth SOURCES test_daemon_depth.c
      LIBS tsdfd_testlib LABELS daemon TIMEOUT 300)
    # Frames through a shared-memory ring: the same volume as in the
    # request, the refusals, detaching, and the fallback after a restart
    # (client_ring.c compiled in: its attach exchange is not exported).
    tsdf_add_test(NAME daemon_ring
      SOURCES test_daemon_ring.c daemon_ring_testlib.c ${PROJECT_SOURCE_DIR}/client/client_ring.c
      LIBS tsdfd_testlib LABELS daemon TIMEOUT 300)
    target_include_directories(test_daemon_ring PRIVATE ${PROJECT_SOURCE_DIR}/client)
    # Fences on a ring: requests below one refused untouched, and libtsdf
    # taking back the slot of a frame that timed out (SIGSTOP).
    tsdf_add_test(NAME daemon_ring_fence
      SOURCES test_daemon_ring_fence.c daemon_ring_testlib.c
        ${PROJECT_SOURCE_DIR}/client/client_ring.c
      LIBS tsdfd_testlib LABELS daemon TIMEOUT 300)
    target_include_directories(test_daemon_ring_fence PRIVATE ${PROJECT_SOURCE_DIR}/client)
    if(TARGET tsdfctl)
      target_compile_definitions(test_daemon_ring PRIVATE TSDFCTL_BIN="$<TARGET_FILE:tsdfctl>")
    endif()
    # The daemon against proto/PROTOCOL.md, on the points where a client
    # written from the document alone found the two apart.
    tsdf_add_test(NAME daemon_protocol SOURCES test_daemon_protocol.c
      LIBS tsdfd_testlib LABELS daemon TIMEOUT 300)
    # Eviction: a camera down a long corridor and back, spilling, dropping,
    # and making room when the map is full.
    tsdf_add_test(NAME daemon_evict SOURCES test_daemon_evict.c
      LIBS tsdfd_testlib tsdf_ops LABELS daemon TIMEOUT 300)
    # The same end-to-end suite against a daemon on the CUDA backend (the
    # reference volume in the test on CUDA too), daemon_<topic>_cuda for
    # each program of it; skipped (77) without a GPU.
    foreach(topic IN LISTS TSDF_DAEMON_E2E_TOPICS)
      add_test(NAME daemon_${topic}_cuda COMMAND test_daemon_${topic})
      set_tests_properties(daemon_${topic}_cuda PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
        LABELS "gpu;daemon"
        ENVIRONMENT "TSDF_SOURCE_DIR=${PROJECT_SOURCE_DIR};TSDF_TEST_DAEMON_BACKEND=cuda")
    endforeach()
    # The rings against a daemon on the CUDA backend, where raycast images
    # go from the device straight into the rings; skipped (77) without a GPU.
    foreach(topic IN ITEMS ring ring_fence)
      add_test(NAME daemon_${topic}_cuda COMMAND test_daemon_${topic})
      set_tests_properties(daemon_${topic}_cuda PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
        LABELS "gpu;daemon"
        ENVIRONMENT "TSDF_SOURCE_DIR=${PROJECT_SOURCE_DIR};TSDF_TEST_DAEMON_BACKEND=cuda")
    endforeach()
    # Upload/compute overlap on the CUDA daemon path, from the CUDA event
    # timeline of the stats reply; skipped (77) without a GPU.
    tsdf_add_test(NAME daemon_overlap SOURCES test_daemon_overlap.c
      LIBS tsdfd_harness tsdf_client tsdf_engine tsdf_scenes
      LABELS "gpu;daemon" TIMEOUT 300)
  endif()
else()
  message(STATUS "tests/daemon.cmake: no tsdf_client yet; the end-to-end daemon test is not built")
endif()

# The daemon benchmark (bench/bench_daemon.c), briefly, as a smoke test:
# two clients for one second on the CPU backend with small frames and
# small raycasts, once acknowledged on ipc:// with a map each and the
# queries, once fire-and-forget on tcp:// loopback into one map. It fails
# (exit 1) when the daemon's counters do not reconcile with what the
# clients sent or a query answer is wrong.
if(TARGET bench_daemon AND TARGET tsdfd)
  set(TSDF_BENCH_DAEMON_SMOKE --spawn $<TARGET_FILE:tsdfd> --backend cpu --clients 2 --seconds 1
    --width 160 --height 120 --raycast-width 160 --raycast-height 120 --settle-timeout-s 120)
  add_test(NAME bench_daemon_smoke COMMAND bench_daemon ${TSDF_BENCH_DAEMON_SMOKE}
    --mode acked --maps own --transport ipc)
  add_test(NAME bench_daemon_ff_smoke COMMAND bench_daemon ${TSDF_BENCH_DAEMON_SMOKE}
    --mode ff --maps shared --transport tcp --mesh off)
  # Queries only (--clients 0): a map of 30 prefill frames, then the
  # raycast and the mesh alone against it, each answer checked.
  add_test(NAME bench_daemon_idle_smoke COMMAND bench_daemon --spawn $<TARGET_FILE:tsdfd>
    --backend cpu --clients 0 --seconds 1 --width 160 --height 120 --raycast-width 160
    --raycast-height 120 --settle-timeout-s 120)
  # The same with the raycast's reply at half size, depth alone, its
  # answers checked against the scene rendered through the scaled view.
  add_test(NAME bench_daemon_half_smoke COMMAND bench_daemon --spawn $<TARGET_FILE:tsdfd>
    --backend cpu --clients 0 --seconds 1 --width 160 --height 120 --raycast-width 160
    --raycast-height 120 --raycast-reply half --mesh off --settle-timeout-s 120)
  # Acknowledged frames through shared-memory rings: fails unless every
  # client frame's depth came through a ring (rings.frames).
  add_test(NAME bench_daemon_ring_smoke COMMAND bench_daemon ${TSDF_BENCH_DAEMON_SMOKE}
    --mode acked --maps own --transport ipc --raycast off --mesh off --ring)
  set_tests_properties(bench_daemon_smoke bench_daemon_ff_smoke bench_daemon_idle_smoke
    bench_daemon_half_smoke bench_daemon_ring_smoke PROPERTIES TIMEOUT 300 LABELS "bench;daemon")
endif()

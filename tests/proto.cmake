# The wire codec and the client library (unit level). The end-to-end tests
# against a running tsdfd live with the daemon's tests.
# The codec's tests, one program a topic (test_proto_<topic>.c): round
# trips, request validation, what the encoders and the reply decoder refuse
# (consistency), truncated, mutated and random bytes (robustness), UTF-8,
# and the frame path's aligned payloads and raycast options (framepath). What they share is proto_testlib.h.
add_library(tsdf_proto_testlib STATIC proto_testlib.c)
target_link_libraries(tsdf_proto_testlib PUBLIC tsdf_proto tsdf_testutil PkgConfig::MSGPACK
  PRIVATE tsdf_warnings m)
foreach(topic IN ITEMS roundtrip validation consistency robustness utf8 framepath)
  tsdf_add_test(NAME proto_${topic} SOURCES test_proto_${topic}.c LIBS tsdf_proto_testlib
    TIMEOUT 120)
endforeach()
# The depth encodings frames may travel in (png, zstd, rvl).
# The C codec on stdin and stdout, for the Python package's tests
# (python/tests/test_depth_encoding.py) to check theirs against both ways.
add_executable(depth_codec_tool depth_codec_tool.c)
target_link_libraries(depth_codec_tool PRIVATE tsdf_proto tsdf_warnings)
# zlib (zlib1g-dev) makes the PNG bombs.
tsdf_add_test(NAME depth_codec SOURCES test_depth_codec.c LIBS tsdf_proto z TIMEOUT 120)
# The depth codec benchmark on 3 frames: it checks every decode is exact.
# Skipped (77) without the 7-Scenes data ($TSDF_DATA_DIR).
if(TARGET bench_depth_codec)
  add_test(NAME bench_depth_codec_smoke COMMAND bench_depth_codec --frames 3 --repeat 1)
  set_tests_properties(bench_depth_codec_smoke PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
    ENVIRONMENT "TSDF_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endif()
tsdf_add_test(NAME client SOURCES test_client.c LIBS tsdf_client_static Threads::Threads
  TIMEOUT 120)
# The ring's slot runs (client_ring.c compiled in: it is not exported),
# against a stand-in for the daemon's ring socket.
tsdf_add_test(NAME client_ring
  SOURCES test_client_ring.c ${PROJECT_SOURCE_DIR}/client/client_ring.c
  LIBS Threads::Threads TIMEOUT 60)
target_include_directories(test_client_ring PRIVATE ${PROJECT_SOURCE_DIR}/client
  ${PROJECT_SOURCE_DIR}/proto)

# tsdfctl end to end: every subcommand against a real daemon.
add_test(NAME tsdfctl
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_tsdfctl.sh $<TARGET_FILE:tsdfd> $<TARGET_FILE:tsdfctl>)
set_tests_properties(tsdfctl PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# proto/PROTOCOL.md lists every error code, and by request every code the
# codec and the daemon's request path name.
add_test(NAME protocol_codes
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_protocol_codes.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(protocol_codes PROPERTIES TIMEOUT 60)

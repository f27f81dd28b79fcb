# The wire codec and the client library (unit level). The end-to-end tests
# against a running tsdfd live with the daemon's tests.
tsdf_add_test(NAME proto SOURCES test_proto.c LIBS tsdf_proto TIMEOUT 120)
tsdf_add_test(NAME client SOURCES test_client.c LIBS tsdf_client_static Threads::Threads
  TIMEOUT 120)

# tsdfctl end to end: every subcommand against a real daemon.
add_test(NAME tsdfctl
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_tsdfctl.sh $<TARGET_FILE:tsdfd> $<TARGET_FILE:tsdfctl>)
set_tests_properties(tsdfctl PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

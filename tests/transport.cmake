# Tests of the transport module shared by the daemon and libtsdf
# (common/tsdf_transport.c): the nng error map, local URLs, TLS set-up
# refusals. The TLS end-to-end test against a real tsdfd is test_tls.c
# (tests/tls.cmake).
tsdf_add_test(NAME transport SOURCES test_transport.c LIBS tsdf_transport TIMEOUT 60)

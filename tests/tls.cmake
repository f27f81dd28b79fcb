# TLS with client certificates end to end against a real tsdfd: writers,
# read-only clients, refused handshakes. The certificates are made at run
# time by tests/tls_certs.sh with the openssl CLI (skipped without it).
if(TARGET tsdfd_harness)
  tsdf_add_test(NAME tls SOURCES test_tls.c LIBS tsdfd_harness tsdf_client
    LABELS daemon TIMEOUT 120)
endif()

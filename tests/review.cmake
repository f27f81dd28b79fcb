# Regression tests of the code review (tests/test_review.c): snapshot
# naming and listing, the stats reply of a real daemon, and fuzz-style loops
# over the scenes/ file readers (meant for the ASan/UBSan build).
if(TARGET tsdf_ops)
  set(TSDF_REVIEW_OPS_LIB tsdf_ops)
elseif(TARGET tsdfd_ops)
  set(TSDF_REVIEW_OPS_LIB tsdfd_ops)
endif()
if(NOT TSDF_REVIEW_OPS_LIB OR NOT TARGET tsdfd_harness OR NOT TARGET tsdf_client
   OR NOT TARGET tsdf_scenes)
  message(WARNING "tests/review.cmake: no ops library or daemon harness; test_review not built")
  return()
endif()

tsdf_add_test(NAME review SOURCES test_review.c
  LIBS ${TSDF_REVIEW_OPS_LIB} tsdfd_harness tsdf_client tsdf_engine tsdf_scenes
       Threads::Threads
  LABELS daemon TIMEOUT 300)
# zlib's crc32 (to repair PNG chunks) comes with the ops library, which
# links zlib publicly.

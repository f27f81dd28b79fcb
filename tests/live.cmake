# Tests of the live view (issue #12): the per-map ring of sensor poses, and
# further down the view's encodings and the page in a real headless
# Chromium against a daemon fed with the demo scene.
if(NOT TARGET tsdfd_core)
  message(WARNING "tests/live.cmake: no tsdfd_core target; the live view tests are not built")
  return()
endif()

tsdf_add_test(NAME pose_ring SOURCES test_pose_ring.c LIBS tsdfd_core Threads::Threads
  LABELS live TIMEOUT 60)
tsdf_add_test(NAME view_mesh SOURCES test_view_mesh.c LIBS tsdfd_core tsdf_scenes
  LABELS live TIMEOUT 60)
tsdf_add_test(NAME json_out SOURCES test_json_out.c LIBS tsdfd_core LABELS live TIMEOUT 60)

# The page in a real headless Chromium (Debian's chromium, software WebGL)
# against a daemon fed with the demo scene: no console errors, the map in
# the list, a 3D view that is not blank and grows with more frames. Skips
# (77) where Chromium or libjs-three is missing or Chromium cannot run.
if(TARGET tsdfd AND TARGET tsdfctl)
  add_test(NAME live_view
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_live_view.sh $<TARGET_FILE:tsdfd>
            $<TARGET_FILE:tsdfctl> ${PROJECT_SOURCE_DIR}/web)
  set_tests_properties(live_view PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
    LABELS "live;daemon")
endif()

# The PLY writer against an independent reader: tests/make_ply (a tool, not a
# cmocka test) fuses synthetic scenes through the CPU engine and writes PLY
# files; tests/test_ply_open3d.sh loads them with Open3D (Debian's
# python3-open3d, under /usr/bin/python3) and compares the counts, colours,
# normals and, for the sphere, watertightness. Skipped (77) without Open3D.
add_executable(make_ply ${CMAKE_CURRENT_LIST_DIR}/make_ply.c)
target_link_libraries(make_ply PRIVATE tsdf_engine tsdf_scenes tsdf_warnings m)

add_test(NAME ply_open3d
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_ply_open3d.sh $<TARGET_FILE:make_ply>)
set_tests_properties(ply_open3d PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

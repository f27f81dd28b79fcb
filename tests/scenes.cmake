# Tests of the frame sources (scenes/) and the 7-Scenes end-to-end engine test.
tsdf_add_test(NAME synth SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_synth.c LIBS tsdf_scenes)
# The PNG mutation loop repairs chunk CRCs with zlib's crc32.
find_package(ZLIB REQUIRED)
tsdf_add_test(NAME dataset SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dataset.c
              LIBS tsdf_scenes ZLIB::ZLIB)
# Fuses the 450 real 7-Scenes frames on the CPU backend (skips, exit 77,
# without the data). About 45 s on 2 cores at 1 cm voxels (the fusion, and the s16-against-f32 comparison).
tsdf_add_test(NAME kitchen SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kitchen.c
              LIBS tsdf_engine tsdf_scenes TIMEOUT 600)

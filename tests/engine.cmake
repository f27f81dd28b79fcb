# Tests of the volume engine's CPU reference backend (gpu/cpu/*.c,
# gpu/volume.c) and of the PLY writer (scenes/tsdf_ply.c). They need no GPU.
tsdf_add_test(NAME hash SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hash.c LIBS tsdf_engine_internals TIMEOUT 120)
tsdf_add_test(NAME pool SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_pool.c LIBS tsdf_engine_internals TIMEOUT 120)
# The volume API, by topic; volume_testlib.c holds what they share.
add_library(tsdf_volume_testlib STATIC ${CMAKE_CURRENT_LIST_DIR}/volume_testlib.c)
target_include_directories(tsdf_volume_testlib PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(tsdf_volume_testlib PUBLIC tsdf_engine tsdf_testutil PRIVATE tsdf_scenes tsdf_warnings m)
foreach(topic volume volume_raycast volume_limits volume_blocks)
  tsdf_add_test(NAME ${topic} SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_${topic}.c
                LIBS tsdf_volume_testlib tsdf_engine tsdf_scenes TIMEOUT 120)
endforeach()
# 1 against 2, 3 and 7 threads of the CPU backend: the same bits.
tsdf_add_test(NAME threads SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_threads.c
              LIBS tsdf_volume_testlib tsdf_engine tsdf_scenes TIMEOUT 300)
# The CPU raycast against the reference march, bit for bit.
tsdf_add_test(NAME ray_fast SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ray_fast.c
              LIBS tsdf_volume_testlib tsdf_engine_internals tsdf_scenes TIMEOUT 300)
# The CPU raycast against the exact geometry, from poses never fused.
tsdf_add_test(NAME raycast_truth SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_raycast_truth.c
              LIBS tsdf_volume_testlib tsdf_engine tsdf_scenes TIMEOUT 120)
tsdf_add_test(NAME raycast_march SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_raycast_march.c
              LIBS tsdf_engine TIMEOUT 60)
tsdf_add_test(NAME mesh SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mesh.c
              LIBS tsdf_engine tsdf_scenes TIMEOUT 120)
tsdf_add_test(NAME band SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_band.c LIBS tsdf_engine_internals TIMEOUT 120)
tsdf_add_test(NAME sort SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sort.c LIBS tsdf_engine_internals TIMEOUT 60)
tsdf_add_test(NAME store SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store.c LIBS tsdf_engine_internals
              TIMEOUT 120)
tsdf_add_test(NAME evict SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_evict.c LIBS tsdf_engine tsdf_scenes
              TIMEOUT 300)

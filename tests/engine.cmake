# Tests of the volume engine's CPU reference backend (gpu/cpu/*.c,
# gpu/volume.c) and of the PLY writer (scenes/tsdf_ply.c). They need no GPU.
tsdf_add_test(NAME hash SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hash.c LIBS tsdf_engine_internals TIMEOUT 120)
tsdf_add_test(NAME volume SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_volume.c
              LIBS tsdf_engine tsdf_scenes TIMEOUT 120)
tsdf_add_test(NAME raycast_march SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_raycast_march.c
              LIBS tsdf_engine TIMEOUT 60)
tsdf_add_test(NAME mesh SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mesh.c
              LIBS tsdf_engine tsdf_scenes TIMEOUT 120)
tsdf_add_test(NAME band SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_band.c LIBS tsdf_engine_internals TIMEOUT 120)
tsdf_add_test(NAME store SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store.c LIBS tsdf_engine_internals
              TIMEOUT 120)
tsdf_add_test(NAME evict SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_evict.c LIBS tsdf_engine tsdf_scenes
              TIMEOUT 300)

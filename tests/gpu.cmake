# GPU tests of the CUDA backend (gpu/cuda/*.cu): GPU-vs-CPU agreement, the
# device hash table under stress, the frame pipeline. Label "gpu"; each
# program exits 77 ("SKIPPED: no usable GPU") where no GPU is usable, so
# CTest reports them as skipped on machines without one. Run them with
# scripts/gpu-test.sh on a GPU machine.
if(TSDF_HAVE_CUDA)
  tsdf_add_test(NAME cuda_hash SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_hash.c
                LIBS tsdf_engine_internals CUDA::cudart_static LABELS gpu TIMEOUT 300)
  tsdf_add_test(NAME cuda_pipeline SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_pipeline.c
                LIBS tsdf_engine_internals tsdf_scenes LABELS gpu TIMEOUT 300)
  tsdf_add_test(NAME cuda_volume SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_volume.c
                LIBS tsdf_engine tsdf_scenes LABELS gpu TIMEOUT 600)
endif()

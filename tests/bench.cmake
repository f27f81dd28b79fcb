# Smoke tests of the engine benchmark (bench/bench_engine.c) on 12 frames of
# the 7-Scenes kitchen: not a measurement, but every check it makes before
# it prints a time must pass -- back to back against synced, each
# incremental mesh against the whole mesh, and with CUDA the GPU against
# the CPU reference and the copies. Label "bench". Each exits 77 (skipped)
# without the data ($TSDF_DATA_DIR, see tests/testutil.h) or, for the CUDA
# one (also labelled "gpu", so scripts/gpu-test.sh runs it), without a GPU.
if(TARGET bench_engine)
  set(TSDF_BENCH_SMOKE_ARGS --frames 12 --check-frames 5 --raycast-reps 1 --mesh-reps 1
    --inc-mesh-step 3)
  add_test(NAME bench_engine_smoke COMMAND bench_engine --backend cpu ${TSDF_BENCH_SMOKE_ARGS})
  set_tests_properties(bench_engine_smoke PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
    LABELS bench)
  if(TSDF_HAVE_CUDA)
    add_test(NAME bench_engine_smoke_cuda
      COMMAND bench_engine --backend cuda ${TSDF_BENCH_SMOKE_ARGS})
    set_tests_properties(bench_engine_smoke_cuda PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
      LABELS "bench;gpu")
  endif()
endif()

# The transport's floor (bench/bench_transport.c): a few frame-sized
# round trips over ipc:// and tcp://, and with the frames in a shared ring,
# every reply checked.
if(TARGET bench_transport)
  add_test(NAME bench_transport_smoke_ipc COMMAND bench_transport --reps 20)
  add_test(NAME bench_transport_smoke_tcp COMMAND bench_transport --reps 20 --transport tcp)
  add_test(NAME bench_transport_smoke_shm COMMAND bench_transport --reps 20 --shm)
  add_test(NAME bench_transport_smoke_reply COMMAND bench_transport --reps 20 --reply)
  add_test(NAME bench_transport_smoke_reply_shm COMMAND bench_transport --reps 20 --reply --shm)
  set_tests_properties(bench_transport_smoke_ipc bench_transport_smoke_tcp
    bench_transport_smoke_shm bench_transport_smoke_reply bench_transport_smoke_reply_shm
    PROPERTIES TIMEOUT 60 LABELS bench)
endif()

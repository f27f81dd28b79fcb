/*
 * testutil.h - helpers shared by every test program.
 */
#ifndef TSDF_TESTUTIL_H
#define TSDF_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* CTest treats this exit code as "skipped" (SKIP_RETURN_CODE). */
#define TSDF_TEST_SKIP_CODE 77

/* The 7-Scenes folder: $TSDF_DATA_DIR if set, else
 * $TSDF_SOURCE_DIR/../shared/data/7scenes-redkitchen. Returns NULL (and
 * prints why) when the folder is missing. */
const char *tsdf_test_data_dir(void);

/* The path of rel inside the source tree ($TSDF_SOURCE_DIR, which CTest
 * sets, else the tree the test was built from), in a static buffer. */
const char *tsdf_test_source_path(const char *rel);

/* Prints "SKIPPED: <why>" and exits the whole test program with code 77.
 * For tests whose precondition (a GPU, a data set) is missing. */
void tsdf_test_skip_program(const char *fmt, ...);

/* From now on SIGUSR1 prints the main thread's backtrace to stderr (the
 * program goes on). For the GPU programs, whose sanitizer runs have
 * stalled where no debugger is installed (tests/trace_signal.c). */
void tsdf_test_trace_on_signal(void);

/* A scratch directory unique to this process under $TMPDIR, created empty
 * on the first call (mkdtemp). */
const char *tsdf_test_tmpdir(void);

/* A deterministic pseudo-random sequence (xorshift64*) from one process-wide
 * state with a fixed seed, so that a failure reproduces run after run. */
uint64_t tsdf_test_rng(void);

/* 1 when the n bytes at s are valid UTF-8 by RFC 3629 (no overlong forms,
 * no surrogates, nothing past U+10FFFF, no truncated sequence), else 0.
 * Written apart from the codec's own check, so that a test compares two. */
int tsdf_test_utf8_valid(const void *s, size_t n);

/* 1 when data holds one msgpack value every str of which (map keys too, at
 * any depth) passes tsdf_test_utf8_valid; 0 when one does not or the bytes
 * do not unpack. Checks what a strict peer sees, before any decoder of ours
 * could repair it. */
int tsdf_test_msgpack_strs_valid(const void *data, size_t len);

#endif

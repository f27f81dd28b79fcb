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

/* Prints "SKIPPED: <why>" and exits the whole test program with code 77.
 * For tests whose precondition (a GPU, a data set) is missing. */
void tsdf_test_skip_program(const char *fmt, ...);

/* A scratch directory unique to this process under $TMPDIR (created). */
const char *tsdf_test_tmpdir(void);

#endif

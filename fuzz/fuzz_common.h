/*
 * fuzz_common.h - what the libFuzzer targets in fuzz/ share: a private
 * scratch directory for the readers that take a path, an invariant check
 * that crashes loudly, and the checksum repairs that let mutated snapshots
 * and PNG files get past their CRCs to the code behind them.
 *
 * Threads: libFuzzer calls a target from one thread; none of this is
 * thread-safe.
 */
#ifndef TSDF_FUZZ_COMMON_H
#define TSDF_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* A broken invariant is a finding: print where and abort, so that libFuzzer
 * saves the input as a crash. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fuzz_fail(__FILE__, __LINE__, #cond);                                                  \
    } while (0)

void fuzz_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/* The path of file name in this process's scratch directory (created on
 * first use under $TSDF_FUZZ_TMPDIR, else /dev/shm when it exists, else
 * /tmp; removed with everything fuzz_path named when the process exits).
 * The string is static: one per name, valid until exit. */
const char *fuzz_path(const char *name);

/* Writes len bytes into the scratch file name (replacing it); returns its
 * path. A failed write is an environment fault, not a finding: it aborts. */
const char *fuzz_write(const char *name, const void *data, size_t len);

/* Rewrites every checksum of a snapshot file in place (the header's crc32,
 * each map's payload crc32, the trailer's size and whole-file crc32; format
 * in docs/OPERATIONS.md) where the sizes it reads let it find them, so that
 * a mutation reaches the checks behind the checksums. Header timestamps are
 * left alone. */
void fuzz_snap_repair(uint8_t *p, size_t len);

/* Rewrites the crc32 of every PNG chunk whose length fits in the file. */
void fuzz_png_repair(uint8_t *p, size_t len);

/* 1 when a tsdf error code is one of the table's (0 included). */
int fuzz_known_code(int rc);

/* The checks every decoder result gets: a known code, a terminated error
 * key and message (the fields of tsdf_proto_error), and a message whenever
 * the code is an error. Returns 1 when rc is an error (nothing more to
 * check), 0 on TSDF_OK. */
int fuzz_check_result(int rc, const char *key, size_t key_size, const char *message,
                      size_t message_size);

#endif /* TSDF_FUZZ_COMMON_H */

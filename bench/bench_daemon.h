/*
 * bench_daemon.h - what the daemon benchmark's two files share.
 *
 * bench_daemon.c is the run: it starts or reaches the daemon, drives the
 * client and query threads, reconciles the daemon's counters and prints
 * the results. bench_daemon_opts.c holds the parts that need none of that:
 * the command line (bd_parse_args, bd_usage) and the latency samples the
 * threads record and the report prints (bd_sample_add, bd_sample_merge,
 * bd_print_latency).
 *
 * Ownership: the caller owns every struct here; a sample_set owns its ms
 * array, which bd_sample_merge frees from its source. Threads: a sample_set
 * is used by one thread at a time; the functions keep no state of their own.
 */
#ifndef TSDF_BENCH_DAEMON_H
#define TSDF_BENCH_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Latency samples one thread keeps; later ones are counted, not kept. */
#define MAX_SAMPLES_PER_THREAD (1u << 20)
/* The --set overrides one run takes. */
#define MAX_SETS 32

typedef enum { MODE_ACKED, MODE_FF } bench_mode;

/* The command line, as bd_parse_args leaves it. The strings point into
 * argv, which must outlive the struct. */
typedef struct {
    const char *spawn_bin;
    const char *addr;
    const char *frames_addr;
    const char *backend;
    int tcp;
    uint32_t clients;
    double seconds;
    bench_mode mode;
    int shared_map;
    uint32_t width, height;
    const char *scene;
    int raycast, mesh;
    uint32_t query_period_ms;
    uint32_t raycast_width, raycast_height;
    const char *sets[MAX_SETS];
    size_t set_count;
    double settle_timeout_s;
    int keep;
} bench_opts;

/* A growable array of latencies, in ms. Zero-initialised it is empty. */
typedef struct {
    double *ms;
    size_t n, cap;
    uint64_t not_kept;
} sample_set;

/* Prints the usage text and the defaults to `to`. */
void bd_usage(FILE *to);

/* Fills o from argv, defaults first. Returns 0, 1 for --help, -1 for a
 * usage error (said on stderr). */
int bd_parse_args(int argc, char **argv, bench_opts *o);

/* Appends one latency (ms) to s; past MAX_SAMPLES_PER_THREAD, or when the
 * array cannot grow, the sample is counted in not_kept instead. */
void bd_sample_add(sample_set *s, double ms);

/* Moves every sample of src into dst (src is emptied and its array freed). */
void bd_sample_merge(sample_set *dst, sample_set *src);

/* Sorts s and prints p50 / p90 / p99 / max (ms) and the count. */
void bd_print_latency(const char *name, sample_set *s);

#endif

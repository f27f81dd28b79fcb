/*
 * bench_cputime.h - where a benchmark's host CPU time goes: the CPU
 * seconds of a child process (the spawned daemon, /proc/PID/stat), of
 * this process (the clients, getrusage) and of the whole machine
 * (/proc/stat), read at the start and the end of a window, so that a
 * throughput can be told host-bound (the machine's cores busy) or not.
 *
 * Linux only (procfs); where a figure cannot be read it is negative and
 * the report says so rather than print a wrong one.
 */
#ifndef TSDF_BENCH_CPUTIME_H
#define TSDF_BENCH_CPUTIME_H

#include <sys/types.h>

typedef struct {
    double wall_s;  /* CLOCK_MONOTONIC */
    double child_s; /* user + system CPU seconds of the child; < 0: unknown */
    double self_s;  /* user + system CPU seconds of this process */
    double busy_s;  /* non-idle CPU seconds of the machine, all cores; < 0: unknown */
    int cores;      /* online cores */
} bench_cputime;

/* Reads the figures now; child 0: none. */
void bench_cputime_read(pid_t child, bench_cputime *out);

/* Prints one line per figure for the window [a, b], per second and per
 * item (frames) when items > 0. */
void bench_cputime_report(const bench_cputime *a, const bench_cputime *b, double items,
                          const char *child_name, const char *self_name);

#endif /* TSDF_BENCH_CPUTIME_H */

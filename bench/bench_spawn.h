/*
 * bench_spawn.h - a tsdfd child process for the daemon benchmark.
 *
 * bench_spawn_start makes a fresh directory under $TMPDIR (else /tmp),
 * writes a configuration there (the sockets on ipc:// in that directory,
 * or on tcp://127.0.0.1 ports that were free a moment before, the backend
 * asked for, room for the benchmark's maps and connections, no snapshots,
 * no metrics port, no periodic log line), starts the given tsdfd binary on
 * it with its stderr in <dir>/tsdfd.log, and waits until it answers ping.
 * bench_spawn_stop sends SIGTERM and waits for the exit status;
 * bench_spawn_cleanup removes the directory.
 *
 * The tests have their own harness (tests/daemon_harness.h); this one
 * exists because a benchmark is built without the tests (-DTSDF_TESTS=OFF)
 * and needs a backend, tcp:// listeners and limits the tests never set.
 *
 * Ownership: the caller owns the bench_spawn struct; nothing in it is
 * allocated. Threads: one thread uses one bench_spawn.
 * Errors: functions return 0 or -1 and say why on stderr.
 */
#ifndef TSDF_BENCH_SPAWN_H
#define TSDF_BENCH_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

#define BENCH_SPAWN_PATH_LEN 512

typedef struct {
    const char *bin;         /* path of the tsdfd binary */
    const char *backend;     /* [volume] backend: "cpu", "cuda" or "auto" */
    int tcp;                 /* 1: tcp://127.0.0.1 listeners; 0: ipc:// ones */
    int max_maps;            /* [volume] max_maps (1..256) */
    int max_connections;     /* [server] max_connections (1..4096) */
    const char *const *sets; /* "SECTION.KEY=VALUE" overrides (tsdfd --set), may be NULL */
    size_t set_count;
    int ready_timeout_ms; /* how long the daemon may take to answer ping */
} bench_spawn_opts;

typedef struct {
    char dir[BENCH_SPAWN_PATH_LEN];
    char config_path[BENCH_SPAWN_PATH_LEN];
    char log_path[BENCH_SPAWN_PATH_LEN];
    char req_url[BENCH_SPAWN_PATH_LEN];    /* REQ/REP address of the daemon */
    char frames_url[BENCH_SPAWN_PATH_LEN]; /* PUSH/PULL address */
    char ring_path[BENCH_SPAWN_PATH_LEN];  /* [server] ring_socket (PROTOCOL.md 6.10) */
    pid_t pid;                             /* 0 when not running */
} bench_spawn;

/* Starts a daemon as above. Returns 0 once it answered ping, -1 otherwise
 * (the child is then killed, its log printed; the directory is kept). */
int bench_spawn_start(bench_spawn *s, const bench_spawn_opts *o);

/* 1 while the child runs (it has not exited), 0 otherwise. */
int bench_spawn_alive(bench_spawn *s);

/* SIGTERM, then waits up to timeout_ms (then SIGKILL). Returns the exit
 * code (0: a clean stop) or -1 (a signal, or it did not stop in time). */
int bench_spawn_stop(bench_spawn *s, int timeout_ms);

/* Prints the last lines of the daemon's log to stderr. */
void bench_spawn_print_log(const bench_spawn *s, int last_lines);

/* Removes the directory and everything in it (the daemon must be stopped). */
void bench_spawn_cleanup(bench_spawn *s);

#endif /* TSDF_BENCH_SPAWN_H */

/*
 * daemon_harness.h - start and stop a real tsdfd for tests.
 *
 * tsdfd_harness_start runs the tsdfd binary of this build tree as a child
 * process on ipc:// sockets in a fresh directory under the test's scratch
 * dir, with the CPU backend and a generated configuration file (plus the
 * caller's extra INI text), and waits until it answers ping. The daemon's
 * stderr goes to <dir>/tsdfd.log (printed by tsdfd_harness_dump_log).
 * tsdfd_harness_stop sends SIGTERM and waits for the exit status.
 *
 * The binary is $TSDFD_BIN when set, else the one this build made.
 * Threads: use one harness from one thread (clients may be many).
 */
#ifndef TSDFD_DAEMON_HARNESS_H
#define TSDFD_DAEMON_HARNESS_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSDFD_HARNESS_PATH_LEN 512

typedef struct {
    char dir[TSDFD_HARNESS_PATH_LEN];         /* everything of this daemon lives here */
    char state_dir[TSDFD_HARNESS_PATH_LEN];   /* its state_dir (snapshots) */
    char req_url[TSDFD_HARNESS_PATH_LEN];     /* ipc:// REQ/REP address */
    char frames_url[TSDFD_HARNESS_PATH_LEN];  /* ipc:// PUSH/PULL address */
    char config_path[TSDFD_HARNESS_PATH_LEN]; /* the generated config file */
    char log_path[TSDFD_HARNESS_PATH_LEN];    /* the daemon's stderr */
    pid_t pid;                                /* 0 when not running */
} tsdfd_harness;

/* The tsdfd binary the harness runs. */
const char *tsdfd_harness_bin(void);

/*
 * Starts a daemon. extra_ini (may be NULL) is appended to the generated
 * configuration, which sets [server] listen, frames_listen and state_dir,
 * [volume] backend = cpu, [snapshot] autosave_period_s = 0, save_on_stop =
 * false, load_on_start = false, [metrics] enabled = false (so parallel tests
 * never share port 9464 or a state directory) and [log] stats_period_s =
 * 0; the extra text may
 * repeat those sections and keys (later lines win), and "@DIR@" in it
 * stands for h->dir (e.g. "listen = ipc://@DIR@/req.sock, tls+tcp://..."). extra_args (NULL or
 * NULL-terminated) are appended to the command line.
 * Returns 0 once the daemon answers ping (within 20 s), -1 otherwise (the
 * child is then killed and its log printed).
 */
int tsdfd_harness_start(tsdfd_harness *h, const char *extra_ini, const char *const *extra_args);

/* Sends SIGTERM and waits up to timeout_ms. Returns the exit code (0: a
 * clean stop), or -1 when the daemon died from a signal or did not stop in
 * time (then it is killed with SIGKILL). */
int tsdfd_harness_stop(tsdfd_harness *h, int timeout_ms);

/* Prints the daemon's log to stderr (for failing tests). */
void tsdfd_harness_dump_log(const tsdfd_harness *h);

#ifdef __cplusplus
}
#endif

#endif /* TSDFD_DAEMON_HARNESS_H */

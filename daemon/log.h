/*
 * log.h - the daemon's logger.
 *
 * One line per event on stderr, with a level prefix. When $JOURNAL_STREAM is
 * set (stderr is connected to the systemd journal) the prefix is the
 * syslog-style "<N>" that journald turns into a priority; otherwise it is a
 * UTC timestamp and a level word, which reads well on a terminal.
 *
 * Threads: every function and macro here may be called from any thread. A
 * line is written with one write(2), so lines of different threads never
 * interleave.
 *
 * The TSDF_LOG macro checks the level before it evaluates its arguments, so
 * a disabled debug line costs one integer comparison (the Redis habit).
 */
#ifndef TSDF_DAEMON_LOG_H
#define TSDF_DAEMON_LOG_H

#include <stdarg.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Levels, most severe first; a message is printed when level <= the current level. */
#define TSDF_LOG_ERROR 0
#define TSDF_LOG_WARN 1
#define TSDF_LOG_INFO 2
#define TSDF_LOG_DEBUG 3

/* Set the current level (clamped to [TSDF_LOG_ERROR, TSDF_LOG_DEBUG]). Default: INFO. */
void tsdf_log_set_level(int level);

/* The current level. */
int tsdf_log_get_level(void);

/* Parse "error", "warn"/"warning", "info" or "debug" into *level. Returns
 * TSDF_OK, or TSDF_EINVAL for any other string (then *level is unchanged). */
int tsdf_log_parse_level(const char *name, int *level);

/* Write one line unconditionally (the macros below filter by level first). */
void tsdf_log_write(int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The state of one rate-limited call site; one static instance per site. */
typedef struct {
    int64_t window_start_ms; /* start of the current window (monotonic ms) */
    uint32_t in_window;      /* messages seen in the current window */
    uint32_t suppressed;     /* messages not printed in the current window */
} tsdf_log_ratelimit;

/* Messages printed per window per call site, and the window length (ms). */
#define TSDF_LOG_RL_BURST 5
#define TSDF_LOG_RL_WINDOW_MS 5000

/* Decide whether a rate-limited message may be printed now. When a new
 * window starts after messages were suppressed, prints the "N messages
 * suppressed" line first. Returns 1 to print, 0 to suppress. Thread-safe. */
int tsdf_log_ratelimit_allow(tsdf_log_ratelimit *rl, int level, const char *key);

#define TSDF_LOG(level, ...)                                                                       \
    do {                                                                                           \
        if ((level) <= tsdf_log_get_level())                                                       \
            tsdf_log_write((level), __VA_ARGS__);                                                  \
    } while (0)

/*
 * Like TSDF_LOG, but allows TSDF_LOG_RL_BURST messages per
 * TSDF_LOG_RL_WINDOW_MS for this call site, then counts the rest and reports
 * "<key>: N messages suppressed" when the next window opens. key_static must
 * be a string literal (it names the site in the suppression line). Meant for
 * events a bad client can trigger at will (malformed messages), so that no
 * client can flood the journal.
 */
#define TSDF_LOG_RATELIMITED(level, key_static, ...)                                               \
    do {                                                                                           \
        static tsdf_log_ratelimit tsdf_log_rl_site_;                                               \
        if ((level) <= tsdf_log_get_level() &&                                                     \
            tsdf_log_ratelimit_allow(&tsdf_log_rl_site_, (level), "" key_static))                  \
            tsdf_log_write((level), __VA_ARGS__);                                                  \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* TSDF_DAEMON_LOG_H */

/*
 * log.c - one-line-per-event logging to stderr (see log.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "log.h"

#include "tsdf_error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = TSDF_LOG_INFO;

/* journald maps "<N>" prefixes onto syslog priorities: err=3, warning=4,
 * info=6, debug=7. Decided once, at the first line, because the environment
 * does not change under a running daemon. */
static int log_journal = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

/* One mutex guards every rate-limit site: they are touched only when a
 * message is about to be printed, which is rare next to the hot paths. */
static pthread_mutex_t log_rl_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_detect(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    log_journal = (js != NULL && js[0] != '\0') ? 1 : 0;
}

void tsdf_log_set_level(int level)
{
    if (level < TSDF_LOG_ERROR)
        level = TSDF_LOG_ERROR;
    if (level > TSDF_LOG_DEBUG)
        level = TSDF_LOG_DEBUG;
    atomic_store(&log_level, level);
}

int tsdf_log_get_level(void)
{
    return atomic_load_explicit(&log_level, memory_order_relaxed);
}

int tsdf_log_parse_level(const char *name, int *level)
{
    if (name == NULL || level == NULL)
        return TSDF_EINVAL;
    if (strcasecmp(name, "error") == 0)
        *level = TSDF_LOG_ERROR;
    else if (strcasecmp(name, "warn") == 0 || strcasecmp(name, "warning") == 0)
        *level = TSDF_LOG_WARN;
    else if (strcasecmp(name, "info") == 0)
        *level = TSDF_LOG_INFO;
    else if (strcasecmp(name, "debug") == 0)
        *level = TSDF_LOG_DEBUG;
    else
        return TSDF_EINVAL;
    return TSDF_OK;
}

static int64_t log_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void log_vwrite(int level, const char *fmt, va_list ap)
{
    static const char *const words[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    static const int prio[] = {3, 4, 6, 7};
    char line[2048];
    int n;

    pthread_once(&log_once, log_detect);
    if (level < TSDF_LOG_ERROR)
        level = TSDF_LOG_ERROR;
    if (level > TSDF_LOG_DEBUG)
        level = TSDF_LOG_DEBUG;

    if (log_journal) {
        n = snprintf(line, sizeof line, "<%d>", prio[level]);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ tsdfd[%ld] %s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, (long)getpid(), words[level]);
    }
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof line) {
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        if (m > 0)
            n += m;
    }
    /* A truncated line still ends with a newline so the next one starts clean. */
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    /* Keep one event on one line: a newline inside a message (say, from a
     * client-supplied string) would otherwise forge a second log line. */
    for (int i = 0; i < n; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    line[n++] = '\n';

    /* One write(2) per line keeps lines of different threads whole. */
    const char *p = line;
    size_t left = (size_t)n;
    while (left > 0) {
        ssize_t w = write(STDERR_FILENO, p, left);
        if (w <= 0)
            break;
        p += w;
        left -= (size_t)w;
    }
}

void tsdf_log_write(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}

int tsdf_log_ratelimit_allow(tsdf_log_ratelimit *rl, int level, const char *key)
{
    int64_t now = log_now_ms();
    uint32_t suppressed = 0;
    int allow;

    pthread_mutex_lock(&log_rl_lock);
    if (rl->window_start_ms == 0 || now - rl->window_start_ms >= TSDF_LOG_RL_WINDOW_MS) {
        suppressed = rl->suppressed;
        rl->window_start_ms = now;
        rl->in_window = 0;
        rl->suppressed = 0;
    }
    if (rl->in_window < TSDF_LOG_RL_BURST) {
        rl->in_window++;
        allow = 1;
    } else {
        rl->suppressed++;
        allow = 0;
    }
    pthread_mutex_unlock(&log_rl_lock);

    if (suppressed > 0)
        tsdf_log_write(level, "%s: %u messages suppressed", key ? key : "log", suppressed);
    return allow;
}

#define _POSIX_C_SOURCE 200809L

#include "notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#ifdef TSDF_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>

static void send_state(const char *state)
{
    /* unset_environment = 0: the watchdog kicks need $NOTIFY_SOCKET for the
     * whole life of the daemon. */
    int r = sd_notify(0, state);
    if (r < 0)
        TSDF_LOG_RATELIMITED(TSDF_LOG_WARN, "sd_notify", "notify: sd_notify(\"%s\") failed: %s",
                             state, strerror(-r));
}

uint64_t notify_watchdog_usec(void)
{
    uint64_t usec = 0;
    /* > 0 only when $WATCHDOG_USEC is set and $WATCHDOG_PID, if present,
     * names this process. */
    if (sd_watchdog_enabled(0, &usec) > 0)
        return usec;
    return 0;
}
#else
static void send_state(const char *state)
{
    (void)state;
}

uint64_t notify_watchdog_usec(void)
{
    return 0;
}
#endif

void notify_ready(void)
{
    char msg[64];
    snprintf(msg, sizeof msg, "READY=1\nMAINPID=%ld", (long)getpid());
    send_state(msg);
}

void notify_status(const char *fmt, ...)
{
    char msg[7 + 256 + 1] = "STATUS=";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + 7, sizeof msg - 7, fmt, ap);
    va_end(ap);
    /* A newline would start a new KEY=VALUE assignment in the datagram. */
    for (char *p = msg; *p; p++) {
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    }
    send_state(msg);
}

void notify_stopping(void)
{
    send_state("STOPPING=1");
}

void notify_watchdog_kick(void)
{
    send_state("WATCHDOG=1");
}

void notify_extend_timeout(uint64_t usec)
{
    char msg[64];
    snprintf(msg, sizeof msg, "EXTEND_TIMEOUT_USEC=%llu", (unsigned long long)usec);
    send_state(msg);
}

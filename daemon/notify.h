/*
 * notify.h - the daemon's side of systemd's notify protocol (sd_notify).
 *
 * Under `Type=notify` systemd waits for READY=1 before it calls the
 * service started, shows STATUS= in `systemctl status`, and with
 * WatchdogSec= restarts the daemon when WATCHDOG=1 stops arriving.
 *
 * Every function is a no-op returning quietly when the daemon does not run
 * under systemd ($NOTIFY_SOCKET unset) or was built without libsystemd
 * (TSDF_HAVE_SYSTEMD undefined), so callers never need to test for either.
 * Failures to notify are logged (rate-limited) and otherwise ignored: the
 * daemon must keep serving even if the notify socket misbehaves.
 *
 * Threads: every function may be called from any thread (sd_notify opens a
 * fresh datagram socket per call and keeps no state).
 */
#ifndef TSDF_DAEMON_NOTIFY_H
#define TSDF_DAEMON_NOTIFY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tells systemd that start-up is complete (sockets bound, maps restored).
 * Also sends MAINPID so that NotifyAccess=main matches. */
void notify_ready(void);

/* Sets the one-line status shown by `systemctl status` (printf format; the
 * text is cut at 256 bytes and newlines become spaces). */
void notify_status(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Tells systemd that an orderly shutdown has begun (draining, saving). */
void notify_stopping(void);

/* The watchdog period systemd expects in microseconds (WatchdogSec=), or 0
 * when the watchdog is off or not under systemd. Kick at least twice per
 * period, e.g. from a timer of notify_watchdog_usec() / 2 / 1000 ms. */
uint64_t notify_watchdog_usec(void);

/* Sends WATCHDOG=1: "the daemon is alive". Call from the main loop's timer,
 * so that a wedged loop stops the kicks and systemd restarts the service. */
void notify_watchdog_kick(void);

/* Asks systemd for more time for a slow start or stop (EXTEND_TIMEOUT_USEC),
 * e.g. while loading or saving a large snapshot. */
void notify_extend_timeout(uint64_t usec);

#ifdef __cplusplus
}
#endif

#endif /* TSDF_DAEMON_NOTIFY_H */

/*
 * test_notify.c - the sd_notify wrapper (daemon/notify.c) against a fake
 * notify socket: an AF_UNIX datagram socket named by $NOTIFY_SOCKET, which
 * is all systemd's side of the protocol is.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"
#include "testutil.h"

static int sock = -1;
static char sock_path[108];

static int setup(void **state)
{
    snprintf(sock_path, sizeof sock_path, "%s/notify.sock", tsdf_test_tmpdir());
    unlink(sock_path);
    sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(sock >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock_path);
    assert_int_equal(bind(sock, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setenv("NOTIFY_SOCKET", sock_path, 1);
    return 0;
}

static int teardown(void **state)
{
    close(sock);
    unlink(sock_path);
    rmdir(tsdf_test_tmpdir());
    return 0;
}

/* The next datagram, or "" when none came within the timeout. */
static const char *next_message(void)
{
    static char buf[1024];
    ssize_t n = recv(sock, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void test_ready_status_stopping(void **state)
{
    char expect[64];
    notify_ready();
    snprintf(expect, sizeof expect, "READY=1\nMAINPID=%ld", (long)getpid());
    assert_string_equal(next_message(), expect);
    notify_status("serving %d maps\non 2 sockets", 3);
    assert_string_equal(next_message(), "STATUS=serving 3 maps on 2 sockets");
    notify_stopping();
    assert_string_equal(next_message(), "STOPPING=1");
    notify_extend_timeout(5000000);
    assert_string_equal(next_message(), "EXTEND_TIMEOUT_USEC=5000000");
}

static void test_status_is_bounded(void **state)
{
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    notify_status("%s", big);
    const char *m = next_message();
    assert_true(strncmp(m, "STATUS=xxx", 10) == 0);
    assert_int_equal(strlen(m), 7 + 256);
}

static void test_watchdog(void **state)
{
    char pid[32];
    unsetenv("WATCHDOG_USEC");
    assert_int_equal(notify_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "2000000", 1);
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    assert_int_equal(notify_watchdog_usec(), 2000000);
    /* A watchdog meant for another process is not ours to feed. */
    snprintf(pid, sizeof pid, "%ld", (long)getpid() + 1);
    setenv("WATCHDOG_PID", pid, 1);
    assert_int_equal(notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
    notify_watchdog_kick();
    assert_string_equal(next_message(), "WATCHDOG=1");
}

static void test_no_socket_is_a_quiet_no_op(void **state)
{
    unsetenv("NOTIFY_SOCKET");
    notify_ready();
    notify_status("x");
    notify_watchdog_kick();
    notify_stopping();
    assert_string_equal(next_message(), "");
    setenv("NOTIFY_SOCKET", sock_path, 1);
}

int main(void)
{
#ifndef TSDF_HAVE_SYSTEMD
    tsdf_test_skip_program("built without libsystemd: notify is a no-op");
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_status_stopping),
        cmocka_unit_test(test_status_is_bounded),
        cmocka_unit_test(test_watchdog),
        cmocka_unit_test(test_no_socket_is_a_quiet_no_op),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

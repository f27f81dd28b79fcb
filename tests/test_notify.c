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
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
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
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tsdf_test_tmpdir());
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tsdf_test_tmpdir());
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

#ifndef TSDFD_BIN
#define TSDFD_BIN ""
#endif

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* The daemon's side of the protocol, end to end: started with a notify
 * socket and a 200 ms watchdog, tsdfd must send READY=1 (with its pid),
 * STATUS=, WATCHDOG=1 at least every 100 ms, and STOPPING=1 on SIGTERM,
 * then exit 0. */
static void test_daemon_notifies(void **state)
{
    const char *bin = getenv("TSDFD") ? getenv("TSDFD") : TSDFD_BIN;
    if (!*bin || access(bin, X_OK) != 0) {
        printf("SKIPPED: no tsdfd binary\n");
        skip();
    }
    char dir[4096], req[4200], frames[4200];
    snprintf(dir, sizeof dir, "%s", tsdf_test_tmpdir());
    snprintf(req, sizeof req, "ipc://%s/req.sock", dir);
    snprintf(frames, sizeof frames, "ipc://%s/frames.sock", dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("WATCHDOG_USEC", "200000", 1);
        unsetenv("WATCHDOG_PID");
        char *argv[] = {(char *)bin, "--backend", "cpu", "--listen",    req, "--frames-listen",
                        frames,      "--metrics", "off", "--state-dir", dir, "--log-level",
                        "warn",      NULL};
        execv(bin, argv);
        _exit(127);
    }
    int ready = 0, status_lines = 0, kicks = 0, stopping = 0;
    double t_ready = 0, t0 = now_s();
    char expect_ready[64];
    snprintf(expect_ready, sizeof expect_ready, "MAINPID=%ld", (long)pid);
    /* Until READY, a STATUS line and WATCHDOG_KICKS kicks after READY: the
     * kicks keep coming, which is what the watchdog needs (how often is the
     * loop's timer's, which a busy host may stretch). A generous deadline
     * for a daemon that never gets there. */
    enum { WATCHDOG_KICKS = 5 };
    while (now_s() - t0 < 120.0 && !(ready && status_lines >= 1 && kicks >= WATCHDOG_KICKS)) {
        const char *m = next_message();
        if (strstr(m, "READY=1")) {
            assert_non_null(strstr(m, expect_ready));
            ready = 1;
            t_ready = now_s();
        }
        status_lines += strncmp(m, "STATUS=", 7) == 0;
        kicks += ready && strcmp(m, "WATCHDOG=1") == 0;
    }
    assert_true(ready);
    assert_true(status_lines >= 1);
    assert_true(kicks >= WATCHDOG_KICKS);
    const double kick_s = now_s() - t_ready;
    assert_int_equal(kill(pid, SIGTERM), 0);
    t0 = now_s();
    while (now_s() - t0 < 120.0 && !stopping)
        stopping = strcmp(next_message(), "STOPPING=1") == 0;
    int wstatus;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(stopping);
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    printf("tsdfd: READY, %d STATUS lines, %d watchdog kicks in %.2f s, STOPPING, exit 0\n",
           status_lines, kicks, kick_s);
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
        cmocka_unit_test(test_daemon_notifies),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

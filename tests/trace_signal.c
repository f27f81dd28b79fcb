/* The main thread's backtrace on SIGUSR1, for a test program that stops
 * making progress where no debugger can attach (scripts/gpu-test.sh sends
 * the signal to a sanitizer run past its time limit). */
#define _GNU_SOURCE
#include "testutil.h"

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static pthread_t trace_main;

static void write_str(const char *s)
{
    ssize_t n = write(STDERR_FILENO, s, strlen(s));
    (void)n;
}

static void on_trace_signal(int sig)
{
    /* The kernel gives a process-directed signal to any thread that does
     * not block it: pass it on to the main thread, whose stack is wanted. */
    if (!pthread_equal(pthread_self(), trace_main)) {
        pthread_kill(trace_main, sig);
        return;
    }
    void *frames[64];
    int n = backtrace(frames, 64);
    write_str("== backtrace of the main thread (SIGUSR1):\n");
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    write_str("== end of backtrace\n");
}

void tsdf_test_trace_on_signal(void)
{
    trace_main = pthread_self();
    /* backtrace() loads libgcc on its first call, which allocates: do
     * that here, not in the handler. */
    void *warm[2];
    (void)backtrace(warm, 2);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_trace_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
}

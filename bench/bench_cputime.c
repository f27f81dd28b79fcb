/*
 * bench_cputime.c - host CPU time of a benchmark's window (see
 * bench_cputime.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_cputime.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_clock.h"

/* utime + stime of /proc/PID/stat, in seconds; -1 when unreadable. Fields
 * 14 and 15, counted after the command name's closing parenthesis (the
 * name may hold spaces). */
static double proc_cpu_s(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return -1.0;
    size_t n = fread(line, 1, sizeof line - 1, fp);
    fclose(fp);
    line[n] = '\0';
    const char *p = strrchr(line, ')');
    unsigned long long ut = 0, st = 0;
    /* After ")": state (field 3), then fields 4..13, then utime, stime. */
    if (p == NULL ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1.0;
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? (double)(ut + st) / (double)hz : -1.0;
}

/* Busy (all but idle and iowait) seconds of the machine's "cpu" line. */
static double machine_busy_s(void)
{
    FILE *fp = fopen("/proc/stat", "r");
    if (fp == NULL)
        return -1.0;
    unsigned long long v[8] = {0};
    int got = fscanf(fp, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                     &v[4], &v[5], &v[6], &v[7]);
    fclose(fp);
    long hz = sysconf(_SC_CLK_TCK);
    if (got != 8 || hz <= 0)
        return -1.0;
    /* user nice system idle iowait irq softirq steal */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

void bench_cputime_read(pid_t child, bench_cputime *out)
{
    struct rusage ru;
    memset(out, 0, sizeof *out);
    out->wall_s = now_ms() / 1e3;
    out->child_s = child > 0 ? proc_cpu_s(child) : -1.0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        out->self_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                      (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    else
        out->self_s = -1.0;
    out->busy_s = machine_busy_s();
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    out->cores = c > 0 ? (int)c : 0;
}

static void line(const char *name, double a, double b, double wall, double items)
{
    if (a < 0.0 || b < 0.0 || wall <= 0.0) {
        printf("  host CPU, %-20s unknown\n", name);
        return;
    }
    double s = b - a;
    printf("  host CPU, %-20s %6.2f cores", name, s / wall);
    if (items > 0.0)
        printf(", %.3f ms a frame", 1e3 * s / items);
    printf("\n");
}

void bench_cputime_report(const bench_cputime *a, const bench_cputime *b, double items,
                          const char *child_name, const char *self_name)
{
    const double wall = b->wall_s - a->wall_s;
    if (a->child_s >= 0.0)
        line(child_name, a->child_s, b->child_s, wall, items);
    line(self_name, a->self_s, b->self_s, wall, items);
    line("the whole machine", a->busy_s, b->busy_s, wall, items);
    if (b->cores > 0)
        printf("  (of %d cores online; user + system time, from procfs)\n", b->cores);
}

/*
 * tsdfctl.h - what the files of tsdfctl share: the global options, the
 * helpers of tsdfctl_util.c and one entry point per command.
 *
 *   tsdfctl.c         main: global options, dispatch, the main help
 *   tsdfctl_util.c    argument parsing, error printing, opening a client
 *   tsdfctl_replay.c  replay
 *   tsdfctl_query.c   mesh, raycast, stats
 *   tsdfctl_cmds.c    save, load, reset, maps, ping
 *
 * Every command takes its own arguments (argv after the command name) and
 * returns the process exit status: 0 success, 1 failure, EXIT_USAGE for a
 * usage error.
 */
#ifndef TSDFCTL_H
#define TSDFCTL_H

#include <stdint.h>

#include "tsdf_client.h"
#include "tsdf_proto.h"
#include "tsdf_ply.h"
#include "tsdf_types.h"

#define EXIT_USAGE 2

typedef struct {
    const char *url;
    const char *push_url;
    int timeout_ms;
    /* TLS files for tls+tcp:// URLs (NULL: not given); see tsdf_client_options. */
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
    const char *tls_server_name;
} global_opts;

/* Prints "tsdfctl: CMD: " + fmt (with arg) and a pointer to the command's
 * help; returns EXIT_USAGE. */
int ctl_usage_error(const char *cmd, const char *fmt, const char *arg);

/* Prints a failed call: the code's message and name, and the daemon's own
 * explanation when it sent one; returns EXIT_FAILURE. */
int ctl_call_error(const char *cmd, int rc);

/* Prints why a local file could not be used: for a file that cannot be
 * opened or read (rc TSDF_ENOT_FOUND, TSDF_EIO) the system's reason
 * (strerror), for TSDF_EFORMAT "expected <expect>", else the code's
 * message. what names the file's role ("pose file"). Returns EXIT_FAILURE. */
int ctl_file_error(const char *cmd, const char *what, const char *path, int rc, const char *expect);

/* 0 when a file can be created at path (its directory exists and is
 * writable, and path is no directory); else prints why and returns
 * EXIT_FAILURE. For commands that fetch something large first. */
int ctl_check_writable(const char *cmd, const char *path);

/* Strict number parsers: 0 on success, -1 for anything but the whole string
 * being a number in range. */
int ctl_parse_float(const char *s, float *out);
int ctl_parse_u64(const char *s, uint64_t max, uint64_t *out);
int ctl_parse_u32(const char *s, uint32_t *out);

/* 1 for --help or -h. */
int ctl_is_help(const char *a);

/* CLOCK_MONOTONIC, seconds. */
double ctl_now_s(void);

/* Opens a client on g's URLs (the push URL only with with_push); prints why
 * on failure. Returns the tsdf code. */
int ctl_open_client(const global_opts *g, int with_push, tsdf_client **c);

int ctl_replay(const global_opts *g, int argc, char **argv);
int ctl_mesh(const global_opts *g, int argc, char **argv);
int ctl_raycast(const global_opts *g, int argc, char **argv);
int ctl_stats(const global_opts *g, int argc, char **argv);
/* load: 1 for load, 0 for save. */
int ctl_save_load(const global_opts *g, int argc, char **argv, int load);
/* name: "reset", "maps" or "ping". */
int ctl_simple(const global_opts *g, int argc, char **argv, const char *name);

#endif /* TSDFCTL_H */

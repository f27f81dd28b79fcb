/*
 * tsdfctl - command-line client of tsdfd.
 *
 *   tsdfctl [--url URL] [--push-url URL] [--timeout-ms MS] [--tls-ca FILE
 *           --tls-cert FILE --tls-key FILE [--tls-server-name NAME]] COMMAND [ARGS]
 *
 * Commands: replay, mesh, raycast, stats, save, load, reset, delete, maps, ping.
 * `tsdfctl COMMAND --help` explains each. Exit status: 0 on success, 1 when
 * the daemon or a file operation failed, 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdfctl.h"

/* ---- main --------------------------------------------------------------- */

static const char main_help[] =
    "usage: tsdfctl [--url URL] [--push-url URL] [--timeout-ms MS]\n"
    "               [--tls-ca FILE --tls-cert FILE --tls-key FILE [--tls-server-name NAME]]\n"
    "               COMMAND [ARGS]\n"
    "\n"
    "Commands (--map NAME picks the map; default \"default\"):\n"
    "  replay DIR | --synthetic NAME [--map NAME]   send a depth sequence to the daemon\n"
    "  mesh OUT.ply [--map NAME]       extract the surface as a PLY mesh\n"
    "  raycast --pose FILE OUT.png [--map NAME]   render the surface from a pose into a PNG\n"
    "  stats [--map NAME] [--json]     volume and daemon statistics\n"
    "  save [PATH]                     a snapshot of every map\n"
    "  load [--map NAME] [PATH]        restore one map from a snapshot\n"
    "  reset [--map NAME]              empty a map\n"
    "  delete --map NAME               delete a map (its blocks, name and slot)\n"
    "  maps                            list the maps\n"
    "  ping                            check that the daemon answers\n"
    "`tsdfctl COMMAND --help` describes each command.\n"
    "\n"
    "Global options (anywhere on the line):\n"
    "  --url URL         request socket (default $TSDF_URL or " TSDF_PROTO_DEFAULT_REQ_URL ")\n"
    "  --push-url URL    frame socket (default $TSDF_PUSH_URL or " TSDF_PROTO_DEFAULT_PUSH_URL ")\n"
    "  --timeout-ms MS   the most any call waits (default 10000); connecting to a\n"
    "                    silent tcp:// peer may take longer (nng's 10 s handshake limit,\n"
    "                    the OS's connect timeout for an unreachable host)\n"
    "  --tls-ca FILE     for tls+tcp:// URLs: the CA the daemon's certificate chains to\n"
    "  --tls-cert FILE   this client's certificate (tsdfd requires one), and\n"
    "  --tls-key FILE    its private key\n"
    "  --tls-server-name NAME  the name the daemon's certificate must carry\n"
    "                    (default: the URL's host)\n"
    "Exit status: 0 success, 1 failure, 2 usage error.\n";

int main(int argc, char **argv)
{
    global_opts g;
    g.url =
        getenv("TSDF_URL") && *getenv("TSDF_URL") ? getenv("TSDF_URL") : TSDF_PROTO_DEFAULT_REQ_URL;
    g.push_url = getenv("TSDF_PUSH_URL") && *getenv("TSDF_PUSH_URL") ? getenv("TSDF_PUSH_URL")
                                                                     : TSDF_PROTO_DEFAULT_PUSH_URL;
    g.timeout_ms = 10000;
    g.tls_ca = g.tls_cert = g.tls_key = g.tls_server_name = NULL;

    /* Take the global options out of argv wherever they are, so that
     * `tsdfctl stats --url X` works as well as `tsdfctl --url X stats`. */
    char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
    if (rest == NULL)
        return EXIT_FAILURE;
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "--url") == 0 || strcmp(a, "--push-url") == 0 ||
             strcmp(a, "--timeout-ms") == 0 || strncmp(a, "--tls-", 6) == 0)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tsdfctl: %s needs a value\n", a);
                free(rest);
                return EXIT_USAGE;
            }
            const char *v = argv[++i];
            if (strcmp(a, "--url") == 0) {
                g.url = v;
            } else if (strcmp(a, "--push-url") == 0) {
                g.push_url = v;
            } else if (strcmp(a, "--tls-ca") == 0) {
                g.tls_ca = v;
            } else if (strcmp(a, "--tls-cert") == 0) {
                g.tls_cert = v;
            } else if (strcmp(a, "--tls-key") == 0) {
                g.tls_key = v;
            } else if (strcmp(a, "--tls-server-name") == 0) {
                g.tls_server_name = v;
            } else if (strcmp(a, "--timeout-ms") != 0) {
                fprintf(stderr, "tsdfctl: unknown option %s (see tsdfctl --help)\n", a);
                free(rest);
                return EXIT_USAGE;
            } else {
                uint32_t t;
                if (ctl_parse_u32(v, &t) != 0 || t == 0 || t > 86400000u) {
                    fprintf(stderr, "tsdfctl: --timeout-ms needs 1..86400000, not \"%s\"\n", v);
                    free(rest);
                    return EXIT_USAGE;
                }
                g.timeout_ms = (int)t;
            }
        } else {
            rest[n++] = argv[i];
        }
    }
    rest[n] = NULL;
    int rc;
    if (n == 0 || ctl_is_help(rest[0]) || strcmp(rest[0], "help") == 0) {
        fputs(main_help, n == 0 ? stderr : stdout);
        rc = n == 0 ? EXIT_USAGE : EXIT_SUCCESS;
    } else {
        const char *cmd = rest[0];
        int cargc = n - 1;
        char **cargv = rest + 1;
        if (strcmp(cmd, "replay") == 0)
            rc = ctl_replay(&g, cargc, cargv);
        else if (strcmp(cmd, "mesh") == 0)
            rc = ctl_mesh(&g, cargc, cargv);
        else if (strcmp(cmd, "raycast") == 0)
            rc = ctl_raycast(&g, cargc, cargv);
        else if (strcmp(cmd, "stats") == 0)
            rc = ctl_stats(&g, cargc, cargv);
        else if (strcmp(cmd, "save") == 0)
            rc = ctl_save_load(&g, cargc, cargv, 0);
        else if (strcmp(cmd, "load") == 0)
            rc = ctl_save_load(&g, cargc, cargv, 1);
        else if (strcmp(cmd, "reset") == 0 || strcmp(cmd, "delete") == 0 ||
                 strcmp(cmd, "maps") == 0 || strcmp(cmd, "ping") == 0)
            rc = ctl_simple(&g, cargc, cargv, cmd);
        else {
            fprintf(stderr, "tsdfctl: unknown command \"%s\" (see tsdfctl --help)\n", cmd);
            rc = EXIT_USAGE;
        }
    }
    free(rest);
    return rc;
}

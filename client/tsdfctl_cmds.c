/*
 * tsdfctl_cmds.c - tsdfctl save, load, reset, maps and ping.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsdfctl.h"

static const char save_help[] =
    "usage: tsdfctl save [--map NAME] [PATH]\n"
    "       tsdfctl load [--map NAME] [PATH]\n"
    "\n"
    "save writes a snapshot of every one of the daemon's maps, whatever --map says;\n"
    "--map NAME (default \"default\") only names the map whose version it prints.\n"
    "load replaces map NAME (default \"default\") alone by its blocks from a\n"
    "snapshot; the other maps stay as they are. PATH is relative to the daemon's\n"
    "state directory or absolute inside it, and is opened by the daemon on its\n"
    "machine. Without PATH, save writes a new snapshot into the state directory\n"
    "(keeping the newest [snapshot] keep of them) and load reads the newest valid\n"
    "one there.\n";

int ctl_save_load(const global_opts *g, int argc, char **argv, int load)
{
    const char *name = load ? "load" : "save";
    const char *map = NULL, *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (ctl_is_help(argv[i])) {
            fputs(save_help, stdout);
            return 0;
        } else if (strcmp(argv[i], "--map") == 0 && i + 1 < argc) {
            map = argv[++i];
        } else if (argv[i][0] == '-') {
            return ctl_usage_error(name, "unknown option or missing value: %s", argv[i]);
        } else if (path == NULL) {
            path = argv[i];
        } else {
            return ctl_usage_error(name, "unexpected argument \"%s\"", argv[i]);
        }
    }
    tsdf_client *c;
    if (ctl_open_client(g, 0, &c) != TSDF_OK)
        return EXIT_FAILURE;
    tsdf_rep_path r;
    int rc = load ? tsdf_client_load(c, map, path, &r, TSDF_CLIENT_TIMEOUT_DEFAULT)
                  : tsdf_client_save(c, map, path, &r, TSDF_CLIENT_TIMEOUT_DEFAULT);
    tsdf_client_close(c);
    if (rc != TSDF_OK)
        return ctl_call_error(name, rc);
    if (load)
        printf("loaded map %s from %s (version %llu)\n", map ? map : TSDF_PROTO_DEFAULT_MAP, r.path,
               (unsigned long long)r.version);
    else
        printf("saved snapshot %s (map %s at version %llu)\n", r.path,
               map ? map : TSDF_PROTO_DEFAULT_MAP, (unsigned long long)r.version);
    return EXIT_SUCCESS;
}

static const char reset_help[] = "usage: tsdfctl reset [--map NAME]\n"
                                 "\n"
                                 "Drops every block of the map (the map keeps existing).\n";
static const char delete_help[] = "usage: tsdfctl delete --map NAME\n"
                                  "\n"
                                  "Deletes the map from the daemon: its blocks, its name and its "
                                  "slot.\nWith snapshots restored at start, the daemon writes a "
                                  "new snapshot\nright away, so the map does not come back.\n";
static const char maps_help[] = "usage: tsdfctl maps\n\nLists the daemon's maps, one a line.\n";
static const char ping_help[] = "usage: tsdfctl ping\n"
                                "\n"
                                "Asks the daemon for its version and uptime and prints the "
                                "round-trip time.\n";

int ctl_simple(const global_opts *g, int argc, char **argv, const char *name)
{
    const char *map = NULL;
    int takes_map = strcmp(name, "reset") == 0 || strcmp(name, "delete") == 0;
    const char *help = strcmp(name, "reset") == 0    ? reset_help
                       : strcmp(name, "delete") == 0 ? delete_help
                       : strcmp(name, "maps") == 0   ? maps_help
                                                     : ping_help;
    for (int i = 0; i < argc; i++) {
        if (ctl_is_help(argv[i])) {
            fputs(help, stdout);
            return 0;
        } else if (takes_map && strcmp(argv[i], "--map") == 0 && i + 1 < argc) {
            map = argv[++i];
        } else {
            return ctl_usage_error(name, "unexpected argument \"%s\"", argv[i]);
        }
    }
    /* Deleting the default map by accident is too easy: name it. */
    if (strcmp(name, "delete") == 0 && map == NULL)
        return ctl_usage_error(name, "which map? (%s)", "--map NAME");
    tsdf_client *c;
    if (ctl_open_client(g, 0, &c) != TSDF_OK)
        return EXIT_FAILURE;
    int rc;
    if (strcmp(name, "delete") == 0) {
        rc = tsdf_client_delete(c, map, TSDF_CLIENT_TIMEOUT_DEFAULT);
        if (rc == TSDF_OK)
            printf("map %s deleted\n", map);
    } else if (strcmp(name, "reset") == 0) {
        rc = tsdf_client_reset(c, map, TSDF_CLIENT_TIMEOUT_DEFAULT);
        if (rc == TSDF_OK)
            printf("map %s reset\n", map ? map : TSDF_PROTO_DEFAULT_MAP);
    } else if (strcmp(name, "maps") == 0) {
        tsdf_rep_maps *m = malloc(sizeof(*m));
        rc = m ? tsdf_client_maps(c, m, TSDF_CLIENT_TIMEOUT_DEFAULT) : TSDF_ENOMEM;
        for (uint32_t i = 0; rc == TSDF_OK && i < m->count; i++)
            printf("%s\n", m->names[i]);
        free(m);
    } else {
        tsdf_rep_ping p;
        double t0 = ctl_now_s();
        rc = tsdf_client_ping(c, &p, TSDF_CLIENT_TIMEOUT_DEFAULT);
        if (rc == TSDF_OK)
            printf("%s: %s, up %.1f s, round trip %.3f ms\n", g->url, p.server,
                   (double)p.uptime_ms / 1000.0, (ctl_now_s() - t0) * 1000.0);
    }
    tsdf_client_close(c);
    return rc == TSDF_OK ? EXIT_SUCCESS : ctl_call_error(name, rc);
}

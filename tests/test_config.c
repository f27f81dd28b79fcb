/*
 * test_config.c - the daemon's configuration (daemon/config.h): defaults,
 * every key of the file, bad values named by key, command-line overrides,
 * and `tsdfd --check-config`.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "config.h"
#include "log.h"
#include "tsdf_error.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TSDFD_BIN
#error "TSDFD_BIN must name the tsdfd binary"
#endif
#ifndef TSDF_CONF
#error "TSDF_CONF must name config/tsdfd.conf"
#endif

static const char *write_file(const char *name, const char *text)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", tsdf_test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_defaults(void **state)
{
    tsdfd_config c;
    (void)state;
    cfg_defaults(&c);
    assert_int_equal(c.listen_count, 2);
    assert_string_equal(c.listen[0], "ipc:///run/tsdfd/tsdfd.sock");
    assert_string_equal(c.listen[1], "tcp://127.0.0.1:5555");
    assert_int_equal(c.frames_listen_count, 2);
    assert_string_equal(c.frames_listen[0], "ipc:///run/tsdfd/frames.sock");
    assert_string_equal(c.frames_listen[1], "tcp://127.0.0.1:5556");
    assert_int_equal(c.request_contexts, 16);
    assert_int_equal(c.max_queries_per_map, 0);
    assert_int_equal(c.max_queries_per_kind, 0);
    assert_int_equal(c.decode_threads, 2);
    assert_int_equal(c.max_message_mb, 8);
    assert_int_equal(c.max_connections, 64);
    assert_string_equal(c.state_dir, "/var/lib/tsdfd");
    assert_int_equal(c.queue_length, 64);
    assert_int_equal(c.queue_policy, CFG_POLICY_BLOCK);
    assert_int_equal(c.queue_max_bytes_mb, 1024);
    assert_int_equal(c.queue_pinned_mb, 64);
    assert_int_equal(c.volume.backend, TSDF_BACKEND_AUTO);
    /* Memory is bounded by default: per map, and all maps together by a
     * budget derived from the machine (0 = auto). */
    assert_int_equal(c.volume.memory_cap_bytes, 4096ull << 20);
    assert_int_equal(c.volume_memory_budget_bytes, 0);
    assert_true(fabsf(c.volume.voxel_size_m - 0.01f) < 1e-9f);
    assert_int_equal(c.max_maps, 16);
    assert_int_equal(c.maps_count, 1);
    assert_string_equal(c.maps[0], "default");
    /* The compact layout; nothing evicted until the operator says so. */
    assert_int_equal(c.volume.layout, TSDF_LAYOUT_S16);
    /* Every core for the cpu backend unless the operator says otherwise. */
    assert_int_equal(c.volume.cpu_threads, 0);
    assert_int_equal(c.evict_mode, CFG_EVICT_OFF);
    assert_false(c.evict_on_full);
    assert_true(fabsf(c.evict_radius_m - 10.0f) < 1e-9f);
    assert_int_equal(c.evict_check_frames, 30);
    /* Production defaults: snapshots on a period, at stop and at start,
     * and /metrics on loopback. */
    assert_int_equal(c.autosave_period_s, 300);
    assert_true(c.save_on_stop);
    assert_true(c.load_on_start);
    assert_int_equal(c.snapshot_keep, 3);
    assert_true(c.metrics_enabled);
    assert_string_equal(c.metrics_host, "127.0.0.1");
    assert_int_equal(c.metrics_port, 9464);
    assert_int_equal(c.log_level, TSDF_LOG_INFO);
    char err[CFG_ERR_LEN];
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_OK);
}

/* The shipped file lists every key with its default: loading it onto the
 * defaults changes nothing, and it names every key of the table. */
static void test_shipped_file_is_the_defaults(void **state)
{
    tsdfd_config def, c;
    char err[CFG_ERR_LEN] = "";
    (void)state;
    cfg_defaults(&def);
    cfg_defaults(&c);
    int rc = cfg_load_file(&c, TSDF_CONF, err, sizeof err);
    if (rc != TSDF_OK)
        fail_msg("%s", err);
    assert_memory_equal(&def, &c, sizeof c);

    static const char *const keys[] = {
        "listen",
        "frames_listen",
        "request_contexts",
        "max_queries_per_map",
        "max_queries_per_kind",
        "decode_threads",
        "max_message_mb",
        "max_connections",
        "request_timeout_ms",
        "stop_timeout_ms",
        "stall_timeout_ms",
        "state_dir",
        "allow_insecure_remote",
        "ipc_mode",
        "ipc_group",
        "cert_file",
        "key_file",
        "ca_file",
        "writers",
        "length",
        "policy",
        "push_timeout_ms",
        "max_bytes_mb",
        "pinned_mb",
        "drain_timeout_ms",
        "max_sensors",
        "backend",
        "voxel_size_m",
        "trunc_vox",
        "max_weight",
        "initial_capacity_blocks",
        "max_load_factor",
        "memory_cap_mb",
        "memory_budget_mb",
        "cuda_device",
        "cpu_threads",
        "max_maps",
        "auto_create_maps",
        "maps",
        "autosave_period_s",
        "save_on_stop",
        "load_on_start",
        "keep",
        "enabled",
        "host",
        "port",
        "level",
        "stats_period_s",
        "latency_window",
    };
    FILE *f = fopen(TSDF_CONF, "r");
    assert_non_null(f);
    char line[512];
    int seen[sizeof keys / sizeof keys[0]] = {0};
    while (fgets(line, sizeof line, f) != NULL) {
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            size_t n = strlen(keys[k]);
            if (strncmp(line, keys[k], n) == 0 && line[n] == ' ' && line[n + 1] == '=')
                seen[k]++;
        }
    }
    fclose(f);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (seen[k] != 1)
            fail_msg("key %s appears %d times in %s", keys[k], seen[k], TSDF_CONF);
}

static void test_every_key_parsed(void **state)
{
    tsdfd_config c;
    char err[CFG_ERR_LEN] = "";
    (void)state;
    const char *path =
        write_file("all.conf", "; comment\n"
                               "[server]\n"
                               "listen = ipc:///tmp/x/a.sock , tcp://127.0.0.1:7000\n"
                               "frames_listen = ipc:///tmp/x/f.sock\n"
                               "request_contexts = 3\n"
                               "decode_threads = 5\n"
                               "max_message_mb = 12\n"
                               "request_timeout_ms = 1234\n"
                               "state_dir = /tmp/x/state\n"
                               "[queue]\n"
                               "length = 7\n"
                               "policy = drop_oldest\n"
                               "push_timeout_ms = 0\n"
                               "drain_timeout_ms = 250\n"
                               "max_sensors = 9\n"
                               "[volume]\n"
                               "backend = cpu\n"
                               "voxel_size_m = 0.02\n"
                               "trunc_vox = 5.5\n"
                               "max_weight = 100\n"
                               "initial_capacity_blocks = 1024\n"
                               "max_load_factor = 0.7\n"
                               "memory_cap_mb = 256\n"
                               "memory_budget_mb = 1024\n"
                               "cuda_device = 1\n"
                               "max_maps = 4\n"
                               "auto_create_maps = no\n"
                               "maps = siteA, siteB\n"
                               "layout = f32\n"
                               "cpu_threads = 3\n"
                               "[eviction]\n"
                               "mode = spill\n"
                               "radius_m = 7.5\n"
                               "check_frames = 12\n"
                               "on_full = evict\n"
                               "[snapshot]\n"
                               "autosave_period_s = 600\n"
                               "save_on_stop = no\n"
                               "load_on_start = off\n"
                               "keep = 5\n"
                               "[metrics]\n"
                               "enabled = false\n"
                               "host = 0.0.0.0\n"
                               "port = 9100\n"
                               "[log]\n"
                               "level = debug\n"
                               "stats_period_s = 0\n"
                               "latency_window = 64\n");
    cfg_defaults(&c);
    int rc = cfg_load_file(&c, path, err, sizeof err);
    if (rc != TSDF_OK)
        fail_msg("%s", err);
    assert_int_equal(c.listen_count, 2);
    assert_string_equal(c.listen[0], "ipc:///tmp/x/a.sock");
    assert_string_equal(c.listen[1], "tcp://127.0.0.1:7000");
    assert_int_equal(c.frames_listen_count, 1);
    assert_string_equal(c.frames_listen[0], "ipc:///tmp/x/f.sock");
    assert_int_equal(c.request_contexts, 3);
    assert_int_equal(c.decode_threads, 5);
    assert_int_equal(c.max_message_mb, 12);
    assert_int_equal(c.request_timeout_ms, 1234);
    assert_string_equal(c.state_dir, "/tmp/x/state");
    assert_int_equal(c.queue_length, 7);
    assert_int_equal(c.queue_policy, CFG_POLICY_DROP_OLDEST);
    assert_int_equal(c.push_timeout_ms, 0);
    assert_int_equal(c.drain_timeout_ms, 250);
    assert_int_equal(c.max_sensors, 9);
    assert_int_equal(c.volume.backend, TSDF_BACKEND_CPU);
    assert_true(fabsf(c.volume.voxel_size_m - 0.02f) < 1e-9f);
    assert_true(fabsf(c.volume.trunc_vox - 5.5f) < 1e-9f);
    assert_true(fabsf(c.volume.max_weight - 100.0f) < 1e-9f);
    assert_int_equal(c.volume.initial_capacity_blocks, 1024);
    assert_true(fabsf(c.volume.max_load_factor - 0.7f) < 1e-7f);
    assert_int_equal(c.volume.memory_cap_bytes, 256ull << 20);
    assert_int_equal(c.volume_memory_budget_bytes, 1024ull << 20);
    /* "auto" and 0 both mean a budget derived from the machine at start. */
    assert_int_equal(cfg_set(&c, "volume", "memory_budget_mb", "auto", err, sizeof err), TSDF_OK);
    assert_int_equal(c.volume_memory_budget_bytes, 0);
    assert_int_equal(cfg_set(&c, "volume", "memory_budget_mb", "1024", err, sizeof err), TSDF_OK);
    assert_int_equal(c.volume.cuda_device, 1);
    assert_int_equal(c.max_maps, 4);
    assert_false(c.auto_create_maps);
    assert_int_equal(c.maps_count, 2);
    assert_string_equal(c.maps[0], "siteA");
    assert_string_equal(c.maps[1], "siteB");
    assert_int_equal(c.volume.layout, TSDF_LAYOUT_F32);
    assert_int_equal(c.volume.cpu_threads, 3);
    assert_int_equal(c.evict_mode, CFG_EVICT_SPILL);
    assert_true(fabsf(c.evict_radius_m - 7.5f) < 1e-7f);
    assert_int_equal(c.evict_check_frames, 12);
    assert_true(c.evict_on_full);
    assert_string_equal(cfg_evict_mode_name(c.evict_mode), "spill");
    assert_int_equal(c.autosave_period_s, 600);
    assert_false(c.save_on_stop);
    assert_false(c.load_on_start);
    assert_int_equal(c.snapshot_keep, 5);
    assert_false(c.metrics_enabled);
    assert_string_equal(c.metrics_host, "0.0.0.0");
    assert_int_equal(c.metrics_port, 9100);
    assert_int_equal(c.log_level, TSDF_LOG_DEBUG);
    assert_int_equal(c.stats_period_s, 0);
    assert_int_equal(c.latency_window, 64);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_OK);
}

typedef struct {
    const char *section, *key, *value;
} bad_value;

static void test_bad_values_name_the_key(void **state)
{
    static const bad_value bad[] = {
        {"server", "listen", "http://x"},
        {"server", "listen", "ipc:///a, ipc:///a"},
        {"server", "listen", ""},
        {"server", "frames_listen", "ipc://"},
        {"server", "request_contexts", "0"},
        {"server", "max_queries_per_map", "65"},
        {"server", "request_contexts", "65"},
        {"server", "decode_threads", "two"},
        {"server", "max_message_mb", "65"},
        {"server", "max_connections", "0"},
        {"server", "max_connections", "4097"},
        {"server", "request_timeout_ms", "-5"},
        {"server", "state_dir", ""},
        {"server", "listen", "tls://127.0.0.1:1"},
        {"server", "allow_insecure_remote", "maybe"},
        {"server", "ipc_mode", "0999"},
        {"server", "ipc_mode", "0500"},
        {"server", "ipc_mode", "-0660"},
        {"tls", "writers", "robot1,,robot2"},
        {"tls", "writers", "robot1, robot1"},
        {"queue", "length", "0"},
        {"queue", "length", "12abc"},
        {"queue", "policy", "drop_newest"},
        {"queue", "push_timeout_ms", "1e3"},
        {"queue", "drain_timeout_ms", "999999999"},
        {"queue", "max_sensors", "0"},
        {"queue", "max_bytes_mb", "15"},
        {"queue", "max_bytes_mb", "1048577"},
        {"queue", "pinned_mb", "65537"},
        {"queue", "pinned_mb", "-1"},
        {"volume", "backend", "opencl"},
        {"volume", "voxel_size_m", "0"},
        {"volume", "voxel_size_m", "nan"},
        {"volume", "voxel_size_m", "-0.01"},
        {"volume", "trunc_vox", "0.5"},
        {"volume", "max_weight", "inf"},
        {"volume", "initial_capacity_blocks", "8"},
        {"volume", "max_load_factor", "0.99"},
        {"volume", "memory_cap_mb", "-1"},
        {"volume", "memory_budget_mb", "-1"},
        {"volume", "memory_budget_mb", "half"},
        {"volume", "memory_budget_mb", "16777217"},
        {"volume", "cuda_device", "64"},
        {"volume", "max_maps", "0"},
        {"volume", "auto_create_maps", "maybe"},
        {"volume", "maps", "bad name"},
        {"volume", "maps", ".hidden"},
        {"volume", "layout", "f16"},
        {"volume", "cpu_threads", "257"},
        {"volume", "cpu_threads", "-1"},
        {"volume", "cpu_threads", "all"},
        {"eviction", "mode", "evict"},
        {"eviction", "radius_m", "0"},
        {"eviction", "radius_m", "-3"},
        {"eviction", "check_frames", "0"},
        {"eviction", "on_full", "drop"},
        {"snapshot", "autosave_period_s", "x"},
        {"snapshot", "save_on_stop", "2"},
        {"snapshot", "load_on_start", ""},
        {"snapshot", "keep", "0"},
        {"metrics", "enabled", "enable"},
        {"metrics", "port", "65536"},
        {"metrics", "host", ""},
        {"log", "level", "verbose"},
        {"log", "stats_period_s", "86401"},
        {"log", "latency_window", "0"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tsdfd_config c;
        char err[CFG_ERR_LEN] = "";
        char want[128];
        cfg_defaults(&c);
        int rc = cfg_set(&c, bad[i].section, bad[i].key, bad[i].value, err, sizeof err);
        if (rc != TSDF_EINVAL)
            fail_msg("[%s] %s = '%s' gave %d, expected EINVAL", bad[i].section, bad[i].key,
                     bad[i].value, rc);
        snprintf(want, sizeof want, "[%s] %s:", bad[i].section, bad[i].key);
        if (strstr(err, want) == NULL)
            fail_msg("error '%s' does not name '%s'", err, want);
    }
}

static void test_unknown_keys_are_errors(void **state)
{
    tsdfd_config c;
    char err[CFG_ERR_LEN] = "";
    (void)state;
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "queue", "lenght", "5", err, sizeof err), TSDF_ENOT_FOUND);
    assert_non_null(strstr(err, "lenght"));
    assert_non_null(strstr(err, "unknown key"));
    assert_int_equal(cfg_set(&c, "gpu", "device", "0", err, sizeof err), TSDF_ENOT_FOUND);
    assert_non_null(strstr(err, "unknown section"));

    const char *path = write_file("unknown.conf", "[queue]\nlength = 8\n\n[queue]\nfoo = 1\n");
    cfg_defaults(&c);
    assert_int_equal(cfg_load_file(&c, path, err, sizeof err), TSDF_ENOT_FOUND);
    assert_non_null(strstr(err, ":5: [queue] foo: unknown key"));

    path = write_file("keyless.conf", "[server]\nthis is not ini\n");
    assert_int_equal(cfg_load_file(&c, path, err, sizeof err), TSDF_EFORMAT);
    assert_non_null(strstr(err, ":2:"));

    assert_int_equal(cfg_load_file(&c, "/nonexistent/tsdfd.conf", err, sizeof err), TSDF_EIO);
}

static void test_cross_key_checks(void **state)
{
    tsdfd_config c;
    char err[CFG_ERR_LEN] = "";
    (void)state;
    cfg_defaults(&c);
    assert_int_equal(
        cfg_set(&c, "server", "frames_listen", "tcp://127.0.0.1:5555", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[server] frames_listen"));

    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "volume", "maps", "a,b,c", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_set(&c, "volume", "max_maps", "2", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[volume] maps"));

    /* s16 stores weights as integers. */
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "volume", "max_weight", "64.5", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[volume] max_weight"));
    assert_int_equal(cfg_set(&c, "volume", "layout", "f32", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_OK);

    /* Making room on a full map needs a mode that removes blocks. */
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "eviction", "on_full", "evict", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[eviction] on_full"));
    assert_int_equal(cfg_set(&c, "eviction", "mode", "drop", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_OK);
}

/* [tls] and the listen URLs: TLS needs its files, plain TCP beyond
 * loopback needs allow_insecure_remote, each refusal names the URL. */
static void test_access_checks(void **state)
{
    tsdfd_config c;
    char err[CFG_ERR_LEN] = "";
    (void)state;

    cfg_defaults(&c);
    assert_int_equal(c.ipc_mode, 0660);
    assert_false(c.allow_insecure_remote);
    assert_int_equal(cfg_set(&c, "server", "ipc_mode", "0600", err, sizeof err), TSDF_OK);
    assert_int_equal(c.ipc_mode, 0600);

    /* A plain tcp:// URL on every interface is refused... */
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "server", "listen", "tcp://0.0.0.0:5555", err, sizeof err),
                     TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[server] listen: tcp://0.0.0.0:5555"));
    assert_non_null(strstr(err, "allow_insecure_remote"));
    /* ...unless the operator says so (the warning is logged: see the
     * --check-config test below). */
    assert_int_equal(cfg_set(&c, "server", "allow_insecure_remote", "true", err, sizeof err),
                     TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_OK);

    /* The frames socket too; loopback needs nothing. */
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "server", "frames_listen", "tcp://[::]:5556", err, sizeof err),
                     TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[server] frames_listen: tcp://[::]:5556"));
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "server", "listen", "tcp://[::1]:5555", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_OK);

    /* tls+tcp:// without [tls]. */
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "server", "listen", "tls+tcp://0.0.0.0:5555", err, sizeof err),
                     TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "tls+tcp://0.0.0.0:5555 needs [tls] cert_file, key_file and "
                                "ca_file"));
    /* Half a [tls]. */
    assert_int_equal(cfg_set(&c, "tls", "cert_file", "/etc/tsdfd/c.pem", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[tls] key_file: cert_file, key_file and ca_file go together"));
    /* All three, but the files are not there: named before any start. */
    assert_int_equal(cfg_set(&c, "tls", "key_file", "/nonexistent/k.pem", err, sizeof err),
                     TSDF_OK);
    assert_int_equal(cfg_set(&c, "tls", "ca_file", "/nonexistent/ca.pem", err, sizeof err),
                     TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[tls]"));
    assert_non_null(strstr(err, "c.pem"));

    /* writers without any TLS listener would restrict no one. */
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "tls", "writers", "robot1, robot2", err, sizeof err), TSDF_OK);
    assert_int_equal(c.tls_writers_count, 2);
    assert_string_equal(c.tls_writers[1], "robot2");
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[tls] writers"));
    assert_int_equal(cfg_set(&c, "tls", "writers", "", err, sizeof err), TSDF_OK);
    assert_int_equal(c.tls_writers_count, 0);

    /* An unknown ipc_group. */
    cfg_defaults(&c);
    assert_int_equal(cfg_set(&c, "server", "ipc_group", "no-such-group-tsdf", err, sizeof err),
                     TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_EINVAL);
    assert_non_null(strstr(err, "[server] ipc_group: no group 'no-such-group-tsdf'"));
    assert_int_equal(cfg_set(&c, "server", "ipc_group", "root", err, sizeof err), TSDF_OK);
    assert_int_equal(cfg_validate(&c, err, sizeof err), TSDF_OK);
}

static void test_flags_override_file(void **state)
{
    tsdfd_config c;
    cfg_action action;
    char err[CFG_ERR_LEN] = "";
    char used[CFG_PATH_LEN];
    (void)state;
    const char *path = write_file("flags.conf", "[queue]\nlength = 7\npolicy = drop_oldest\n"
                                                "[metrics]\nenabled = false\n"
                                                "[log]\nlevel = warn\n");
    char file[1024];
    snprintf(file, sizeof file, "%s", path);
    char *argv[] = {"tsdfd",
                    "--config",
                    file,
                    "--listen",
                    "ipc:///tmp/q/r.sock,tcp://127.0.0.1:6000",
                    "--frames-listen",
                    "ipc:///tmp/q/f.sock",
                    "--backend",
                    "cpu",
                    "--log-level",
                    "debug",
                    "--state-dir",
                    "/tmp/q",
                    "--metrics",
                    "127.0.0.1:9999",
                    "--queue-length",
                    "11",
                    "--set",
                    "volume.max_maps=3",
                    "--foreground",
                    NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    int rc = cfg_from_args(argc, argv, &c, &action, used, sizeof used, err, sizeof err);
    if (rc != TSDF_OK)
        fail_msg("%s", err);
    assert_int_equal(action, CFG_ACTION_RUN);
    assert_string_equal(used, file);
    assert_int_equal(c.listen_count, 2);
    assert_string_equal(c.listen[1], "tcp://127.0.0.1:6000");
    assert_string_equal(c.frames_listen[0], "ipc:///tmp/q/f.sock");
    assert_int_equal(c.volume.backend, TSDF_BACKEND_CPU);
    assert_int_equal(c.log_level, TSDF_LOG_DEBUG); /* flag beats file */
    assert_string_equal(c.state_dir, "/tmp/q");
    assert_true(c.metrics_enabled);
    assert_int_equal(c.metrics_port, 9999);
    assert_int_equal(c.queue_length, 11);                     /* flag beats file */
    assert_int_equal(c.queue_policy, CFG_POLICY_DROP_OLDEST); /* file beats default */
    assert_int_equal(c.max_maps, 3);

    /* --metrics off beats the default (on), as the tests' daemons rely on. */
    char *off[] = {"tsdfd", "--set", "snapshot.save_on_stop=false", "--metrics", "off", NULL};
    rc = cfg_from_args(5, off, &c, &action, used, sizeof used, err, sizeof err);
    if (rc != TSDF_OK)
        fail_msg("%s", err);
    assert_false(c.metrics_enabled);
    assert_false(c.save_on_stop);
    assert_true(c.load_on_start); /* untouched: the default */

    char *bad_flag[] = {"tsdfd", "--config", file, "--queue-length", "0", NULL};
    rc = cfg_from_args(5, bad_flag, &c, &action, used, sizeof used, err, sizeof err);
    assert_int_equal(rc, TSDF_EINVAL);
    assert_non_null(strstr(err, "--queue-length"));
    assert_non_null(strstr(err, "[queue] length"));

    char *unknown[] = {"tsdfd", "--config", file, "--frobnicate", "1", NULL};
    rc = cfg_from_args(5, unknown, &c, &action, used, sizeof used, err, sizeof err);
    assert_int_equal(rc, TSDF_EINVAL);
    assert_non_null(strstr(err, "--frobnicate"));
    assert_non_null(strstr(err, "unknown option"));
    assert_non_null(strstr(err, "tsdfd --help"));
    /* Alone at the end: still unknown, not "missing value"; a known flag
     * at the end needs its value. */
    char *unknown_last[] = {"tsdfd", "--config", file, "--bogus", NULL};
    rc = cfg_from_args(4, unknown_last, &c, &action, used, sizeof used, err, sizeof err);
    assert_int_equal(rc, TSDF_EINVAL);
    assert_non_null(strstr(err, "--bogus: unknown option"));
    assert_non_null(strstr(err, "tsdfd --help"));
    char *no_value[] = {"tsdfd", "--config", file, "--listen", NULL};
    rc = cfg_from_args(4, no_value, &c, &action, used, sizeof used, err, sizeof err);
    assert_int_equal(rc, TSDF_EINVAL);
    assert_non_null(strstr(err, "--listen: needs a value"));

    char *missing[] = {"tsdfd", "--config", "/nonexistent/x.conf", NULL};
    rc = cfg_from_args(3, missing, &c, &action, used, sizeof used, err, sizeof err);
    assert_int_equal(rc, TSDF_EIO);
}

/* Runs `tsdfd --check-config path`, returning its exit code and output. */
static int run_check(const char *path, char *out, size_t len)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' --check-config '%s' 2>&1", TSDFD_BIN, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void test_check_config_binary(void **state)
{
    char out[4096];
    (void)state;
    assert_int_equal(run_check(TSDF_CONF, out, sizeof out), 0);
    assert_non_null(strstr(out, "ok"));

    const char *bad = write_file("bad.conf", "[queue]\nlength = 7\npolicy = fastest\n");
    int code = run_check(bad, out, sizeof out);
    assert_int_not_equal(code, 0);
    assert_non_null(strstr(out, "[queue] policy"));
    assert_non_null(strstr(out, "fastest"));

    const char *unk = write_file("unk.conf", "[volume]\nvoxel_size = 0.01\n");
    code = run_check(unk, out, sizeof out);
    assert_int_not_equal(code, 0);
    assert_non_null(strstr(out, "[volume] voxel_size: unknown key"));

    code = run_check("/nonexistent/tsdfd.conf", out, sizeof out);
    assert_int_not_equal(code, 0);

    /* A non-loopback tcp:// listen URL without TLS: refused, naming it... */
    const char *open_tcp =
        write_file("insecure.conf", "[server]\nlisten = ipc:///tmp/x.sock, tcp://0.0.0.0:5555\n");
    code = run_check(open_tcp, out, sizeof out);
    assert_int_not_equal(code, 0);
    assert_non_null(strstr(out, "tcp://0.0.0.0:5555"));
    /* ...and allowed with allow_insecure_remote, with a warning. */
    const char *allowed =
        write_file("insecure_ok.conf", "[server]\nlisten = ipc:///tmp/x.sock, tcp://0.0.0.0:5555\n"
                                       "allow_insecure_remote = true\n");
    code = run_check(allowed, out, sizeof out);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "WARN"));
    assert_non_null(strstr(out, "tcp://0.0.0.0:5555 is open to other hosts without TLS"));

    /* Socket paths longer than a Unix socket path may be (107 bytes):
     * refused here, not at the start. */
    char longdir[200];
    memset(longdir, 'r', sizeof longdir);
    longdir[0] = '/';
    longdir[120] = '\0';
    char conf[1024];
    snprintf(conf, sizeof conf, "[server]\nring_socket = %s/rings.sock\n", longdir);
    code = run_check(write_file("ring_long.conf", conf), out, sizeof out);
    assert_int_not_equal(code, 0);
    assert_non_null(strstr(out, "[server] ring_socket"));
    assert_non_null(strstr(out, "at most 107"));
    snprintf(conf, sizeof conf, "[server]\nlisten = ipc://%s/req.sock\n", longdir);
    code = run_check(write_file("ipc_long.conf", conf), out, sizeof out);
    assert_int_not_equal(code, 0);
    assert_non_null(strstr(out, "[server] listen"));
    assert_non_null(strstr(out, "at most 107"));
    /* /metrics on every address: allowed, with the warning the request
     * sockets give; on loopback, none. */
    code =
        run_check(write_file("metrics_any.conf", "[metrics]\nhost = 0.0.0.0\n"), out, sizeof out);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "WARN"));
    assert_non_null(strstr(out, "[metrics] host: 0.0.0.0:"));
    code = run_check(write_file("metrics_v6.conf", "[metrics]\nhost = ::\n"), out, sizeof out);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "[metrics] host: ::"));
    code = run_check(write_file("metrics_lo.conf", "[metrics]\nhost = ::1\n"), out, sizeof out);
    assert_int_equal(code, 0);
    assert_null(strstr(out, "[metrics] host"));

    /* tls+tcp:// without [tls]: a clear error. */
    const char *tls = write_file("tls.conf", "[server]\nlisten = tls+tcp://127.0.0.1:5555\n");
    code = run_check(tls, out, sizeof out);
    assert_int_not_equal(code, 0);
    assert_non_null(strstr(out, "tls+tcp://127.0.0.1:5555 needs [tls]"));
}

/* ring_socket = auto (the default) is rings.sock beside the first ipc://
 * listen socket, none without one or without room; a path or "" is taken
 * as given. */
static void test_ring_socket_path(void **state)
{
    tsdfd_config c;
    char out[CFG_PATH_LEN];
    (void)state;
    cfg_defaults(&c);
    assert_string_equal(c.ring_socket, "auto");
    cfg_ring_socket_path(&c, out, sizeof out);
    assert_string_equal(out, "/run/tsdfd/rings.sock");
    /* The first ipc:// URL, wherever it is in the list. */
    snprintf(c.listen[0], sizeof c.listen[0], "tcp://127.0.0.1:7000");
    snprintf(c.listen[1], sizeof c.listen[1], "ipc:///tmp/a/b/req.sock");
    cfg_ring_socket_path(&c, out, sizeof out);
    assert_string_equal(out, "/tmp/a/b/rings.sock");
    /* A relative one: beside it, made absolute. */
    char cwd[PATH_MAX], want[PATH_MAX + 16];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(want, sizeof want, "%s/rings.sock", cwd);
    snprintf(c.listen[1], sizeof c.listen[1], "ipc://req.sock");
    cfg_ring_socket_path(&c, out, sizeof out);
    assert_string_equal(out, want);
    /* No ipc:// listener: none. */
    c.listen_count = 1;
    cfg_ring_socket_path(&c, out, sizeof out);
    assert_string_equal(out, "");
    /* A folder too long for a Unix socket path (107 bytes): none. */
    c.listen_count = 2;
    char dir[120];
    memset(dir, 'd', sizeof dir);
    dir[0] = '/';
    dir[100] = '\0';
    snprintf(c.listen[1], sizeof c.listen[1], "ipc://%s/req.sock", dir);
    cfg_ring_socket_path(&c, out, sizeof out);
    assert_string_equal(out, "");
    /* Given: as given (absolute), "" for off. */
    snprintf(c.ring_socket, sizeof c.ring_socket, "/srv/r.sock");
    cfg_ring_socket_path(&c, out, sizeof out);
    assert_string_equal(out, "/srv/r.sock");
    snprintf(c.ring_socket, sizeof c.ring_socket, "r.sock");
    snprintf(want, sizeof want, "%s/r.sock", cwd);
    cfg_ring_socket_path(&c, out, sizeof out);
    assert_string_equal(out, want);
    c.ring_socket[0] = '\0';
    cfg_ring_socket_path(&c, out, sizeof out);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_shipped_file_is_the_defaults),
        cmocka_unit_test(test_every_key_parsed),
        cmocka_unit_test(test_bad_values_name_the_key),
        cmocka_unit_test(test_unknown_keys_are_errors),
        cmocka_unit_test(test_cross_key_checks),
        cmocka_unit_test(test_access_checks),
        cmocka_unit_test(test_flags_override_file),
        cmocka_unit_test(test_check_config_binary),
        cmocka_unit_test(test_ring_socket_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

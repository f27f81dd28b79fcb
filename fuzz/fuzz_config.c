/*
 * fuzz_config.c - libFuzzer target: the daemon's INI configuration
 * (cfg_load_file over inih, cfg_set for every key, cfg_validate).
 *
 * cfg_load_file reads a path, so each input goes through a scratch file
 * (tmpfs where there is one). Beyond "no crash" it checks that every code
 * is a known one, that the error text is terminated, and that a file that
 * loads is idempotent: applying it again on top of its own result changes
 * nothing (every key replaces, none appends).
 */
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "fuzz_common.h"
#include "log.h"
#include "tsdf_error.h"

static tsdfd_config g_cfg, g_again;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tsdf_log_set_level(TSDF_LOG_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("tsdfd.conf", data, size);
    char err[CFG_ERR_LEN];
    err[0] = '\0';
    cfg_defaults(&g_cfg);
    int rc = cfg_load_file(&g_cfg, path, err, sizeof err);
    FUZZ_CHECK(fuzz_known_code(rc));
    FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL);
    if (rc != TSDF_OK) {
        FUZZ_CHECK(err[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(g_cfg.listen_count <= CFG_MAX_URLS);
    FUZZ_CHECK(g_cfg.frames_listen_count <= CFG_MAX_URLS);
    FUZZ_CHECK(g_cfg.maps_count <= CFG_MAX_DECLARED_MAPS);
    rc = cfg_validate(&g_cfg, err, sizeof err);
    FUZZ_CHECK(rc == TSDF_OK || rc == TSDF_EINVAL);

    memcpy(&g_again, &g_cfg, sizeof g_cfg);
    FUZZ_CHECK(cfg_load_file(&g_again, path, err, sizeof err) == TSDF_OK);
    FUZZ_CHECK(memcmp(&g_again, &g_cfg, sizeof g_cfg) == 0);
    return 0;
}

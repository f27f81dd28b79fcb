/*
 * test_metrics.c - the counter table (daemon/metrics.c) and its two
 * outputs, the stats reply's "daemon" entries and the /metrics text.
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "metrics_sample.h"
#include "testutil.h"
#include "tsdf_error.h"

/* ---- reading the two outputs ------------------------------------------- */

static char *render(const metrics_ctx *c)
{
    prom_buf b;
    prom_buf_init(&b);
    assert_int_equal(metrics_render(c, &b), TSDF_OK);
    char *text = strdup(b.data);
    assert_non_null(text);
    prom_buf_fini(&b);
    return text;
}

static int count_substr(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---- the families that were prom.c's helpers ---------------------------- */

static void test_volume_families(void **state)
{
    metrics_sample smp;
    assert_int_equal(metrics_sample_init(&smp), TSDF_OK);
    char *text = render(&smp.ctx);
    const char *expect[] = {
        "tsdfd_hash_load_factor{map=\"default\"} 0.29296875\n",
        "tsdfd_hash_blocks{map=\"default\"} 300\n",
        "tsdfd_hash_blocks{map=\"a\\\"b\"} 0\n",
        "tsdfd_hash_capacity_slots{map=\"default\"} 1024\n",
        "tsdfd_hash_probe_length_bucket{map=\"default\",le=\"0\"} 200\n",
        "tsdfd_hash_probe_length_bucket{map=\"default\",le=\"1\"} 290\n",
        "tsdfd_hash_probe_length_bucket{map=\"default\",le=\"14\"} 290\n",
        "tsdfd_hash_probe_length_bucket{map=\"default\",le=\"+Inf\"} 300\n",
        "tsdfd_hash_probe_length_sum{map=\"default\"} 300\n",
        "tsdfd_hash_probe_length_count{map=\"default\"} 300\n",
        "tsdfd_hash_growth_events_total{map=\"default\"} 3\n",
        "tsdfd_hash_insert_failures_total{map=\"default\"} 7\n",
        "tsdfd_gpu_memory_bytes{map=\"default\"} 4096\n",
        "tsdfd_gpu_memory_bytes{map=\"a\\\"b\"} 0\n",
        "tsdfd_map_version{map=\"default\"} 40\n",
        "tsdfd_map_version{map=\"a\\\"b\"} 45\n",
    };
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        if (!strstr(text, expect[i]))
            fail_msg("missing: %s in:\n%s", expect[i], text);
    }
    free(text);

    /* No maps: the families are declared, but no map has a series. */
    smp.ctx.map_count = 0;
    text = render(&smp.ctx);
    assert_null(strstr(text, "{map="));
    assert_non_null(strstr(text, "# TYPE tsdfd_hash_blocks gauge\n"));
    free(text);
    metrics_sample_fini(&smp);
}

static void test_process_families_and_stages(void **state)
{
    dstats st;
    assert_int_equal(dstats_init(&st, 2, 8), TSDF_OK);
    metrics_ctx c = {.stats = &st, .version = "0.1.0", .backend = "cpu", .uptime_ms = 2500};
    dstats_get_totals(&st, &c.totals);
    c.has_host_memory = metrics_rss_bytes(&c.host_memory_bytes) == TSDF_OK;
    assert_true(c.has_host_memory);
    lat_window_add(&st.lat_stage[DS_STAGE_UPDATE], 4.0);
    char *text = render(&c);

    assert_non_null(strstr(text, "tsdfd_build_info{version=\"0.1.0\",backend=\"cpu\"} 1\n"));
    assert_non_null(strstr(text, "tsdfd_uptime_seconds 2.5\n"));
    const char *rss = strstr(text, "\ntsdfd_host_memory_bytes ");
    assert_non_null(rss);
    double bytes = strtod(rss + strlen("\ntsdfd_host_memory_bytes "), NULL);
    uint64_t direct = 0;
    assert_int_equal(metrics_rss_bytes(&direct), TSDF_OK);
    /* A test program's RSS: above 100 KiB, below 1 GiB, close to a fresh read. */
    assert_true(bytes > 100e3 && bytes < 1e9);
    assert_true(fabs(bytes - (double)direct) < 64e6);

    assert_int_equal(count_substr(text, "# TYPE tsdfd_stage_latency_seconds summary"), 1);
    for (int i = 0; i < DS_STAGE_COUNT; i++) {
        char line[128];
        snprintf(line, sizeof line, "tsdfd_stage_latency_seconds_count{stage=\"%s\"} %d\n",
                 dstats_stage_name((ds_stage)i), i == 3 ? 1 : 0);
        assert_non_null(strstr(text, line));
    }
    assert_string_equal(dstats_stage_name(DS_STAGE_UPDATE), "update");
    assert_non_null(
        strstr(text, "tsdfd_stage_latency_seconds{stage=\"update\",quantile=\"0.99\"} 0.004\n"));
    assert_non_null(
        strstr(text, "tsdfd_stage_latency_seconds{stage=\"decode\",quantile=\"0.5\"} NaN\n"));
    /* An idle daemon: the per-sensor families, with no series yet. */
    assert_non_null(strstr(text, "# TYPE tsdfd_frames_received_total counter\n"));
    assert_null(strstr(text, "{sensor="));
    free(text);
    dstats_fini(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_volume_families),
        cmocka_unit_test(test_process_families_and_stages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

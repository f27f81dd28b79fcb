/*
 * test_prom.c - the Prometheus text builder (daemon/prom.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"
#include "testutil.h"
#include "tsdf_error.h"

static void test_counter_and_gauge_text(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    assert_int_equal(prom_counter(&b, "tsdfd_frames_received_total", "Frames received.", NULL, 42),
                     TSDF_OK);
    assert_int_equal(
        prom_gauge(&b, "tsdfd_hash_load_factor", "Blocks per slot.", "map=\"default\"", 0.25),
        TSDF_OK);
    assert_string_equal(b.data, "# HELP tsdfd_frames_received_total Frames received.\n"
                                "# TYPE tsdfd_frames_received_total counter\n"
                                "tsdfd_frames_received_total 42\n"
                                "# HELP tsdfd_hash_load_factor Blocks per slot.\n"
                                "# TYPE tsdfd_hash_load_factor gauge\n"
                                "tsdfd_hash_load_factor{map=\"default\"} 0.25\n");
    assert_int_equal(b.len, strlen(b.data));
    assert_int_equal(prom_buf_error(&b), TSDF_OK);
    prom_buf_fini(&b);
}

/* A family declared before its first series (the per-sensor families of an
 * idle daemon): HELP and TYPE alone, and samples may follow under them. */
static void test_family_without_samples(void **state)
{
    prom_buf b;
    (void)state;
    prom_buf_init(&b);
    assert_int_equal(prom_family(&b, "tsdfd_frames_received_total", "counter", "Frames."), TSDF_OK);
    assert_int_equal(prom_family(&b, "tsdfd_frames_integrated_total", "counter", "Fused."),
                     TSDF_OK);
    assert_int_equal(prom_counter(&b, "tsdfd_frames_integrated_total", "Fused.", "sensor=\"a\"", 2),
                     TSDF_OK);
    assert_string_equal(b.data, "# HELP tsdfd_frames_received_total Frames.\n"
                                "# TYPE tsdfd_frames_received_total counter\n"
                                "# HELP tsdfd_frames_integrated_total Fused.\n"
                                "# TYPE tsdfd_frames_integrated_total counter\n"
                                "tsdfd_frames_integrated_total{sensor=\"a\"} 2\n");
    /* A counter's name ends in _total; the type must be one of the four. */
    prom_buf_reset(&b);
    assert_int_equal(prom_family(&b, "tsdfd_frames", "counter", "x"), TSDF_EINVAL);
    prom_buf_reset(&b);
    assert_int_equal(prom_family(&b, "tsdfd_x", "untyped", "x"), TSDF_EINVAL);
    prom_buf_fini(&b);
}

static int count_substr(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_help_and_type_once_per_family(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    const char *reasons[] = {"queue_full", "shutdown", "too_old"};
    for (int i = 0; i < 3; i++) {
        char labels[64];
        snprintf(labels, sizeof labels, "reason=\"%s\"", reasons[i]);
        assert_int_equal(
            prom_counter(&b, "tsdfd_frames_dropped_total", "Frames dropped.", labels, i), TSDF_OK);
    }
    assert_int_equal(count_substr(b.data, "# HELP tsdfd_frames_dropped_total"), 1);
    assert_int_equal(count_substr(b.data, "# TYPE tsdfd_frames_dropped_total counter"), 1);
    assert_non_null(strstr(b.data, "tsdfd_frames_dropped_total{reason=\"shutdown\"} 1\n"));
    assert_non_null(strstr(b.data, "tsdfd_frames_dropped_total{reason=\"too_old\"} 2\n"));
    prom_buf_fini(&b);
}

static void test_reopening_a_family_is_refused_and_sticky(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    assert_int_equal(prom_gauge(&b, "a_bytes", "A.", NULL, 1), TSDF_OK);
    assert_int_equal(prom_gauge(&b, "b_bytes", "B.", NULL, 2), TSDF_OK);
    assert_int_equal(prom_gauge(&b, "a_bytes", "A.", "x=\"1\"", 3), TSDF_EINVAL);
    /* Sticky: a good call after the failure fails the same way. */
    assert_int_equal(prom_gauge(&b, "c_bytes", "C.", NULL, 4), TSDF_EINVAL);
    assert_int_equal(prom_buf_error(&b), TSDF_EINVAL);
    assert_null(strstr(b.data, "c_bytes"));
    /* Reset clears the error and the families. */
    prom_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_int_equal(prom_gauge(&b, "a_bytes", "A.", NULL, 5), TSDF_OK);
    assert_string_equal(b.data, "# HELP a_bytes A.\n# TYPE a_bytes gauge\na_bytes 5\n");
    prom_buf_fini(&b);
}

static void test_bad_names_refused(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    assert_int_equal(prom_counter(&b, "tsdfd_frames", "no _total", NULL, 1), TSDF_EINVAL);
    prom_buf_reset(&b);
    assert_int_equal(prom_gauge(&b, "9starts_with_digit", "x", NULL, 1), TSDF_EINVAL);
    prom_buf_reset(&b);
    assert_int_equal(prom_gauge(&b, "has-dash", "x", NULL, 1), TSDF_EINVAL);
    prom_buf_reset(&b);
    assert_int_equal(prom_gauge(&b, "", "x", NULL, 1), TSDF_EINVAL);
    assert_true(prom_name_valid("tsdfd:ok_name_1"));
    assert_false(prom_name_valid(NULL));
    char longname[PROM_NAME_MAX + 1];
    memset(longname, 'a', PROM_NAME_MAX);
    longname[PROM_NAME_MAX] = '\0';
    assert_false(prom_name_valid(longname));
    prom_buf_fini(&b);
}

static void test_values_formatting(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    assert_int_equal(prom_gauge(&b, "v", "x", "k=\"a\"", 0.1), TSDF_OK);
    assert_int_equal(prom_gauge(&b, "v", "x", "k=\"b\"", NAN), TSDF_OK);
    assert_int_equal(prom_gauge(&b, "v", "x", "k=\"c\"", INFINITY), TSDF_OK);
    assert_int_equal(prom_gauge(&b, "v", "x", "k=\"d\"", -INFINITY), TSDF_OK);
    assert_int_equal(prom_gauge(&b, "v", "x", "k=\"e\"", 18446744073709551615.0), TSDF_OK);
    assert_int_equal(prom_gauge(&b, "v", "x", "k=\"f\"", 1.0 / 3.0), TSDF_OK);
    assert_int_equal(prom_gauge(&b, "v", "x", "k=\"g\"", 123456789012.0), TSDF_OK);
    assert_non_null(strstr(b.data, "v{k=\"a\"} 0.1\n"));
    assert_non_null(strstr(b.data, "v{k=\"b\"} NaN\n"));
    assert_non_null(strstr(b.data, "v{k=\"c\"} +Inf\n"));
    assert_non_null(strstr(b.data, "v{k=\"d\"} -Inf\n"));
    assert_non_null(strstr(b.data, "v{k=\"g\"} 123456789012\n"));
    /* The text of 1/3 must read back as exactly the same double. */
    const char *third = strstr(b.data, "v{k=\"f\"} ");
    assert_non_null(third);
    assert_true(strtod(third + strlen("v{k=\"f\"} "), NULL) == 1.0 / 3.0);
    const char *big = strstr(b.data, "v{k=\"e\"} ");
    assert_true(strtod(big + strlen("v{k=\"e\"} "), NULL) == 18446744073709551615.0);
    prom_buf_fini(&b);
}

static void test_help_is_escaped(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    assert_int_equal(prom_gauge(&b, "g", "line one\nback\\slash", NULL, 1), TSDF_OK);
    assert_non_null(strstr(b.data, "# HELP g line one\\nback\\\\slash\n"));
    prom_buf_fini(&b);
}

static void test_summary_converts_ms_to_seconds(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    lat_summary s = {.p50_ms = 2.5, .p99_ms = 40, .max_ms = 50, .count = 7, .sum_ms = 1500};
    assert_int_equal(
        prom_summary(&b, "tsdfd_stage_latency_seconds", "Stage latency.", "stage=\"decode\"", &s),
        TSDF_OK);
    lat_summary empty = {.p50_ms = NAN, .p99_ms = NAN, .max_ms = NAN, .count = 0, .sum_ms = 0};
    assert_int_equal(
        prom_summary(&b, "tsdfd_stage_latency_seconds", "Stage latency.", "stage=\"mesh\"", &empty),
        TSDF_OK);
    assert_string_equal(b.data,
                        "# HELP tsdfd_stage_latency_seconds Stage latency.\n"
                        "# TYPE tsdfd_stage_latency_seconds summary\n"
                        "tsdfd_stage_latency_seconds{stage=\"decode\",quantile=\"0.5\"} 0.0025\n"
                        "tsdfd_stage_latency_seconds{stage=\"decode\",quantile=\"0.99\"} 0.04\n"
                        "tsdfd_stage_latency_seconds_sum{stage=\"decode\"} 1.5\n"
                        "tsdfd_stage_latency_seconds_count{stage=\"decode\"} 7\n"
                        "tsdfd_stage_latency_seconds{stage=\"mesh\",quantile=\"0.5\"} NaN\n"
                        "tsdfd_stage_latency_seconds{stage=\"mesh\",quantile=\"0.99\"} NaN\n"
                        "tsdfd_stage_latency_seconds_sum{stage=\"mesh\"} 0\n"
                        "tsdfd_stage_latency_seconds_count{stage=\"mesh\"} 0\n");
    prom_buf_reset(&b);
    /* Without labels the quantile is the only one. */
    assert_int_equal(prom_summary(&b, "x_seconds", "X.", NULL, &s), TSDF_OK);
    assert_non_null(strstr(b.data, "x_seconds{quantile=\"0.5\"} 0.0025\n"));
    assert_non_null(strstr(b.data, "x_seconds_count 7\n"));
    prom_buf_fini(&b);
}

static void test_histogram_is_cumulative(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    const double le[3] = {0, 1, 2};
    const uint64_t counts[3] = {5, 3, 0};
    assert_int_equal(prom_histogram(&b, "tsdfd_hash_probe_length", "Probe lengths.", "map=\"m\"",
                                    le, counts, 3, 2, 17.0),
                     TSDF_OK);
    assert_string_equal(b.data, "# HELP tsdfd_hash_probe_length Probe lengths.\n"
                                "# TYPE tsdfd_hash_probe_length histogram\n"
                                "tsdfd_hash_probe_length_bucket{map=\"m\",le=\"0\"} 5\n"
                                "tsdfd_hash_probe_length_bucket{map=\"m\",le=\"1\"} 8\n"
                                "tsdfd_hash_probe_length_bucket{map=\"m\",le=\"2\"} 8\n"
                                "tsdfd_hash_probe_length_bucket{map=\"m\",le=\"+Inf\"} 10\n"
                                "tsdfd_hash_probe_length_sum{map=\"m\"} 17\n"
                                "tsdfd_hash_probe_length_count{map=\"m\"} 10\n");
    prom_buf_reset(&b);
    const double bad_le[2] = {1, 1};
    assert_int_equal(prom_histogram(&b, "h", "x", NULL, bad_le, counts, 2, 0, 0), TSDF_EINVAL);
    prom_buf_fini(&b);
}

static void test_label_escape(void **state)
{
    char out[64];
    assert_int_equal(prom_label_escape(out, sizeof out, "a\"b\\c\nd"), TSDF_OK);
    assert_string_equal(out, "a\\\"b\\\\c\\nd");
    assert_int_equal(prom_label_escape(out, sizeof out, NULL), TSDF_OK);
    assert_string_equal(out, "");
    /* Truncation never splits an escape pair... */
    assert_int_equal(prom_label_escape(out, 4, "ab\"c"), TSDF_ETOO_LARGE);
    assert_string_equal(out, "ab");
    /* ...nor a UTF-8 character ("é" is 2 bytes). */
    assert_int_equal(prom_label_escape(out, 4, "ab\xc3\xa9"), TSDF_ETOO_LARGE);
    assert_string_equal(out, "ab");
    assert_int_equal(prom_label_escape(out, 5, "ab\xc3\xa9"), TSDF_OK);
    assert_string_equal(out, "ab\xc3\xa9");
}

static void test_buffer_is_bounded(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    char labels[64];
    int r = TSDF_OK;
    size_t lines = 0;
    /* ~50 bytes a line: 16 MiB is reached well before 1M lines. */
    for (size_t i = 0; i < 1000000 && r == TSDF_OK; i++, lines++) {
        snprintf(labels, sizeof labels, "sensor=\"s%zu\"", i);
        r = prom_counter(&b, "tsdfd_frames_received_total", "x", labels, (double)i);
    }
    assert_int_equal(r, TSDF_ETOO_LARGE);
    assert_true(lines < 1000000);
    assert_true(b.len < PROM_BUF_MAX_BYTES);
    assert_int_equal(prom_buf_error(&b), TSDF_ETOO_LARGE);
    prom_buf_fini(&b);
}

static void test_tsdfd_volume_families(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    tsdf_volume_stats st[2];
    memset(st, 0, sizeof st);
    st[0].backend = TSDF_BACKEND_CUDA;
    st[0].blocks_allocated = 300;
    st[0].capacity_slots = 1024;
    st[0].load_factor = 300.0 / 1024.0;
    st[0].probe_hist[0] = 200;
    st[0].probe_hist[1] = 90;
    st[0].probe_hist[TSDF_PROBE_HIST_BINS - 1] = 10; /* displacements >= 15 */
    st[0].mean_probe = 1.0;
    st[0].growth_events = 3;
    st[0].insert_failures = 7;
    st[0].memory_bytes = 4096;
    st[1].backend = TSDF_BACKEND_CPU;
    st[1].memory_bytes = 999; /* host memory: not GPU memory */
    const char *names[2] = {"default", "a\"b"};
    assert_int_equal(prom_tsdfd_volume_families(&b, names, st, 2), TSDF_OK);
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
    };
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        if (!strstr(b.data, expect[i]))
            fail_msg("missing: %s in:\n%s", expect[i], b.data);
    }
    assert_int_equal(count_substr(b.data, "# TYPE "), 7);
    /* No maps: nothing at all. */
    prom_buf_reset(&b);
    assert_int_equal(prom_tsdfd_volume_families(&b, NULL, NULL, 0), TSDF_OK);
    assert_int_equal(b.len, 0);
    prom_buf_fini(&b);
}

static void test_tsdfd_process_families_and_stages(void **state)
{
    prom_buf b;
    prom_buf_init(&b);
    assert_int_equal(prom_tsdfd_process_families(&b, "0.1.0", "cpu", 2.5), TSDF_OK);
    assert_non_null(strstr(b.data, "tsdfd_build_info{version=\"0.1.0\",backend=\"cpu\"} 1\n"));
    assert_non_null(strstr(b.data, "tsdfd_uptime_seconds 2.5\n"));
    const char *rss = strstr(b.data, "\ntsdfd_host_memory_bytes ");
    assert_non_null(rss);
    double bytes = strtod(rss + strlen("\ntsdfd_host_memory_bytes "), NULL);
    uint64_t direct = 0;
    assert_int_equal(prom_rss_bytes(&direct), TSDF_OK);
    /* A test program's RSS: above 100 KiB, below 1 GiB, close to a fresh read. */
    assert_true(bytes > 100e3 && bytes < 1e9);
    assert_true(fabs(bytes - (double)direct) < 64e6);

    lat_window w;
    assert_int_equal(lat_window_init(&w, 8), TSDF_OK);
    lat_window_add(&w, 4.0);
    lat_window *ws[PROM_STAGE_COUNT] = {NULL, NULL, NULL, &w, NULL, NULL};
    prom_buf_reset(&b);
    assert_int_equal(prom_tsdfd_stage_latency(&b, ws), TSDF_OK);
    assert_int_equal(count_substr(b.data, "# TYPE tsdfd_stage_latency_seconds summary"), 1);
    for (int i = 0; i < PROM_STAGE_COUNT; i++) {
        char line[128];
        snprintf(line, sizeof line, "tsdfd_stage_latency_seconds_count{stage=\"%s\"} %d\n",
                 prom_stage_names[i], i == 3 ? 1 : 0);
        assert_non_null(strstr(b.data, line));
    }
    assert_string_equal(prom_stage_names[3], "update");
    assert_non_null(
        strstr(b.data, "tsdfd_stage_latency_seconds{stage=\"update\",quantile=\"0.99\"} 0.004\n"));
    assert_non_null(
        strstr(b.data, "tsdfd_stage_latency_seconds{stage=\"decode\",quantile=\"0.5\"} NaN\n"));
    lat_window_fini(&w);
    prom_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_and_gauge_text),
        cmocka_unit_test(test_family_without_samples),
        cmocka_unit_test(test_help_and_type_once_per_family),
        cmocka_unit_test(test_reopening_a_family_is_refused_and_sticky),
        cmocka_unit_test(test_bad_names_refused),
        cmocka_unit_test(test_values_formatting),
        cmocka_unit_test(test_help_is_escaped),
        cmocka_unit_test(test_summary_converts_ms_to_seconds),
        cmocka_unit_test(test_histogram_is_cumulative),
        cmocka_unit_test(test_label_escape),
        cmocka_unit_test(test_buffer_is_bounded),
        cmocka_unit_test(test_tsdfd_volume_families),
        cmocka_unit_test(test_tsdfd_process_families_and_stages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

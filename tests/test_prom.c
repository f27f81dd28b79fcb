/*
 * test_prom.c - the Prometheus text builder (daemon/prom.c). tsdfd's own
 * families are the counter table's, tested in test_metrics.c.
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_metrics.c - the counter table (daemon/metrics.c): every row in both
 * outputs, the stats reply's "daemon" entries and the /metrics text, with
 * the same value; valid and unique names within the protocol's limits; the
 * reply within its 128 entries; and docs/OPERATIONS.md in step with the
 * table.
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

/* The value of the sample line `series value` (series is the name with its
 * braces, if any); *found 0 when there is none. */
static double prom_sample(const char *text, const char *series, int *found)
{
    size_t n = strlen(series);
    for (const char *line = text; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, series, n) == 0 && line[n] == ' ') {
            *found = 1;
            return strtod(line + n + 1, NULL);
        }
    }
    *found = 0;
    return 0.0;
}

static double prom_must(const char *text, const char *series)
{
    int found;
    double v = prom_sample(text, series, &found);
    if (!found)
        fail_msg("/metrics has no sample %s", series);
    return v;
}

/* The sum of a family's plain samples, over every label set. */
static double family_sum(const char *text, const char *name)
{
    size_t n = strlen(name);
    double sum = 0.0;
    for (const char *line = text; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, name, n) != 0 || (line[n] != '{' && line[n] != ' '))
            continue;
        /* The value follows the line's last space (label values may hold
         * spaces: "(no sensor)"). */
        const char *end = strchr(line, '\n') ? strchr(line, '\n') : line + strlen(line);
        while (end > line && end[-1] != ' ')
            end--;
        sum += strtod(end, NULL);
    }
    return sum;
}

static int count_substr(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The index of the stats entry `key`, or -1. */
static int stat_index(const tsdf_rep_stats *s, const char *key)
{
    for (uint32_t i = 0; i < s->extra_count; i++) {
        if (strcmp(s->extra[i].key, key) == 0)
            return (int)i;
    }
    return -1;
}

static double entry_value(const tsdf_stat_entry *e)
{
    return e->is_float ? e->f : (double)e->i;
}

/* The stats entry `key`, marked as accounted for; fails when absent. */
static double stat_must(const tsdf_rep_stats *s, const char *key, int *seen)
{
    int i = stat_index(s, key);
    if (i < 0)
        fail_msg("the stats reply has no entry %s", key);
    seen[i] = 1;
    return entry_value(&s->extra[i]);
}

/* What /metrics must show for a stats value of row r. */
static double to_prom(const metrics_row *r, double v)
{
    return r->unit == METRIC_UNIT_MS && v >= 0 ? v / 1e3 : v;
}

static void expand(const char *pattern, const char *value, char *out, size_t len)
{
    const char *open = strchr(pattern, '<');
    const char *close = open ? strchr(open, '>') : NULL;
    if (!close)
        snprintf(out, len, "%s", pattern);
    else
        snprintf(out, len, "%.*s%s%s", (int)(open - pattern), pattern, value, close + 1);
}

/* name{label="value"} (name alone without a label). */
static void series(const metrics_row *r, const char *suffix, const char *value, const char *extra,
                   char *out, size_t len)
{
    char esc[160];
    const char *label = metrics_dim_label(r->dim);
    if (!label && !extra) {
        snprintf(out, len, "%s%s", r->prom_name, suffix);
        return;
    }
    if (label)
        prom_label_escape(esc, sizeof esc, value);
    snprintf(out, len, "%s%s{%s%s%s%s%s%s}", r->prom_name, suffix, label ? label : "",
             label ? "=\"" : "", label ? esc : "", label ? "\"" : "", label && extra ? "," : "",
             extra ? extra : "");
}

/* ---- every row in both outputs ------------------------------------------ */

static void check_scalar(const metrics_row *r, const tsdf_rep_stats *s, const char *text,
                         const char *value, int *seen)
{
    char key[128], name[256];
    expand(r->stats_key, value, key, sizeof key);
    series(r, "", value, NULL, name, sizeof name);
    double want = to_prom(r, stat_must(s, key, seen));
    double got = prom_must(text, name);
    if (got != want)
        fail_msg("%s is %.17g in the stats reply (%s), %.17g in /metrics", r->prom_name, want, key,
                 got);
}

static void check_summary(const metrics_row *r, const tsdf_rep_stats *s, const char *text,
                          const char *value, size_t index, int *seen)
{
    char prefix[128], key[160], name[256];
    expand(r->stats_key, value, prefix, sizeof prefix);
    snprintf(key, sizeof key, "%s.count", prefix);
    double count = stat_must(s, key, seen);
    series(r, "_count", value, NULL, name, sizeof name);
    assert_true(prom_must(text, name) == count);
    static const char *const quantiles[2][2] = {{"p50_ms", "quantile=\"0.5\""},
                                                {"p99_ms", "quantile=\"0.99\""}};
    int max_mean = (int)((r->stats_first >> index) & 1u);
    for (int q = 0; q < 2; q++) {
        snprintf(key, sizeof key, "%s.%s", prefix, quantiles[q][0]);
        series(r, "", value, quantiles[q][1], name, sizeof name);
        if (count == 0) {
            /* An empty window: its count only, and NaN quantiles. */
            assert_int_equal(stat_index(s, key), -1);
            assert_true(isnan(prom_must(text, name)));
            continue;
        }
        assert_true(prom_must(text, name) == stat_must(s, key, seen) / 1e3);
    }
    snprintf(key, sizeof key, "%s.mean_ms", prefix);
    if (count > 0 && max_mean) {
        double mean = stat_must(s, key, seen);
        series(r, "_sum", value, NULL, name, sizeof name);
        assert_true(fabs(prom_must(text, name) - mean * count / 1e3) < 1e-9 * (1 + mean * count));
        snprintf(key, sizeof key, "%s.max_ms", prefix);
        assert_true(stat_must(s, key, seen) > 0);
    } else {
        assert_int_equal(stat_index(s, key), -1);
    }
}

/* A stats reply carrying s, encoded into buf (initialised here; the caller
 * finis it) and decoded again, as a client reads it: the decoded reply,
 * which the caller frees. */
static tsdf_reply *round_trip(const tsdf_rep_stats *s, tsdf_buf *buf)
{
    tsdf_reply *rep = calloc(2, sizeof *rep);
    assert_non_null(rep);
    tsdf_reply_init(&rep[0], TSDF_MSG_STATS, 1);
    rep[0].u.stats = *s;
    tsdf_buf_init(buf);
    assert_int_equal(tsdf_proto_encode_reply(&rep[0], buf), TSDF_OK);
    assert_int_equal(tsdf_proto_decode_reply(buf->data, buf->len, &rep[1], NULL), TSDF_OK);
    memmove(&rep[0], &rep[1], sizeof *rep);
    return rep;
}

/* The engine rows: the reply's "engine" map, encoded and decoded as a
 * client sees it, against the map's series. */
static void check_engine(const metrics_ctx *c, const tsdf_rep_stats *s, const char *text)
{
    tsdf_buf buf;
    tsdf_reply *rep = round_trip(s, &buf);
    assert_true(rep->u.stats.has_engine);

    metrics_map decoded = c->maps[0];
    decoded.vstats = rep->u.stats.engine;
    metrics_label l = {.index = 0, .map = &decoded};
    size_t n;
    const metrics_row *rows = metrics_rows(&n);
    for (size_t i = 0; i < n; i++) {
        const metrics_row *r = &rows[i];
        if (r->dim != METRIC_DIM_ENGINE)
            continue;
        /* The key is in the engine map (a msgpack fixstr). */
        const char *key = r->stats_key + strlen("engine.");
        char needle[40];
        needle[0] = (char)(0xa0 | strlen(key));
        memcpy(needle + 1, key, strlen(key));
        if (!memmem(buf.data, buf.len, needle, 1 + strlen(key)))
            fail_msg("the reply's engine map has no key %s", key);
        char name[256];
        if (r->type == METRIC_HISTOGRAM) {
            metrics_hist h;
            r->histogram(c, &l, &h);
            double count = (double)h.overflow;
            for (size_t k = 0; k < h.n; k++)
                count += (double)h.counts[k];
            series(r, "_count", decoded.name, NULL, name, sizeof name);
            assert_true(prom_must(text, name) == count);
            series(r, "_bucket", decoded.name, "le=\"+Inf\"", name, sizeof name);
            assert_true(prom_must(text, name) == count);
            series(r, "_sum", decoded.name, NULL, name, sizeof name);
            assert_true(prom_must(text, name) == h.sum);
            continue;
        }
        metric_value v = r->value(c, &l);
        series(r, "", decoded.name, NULL, name, sizeof name);
        double want = v.is_float ? v.f : (double)v.i;
        if (prom_must(text, name) != want)
            fail_msg("%s: engine %s gives %.17g, /metrics %.17g", name, key, want,
                     prom_must(text, name));
    }
    tsdf_buf_fini(&buf);
    free(rep);
}

/* Every row of the table against the stats reply about sample map m and
 * the /metrics text of the whole sample; and nothing in the reply that no
 * row accounts for. */
static void check_both_outputs(const metrics_sample *smp, size_t m, const char *text)
{
    metrics_ctx c = metrics_sample_for_map(smp, m);
    tsdf_rep_stats *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_int_equal(metrics_fill_stats(&c, s), TSDF_OK);
    int seen[TSDF_PROTO_MAX_STATS_EXTRA] = {0};
    size_t n;
    const metrics_row *rows = metrics_rows(&n);

    for (size_t i = 0; i < n; i++) {
        const metrics_row *r = &rows[i];
        if (r->stats_total_key) {
            double total = stat_must(s, r->stats_total_key, seen);
            if (total != family_sum(text, r->prom_name))
                fail_msg("%s is %.17g, the sum of %s %.17g", r->stats_total_key, total,
                         r->prom_name, family_sum(text, r->prom_name));
        }
        switch (r->dim) {
        case METRIC_DIM_MAP:
            check_scalar(r, s, text, c.maps[0].name, seen);
            break;
        case METRIC_DIM_ENGINE:
            break;
        case METRIC_DIM_SENSOR:
            for (size_t k = 0; k < c.totals.sensor_count; k++) {
                ds_sensor sn;
                assert_true(dstats_sensor_at(c.stats, k, &sn));
                if (sn.received > 0)
                    check_scalar(r, s, text, sn.name, seen);
            }
            break;
        default:
            for (size_t k = 0; k < metrics_dim_fixed_count(r->dim); k++) {
                const char *v = metrics_dim_fixed_value(r->dim, k);
                if (r->type == METRIC_SUMMARY)
                    check_summary(r, s, text, v, k, seen);
                else
                    check_scalar(r, s, text, v, seen);
            }
        }
    }
    check_engine(&c, s, text);
    for (uint32_t i = 0; i < s->extra_count; i++) {
        if (!seen[i])
            fail_msg("the stats entry %s has no row in the table", s->extra[i].key);
    }
    free(s);
}

static void test_every_row_in_both_outputs(void **state)
{
    metrics_sample smp;
    assert_int_equal(metrics_sample_init(&smp), TSDF_OK);
    char *text = render(&smp.ctx);

    for (size_t m = 0; m < METRICS_SAMPLE_MAPS; m++)
        check_both_outputs(&smp, m, text);

    /* Each family once, of its row's type; and none the table lacks. */
    size_t n;
    const metrics_row *rows = metrics_rows(&n);
    char line[256];
    for (size_t i = 0; i < n; i++) {
        static const char *const types[] = {"counter", "gauge", "summary", "histogram"};
        snprintf(line, sizeof line, "# TYPE %s %s\n", rows[i].prom_name, types[rows[i].type]);
        assert_int_equal(count_substr(text, line), 1);
    }
    assert_int_equal(count_substr(text, "# TYPE "), (int)n + 1); /* + tsdfd_build_info */
    assert_int_equal(count_substr(text, "# TYPE tsdfd_build_info gauge\n"), 1);

    /* A few figures by hand, so that the walk is tied to the sample. */
    assert_true(prom_must(text, "tsdfd_queue_depth{map=\"default\"}") == 100);
    assert_true(prom_must(text, "tsdfd_queue_depth{map=\"a\\\"b\"}") == 105);
    assert_true(prom_must(text, "tsdfd_frames_in_flight") == 1);
    assert_true(prom_must(text, "tsdfd_frames_received_total{sensor=\"cam0\"}") == 8);
    assert_true(prom_must(text, "tsdfd_frames_received_total{sensor=\"(other sensors)\"}") == 3);
    assert_true(prom_must(text, "tsdfd_sensor_rejected_total{sensor=\"cam1\"}") == 2);
    assert_true(prom_must(text, "tsdfd_queries_busy_total{reason=\"kind\"}") == 29);
    assert_true(prom_must(text, "tsdfd_snapshot_age_seconds") == 4.321);
    assert_true(prom_must(text, "tsdfd_request_seconds_count{type=\"ping\"}") == 1);
    assert_true(prom_must(text, "tsdfd_requests_errors_total") == 2);
    free(text);
    metrics_sample_fini(&smp);
}

/* A stats reply about a map that does not exist: the daemon's counters,
 * no per-map entry, no engine map. */
static void test_stats_without_a_map(void **state)
{
    metrics_sample smp;
    assert_int_equal(metrics_sample_init(&smp), TSDF_OK);
    metrics_ctx c = metrics_sample_for_map(&smp, METRICS_SAMPLE_MAPS);
    tsdf_rep_stats *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_int_equal(metrics_fill_stats(&c, s), TSDF_OK);
    assert_false(s->has_engine);
    assert_int_equal(stat_index(s, "queue.depth"), -1);
    assert_int_equal(stat_index(s, "map.frames_unsaved"), -1);
    int i = stat_index(s, "frames.unsaved");
    assert_true(i >= 0);
    assert_int_equal(s->extra[i].i, 180 + 185);
    assert_true(stat_index(s, "frames.received") >= 0);
    assert_true(stat_index(s, "sensor.cam0.received") >= 0);

    /* The reply is about one map: two are a caller's mistake. */
    memset(s, 0, sizeof *s);
    assert_int_equal(metrics_fill_stats(&smp.ctx, s), TSDF_EINVAL);
    free(s);
    metrics_sample_fini(&smp);
}

/* -1 ("none yet") stays -1 in both outputs; a figure that cannot be read
 * is in neither. */
static void test_none_yet_and_missing(void **state)
{
    metrics_sample smp;
    assert_int_equal(metrics_sample_init(&smp), TSDF_OK);
    smp.ctx.snapshot_age_ms = -1;
    smp.ctx.has_host_memory = 0;
    char *text = render(&smp.ctx);
    assert_true(prom_must(text, "tsdfd_snapshot_age_seconds") == -1.0);
    int found;
    prom_sample(text, "tsdfd_host_memory_bytes", &found);
    assert_false(found);
    assert_non_null(strstr(text, "# TYPE tsdfd_host_memory_bytes gauge\n"));
    metrics_ctx c = metrics_sample_for_map(&smp, 0);
    tsdf_rep_stats *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_int_equal(metrics_fill_stats(&c, s), TSDF_OK);
    assert_int_equal(s->extra[stat_index(s, "snapshot.last_save_age_ms")].i, -1);
    assert_int_equal(stat_index(s, "host.memory_bytes"), -1);
    free(s);
    free(text);
    metrics_sample_fini(&smp);
}

/* ---- names and keys ----------------------------------------------------- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The naming rule of docs/OPERATIONS.md ("Metrics"): the stats key without
 * its "<label>" (and the separator before it); a summary without its
 * "latency." and with "_seconds"; "_ms" as "_seconds"; no trailing
 * ".count" (the name _count is the summaries'); dots as underscores;
 * "tsdfd_" before; "_total" after a counter's name. */
static void rule_name(const metrics_row *r, char *out, size_t len)
{
    char key[96];
    const char *open = strchr(r->stats_key, '<');
    if (open) {
        const char *close = strchr(open, '>');
        size_t head = (size_t)(open - r->stats_key);
        if (head > 0)
            head--; /* the '.' or '_' before the label */
        snprintf(key, sizeof key, "%.*s%s", (int)head, r->stats_key, close + 1);
    } else {
        snprintf(key, sizeof key, "%s", r->stats_key);
    }
    char *k = key;
    if (r->type == METRIC_SUMMARY && strncmp(k, "latency.", 8) == 0)
        k += 8;
    if (ends_with(k, ".count"))
        k[strlen(k) - 6] = '\0';
    char base[96];
    if (ends_with(k, "_ms"))
        snprintf(base, sizeof base, "%.*s_seconds", (int)(strlen(k) - 3), k);
    else if (r->type == METRIC_SUMMARY)
        snprintf(base, sizeof base, "%s_seconds", k);
    else
        snprintf(base, sizeof base, "%s", k);
    for (char *p = base; *p; p++)
        *p = *p == '.' ? '_' : *p;
    snprintf(out, len, "tsdfd_%s%s", base,
             r->type == METRIC_COUNTER && !ends_with(base, "_total") ? "_total" : "");
}

typedef struct {
    char (*keys)[64];
    size_t n, cap;
} key_set;

static void add_key(key_set *ks, const char *key)
{
    if (strlen(key) > TSDF_PROTO_MAX_STATS_KEY_LEN)
        fail_msg("stats key %s is longer than %u bytes", key, TSDF_PROTO_MAX_STATS_KEY_LEN);
    for (size_t i = 0; i < ks->n; i++) {
        if (strcmp(ks->keys[i], key) == 0)
            fail_msg("stats key %s comes from two rows", key);
    }
    if (ks->n == ks->cap) {
        ks->cap = ks->cap ? 2 * ks->cap : 64;
        ks->keys = realloc(ks->keys, ks->cap * sizeof *ks->keys);
        assert_non_null(ks->keys);
    }
    snprintf(ks->keys[ks->n++], sizeof ks->keys[0], "%s", key);
}

/* Every stats key a row gives: its labels (a sensor's as long as a label
 * may be), and a summary's five suffixes. */
static void add_row_keys(key_set *ks, const metrics_row *r)
{
    char sensor[TSDF_PROTO_MAX_STATS_KEY_LEN + 1], key[128], sub[160];
    size_t labels = metrics_dim_fixed_count(r->dim);
    if (r->stats_total_key)
        add_key(ks, r->stats_total_key);
    if (r->dim == METRIC_DIM_SENSOR || r->dim == METRIC_DIM_MAP || r->dim == METRIC_DIM_ENGINE)
        labels = 1;
    memset(sensor, 's', metrics_stats_sensor_label_max());
    sensor[metrics_stats_sensor_label_max()] = '\0';
    for (size_t k = 0; k < labels; k++) {
        const char *v = r->dim == METRIC_DIM_SENSOR ? sensor : metrics_dim_fixed_value(r->dim, k);
        expand(r->stats_key, v, key, sizeof key);
        if (r->type != METRIC_SUMMARY) {
            add_key(ks, key);
            continue;
        }
        static const char *const suffix[] = {"count", "p50_ms", "p99_ms", "max_ms", "mean_ms"};
        for (int j = 0; j < 5; j++) {
            snprintf(sub, sizeof sub, "%s.%s", key, suffix[j]);
            add_key(ks, sub);
        }
    }
}

static void test_names_and_keys(void **state)
{
    size_t n;
    const metrics_row *rows = metrics_rows(&n);
    key_set ks = {0};
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        const metrics_row *r = &rows[i];
        if (!prom_name_valid(r->prom_name))
            fail_msg("%s is no valid Prometheus name", r->prom_name);
        assert_int_not_equal(strcmp(r->prom_name, "tsdfd_build_info"), 0);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(rows[j].prom_name, r->prom_name) == 0)
                fail_msg("%s is the name of two rows", r->prom_name);
        }
        assert_non_null(r->help);
        assert_true(strlen(r->help) > 0);
        assert_int_equal(ends_with(r->prom_name, "_total"), r->type == METRIC_COUNTER);
        if (r->type == METRIC_SUMMARY || r->unit == METRIC_UNIT_MS)
            assert_true(ends_with(r->prom_name, "_seconds"));
        /* The names Prometheus keeps for a summary's and a histogram's series. */
        assert_false(ends_with(r->prom_name, "_count") || ends_with(r->prom_name, "_sum") ||
                     ends_with(r->prom_name, "_bucket"));

        /* One reader, of the row's type; a total exactly with its key. */
        assert_int_equal(r->value != NULL, r->type == METRIC_COUNTER || r->type == METRIC_GAUGE);
        assert_int_equal(r->window != NULL, r->type == METRIC_SUMMARY);
        assert_int_equal(r->histogram != NULL, r->type == METRIC_HISTOGRAM);
        assert_int_equal(r->total != NULL, r->stats_total_key != NULL);
        assert_true(r->stats_total_key == NULL || r->dim != METRIC_DIM_NONE);
        assert_true(r->type != METRIC_HISTOGRAM || r->dim == METRIC_DIM_ENGINE);

        /* A label's place in the key is named for the label; per-map keys
         * have none (the reply is about one map), engine keys are the
         * engine map's. */
        const char *open = strchr(r->stats_key, '<');
        const char *label = metrics_dim_label(r->dim);
        if (r->dim == METRIC_DIM_ENGINE) {
            assert_int_equal(strncmp(r->stats_key, "engine.", 7), 0);
        } else if (r->dim == METRIC_DIM_NONE || r->dim == METRIC_DIM_MAP) {
            assert_null(open);
        } else {
            char want[32];
            snprintf(want, sizeof want, "<%s>", label);
            assert_non_null(strstr(r->stats_key, want));
        }
        add_row_keys(&ks, r);

        /* The naming rule, for every row but those named before it. */
        if (r->dim != METRIC_DIM_ENGINE) {
            char rule[128];
            rule_name(r, rule, sizeof rule);
            if (!(r->flags & METRIC_F_OLD_NAME) && strcmp(rule, r->prom_name) != 0)
                fail_msg("%s: the rule names it %s, the table %s", r->stats_key, rule,
                         r->prom_name);
            if ((r->flags & METRIC_F_OLD_NAME) && strcmp(rule, r->prom_name) == 0)
                fail_msg("%s follows the rule: it needs no METRIC_F_OLD_NAME", r->prom_name);
        }
    }
    free(ks.keys);
}

/* ---- the reply's entry limit ------------------------------------------- */

/* A dstats with n sensors of one frame each, named sensor-00 ..., and
 * samples in every latency window. */
static void busy_counters(dstats *st, int n)
{
    assert_int_equal(dstats_init(st, (size_t)n, 8), TSDF_OK);
    lat_window_add(&st->lat_integrate, 1.0);
    lat_window_add(&st->lat_queue_wait, 1.0);
    for (int t = 0; t < DS_MSG_TYPES; t++)
        lat_window_add(&st->lat_request[t], 1.0);
    for (int t = 0; t < DS_STAGE_COUNT; t++)
        lat_window_add(&st->lat_stage[t], 1.0);
    for (int i = 0; i < n; i++) {
        tsdf_proto_sensor sn = {0};
        snprintf(sn.name, sizeof sn.name, "sensor-%02d", i);
        dstats_frame_received(st, dstats_sensor_index(st, &sn));
    }
}

/* The stats reply of the sample's first map over the counters st. */
static tsdf_rep_stats *fill_with(const metrics_sample *smp, dstats *st)
{
    metrics_ctx c = metrics_sample_for_map(smp, 0);
    c.stats = st;
    dstats_get_totals(st, &c.totals);
    tsdf_rep_stats *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_int_equal(metrics_fill_stats(&c, s), TSDF_OK);
    assert_true(s->extra_count <= TSDF_PROTO_MAX_STATS_EXTRA);
    return s;
}

/* The sensors listed, each with all its entries, in their order. */
static size_t sensors_listed(const tsdf_rep_stats *s)
{
    size_t listed = 0;
    char key[64];
    for (;; listed++) {
        snprintf(key, sizeof key, "sensor.sensor-%02zu.received", listed);
        if (stat_index(s, key) < 0)
            return listed;
        static const char *const rest[] = {"integrated", "dropped", "rejected"};
        for (int k = 0; k < 3; k++) {
            snprintf(key, sizeof key, "sensor.sensor-%02zu.%s", listed, rest[k]);
            assert_true(stat_index(s, key) >= 0);
        }
    }
}

static void test_reply_fits_its_entry_limit(void **state)
{
    size_t first = metrics_stats_entries_first(), last = metrics_stats_entries_last();
    size_t per = metrics_stats_entries_per_sensor();
    print_message("stats reply: at most %zu entries before the sensors, %zu after, %zu per "
                  "sensor\n",
                  first, last, per);
    assert_true(first + METRICS_STATS_MIN_SENSORS * per <= TSDF_PROTO_MAX_STATS_EXTRA);
    assert_true(first + last + METRICS_STATS_FULL_SENSORS * per <= TSDF_PROTO_MAX_STATS_EXTRA);

    metrics_sample smp;
    assert_int_equal(metrics_sample_init(&smp), TSDF_OK);
    dstats st;

    /* Every window with samples and a map asked for: with as many sensors
     * as METRICS_STATS_FULL_SENSORS, every entry of the table is there. */
    busy_counters(&st, METRICS_STATS_FULL_SENSORS);
    tsdf_rep_stats *s = fill_with(&smp, &st);
    assert_int_equal(sensors_listed(s), METRICS_STATS_FULL_SENSORS);
    assert_int_equal(s->extra_count, first + last + METRICS_STATS_FULL_SENSORS * per);
    assert_true(stat_index(s, "latency.stage.mesh.p99_ms") >= 0);
    assert_true(stat_index(s, "latency.request.delete.p50_ms") >= 0);
    free(s);
    dstats_fini(&st);

    /* More sensors than fit: the first part whole, as many sensors as
     * there is room for (at least METRICS_STATS_MIN_SENSORS), then whole
     * later summaries in what is left. */
    busy_counters(&st, 40);
    s = fill_with(&smp, &st);
    size_t listed = sensors_listed(s);
    assert_true(listed >= METRICS_STATS_MIN_SENSORS);
    assert_int_equal(listed, (TSDF_PROTO_MAX_STATS_EXTRA - first) / per);
    size_t room = TSDF_PROTO_MAX_STATS_EXTRA - first - listed * per;
    size_t later = room / 3 < last / 3 ? room / 3 : last / 3;
    assert_int_equal(s->extra_count, first + listed * per + 3 * later);
    assert_int_equal(s->extra[stat_index(s, "sensors.count")].i, 40);
    assert_true(stat_index(s, "latency.request.mesh.mean_ms") >= 0);

    /* And a client can read it. */
    tsdf_buf buf;
    tsdf_reply *rep = round_trip(s, &buf);
    assert_int_equal(rep->u.stats.extra_count, s->extra_count);
    tsdf_buf_fini(&buf);
    free(rep);
    free(s);
    dstats_fini(&st);
    metrics_sample_fini(&smp);
}

/* Sensor names too long for a key are cut to a distinct label; the
 * metrics carry them in full. */
static void test_long_sensor_names(void **state)
{
    dstats st;
    assert_int_equal(dstats_init(&st, 4, 8), TSDF_OK);
    const char *names[2] = {"warehouse-east-robot-0001.front-depth-camera",
                            "warehouse-east-robot-0002.front-depth-camera-with-a-64-byte-nam"};
    for (int i = 0; i < 2; i++) {
        tsdf_proto_sensor sn = {0};
        snprintf(sn.name, sizeof sn.name, "%s", names[i]);
        dstats_frame_received(&st, dstats_sensor_index(&st, &sn));
    }
    metrics_ctx c = {.stats = &st};
    dstats_get_totals(&st, &c.totals);
    tsdf_rep_stats *s = calloc(1, sizeof *s);
    assert_non_null(s);
    assert_int_equal(metrics_fill_stats(&c, s), TSDF_OK);
    int cut = 0;
    for (uint32_t i = 0; i < s->extra_count; i++) {
        const char *k = s->extra[i].key;
        if (strncmp(k, "sensor.warehouse-east-robot", 27) == 0 && ends_with(k, ".received")) {
            assert_non_null(strchr(k, '~'));
            assert_true(strlen(k) <= TSDF_PROTO_MAX_STATS_KEY_LEN);
            cut++;
        }
    }
    assert_int_equal(cut, 2);
    char *text = render(&c);
    for (int i = 0; i < 2; i++) {
        char name[160];
        snprintf(name, sizeof name, "tsdfd_frames_received_total{sensor=\"%s\"}", names[i]);
        assert_true(prom_must(text, name) == 1);
    }
    free(text);
    free(s);
    dstats_fini(&st);
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

/* ---- the documentation -------------------------------------------------- */

static char *read_text(const char *rel)
{
    char path[1024];
    const char *src = getenv("TSDF_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc(1, (size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return text;
}

/* docs/OPERATIONS.md lists every row as
 *   | `<family>` | <type> | <labels> | `<stats key>` ... | <meaning> |
 * (with its sum's key, and "*(older name)*" where the row predates the
 * naming rule), and no family the table lacks. */
static void test_docs_list_the_table(void **state)
{
    char *doc = read_text("docs/OPERATIONS.md");
    static const char *const types[] = {"counter", "gauge", "summary", "histogram"};
    size_t n;
    const metrics_row *rows = metrics_rows(&n);
    for (size_t i = 0; i < n; i++) {
        char head[192], key[96];
        snprintf(head, sizeof head, "\n| `%s` | %s |", rows[i].prom_name, types[rows[i].type]);
        const char *line = strstr(doc, head);
        if (!line)
            fail_msg("docs/OPERATIONS.md has no row \"%s\"", head + 1);
        const char *end = strchr(line + 1, '\n');
        snprintf(key, sizeof key, "`%s`", rows[i].stats_key);
        const char *at = strstr(line, key);
        if (!at || at > end)
            fail_msg("docs/OPERATIONS.md: the row of %s does not name %s", rows[i].prom_name, key);
        if (rows[i].stats_total_key) {
            snprintf(key, sizeof key, "`%s`", rows[i].stats_total_key);
            at = strstr(line, key);
            if (!at || at > end)
                fail_msg("docs/OPERATIONS.md: the row of %s does not name %s", rows[i].prom_name,
                         key);
        }
        /* The names that predate the naming rule say so. */
        at = strstr(line, "*(older name)*");
        if ((at != NULL && at < end) != ((rows[i].flags & METRIC_F_OLD_NAME) != 0))
            fail_msg("docs/OPERATIONS.md: %s is%s marked as an older name", rows[i].prom_name,
                     at != NULL && at < end ? "" : " not");
    }
    int documented = 0;
    for (const char *p = strstr(doc, "\n| `tsdfd_"); p; p = strstr(p + 1, "\n| `tsdfd_")) {
        char name[PROM_NAME_MAX];
        const char *s = p + 4, *e = strchr(s, '`');
        snprintf(name, sizeof name, "%.*s", (int)(e - s), s);
        int known = strcmp(name, "tsdfd_build_info") == 0;
        for (size_t i = 0; i < n && !known; i++)
            known = strcmp(rows[i].prom_name, name) == 0;
        if (!known)
            fail_msg("docs/OPERATIONS.md documents %s, which the table lacks", name);
        documented++;
    }
    assert_int_equal(documented, (int)n + 1);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_row_in_both_outputs),
        cmocka_unit_test(test_stats_without_a_map),
        cmocka_unit_test(test_none_yet_and_missing),
        cmocka_unit_test(test_names_and_keys),
        cmocka_unit_test(test_reply_fits_its_entry_limit),
        cmocka_unit_test(test_long_sensor_names),
        cmocka_unit_test(test_volume_families),
        cmocka_unit_test(test_process_families_and_stages),
        cmocka_unit_test(test_docs_list_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

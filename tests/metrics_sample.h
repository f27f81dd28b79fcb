/*
 * metrics_sample.h - a populated counter-table context (daemon/metrics.h)
 * for the tests of the table and of the /metrics server, so that both look
 * at every row with real numbers in it.
 *
 * The sample: two maps, "default" on the CUDA backend and "a\"b" (a name
 * the render must escape) on the CPU one, each with its own queue counters
 * and volume statistics; sensors cam0 and cam1 (max_sensors 2), a third
 * that lands in "(other sensors)", and frames in the "(no sensor)" bucket;
 * one frame in flight; requests of several types; every latency window
 * with samples but the mesh stage's (empty: NaN quantiles, a count of 0);
 * every other figure non-zero and distinct from the rest.
 *
 * Ownership: caller-owned struct; init, fini. The context points into it,
 * so it must not move between init and fini.
 */
#ifndef TSDF_TESTS_METRICS_SAMPLE_H
#define TSDF_TESTS_METRICS_SAMPLE_H

#include "metrics.h"

#define METRICS_SAMPLE_MAPS 2

typedef struct {
    dstats stats;
    metrics_map maps[METRICS_SAMPLE_MAPS];
    metrics_ctx ctx; /* every map: the /metrics view */
} metrics_sample;

/* TSDF_OK or the error of dstats_init. */
int metrics_sample_init(metrics_sample *s);
void metrics_sample_fini(metrics_sample *s);

/* The stats reply's view of the sample: its context with map i alone
 * (i == METRICS_SAMPLE_MAPS: no map). */
metrics_ctx metrics_sample_for_map(const metrics_sample *s, size_t i);

#endif

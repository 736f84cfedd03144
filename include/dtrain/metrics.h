/*
 * metrics.h - Prometheus metrics in the text exposition format 0.0.4 (docs/METRICS.md).
 *
 * A scrape builds its answer from the state it describes: dt_prom is the answer being built,
 * with the family header (# HELP, # TYPE) written once before a family's samples and the
 * escaping of help text and label values done here. Label sets are NULL-terminated arrays of
 * name, value, name, value, ... Values print as Go parses floats: the shortest decimal that
 * reads back exactly, NaN, +Inf, -Inf.
 *
 * dt_prom_hist is a histogram updated by many threads (a mutex inside) and written by a
 * scrape: cumulative buckets in increasing "le" order ending with +Inf, _sum and _count.
 *
 * Ownership: dt_prom_init/dt_prom_free and dt_prom_hist_init/dt_prom_hist_free pair up; a
 * dt_prom's text is malloc'd and can be taken with dt_prom_take. Errors are sticky: a failed
 * allocation marks the buffer and dt_prom_take returns NULL.
 */
#ifndef DTRAIN_METRICS_H
#define DTRAIN_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct dt_prom {
    char *p;
    size_t len, cap;
    int oom;
} dt_prom;

void dt_prom_init(dt_prom *b);
void dt_prom_free(dt_prom *b);
/* The text (NUL-terminated, *len its length) for the caller to free; NULL when out of memory.
 * The buffer is left empty. */
char *dt_prom_take(dt_prom *b, size_t *len);

/* # HELP and # TYPE of a family (type: "counter", "gauge", "histogram", "untyped"). */
void dt_prom_family(dt_prom *b, const char *name, const char *type, const char *help);
/* One sample: name{labels} value. labels may be NULL. */
void dt_prom_sample(dt_prom *b, const char *name, const char *const *labels, double value);

#define DT_PROM_MAX_BUCKETS 24

typedef struct dt_prom_hist {
    pthread_mutex_t mu;
    int n;                                   /* bucket bounds, +Inf not counted */
    double le[DT_PROM_MAX_BUCKETS];
    uint64_t counts[DT_PROM_MAX_BUCKETS + 1]; /* per bucket (not cumulative); [n]: above all */
    double sum;
    uint64_t count;
} dt_prom_hist;

/* n increasing bounds (at most DT_PROM_MAX_BUCKETS). */
void dt_prom_hist_init(dt_prom_hist *h, const double *le, int n);
void dt_prom_hist_free(dt_prom_hist *h);
void dt_prom_hist_observe(dt_prom_hist *h, double v);
/* The samples of one histogram series (after its family): name_bucket{labels,le}, name_sum,
 * name_count. */
void dt_prom_hist_write(dt_prom *b, const char *name, const char *const *labels, dt_prom_hist *h);

/* Bounds for request latencies in seconds: 0.0001 .. 10. */
extern const double dt_prom_latency_buckets[];
extern const int dt_prom_latency_nbuckets;

#ifdef __cplusplus
}
#endif
#endif

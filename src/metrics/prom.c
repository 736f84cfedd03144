/*
 * prom.c - the Prometheus text exposition format 0.0.4 (include/dtrain/metrics.h,
 * FORMATS.md 4): family headers, samples with escaped label values, histograms.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf-impl.h"
#include "dtrain/metrics.h"

const double dt_prom_latency_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                          5,      10};
const int dt_prom_latency_nbuckets =
    (int)(sizeof dt_prom_latency_buckets / sizeof dt_prom_latency_buckets[0]);

void dt_prom_init(dt_prom *b) {
    memset(b, 0, sizeof *b);
}

void dt_prom_free(dt_prom *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void put(dt_prom *b, const char *s, size_t n) {
    dt__strbuf t = {.p = b->p, .len = b->len, .cap = b->cap, .oom = b->oom};
    dt__strbuf_put(&t, s, n);
    *b = (dt_prom){.p = t.p, .len = t.len, .cap = t.cap, .oom = t.oom};
}

static void puts_(dt_prom *b, const char *s) {
    put(b, s, strlen(s));
}

/* s with '\\' and newline escaped, and '"' too in label values */
static void put_escaped(dt_prom *b, const char *s, int quote) {
    for (const char *p = s; *p; p++) {
        if (*p == '\\') puts_(b, "\\\\");
        else if (*p == '\n') puts_(b, "\\n");
        else if (quote && *p == '"') puts_(b, "\\\"");
        else put(b, p, 1);
    }
}

static void put_value(dt_prom *b, double v) {
    char num[40];
    if (isnan(v)) snprintf(num, sizeof num, "NaN");
    else if (isinf(v)) snprintf(num, sizeof num, v > 0 ? "+Inf" : "-Inf");
    else {
        snprintf(num, sizeof num, "%.15g", v);
        if (strtod(num, NULL) != v) snprintf(num, sizeof num, "%.17g", v);
    }
    puts_(b, num);
}

char *dt_prom_take(dt_prom *b, size_t *len) {
    if (!b->p) put(b, "", 0);
    if (b->oom) {
        dt_prom_free(b);
        return NULL;
    }
    char *p = b->p;
    *len = b->len;
    memset(b, 0, sizeof *b);
    return p;
}

void dt_prom_family(dt_prom *b, const char *name, const char *type, const char *help) {
    puts_(b, "# HELP ");
    puts_(b, name);
    put(b, " ", 1);
    put_escaped(b, help, 0);
    puts_(b, "\n# TYPE ");
    puts_(b, name);
    put(b, " ", 1);
    puts_(b, type);
    put(b, "\n", 1);
}

static void put_labels(dt_prom *b, const char *const *labels, const char *le) {
    int any = 0;
    for (int i = 0; labels && labels[i] && labels[i + 1]; i += 2) {
        puts_(b, any ? "," : "{");
        puts_(b, labels[i]);
        puts_(b, "=\"");
        put_escaped(b, labels[i + 1], 1);
        put(b, "\"", 1);
        any = 1;
    }
    if (le) {
        puts_(b, any ? ",le=\"" : "{le=\"");
        puts_(b, le);
        put(b, "\"", 1);
        any = 1;
    }
    if (any) put(b, "}", 1);
}

void dt_prom_sample(dt_prom *b, const char *name, const char *const *labels, double value) {
    puts_(b, name);
    put_labels(b, labels, NULL);
    put(b, " ", 1);
    put_value(b, value);
    put(b, "\n", 1);
}

void dt_prom_hist_init(dt_prom_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    h->n = n < DT_PROM_MAX_BUCKETS ? n : DT_PROM_MAX_BUCKETS;
    memcpy(h->le, le, (size_t)h->n * sizeof *le);
}

void dt_prom_hist_free(dt_prom_hist *h) {
    pthread_mutex_destroy(&h->mu);
}

void dt_prom_hist_observe(dt_prom_hist *h, double v) {
    int i = 0;
    while (i < h->n && !(v <= h->le[i]))
        i++;
    pthread_mutex_lock(&h->mu);
    h->counts[i]++;
    h->sum += v;
    h->count++;
    pthread_mutex_unlock(&h->mu);
}

void dt_prom_hist_write(dt_prom *b, const char *name, const char *const *labels, dt_prom_hist *h) {
    uint64_t counts[DT_PROM_MAX_BUCKETS + 1];
    pthread_mutex_lock(&h->mu);
    memcpy(counts, h->counts, sizeof counts);
    double sum = h->sum;
    uint64_t count = h->count;
    pthread_mutex_unlock(&h->mu);
    char series[256], le[40];
    snprintf(series, sizeof series, "%s_bucket", name);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += counts[i];
        if (i < h->n) snprintf(le, sizeof le, "%.15g", h->le[i]);
        else snprintf(le, sizeof le, "+Inf");
        puts_(b, series);
        put_labels(b, labels, le);
        put(b, " ", 1);
        put_value(b, (double)cum);
        put(b, "\n", 1);
    }
    snprintf(series, sizeof series, "%s_sum", name);
    dt_prom_sample(b, series, labels, sum);
    snprintf(series, sizeof series, "%s_count", name);
    dt_prom_sample(b, series, labels, (double)count);
}

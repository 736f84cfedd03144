/*
 * metrics.c - `dtrain serve`'s Prometheus metrics (GET /metrics, and TF Serving's path
 * /monitoring/prometheus/metrics; docs/METRICS.md): requests by model, method and status
 * code; inference latency per model and method; rows per forward pass (the batches the
 * batcher forms); requests waiting in the batch queue; each version's state.
 *
 * A request is counted under its model when the server has a model of that name, else
 * under model "" (names in URLs are the clients' to choose: they must not grow the label
 * set). Thread-safe: one mutex for the counts, histograms with their own.
 */
#include <stdlib.h>
#include <string.h>

#include "dtrain/metrics.h"
#include "serve/serve-impl.h"

static const char *const methods[] = {"predict", "classify", "regress", "status", "metadata",
                                      "other"};
enum { NMETHODS = sizeof methods / sizeof methods[0], NINFER = 3 };

typedef struct count {
    int model; /* index into the server's models, -1: none of them */
    int method;
    int code;
    uint64_t n;
} count;

struct dt__sv_metrics {
    pthread_mutex_t mu;
    int ncounts, capcounts;
    count *counts;          /* under mu */
    dt_prom_hist *latency;  /* (nmodels + 1) x NINFER: [model + 1][method] */
    dt_prom_hist batch_rows;
};

static const double row_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

dt_err dt__sv_metrics_init(dt__sv_server *s) {
    dt__sv_metrics *m = calloc(1, sizeof *m);
    if (!m) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    int nh = (s->nmodels + 1) * NINFER;
    if (!(m->latency = calloc((size_t)nh, sizeof *m->latency))) {
        free(m);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&m->mu, NULL);
    for (int i = 0; i < nh; i++)
        dt_prom_hist_init(&m->latency[i], dt_prom_latency_buckets, dt_prom_latency_nbuckets);
    dt_prom_hist_init(&m->batch_rows, row_buckets, (int)(sizeof row_buckets / sizeof row_buckets[0]));
    s->metrics = m;
    return DT_OK;
}

void dt__sv_metrics_free(dt__sv_server *s) {
    dt__sv_metrics *m = s->metrics;
    if (!m) return;
    for (int i = 0; i < (s->nmodels + 1) * NINFER; i++)
        dt_prom_hist_free(&m->latency[i]);
    dt_prom_hist_free(&m->batch_rows);
    pthread_mutex_destroy(&m->mu);
    free(m->latency);
    free(m->counts);
    free(m);
    s->metrics = NULL;
}

int dt__sv_metrics_method(const char *name) {
    for (int i = 0; i < NMETHODS - 1; i++)
        if (!strcmp(name, methods[i])) return i;
    return NMETHODS - 1;
}

void dt__sv_metrics_request(dt__sv_server *s, const char *model, int method, int code,
                            double seconds) {
    dt__sv_metrics *m = s->metrics;
    if (!m) return;
    int mi = -1;
    for (int i = 0; model && model[0] && i < s->nmodels; i++)
        if (!strcmp(s->models[i].conf.name, model)) mi = i;
    if (method < 0 || method >= NMETHODS) method = NMETHODS - 1;
    pthread_mutex_lock(&m->mu);
    int k = 0;
    while (k < m->ncounts &&
           !(m->counts[k].model == mi && m->counts[k].method == method && m->counts[k].code == code))
        k++;
    if (k == m->ncounts && m->ncounts < 4096) { /* codes are few: the bound is a safety net */
        if (m->ncounts == m->capcounts) {
            int cap = m->capcounts ? m->capcounts * 2 : 32;
            count *c = realloc(m->counts, (size_t)cap * sizeof *c);
            if (c) {
                m->counts = c;
                m->capcounts = cap;
            }
        }
        if (m->ncounts < m->capcounts) m->counts[m->ncounts++] = (count){mi, method, code, 0};
    }
    if (k < m->ncounts) m->counts[k].n++;
    pthread_mutex_unlock(&m->mu);
    if (method < NINFER && code == 200)
        dt_prom_hist_observe(&m->latency[(mi + 1) * NINFER + method], seconds);
}

void dt__sv_metrics_batch(dt__sv_server *s, int64_t rows) {
    if (s->metrics) dt_prom_hist_observe(&s->metrics->batch_rows, (double)rows);
}

static const char *model_name(const dt__sv_server *s, int i) {
    return i < 0 ? "" : s->models[i].conf.name;
}

char *dt__sv_metrics_text(dt__sv_server *s, size_t *len) {
    dt__sv_metrics *m = s->metrics;
    dt_prom b;
    dt_prom_init(&b);
    dt_prom_family(&b, "dtrain_serve_requests_total", "counter",
                   "REST requests answered, by model, method and HTTP status code.");
    pthread_mutex_lock(&m->mu);
    for (int k = 0; k < m->ncounts; k++) {
        char code[16];
        snprintf(code, sizeof code, "%d", m->counts[k].code);
        const char *l[] = {"model", model_name(s, m->counts[k].model), "method",
                           methods[m->counts[k].method], "code", code, NULL};
        dt_prom_sample(&b, "dtrain_serve_requests_total", l, (double)m->counts[k].n);
    }
    pthread_mutex_unlock(&m->mu);
    dt_prom_family(&b, "dtrain_serve_request_duration_seconds", "histogram",
                   "Time from a successful inference request's first byte to its answer.");
    for (int mi = -1; mi < s->nmodels; mi++)
        for (int me = 0; me < NINFER; me++) {
            dt_prom_hist *h = &m->latency[(mi + 1) * NINFER + me];
            /* a series appears once it has a value (read under the histogram's mutex: an
             * unlocked read raced with the request threads' observations, TSan) */
            pthread_mutex_lock(&h->mu);
            uint64_t seen = h->count;
            pthread_mutex_unlock(&h->mu);
            if (!seen) continue;
            const char *l[] = {"model", model_name(s, mi), "method", methods[me], NULL};
            dt_prom_hist_write(&b, "dtrain_serve_request_duration_seconds", l, h);
        }
    dt_prom_family(&b, "dtrain_serve_batch_rows", "histogram",
                   "Rows (samples) in each forward pass: a batch of requests, or one request.");
    dt_prom_hist_write(&b, "dtrain_serve_batch_rows", NULL, &m->batch_rows);
    dt_prom_family(&b, "dtrain_serve_batch_queue_requests", "gauge",
                   "Requests waiting for a batch executor (0 without --enable_batching).");
    dt_prom_sample(&b, "dtrain_serve_batch_queue_requests", NULL, (double)dt__sv_batcher_queued(s));
    dt_prom_family(&b, "dtrain_serve_model_version_state", "gauge",
                   "1 for each version the server knows, with its state (AVAILABLE, LOADING, "
                   "END).");
    for (int i = 0; i < s->nmodels; i++) {
        dt__sv_model *md = &s->models[i];
        pthread_mutex_lock(&md->mu);
        for (int r = 0; r < md->nrec; r++) {
            char ver[32];
            snprintf(ver, sizeof ver, "%lld", (long long)md->rec[r].version);
            const char *l[] = {"model", md->conf.name, "version", ver, "state",
                               dt__sv_state_name(md->rec[r].state), NULL};
            dt_prom_sample(&b, "dtrain_serve_model_version_state", l, 1);
        }
        pthread_mutex_unlock(&md->mu);
    }
    return dt_prom_take(&b, len);
}

/*
 * batcher.c - running a request's inference, alone or in a batch with others.
 *
 * Without batching, the HTTP thread runs the model itself on one of the version's instances.
 * With batching, requests queue and batch executors (one per --num_batch_threads, each with
 * its own instance) take the oldest request together with every other request waiting for
 * the same version, up to max_batch_size rows, and run them as one forward pass. An idle
 * executor takes a lone request at once, so it is not held up; under load, requests gather
 * while the executors are busy and batches grow by themselves. --batch_timeout_micros lets
 * a batch wait that long for more rows (0, the default, never waits).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/serve-impl.h"

typedef struct dt__sv_batcher {
    dt__sv_server *s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dt__sv_job *head, *tail;
    int stopping;
    int nthreads;
    pthread_t *threads;
    atomic_long queued; /* jobs in the queue */
    int flush;          /* no batch waits to fill any more (the server is stopping); under mu */
    atomic_long batches, rows;
} dt__sv_batcher;

static void normalize(const dt__sv_version *v, float *x, int64_t rows) {
    const dt_input_norm *n = &v->ex->norm;
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * n->n;
        for (int64_t j = 0; j < n->n; j++)
            row[j] = row[j] * n->scale[j] + n->shift[j];
    }
}

static void run_inline(dt__sv_server *s, dt__sv_job *job) {
    dt__sv_version *v = job->v;
    int i = dt__sv_instance_take(v);
    dt_err e = dt_model_predict(v->inst[i], job->in->x, job->in->rows, job->out);
    dt__sv_instance_give(v, i);
    dt__sv_metrics_batch(s, job->in->rows);
    if (e) {
        job->code = DT__SV_INTERNAL;
        snprintf(job->err, sizeof job->err, "%s", dt_errmsg());
    }
    job->done(job);
}

void dt__sv_infer(dt__sv_server *s, dt__sv_job *job) {
    normalize(job->v, job->in->x, job->in->rows);
    dt__sv_batcher *b = s->batcher;
    if (!b) return run_inline(s, job);
    job->next = NULL;
    pthread_mutex_lock(&b->mu);
    if (b->tail) b->tail->next = job;
    else b->head = job;
    b->tail = job;
    atomic_fetch_add(&b->queued, 1);
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Take the oldest job and the others queued for its version, up to max rows (the first job
 * always, however many rows it has). Called with b->mu held. */
static dt__sv_job *take_batch(dt__sv_batcher *b, int64_t max, int64_t *rows) {
    dt__sv_job *first = b->head, *out = NULL, **tailp = &out;
    dt__sv_job **pp = &b->head, *prev = NULL;
    *rows = 0;
    while (*pp) {
        dt__sv_job *j = *pp;
        if (j->v == first->v && (j == first || *rows + j->in->rows <= max)) {
            *pp = j->next;
            if (b->tail == j) b->tail = prev;
            j->next = NULL;
            *tailp = j;
            tailp = &j->next;
            *rows += j->in->rows;
            if (*rows >= max) break;
        } else {
            prev = j;
            pp = &j->next;
        }
    }
    return out;
}

static int64_t queued_rows_for(dt__sv_batcher *b, const dt__sv_version *v) {
    int64_t n = 0;
    for (dt__sv_job *j = b->head; j; j = j->next)
        if (j->v == v) n += j->in->rows;
    return n;
}

static void *executor(void *arg) {
    dt__sv_batcher *b = arg;
    const dt__sv_opts *o = &b->s->opts;
    float *x = NULL, *y = NULL;
    int64_t xcap = 0, ycap = 0;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->head && !b->stopping)
            pthread_cond_wait(&b->cv, &b->mu);
        if (b->stopping && !b->head) break;
        if (o->batch_timeout_us > 0 && !b->flush && queued_rows_for(b, b->head->v) < o->max_batch_size) {
            /* let the batch fill for at most the timeout */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += (long)(o->batch_timeout_us % 1000000) * 1000;
            until.tv_sec += o->batch_timeout_us / 1000000 + until.tv_nsec / 1000000000;
            until.tv_nsec %= 1000000000;
            while (!b->stopping && !b->flush && b->head &&
                   queued_rows_for(b, b->head->v) < o->max_batch_size &&
                   pthread_cond_timedwait(&b->cv, &b->mu, &until) == 0) {
            }
            if (!b->head) continue;
        }
        int64_t rows;
        dt__sv_job *batch = take_batch(b, o->max_batch_size, &rows);
        for (dt__sv_job *j = batch; j; j = j->next)
            atomic_fetch_sub(&b->queued, 1);
        if (b->head) pthread_cond_signal(&b->cv); /* another executor may take the rest */
        pthread_mutex_unlock(&b->mu);

        dt__sv_version *v = batch->v;
        int64_t n = v->ex->norm.n, k = batch->k;
        dt_err e = DT_OK;
        const float *in = batch->in->x;
        float *out = batch->out;
        if (batch->next) { /* several requests: gather them */
            if (rows * n > xcap || rows * k > ycap) {
                free(x);
                free(y);
                xcap = rows * n;
                ycap = rows * k;
                x = malloc((size_t)xcap * sizeof *x);
                y = malloc((size_t)ycap * sizeof *y);
                if (!x || !y) {
                    xcap = ycap = 0;
                    e = dt_err_set(DT_ERR_NOMEM, "out of memory for a batch of %lld rows",
                                   (long long)rows);
                }
            }
            int64_t off = 0;
            for (dt__sv_job *j = batch; !e && j; j = j->next) {
                memcpy(x + off * n, j->in->x, (size_t)(j->in->rows * n) * sizeof *x);
                off += j->in->rows;
            }
            in = x;
            out = y;
        }
        if (!e) {
            int i = dt__sv_instance_take(v);
            e = dt_model_predict(v->inst[i], in, rows, out);
            dt__sv_instance_give(v, i);
        }
        atomic_fetch_add(&b->batches, 1);
        atomic_fetch_add(&b->rows, rows);
        dt__sv_metrics_batch(b->s, rows);
        char msg[256] = "";
        if (e) snprintf(msg, sizeof msg, "%s", dt_errmsg());
        int64_t off = 0;
        int gathered = batch->next != NULL; /* batch itself is gone after its done() */
        for (dt__sv_job *j = batch, *next; j; j = next) {
            next = j->next;
            if (e) {
                j->code = DT__SV_INTERNAL;
                snprintf(j->err, sizeof j->err, "%s", msg);
            } else if (gathered) {
                memcpy(j->out, y + off * k, (size_t)(j->in->rows * k) * sizeof *y);
            }
            off += j->in->rows;
            j->done(j); /* j may be gone after this */
        }
        pthread_mutex_lock(&b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    free(x);
    free(y);
    return NULL;
}

void dt__sv_batcher_flush(dt__sv_server *s) {
    dt__sv_batcher *b = s->batcher;
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->flush = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

int64_t dt__sv_batcher_queued(dt__sv_server *s) {
    return s->batcher ? atomic_load(&s->batcher->queued) : 0;
}

dt_err dt__sv_batcher_start(dt__sv_server *s) {
    if (!s->opts.batching) return DT_OK;
    dt__sv_batcher *b = calloc(1, sizeof *b);
    if (!b) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    b->s = s;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->nthreads = s->opts.batch_threads > 0 ? s->opts.batch_threads : 1;
    b->threads = calloc((size_t)b->nthreads, sizeof *b->threads);
    if (!b->threads) {
        free(b);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    s->batcher = b;
    for (int i = 0; i < b->nthreads; i++)
        if (pthread_create(&b->threads[i], NULL, executor, b) != 0) {
            b->nthreads = i;
            dt__sv_batcher_stop(s);
            return dt_err_set(DT_ERR_IO, "cannot start batch executors");
        }
    return DT_OK;
}

void dt__sv_batcher_stop(dt__sv_server *s) {
    dt__sv_batcher *b = s->batcher;
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->stopping = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->nthreads; i++)
        pthread_join(b->threads[i], NULL);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b->threads);
    free(b);
    s->batcher = NULL;
}

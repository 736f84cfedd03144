/*
 * prefetch.c - a trainer's shard prefetcher (prefetch-impl.h).
 *
 * Design: a fetch from the master's shard service costs about a millisecond of wall time on
 * a busy host (the master must be scheduled, answer and journal it), and a trainer that
 * fetches on its step's thread idles that long every shard (5% of a PS job's worker
 * measured at 16 batches a shard). So the trainer asks a few steps before its shard ends,
 * a thread of this module fetches meanwhile, and the trainer takes the answer when the
 * shard ends; the finished shard is handed over in the same call and reported from here
 * too, with the fetch of the shard after the one just taken in the same request (one
 * request a shard instead of two: each costs the master and this thread ~0.2 ms of CPU on
 * a 2-core VM, taken from the cores that train). That shard is then held a whole shard
 * ahead; not in the dataset's last epoch, where the last shards stay spread over the
 * trainers (the trainer then asks a few steps before the end, as at the start). The
 * thread is a background one (core/thread-impl.h): its wake-ups do not preempt the step's
 * thread. It has its own shard client with heartbeats off (the trainer's client keeps
 * the replica's) and fetches without waiting for data: "wait" is taken as no shard, and the
 * trainer then fetches itself. A report refused (HTTP 409: the master re-queued the shard
 * while this replica was silent) drops the shard, as the trainer would; any other failure
 * leaves it held until the replica exits, when the master re-queues it.
 */
#include "role/prefetch-impl.h"

#include <string.h>

#include "core/assert-impl.h"
#include "core/thread-impl.h"

static void swap_shards(dt_shard *a, dt_shard *b) {
    dt_shard x = *a;
    *a = *b;
    *b = x;
}

void dt__shard_dropped(FILE *log, const char *name, const dt_shard *sh) {
    fprintf(log, "%s: %s: shard %lld of epoch %lld dropped (re-queued by the master)\n", name,
            dt_errmsg(), (long long)sh->id, (long long)sh->epoch + 1);
    fflush(log);
    dt_err_clear();
}

/* The report of p->rep (mu not held). */
static void report(dt__prefetch *p) {
    dt_err e = dt_shard_report(p->sc, p->dataset, &p->rep, 1, NULL);
    if (e == DT_ERR_STATE) {
        dt__shard_dropped(p->log, p->name, &p->rep);
    } else if (e) {
        fprintf(p->log, "%s: the report of shard %lld of epoch %lld failed (%s): it goes back "
                "to the queue when this replica exits\n", p->name, (long long)p->rep.id,
                (long long)p->rep.epoch + 1, dt_errmsg());
        fflush(p->log);
    }
    dt_err_clear();
}

/* The report of p->rep and the fetch of the next shard into p->sh, in one request (mu not
 * held): 1 when a shard came, 0 when none (a "wait" or "end" answer; a report refused, said
 * as report() says it: nothing was fetched, the trainer asks later), -1 when the request
 * failed (its error is then the next take's, as a prefetch's: the master may have recorded
 * both, and this replica's exit gives the shard it may hold back; *err is the error). */
static int report_fetch(dt__prefetch *p, dt_shard_fetch_status *st, dt_err *err) {
    int n = 0;
    dt_err e = dt_shard_fetch_many(p->sc, p->dataset, &p->rep, 1, &p->sh, 1, &n, st);
    *err = DT_OK;
    if (!e) return *st == DT_SHARD_FETCH_SHARD && n == 1;
    *st = DT_SHARD_FETCH_WAIT;
    if (e == DT_ERR_STATE) {
        dt__shard_dropped(p->log, p->name, &p->rep);
        return 0;
    }
    *err = e; /* its message in dt_errmsg */
    return -1;
}

static void *prefetch_main(void *arg) {
    dt__prefetch *p = arg;
    dt__thread_background("dt-prefetch");
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && !p->have_done && p->state != DT__PF_ASKED)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->have_done) { /* a finished shard's report first, also when stopping */
            swap_shards(&p->rep, &p->done);
            p->have_done = 0;
            p->reporting = 1;
            /* a fetch asked meanwhile (or by the take, with the report) goes with it */
            int ahead = p->state == DT__PF_ASKED && !p->stop;
            pthread_mutex_unlock(&p->mu);
            dt_shard_fetch_status st = DT_SHARD_FETCH_WAIT;
            int got = 0;
            dt_err e = DT_OK;
            if (ahead)
                got = report_fetch(p, &st, &e);
            else
                report(p);
            pthread_mutex_lock(&p->mu);
            if (ahead) {
                p->err = e;
                if (e) snprintf(p->msg, sizeof p->msg, "%s", dt_errmsg());
                dt_err_clear();
                p->status = st;
                /* no shard: the trainer asks; a failure: the take returns it */
                p->state = got != 0 ? DT__PF_DONE : DT__PF_IDLE;
            }
            p->reporting = 0;
            pthread_cond_broadcast(&p->cv);
            continue;
        }
        if (p->stop) break;
        pthread_mutex_unlock(&p->mu);
        dt_shard_fetch_status st = DT_SHARD_FETCH_WAIT;
        dt_err e = dt_shard_fetch(p->sc, p->dataset, &p->sh, &st);
        pthread_mutex_lock(&p->mu);
        p->err = e;
        if (e) snprintf(p->msg, sizeof p->msg, "%s", dt_errmsg());
        dt_err_clear();
        p->status = st;
        p->state = DT__PF_DONE;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

dt_err dt__prefetch_start(dt__prefetch *p, const dt_dataset_spec *ds, const char *name,
                          FILE *log) {
    memset(p, 0, sizeof *p);
    p->dataset = ds->name;
    p->last_epoch = ds->num_epochs - 1;
    p->name = name;
    p->log = log;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    dt_shard_client_opts o = {.heartbeat_ms = -1, .no_wait = 1};
    dt_err e = dt_shard_client_open(&p->sc, &o);
    if (!e) e = dt_shard_register(p->sc, ds);
    if (e) return e;
    if (pthread_create(&p->thread, NULL, prefetch_main, p) != 0)
        return dt_err_set(DT_ERR_NOMEM, "cannot start the shard prefetcher");
    p->started = 1;
    return DT_OK;
}

void dt__prefetch_end(dt__prefetch *p) {
    if (!p->dataset) return; /* zeroed: never started */
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->started) pthread_join(p->thread, NULL);
    dt_shard_client_close(p->sc);
    dt_shard_free(&p->sh);
    dt_shard_free(&p->done);
    dt_shard_free(&p->rep);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    memset(p, 0, sizeof *p);
}

void dt__prefetch_ask(dt__prefetch *p) {
    pthread_mutex_lock(&p->mu);
    if (p->started && p->state == DT__PF_IDLE) {
        p->state = DT__PF_ASKED;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

dt_err dt__prefetch_take(dt__prefetch *p, dt_shard *sh, int finished, int ahead, int *got) {
    *got = 0;
    pthread_mutex_lock(&p->mu);
    while (p->state == DT__PF_ASKED)
        pthread_cond_wait(&p->cv, &p->mu);
    dt_err e = DT_OK;
    if (p->state == DT__PF_DONE) {
        e = p->err;
        *got = !e && p->status == DT_SHARD_FETCH_SHARD;
        p->state = DT__PF_IDLE;
    }
    if (*got) {
        if (finished) { /* the previous one was sent before this fetch was asked */
            DT_ASSERT(!p->have_done && !p->reporting);
            swap_shards(&p->done, sh);
            p->have_done = 1;
            /* the shard after the one taken, asked with the report (take and ask wait) */
            if (ahead && p->sh.epoch < p->last_epoch) p->state = DT__PF_ASKED;
            pthread_cond_signal(&p->cv);
        }
        swap_shards(sh, &p->sh);
    }
    pthread_mutex_unlock(&p->mu);
    return e ? dt_err_set(e, "%s", p->msg) : DT_OK;
}

void dt__prefetch_quiet(dt__prefetch *p) {
    if (!p->dataset) return;
    pthread_mutex_lock(&p->mu);
    while (p->have_done || p->reporting || p->state == DT__PF_ASKED)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

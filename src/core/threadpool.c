/*
 * threadpool.c - persistent compute threads with a generation barrier.
 *
 * Design: the caller publishes (fn, arg) and bumps `generation`; each worker, waiting for
 * a generation newer than the last it ran, runs its share and decrements `pending`; the
 * caller runs share 0 and waits for `pending` to reach 0. Waiting spins for a short while
 * (a training step issues kernels back to back, so the next one usually comes within
 * microseconds) and then sleeps on `wake` so an idle pool costs no CPU.
 *
 * Locking: `mu` protects sleeping and waking; generation/pending are atomics so the fast
 * path takes no lock. fn/arg are written before generation is released.
 */
#include "dtrain/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/assert-impl.h"
#include "core/fpenv-impl.h"
#include "core/futex-impl.h"
#include "core/thread-impl.h"

#define SPIN_ITERS 20000

struct dt_pool {
    int nthreads;
    pthread_t *threads;
    dt_task_fn fn; /* written by the caller before generation++ */
    void *arg;
    atomic_uint generation;
    atomic_int pending;
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers sleep here for a new generation */
    pthread_cond_t done; /* the caller sleeps here for pending == 0 */
    int sleepers_done;   /* protected by mu: is the caller asleep on done? */
};

struct worker_arg {
    dt_pool *p;
    int ith;
};

static void *worker_main(void *varg) {
    struct worker_arg *wa = varg;
    dt_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    (void)dt__fp_flush_denormals(); /* for good: this thread runs only kernels */
    dt__thread_name("dt-pool");
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                dt__cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->arg, ith, p->nthreads);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

dt_err dt_pool_init(dt_pool **out, int nthreads) {
    if (nthreads < 1) return dt_err_set(DT_ERR_ARG, "thread pool: %d threads", nthreads);
    dt_pool *p = calloc(1, sizeof *p);
    if (!p) return dt_err_set(DT_ERR_NOMEM, "thread pool: out of memory");
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->threads) goto err;
    for (int i = 1; i < nthreads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa) goto err_threads;
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->nthreads = i; /* join only those started */
            goto err_threads;
        }
    }
    *out = p;
    return DT_OK;
err_threads:
    dt_pool_free(p);
    return dt_err_set(DT_ERR_NOMEM, "thread pool: cannot start %d threads", nthreads);
err:
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return dt_err_set(DT_ERR_NOMEM, "thread pool: out of memory");
}

void dt_pool_free(dt_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int dt_pool_size(const dt_pool *p) {
    return p ? p->nthreads : 1;
}

void dt_pool_run(dt_pool *p, dt_task_fn fn, void *arg) {
    if (!p || p->nthreads == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->nthreads - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->nthreads);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
        if (++spins < SPIN_ITERS) {
            dt__cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) != 0)
            pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

void dt_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    DT_ASSERT(nth >= 1 && ith >= 0 && ith < nth);
    int64_t per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

/*
 * threadpool.h - a persistent pool of compute threads.
 *
 * Kernels take (ith, nth) and split their own work (dt_split); dt_pool_run runs one kernel
 * on every thread of the pool, the calling thread being thread 0, and returns when all are
 * done (a barrier). Threads are created once in dt_pool_init and live until dt_pool_free:
 * never a thread per batch. Idle threads spin briefly, then sleep on a condition variable.
 *
 * Threading: one caller at a time per pool (the training loop's thread).
 */
#ifndef DTRAIN_THREADPOOL_H
#define DTRAIN_THREADPOOL_H

#include <stdint.h>

#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_pool dt_pool;
typedef void (*dt_task_fn)(void *arg, int ith, int nth);

/* Start a pool of nthreads (>= 1; 1 means the caller only). Caller frees with dt_pool_free. */
dt_err dt_pool_init(dt_pool **out, int nthreads);
/* Stop and join the threads; NULL is a no-op. */
void dt_pool_free(dt_pool *p);
int dt_pool_size(const dt_pool *p);
/* Run fn(arg, ith, nth) on every thread and wait for all. p may be NULL: runs fn(arg, 0, 1). */
void dt_pool_run(dt_pool *p, dt_task_fn fn, void *arg);
/* The half-open range [*lo, *hi) of n items that thread ith of nth takes. */
void dt_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi);

#ifdef __cplusplus
}
#endif
#endif

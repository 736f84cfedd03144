/*
 * prefetch-impl.h - a trainer's shard prefetcher (prefetch.c): the next shard asked of the
 * master's shard service, and the finished one reported, on a thread of their own while the
 * step's thread trains.
 */
#ifndef DTRAIN_ROLE_PREFETCH_IMPL_H
#define DTRAIN_ROLE_PREFETCH_IMPL_H

#include <pthread.h>
#include <stdio.h>

#include "dtrain/shard.h"

typedef struct dt__prefetch {
    const char *dataset, *name; /* not owned */
    FILE *log;
    dt_shard_client *sc; /* its own: heartbeats off, fetches do not wait for data */
    pthread_t thread;
    int started;
    /* mu guards all below but `sh` while state is ASKED and `rep` (the thread's own) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    enum { DT__PF_IDLE, DT__PF_ASKED, DT__PF_DONE } state;
    dt_shard sh; /* the shard fetched */
    dt_shard_fetch_status status;
    dt_err err;
    char msg[1024];
    dt_shard done; /* finished: to be reported (have_done) */
    int have_done;
    int64_t last_epoch; /* the dataset's: no shard is fetched ahead in it */
    dt_shard rep; /* the one being reported (reporting) */
    int reporting;
} dt__prefetch;

/* Open its shard client, register ds with it (the trainer's registration, again: its fetches
 * then leave the indices to the client, shard/client.c) and start its thread; name and log
 * say whose failed reports are logged; ds->name must outlive the prefetcher. On failure the
 * prefetcher holds nothing (dt__prefetch_end is still safe). */
dt_err dt__prefetch_start(dt__prefetch *p, const dt_dataset_spec *ds, const char *name,
                          FILE *log);
/* Send a finished shard handed over, wait for the fetch in flight, stop the thread, close
 * the client and free the shards (one fetched and not taken goes back to the queue when the
 * replica exits, as every shard it holds). A zeroed prefetcher is a no-op. */
void dt__prefetch_end(dt__prefetch *p);
/* Ask for the next shard, unless a fetch is in flight or its answer not taken yet. */
void dt__prefetch_ask(dt__prefetch *p);
/* Wait for the fetch in flight, if any, and take its answer: *got = 1 when it brought a
 * shard, which is swapped into *sh; with `finished`, what *sh held before is a finished
 * shard, reported by the prefetcher right away - with `ahead`, unless the shard taken is of
 * the dataset's last epoch, in the same request as the fetch of the shard after it (held
 * until the next take; a "wait" answer brings none and the trainer asks again, with
 * dt__prefetch_ask). The fetch's failure is this call's. */
dt_err dt__prefetch_take(dt__prefetch *p, dt_shard *sh, int finished, int ahead, int *got);
/* Wait until the report handed over is sent and the fetch in flight answered: before a
 * request of the caller's own (one of a replica's at a time), at a stop, at the end. */
void dt__prefetch_quiet(dt__prefetch *p);

/* The log line for a shard whose done report the master refused (HTTP 409: it re-queued the
 * shard while this replica was silent): "NAME: WHY: shard I of epoch E dropped (re-queued by
 * the master)"; clears the error. */
void dt__shard_dropped(FILE *log, const char *name, const dt_shard *sh);

#endif

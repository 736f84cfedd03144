/*
 * shard.h - the elastic data shard service's client, for dtrain's own workers (C).
 *
 * A job's master splits each registered dataset, per epoch, into shards of sample indices
 * and hands them out to the replicas that ask (docs/SHARDS.md, docs/API.md); a replica
 * trains on a shard's samples and reports it done. A replica that dies or stops sending
 * heartbeats loses its shards to the others, and a report that comes after its shard was
 * taken away is refused, so every shard of every epoch is counted done exactly once. This
 * is the C side of python/dtrain_client and speaks the same HTTP protocol:
 *
 *     dt_shard_client *c;
 *     dt_shard_client_open(&c, NULL);                 // DTRAIN_MASTER, _JOB_TOKEN, _REPLICA
 *     dt_dataset_spec d;
 *     dt_dataset_spec_init(&d);
 *     d.name = "training"; d.dataset_size = 60000; d.batch_size = 64; d.num_epochs = 2;
 *     dt_shard_register(c, &d);                       // every replica may; same spec: no-op
 *     dt_shard s = {0};
 *     dt_shard_fetch_status st;
 *     while (!(err = dt_shard_fetch(c, "training", &s, &st)) && st == DT_SHARD_FETCH_SHARD) {
 *         train_on(s.indices, s.count);
 *         err = dt_shard_report(c, "training", &s, 1, "");
 *         if (err == DT_ERR_STATE) continue;          // too late: the shard went elsewhere
 *         if (err) break;
 *     }
 *     dt_shard_free(&s);
 *     dt_shard_client_close(c);
 *
 * Failures: a request that cannot reach the master (connection refused or reset, timeout:
 * a master killed and resumed on the same port) is retried with backoff, 50 ms doubling to
 * 2 s, for at most opts.retry_ms in all; after that it is DT_ERR_NETWORK (DT_ERR_TIMEOUT
 * when the last try got no answer in time) naming the URL. An
 * answer of the master is never retried: it maps to DT_ERR_ARG (400, 401: a malformed
 * request, a wrong token, an unknown replica), DT_ERR_NOTFOUND (404: an unknown dataset or
 * job), DT_ERR_STATE (409: a late report refused, a dataset that failed, a registration
 * that differs from the first) and DT_ERR_IO (anything else), with the master's message.
 * A request retried after a lost connection may have reached the master the first time;
 * that is safe: a retried fetch carries the same request id and gets the same shard back,
 * and a retried report the master already recorded is answered OK again.
 *
 * Threading: a client is not thread-safe; use one client per thread (each has its own
 * connection). Each client runs one background thread that sends heartbeats on its own
 * connection until dt_shard_client_close. Error messages (dt_errmsg) are per thread.
 */
#ifndef DTRAIN_SHARD_H
#define DTRAIN_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_shard_client dt_shard_client;

typedef struct dt_shard_client_opts {
    const char *url;     /* the master, "http://HOST:PORT"; NULL: $DTRAIN_MASTER */
    const char *token;   /* the job's token; NULL: $DTRAIN_JOB_TOKEN */
    const char *replica; /* this replica's name, "worker-0"; NULL: $DTRAIN_REPLICA */
    int heartbeat_ms;    /* heartbeat interval; 0: 1000; < 0: no heartbeat thread (then only
                            fetches and reports tell the master this replica is alive) */
    int retry_ms;        /* how long to retry a request the master does not answer; 0: 60000;
                            < 0: no retry */
    int timeout_ms;      /* bound of one request; 0: 30000 */
    int no_wait;         /* 1: a fetch that finds nothing to hand out yet returns at once with
                            DT_SHARD_FETCH_WAIT instead of polling (a worker in an all-reduce
                            ring must keep stepping with its peers meanwhile) */
    int (*cancel)(void); /* may be NULL; non-zero: a fetch that is waiting for a shard stops
                            waiting and returns DT_SHARD_FETCH_WAIT (a replica asked to stop) */
} dt_shard_client_opts;

/* Connect to the job's master: learns the job's name (GET /v1/healthz) and sends a first
 * heartbeat, which checks the token and the replica's name; then starts the heartbeat
 * thread. opts may be NULL (everything from the environment, default intervals); the
 * strings are copied. DT_ERR_ARG naming the variable when a NULL field's environment
 * variable is unset or empty ("DTRAIN_MASTER is not set: ..."), or when the master refuses
 * the token; DT_ERR_NOTFOUND when the job has no such replica; DT_ERR_NETWORK or
 * DT_ERR_TIMEOUT when the master cannot be reached within retry_ms. The caller closes *out with dt_shard_client_close. */
dt_err dt_shard_client_open(dt_shard_client **out, const dt_shard_client_opts *opts);

/* Stop the heartbeat thread (waits for a heartbeat in flight, at most a few seconds when
 * the master hangs), close the connections and free c. NULL: no-op. */
void dt_shard_client_close(dt_shard_client *c);

/* The job's name (from the master) and this replica's name; valid until close. */
const char *dt_shard_client_job(const dt_shard_client *c);
const char *dt_shard_client_replica(const dt_shard_client *c);

/* A dataset as the master splits it: per epoch, shards of batch_size *
 * num_minibatches_per_shard consecutive positions of the epoch's sample order (the last
 * shard shorter). */
typedef struct dt_dataset_spec {
    const char *name;                  /* "training", "evaluation", ...: 1 to 63 bytes */
    int64_t dataset_size;              /* samples, >= 1 */
    int64_t batch_size;                /* >= 1 */
    int64_t num_epochs;                /* >= 1 */
    int64_t num_minibatches_per_shard; /* >= 1 */
    int shuffle;                       /* a seeded permutation of the samples per epoch */
    int shuffle_shards;                /* a seeded permutation of the shards' hand-out order */
    uint64_t seed;                     /* 0..INT64_MAX */
    int max_failures;                  /* failed reports of one shard before the dataset
                                          (and the job) fails; < 0: the master's default (3) */
} dt_dataset_spec;

/* Defaults: name "training", every size and count 1, no shuffle, seed 0, max_failures -1. */
void dt_dataset_spec_init(dt_dataset_spec *spec);

/* Register the dataset with the master. Registering it again with the same spec is a
 * no-op (every replica may register it); a different spec is DT_ERR_STATE naming the
 * difference; a bad value DT_ERR_ARG naming the field. */
dt_err dt_shard_register(dt_shard_client *c, const dt_dataset_spec *spec);

/* A shard: positions [start, end) of epoch's sample order; indices holds the count =
 * end - start sample indices to train on (a permutation's slice with shuffle, start..end-1
 * without). A zero-initialized dt_shard is empty and valid; dt_shard_fetch reuses its
 * buffer; dt_shard_free releases it. */
typedef struct dt_shard {
    int64_t epoch; /* 0-based */
    int64_t id;    /* the shard's position in its epoch, 0-based */
    int64_t start;
    int64_t end;
    uint64_t lease;   /* the master's token for this hand-out; goes back with the report */
    int64_t *indices; /* count sample indices, owned by the shard */
    int64_t count;
    size_t cap; /* allocated length of indices */
} dt_shard;

/* Free the shard's indices and empty it (the struct itself is the caller's). NULL: no-op. */
void dt_shard_free(dt_shard *s);

typedef enum dt_shard_fetch_status {
    DT_SHARD_FETCH_SHARD = 0, /* *shard is filled */
    DT_SHARD_FETCH_END,       /* every shard of every epoch is done */
    DT_SHARD_FETCH_WAIT,      /* nothing to hand out yet (opts.no_wait; opts.cancel) */
} dt_shard_fetch_status;

/* The next shard of dataset for this replica. While the master has nothing to hand out
 * yet (the last shards of an epoch are still held by other replicas) it polls, sleeping
 * 10 ms doubling to at most 0.5 s between asks, for as long as that lasts. On success
 * *status says whether *shard was filled. DT_ERR_NOTFOUND when the dataset is not
 * registered, DT_ERR_STATE when it has failed; on error *shard is left empty (count 0). */
dt_err dt_shard_fetch(dt_shard_client *c, const char *dataset, dt_shard *shard,
                      dt_shard_fetch_status *status);

/* Report *shard done (ok = 1) or failed (ok = 0, message) and fetch the next shard into
 * *shard, in one request (half the round trips of dt_shard_report + dt_shard_fetch; waits
 * through WAIT as dt_shard_fetch does). When the report is refused (DT_ERR_STATE, as
 * dt_shard_report), nothing was fetched and *shard is unchanged: call dt_shard_fetch. */
dt_err dt_shard_report_fetch(dt_shard_client *c, const char *dataset, dt_shard *shard, int ok,
                             const char *message, dt_shard_fetch_status *status);

/* Report the ndone shards of done[] done (0..DT_SHARD_MAX_BATCH; done may be shards: the
 * batch just finished is reported and replaced) and fetch up to max shards (1..
 * DT_SHARD_MAX_BATCH) into shards[], in one request; *n says how many were filled (at least
 * one with DT_SHARD_FETCH_SHARD: as many as the master could hand out at once). Waits
 * through WAIT as dt_shard_fetch does. When a report is refused (DT_ERR_STATE, the master's
 * message naming reports[i]), the reports before it are recorded, nothing was fetched and
 * shards[] are unchanged: report the rest one by one (dt_shard_report) and fetch again. */
#define DT_SHARD_MAX_BATCH 64
dt_err dt_shard_fetch_many(dt_shard_client *c, const char *dataset, const dt_shard *done,
                           int ndone, dt_shard *shards, int max, int *n,
                           dt_shard_fetch_status *status);

/* Report a fetched shard done (ok = 1) or failed (ok = 0; message says why, the master
 * re-queues the shard). DT_ERR_STATE with the master's message when the report is refused
 * because this replica no longer holds the shard under its lease (it was re-queued after a
 * heartbeat timeout or an exit of this replica, and perhaps done elsewhere: the work is
 * not counted, go on with the next fetch) or when the dataset has failed. message may be
 * NULL. */
dt_err dt_shard_report(dt_shard_client *c, const char *dataset, const dt_shard *shard, int ok,
                       const char *message);

/* Post this replica's figures (a JSON object's text, e.g. an evaluator's metrics) to the
 * master's report route: kept in the job's status and result.json (docs/API.md). */
dt_err dt_shard_client_post_report(dt_shard_client *c, const char *json_object_text);
/* Post a replica's training progress (a JSON object text: step, epoch, loss,
 * samples_per_sec, samples; docs/API.md), kept in the master's memory and shown in the
 * job's status, table and metrics. Tried once: progress that cannot be posted now is
 * overtaken by the next. */
dt_err dt_shard_client_post_progress(dt_shard_client *c, const char *json_object_text);

#ifdef __cplusplus
}
#endif
#endif

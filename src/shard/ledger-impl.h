/*
 * ledger-impl.h - the elastic data shard service's ledger (ElasticDL's task dispatcher),
 * kept by the job master.
 *
 * A dataset registered by name (training, evaluation, ...) is split, per epoch, into
 * shards of batch_size * num_minibatches_per_shard consecutive positions of that epoch's
 * sample order (the last shard shorter). With shuffle, an epoch's order is a seeded
 * permutation of 0..dataset_size-1 (the same seed and epoch give the same order, so a
 * replayed ledger rebuilds it) and a shard carries its explicit index list; without, a
 * shard is the range [start, end). With shuffle_shards, the order in which an epoch's
 * shards are handed out is itself a seeded permutation.
 *
 * Shard states: todo, doing (held by one replica since a time), done. Epoch e+1 opens
 * when epoch e has no todo shard left; until then a fetch that finds nothing to hand out
 * answers WAIT (shards of the last open epoch are still in flight elsewhere), and END once
 * every shard of every epoch is done.
 *
 * Exactly-once: a shard of an epoch is counted done once. A report must come from the
 * replica that holds the shard under the same lease (a number handed out with each fetch);
 * a late report for a shard that was re-queued (and maybe finished elsewhere) is refused
 * with DT_ERR_STATE and a message saying so, and changes nothing.
 *
 * Failures: a report "failed" re-queues the shard (to the front of the queue) and counts a
 * failure for it; more than max_failures failures of one shard fail the dataset (and the
 * job) with a reason naming the shard and the last message. A replica that exits, or whose
 * last heartbeat is older than the timeout, has all its doing shards re-queued at once
 * (this is not counted as a failure of the shard).
 *
 * Journaling: every state change is described by one JSON event (dt__ledger_event_fn) that
 * the master appends to its journal; dt__ledger_replay applies such events in order to
 * rebuild the ledger after a master restart, so no shard is lost or counted twice. Shards
 * that were doing when the master died stay doing under their old holders (the resumed
 * master re-queues them when those replicas turn out to be gone).
 *
 * Not thread-safe: owned by the master's event-loop thread.
 */
#ifndef DTRAIN_LEDGER_IMPL_H
#define DTRAIN_LEDGER_IMPL_H

#include <stdint.h>

#include <jansson.h>

#include "dtrain/err.h"

typedef struct dt__ledger dt__ledger;

typedef struct dt__dataset_conf {
    char name[64];
    int64_t dataset_size;              /* >= 1 */
    int64_t batch_size;                /* >= 1 */
    int64_t num_epochs;                /* >= 1 */
    int64_t num_minibatches_per_shard; /* >= 1 */
    int shuffle;                       /* per-epoch permutation of the indices */
    int shuffle_shards;                /* per-epoch permutation of the hand-out order */
    uint64_t seed;
    int max_failures;                  /* default 3 */
} dt__dataset_conf;

/* Fill c with the defaults: every size and count 1, no shuffle, seed 0, max_failures 3
 * (the caller sets name and the rest). */
void dt__dataset_conf_init(dt__dataset_conf *c);

/* Limits checked by dt__ledger_register (DT_ERR_ARG naming the field): an open epoch holds
 * 48 bytes per shard (56 with shuffle_shards) and, with shuffle, 8 bytes per sample; and
 * dataset_size * num_epochs must fit in an int64 (a replica's samples_done sums epochs). */
#define DT__LEDGER_MAX_SHARDS 16777216     /* shards per epoch */
#define DT__LEDGER_MAX_SHUFFLE 268435456LL /* dataset_size with shuffle */
#define DT__LEDGER_MAX_BATCH 64             /* shards one fetch may ask for */

typedef enum dt__fetch_status {
    DT__FETCH_SHARD = 0, /* *shard is filled */
    DT__FETCH_WAIT,      /* nothing to hand out now; ask again */
    DT__FETCH_END,       /* every shard of every epoch is done */
} dt__fetch_status;

typedef struct dt__shard {
    int64_t epoch;   /* 0-based */
    int64_t id;      /* 0-based position of the shard in its epoch (by sample order) */
    int64_t start;   /* positions [start, end) of the epoch's sample order */
    int64_t end;
    uint64_t lease;  /* must come back with the report */
    const int64_t *indices; /* shuffle: end-start sample indices (valid until the next call
                               on the ledger); NULL without shuffle: the indices are
                               start..end-1 */
} dt__shard;

/* Called with each event to journal (a new reference the callee takes). */
typedef void (*dt__ledger_event_fn)(void *ctx, json_t *event);

dt_err dt__ledger_init(dt__ledger **out, dt__ledger_event_fn journal, void *ctx);
void dt__ledger_free(dt__ledger *l);

/* Register a dataset. Registering the same name again with the same conf is a no-op
 * (every worker may register it); with a different conf it is DT_ERR_STATE naming the
 * difference. Bad values are DT_ERR_ARG naming the field ("batch_size: expected >= 1"). */
dt_err dt__ledger_register(dt__ledger *l, const dt__dataset_conf *conf);

/* Hand replica (e.g. "worker-1") a shard of dataset name at time now (seconds).
 * request: the client's id of this fetch, the same when it retries it (0: none); a fetch
 * with the id of the replica's last fetch hands out the same shard again while the replica
 * holds it, so a retry after a lost answer does not take a second shard.
 * DT_ERR_NOTFOUND for an unknown dataset; DT_ERR_STATE when the dataset has failed. */
dt_err dt__ledger_fetch(dt__ledger *l, const char *name, const char *replica, uint64_t request,
                        double now, dt__fetch_status *status, dt__shard *shard);

/* As dt__ledger_fetch, up to max (1..DT__LEDGER_MAX_BATCH) shards at once into shards[]:
 * *n of them with DT__FETCH_SHARD (as many as can be handed out now, at least one), none
 * with WAIT or END. A retry (the request id of the replica's last fetch) gets the shards
 * of that fetch the replica still holds. The shards' indices stay valid until the next
 * call on the ledger. */
dt_err dt__ledger_fetch_many(dt__ledger *l, const char *name, const char *replica,
                             uint64_t request, double now, int max, dt__fetch_status *status,
                             dt__shard *shards, int *n);

/* The holder reports a shard done (ok = 1) or failed (ok = 0, with message). The same
 * report as the replica's last accepted one (a retry) is DT_OK and changes nothing. Refused with
 * DT_ERR_STATE (ledger unchanged) when replica does not hold (epoch, id) under lease:
 * "worker-1 does not hold shard 3 of epoch 0 of training: it was re-queued at ... and
 * done by worker-0" or similar. */
dt_err dt__ledger_report(dt__ledger *l, const char *name, const char *replica, int64_t epoch,
                         int64_t id, uint64_t lease, int ok, const char *message, double now);

/* A replica is alive (heartbeat) / gone (it exited). */
void dt__ledger_heartbeat(dt__ledger *l, const char *replica, double now);
/* Re-queue every doing shard of replica; returns how many. */
int dt__ledger_release(dt__ledger *l, const char *replica, const char *why, double now);
/* Re-queue the shards of replicas whose last heartbeat (or fetch/report) is older than
 * timeout seconds; returns how many shards. */
int dt__ledger_expire(dt__ledger *l, double now, double timeout);

/* Times. Every `now` given to the ledger is on one timeline, which decides heartbeat
 * expiry and lease deadlines: the master's monotonic clock, so that a step of the system
 * clock expires nothing. The events it journals carry the master's wall time instead, and
 * a replay rebuilds the ledger on that timeline. dt__ledger_resume(l, wall, now), once the
 * replay is done (or at a fresh start), moves every time onto the monotonic one (now is
 * the monotonic time of the wall time `wall`), and every lease in flight counts its
 * deadline from now (its holder could not report while no master ran).
 * dt__ledger_set_clock(l, wall - mono) keeps the offset of the times the ledger shows
 * (progress, refusal messages) when the system clock is stepped. */
void dt__ledger_resume(dt__ledger *l, double wall, double now);
void dt__ledger_set_clock(dt__ledger *l, double wall_offset);

/* Lease deadlines (progress, not liveness): a shard held longer than its deadline is
 * re-queued even while its holder sends heartbeats. fixed > 0: that many seconds; else
 * 10 x the mean time a shard of the dataset took from fetch to accepted report (once 3 are
 * done), at least floor_s. Both 0 (the default): no deadline. */
void dt__ledger_set_leases(dt__ledger *l, double fixed, double floor_s);
/* Re-queue every shard held past its deadline (journaled "shard.expire"); returns how many. */
int dt__ledger_expire_leases(dt__ledger *l, double now);

/* Has a dataset failed (a shard over max_failures)? Fills why. */
int dt__ledger_failed(const dt__ledger *l, char *why, size_t len);
/* Are all registered datasets done (and at least one registered)? */
int dt__ledger_all_done(const dt__ledger *l);

/* Progress for the status API and result.json: per dataset, per epoch shards and samples
 * done/total, per replica shards and samples done; {"datasets": {...}}. */
json_t *dt__ledger_progress(const dt__ledger *l);

/* Apply one journaled event (as passed to the journal callback); unknown events are
 * ignored, malformed ones are DT_ERR_FORMAT. Replay does not call the journal callback. */
dt_err dt__ledger_replay(dt__ledger *l, const json_t *event);

#endif

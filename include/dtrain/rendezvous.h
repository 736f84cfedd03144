/*
 * rendezvous.h - how the workers of an all-reduce job find each other: through the master
 * (docs/API.md, "Rendezvous").
 *
 * A worker listens on a data-plane port (dt_ring_listen), then joins: it tells the master its
 * address, the generation of the last ring it belonged to (0: none) and its last completed
 * step. The master forms a new ring generation when every trainer replica it is running has
 * joined (or, after rendezvousTimeoutSeconds, with those that have), ranks the members (the
 * highest step first, then the chief, then by worker index: rank 0 holds the newest state and
 * sends it to the others) and answers each of them the same ring.
 *
 * While training, a member watches the master (dt_rdzv_status): when a replica waits to join
 * or its ring is broken (a member died or joined again), it leaves at its next step boundary
 * and joins again. A member whose ring failed joins at once, naming the peer it lost when it
 * knows it (for a cut link the master then leaves one of the two out for a while).
 *
 * The calls go through a dt_shard_client (the replica's control-plane client: the master's
 * address, the job's token, the replica's name); like it they are not thread-safe: a watcher
 * thread opens its own client.
 */
#ifndef DTRAIN_RENDEZVOUS_H
#define DTRAIN_RENDEZVOUS_H

#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_rdzv_join_req {
    const char *address;     /* this replica's data-plane "host:port" */
    int64_t generation;      /* the last ring it belonged to; 0: none */
    int64_t step;            /* its last completed step */
    const char *unreachable; /* the replica it lost when its ring failed, or NULL */
    int (*cancel)(void);     /* may be NULL; non-zero: stop waiting (DT_ERR_STATE) */
} dt_rdzv_join_req;

typedef struct dt_rdzv_ring {
    int64_t generation;
    int rank, size;
    char **peers;   /* size "host:port", by rank */
    char **members; /* size replica names ("worker-1"), by rank */
} dt_rdzv_ring;

/* Join and wait (polling the master) until a ring with this replica is formed: *ring is
 * filled (free it with dt_rdzv_ring_free). DT_ERR_STATE when timeout_ms passes first, or when
 * the job is finishing (the master forms no more rings); the master's refusals (400/404) as
 * the shard client maps them. timeout_ms <= 0: no limit. req->unreachable goes with the first
 * request only (the master starts its penalty then). */
dt_err dt_rdzv_join(dt_shard_client *c, const dt_rdzv_join_req *req, int timeout_ms,
                    dt_rdzv_ring *ring);

/* The master's view now: its newest generation, and whether the ring `generation` must be
 * left (*leave = 1: a replica waits to join, or that ring is broken or superseded). */
dt_err dt_rdzv_status(dt_shard_client *c, int64_t generation, int64_t *newest, int *leave);

void dt_rdzv_ring_free(dt_rdzv_ring *r); /* frees the arrays; NULL: no-op */

#ifdef __cplusplus
}
#endif

#endif

/*
 * replay-impl.h - a master's journal replayed into a job's state (replay.c): what a resumed
 * master (`dtrain run --resume DIR`) rebuilds before it adopts the replicas that still run.
 *
 * Ownership: the caller owns the job state, the ledger and the rendezvous the events are
 * replayed into (made as a master makes them: from the job's spec); the replay holds what
 * the journal says of the master itself (its token, port, directories, timeouts), which the
 * caller applies. Nothing here starts a process, binds a port or needs a running master, so
 * the fuzz harness (fuzz/fuzz_journal.c) drives it as `dtrain run --resume` does.
 */
#ifndef DTRAIN_MASTER_REPLAY_IMPL_H
#define DTRAIN_MASTER_REPLAY_IMPL_H

#include <jansson.h>

#include "master/master-impl.h"

typedef struct dt__replay {
    /* what the events are replayed into (dt__replay_init) */
    dt__job_state *st;
    dt__ledger *ledger;
    dt__rdzv *rdzv;
    /* what the journal says of the master */
    int started;        /* the start event was read */
    int http_port;      /* the master's port: the start's, or the last continuation's */
    char token[64];     /* the job's secret */
    char cwd[DT__PATH_MAX];  /* where replicas run unless their spec says otherwise */
    char spec[DT__PATH_MAX]; /* the spec as given (absolute) */
    int heartbeat_timeout_ms, lease_timeout_ms; /* as journaled; 0: the default */
    int workers;        /* the worker count the last scale set; -1: never scaled */
} dt__replay;

void dt__replay_init(dt__replay *r, dt__job_state *st, dt__ledger *ledger, dt__rdzv *rdzv);
/* Replay the journal at path, in order. DT_ERR_FORMAT "PATH:LINE: event 'x': field 'y':
 * what is wrong" for a line that is not JSON, an event of a type a master never writes,
 * a field missing or of the wrong type or range, or an event the replayed state refuses
 * (the ledger's checks); a torn last line (a master killed mid-write) is skipped. A journal
 * without a start event replays nothing (r->started stays 0). */
dt_err dt__replay_journal(dt__replay *r, const char *path);
/* One event (a line of the journal), as dt__replay_journal replays it: DT_ERR_FORMAT
 * "event 'x': field 'y': ..." without the file and line. */
dt_err dt__replay_event(dt__replay *r, const json_t *ev);

#endif

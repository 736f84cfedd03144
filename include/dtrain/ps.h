/*
 * ps.h - the parameter-server strategy's data plane: variables partitioned over PS
 * processes, pulled and pushed by workers over a binary TCP protocol (docs/WIRE.md). A
 * client on a PS's host passes the tensors through a shared-memory segment instead, the
 * socket carrying only the frames' headers (docs/WIRE.md, "Shared memory").
 *
 * Partition: every process of a job builds the same model from the spec, so every process
 * knows every variable's name and shape; dt_ps_partition assigns each variable to one PS by
 * a stable rule that balances bytes. A PS holds the values and the optimizer state of its
 * variables and applies the optimizer when gradients arrive.
 *
 * Updates are asynchronous by default: each push is applied at once as one optimizer step.
 * In synchronous mode a PS sums one gradient per active worker and applies their mean as
 * one step; a worker's push returns when the step it joined has been applied. A round does
 * not wait past sync_timeout_ms for a worker that has not pushed: a dead or slow worker
 * cannot stall training (the round is applied with the gradients it has).
 *
 * Every connection opens with a handshake carrying the job's token; a frame is refused
 * before any allocation when it is longer than max_frame; a pushed tensor whose name or
 * shape does not match the PS's variable is refused before anything is applied. A refused
 * connection is closed and the reason logged; the variables stay untouched.
 *
 * Usage (a worker):
 *     dt_ps_client *c;
 *     dt_ps_client_open(&c, &conf, params, nparams);
 *     dt_ps_client_pull(c, &step);                 // values into params[i]->value
 *     for (...) { forward/backward; dt_ps_client_push_pull(c, &step); }
 *     dt_ps_client_close(c);
 */
#ifndef DTRAIN_PS_H
#define DTRAIN_PS_H

#include <stdint.h>
#include <stdio.h>

#include "dtrain/err.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Frames larger than this are refused unless configured otherwise (64 MiB). */
#define DT_PS_DEFAULT_MAX_FRAME ((int64_t)64 << 20)

/* Connections that have not yet sent a valid HELLO, at most (the oldest is closed to admit
 * a new one): a job's replicas send HELLO as they connect, so 16 covers a burst of
 * reconnections, while a flood of idle clients holds 16 threads and descriptors, no more. */
#define DT_PS_DEFAULT_MAX_PENDING 16
/* From connect to a verified HELLO, in all (however slowly the bytes come): a client sends
 * its HELLO at once; 10 s leaves room for a loaded host and bounds what a silent one holds. */
#define DT_PS_DEFAULT_HELLO_TIMEOUT_MS 10000
/* Authenticated connections, at most (more are refused): one per worker, chief and evaluator
 * (and briefly a reconnecting one's old connection); 256 is far above any job's, and bounds
 * the threads and per-connection buffers a token holder can make the PS keep. */
#define DT_PS_DEFAULT_MAX_CONNS 256

/* owner[i] in [0, nps) for each of the n variables of numel[i] floats: variables in order of
 * decreasing size (ties: lower index first) each go to the PS holding the fewest bytes so
 * far (ties: the lowest index). The same inputs give the same owners in every process. */
void dt_ps_partition(const int64_t *numel, int n, int nps, int *owner);

/* ---- the server (the ps role) ---- */

typedef struct dt_ps_server_conf {
    const char *host;  /* listen address ("" or NULL: every interface) */
    int port;          /* 0: any free port (see dt_ps_server_port) */
    const char *token; /* the job's token; a connection must present it */
    int64_t max_frame; /* bytes; 0: DT_PS_DEFAULT_MAX_FRAME */
    int index, nps;    /* this PS is partition `index` of `nps` */
    dt_optim_conf optim;
    int threads;                 /* for the optimizer's element loops (0/1: one thread);
                                    more: async steps take turns instead of running one
                                    block apart (docs/WIRE.md, "Updates") */
    int sync;                    /* 1: synchronous rounds */
    int64_t sync_timeout_ms;     /* sync: the longest a round waits (default 5000) */
    const char *ckpt_dir;        /* partition checkpoints (NULL: none kept) */
    int keep;                    /* checkpoints kept (<= 0: all) */
    int no_shm;                  /* 1: decline clients' shared-memory segments (tensors
                                    then come over TCP) */
    int max_pending;             /* connections without a verified HELLO (0: default
                                    DT_PS_DEFAULT_MAX_PENDING); at it the oldest is closed */
    int64_t hello_timeout_ms;    /* connect -> HELLO verified, in all (0: default
                                    DT_PS_DEFAULT_HELLO_TIMEOUT_MS) */
    int max_conns;               /* authenticated connections (0: default
                                    DT_PS_DEFAULT_MAX_CONNS); more are refused */
    FILE *log;                   /* refusals and events (stderr when NULL) */
} dt_ps_server_conf;

typedef struct dt_ps_server dt_ps_server;

/* Take partition conf->index of the model's variables params[0..n) (names and shapes are
 * copied; the server allocates its own values and optimizer), restore them from the newest
 * checkpoint in conf->ckpt_dir when there is one (otherwise the PS is uninitialized until a
 * worker sends initial values), listen and serve on background threads. */
dt_err dt_ps_server_start(dt_ps_server **out, const dt_ps_server_conf *conf,
                          dt_param *const *params, int n);
int dt_ps_server_port(const dt_ps_server *s);
/* Optimizer steps applied so far (-1 while uninitialized). */
int64_t dt_ps_server_step(const dt_ps_server *s);
/* Stop serving and save, for a PS asked to stop (SIGTERM) that will be started again: no
 * connection is accepted and no frame read any more, the frames being handled are answered
 * (an applied push always gets its reply, so no client sends it again), every connection
 * ends, then the partition (values and optimizer state) is saved at *step into path (len
 * bytes; may be 0). The new PS restores exactly what this one applied. Without values
 * (never initialized) or a checkpoint directory nothing is saved: *step -1. Free it with
 * dt_ps_server_stop after. */
dt_err dt_ps_server_drain(dt_ps_server *s, int64_t *step, char *path, size_t len);
/* Stop listening, close every connection, join the threads, free. NULL is a no-op. */
void dt_ps_server_stop(dt_ps_server *s);

/* ---- the client (workers, chief, evaluator) ---- */

/* The element type of gradients a client pushes over TCP. */
typedef enum dt_ps_wire_dtype { DT_PS_WIRE_F32 = 0, DT_PS_WIRE_BF16 = 1 } dt_ps_wire_dtype;

typedef struct dt_ps_client_conf {
    const char *const *addrs; /* "host:port" of ps-0 .. ps-(nps-1) */
    int nps;
    const char *token;
    const char *replica;   /* who is talking, for the PS's logs ("worker-0") */
    int64_t max_frame;     /* 0: DT_PS_DEFAULT_MAX_FRAME */
    int64_t retry_ms;      /* keep reconnecting this long before failing (default 120000) */
    int offer_init;        /* a PS without values gets this client's current values (INIT)
                              before the request is sent again (the chief's client); else
                              the request waits until another client initializes it */
    int no_shm;            /* 1: tensors always go over TCP; 0: through a shared-memory
                              segment with each PS that can attach it (same host; others
                              decline and stay on TCP) - docs/WIRE.md, "Shared memory" */
    dt_ps_wire_dtype wire_dtype; /* a push's gradients and a push_pull's values over TCP:
                                    float32 (default) or bfloat16, half the bytes
                                    (docs/WIRE.md); init, pull and the shared-memory lane
                                    stay float32 */
    int zero_copy;         /* 1: while a link is on the shared-memory lane, its params'
                              value.data and grad.data point into the segment (backward
                              writes the gradients where the PS reads them, the PS writes
                              the values where forward reads them: no copy either way);
                              they point back to the caller's buffers, holding the
                              segment's data, when the link reconnects and at close. The
                              caller reads the pointers anew at each use (a model's layers
                              do) and never while a request is in flight. */
    FILE *log;             /* reconnects (stderr when NULL) */
} dt_ps_client_conf;

typedef struct dt_ps_client dt_ps_client;

/* A client over the model's variables params[0..n) (not owned; they must outlive it). Pulls
 * write params[i]->value; pushes send params[i]->grad. Connects lazily; on a transport error
 * or a PS restart it reconnects with backoff for up to retry_ms, then fails with
 * DT_ERR_NETWORK (no connection) or DT_ERR_TIMEOUT (a PS that stopped answering). A PS that
 * refuses (ERROR: a wrong token, a shape it does not have) fails it with DT_ERR_STATE and the
 * PS's reason; a reply the protocol does not allow with DT_ERR_PROTOCOL. Neither is retried. */
dt_err dt_ps_client_open(dt_ps_client **out, const dt_ps_client_conf *conf,
                         dt_param *const *params, int n);
void dt_ps_client_close(dt_ps_client *c);
/* Offer the params' current values as initial values: a PS that is uninitialized takes
 * them, one that already has values (from another worker or a checkpoint) keeps its own.
 * *taken (may be NULL) gets the number of PS that took them. */
dt_err dt_ps_client_init(dt_ps_client *c, int *taken);
/* Fetch every variable's value from its PS (all PS in parallel). Waits while a PS is
 * uninitialized. *step (may be NULL) gets the smallest optimizer step count over the PS. */
dt_err dt_ps_client_pull(dt_ps_client *c, int64_t *step);
/* Send every variable's gradient; returns once applied (sync: once its round is applied). */
dt_err dt_ps_client_push(dt_ps_client *c, int64_t *step);
/* push then pull in one round trip per PS: the reply carries the values after the update. */
dt_err dt_ps_client_push_pull(dt_ps_client *c, int64_t *step);
/* Ask every PS to checkpoint its partition now (its step count names the file). */
dt_err dt_ps_client_save(dt_ps_client *c);

#ifdef __cplusplus
}
#endif

#endif

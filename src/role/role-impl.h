/* role-impl.h - the built-in roles (one file each) and what they share (role.c). */
#ifndef DTRAIN_ROLE_IMPL_H
#define DTRAIN_ROLE_IMPL_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "core/path-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/data.h"
#include "dtrain/job.h"
#include "dtrain/nn.h"
#include "dtrain/role.h"
#include "dtrain/spec.h"
#include "train/train-impl.h"

#define DT__ROLE_MAX_PS DT_JOB_MAX_PS

typedef struct dt__role {
    const dt_job_spec *job;
    const dt_spec *spec;
    const char *job_dir;
    FILE *log;
    dt_replica_type type; /* TF_CONFIG's task (alone: DTRAIN_REPLICA) */
    int index;
    char name[48];        /* "worker-0" */
    int is_chief;         /* chief or master, else worker-0 when the cluster has neither */
    const char *token;    /* DTRAIN_JOB_TOKEN */
    char *ps_addrs[DT__ROLE_MAX_PS]; /* cluster.ps, owned */
    int nps;
    int spec_trainers;    /* chief/master + workers the spec declares: the global batch and
                           * the schedule are the spec's, whatever the replicas now */
    int self_port;        /* this replica's port in the cluster (0: not listed) */
    char self_host[256];  /* its host when a numeric address ("" otherwise: every interface) */
    char self_addr[300];  /* its "host:port" as TF_CONFIG lists it ("" when not listed) */
    char ckpt_dir[DT__PATH_MAX]; /* JOB_DIR/checkpoints: the whole model's checkpoints */
    char own_dir[DT__PATH_MAX];  /* JOB_DIR/replicas/<name>: this replica's result.json */
    int permanent;        /* set with a failure no restart can mend (bad data or model) */
    int stopped_by;       /* the role stopped for this signal (SIGTERM: a stop or a
                           * preemption) once what it owns was saved: exit 128 + it */
} dt__role;

/* Load the spec's data and build its model for batches of `batch` (pool may be NULL):
 * *train and *eval may be NULL when not wanted. A failure is permanent (r->permanent). */
dt_err dt__role_model(dt__role *r, int64_t batch, dt_pool *pool, dt_dataset **train,
                      dt_dataset **eval, dt_model **model);
/* The model's parameters as an array (caller frees). */
dt_param **dt__role_params(dt_model *m, int *n);
/* The optimizer as the PS applies it (a cosine schedule's length from the data's size). */
dt_optim_conf dt__role_optim(const dt__role *r, int64_t train_samples);
/* Write obj (stolen) as JOB_DIR/replicas/<name>/result.json, atomically. */
dt_err dt__role_write_result(const dt__role *r, json_t *obj);
/* A trainer's result.json after error e: status Failed and the recorded message (which stays
 * recorded for the caller). */
void dt__role_write_failure(const dt__role *r, dt_err e);

/* The chief's last duties (export.c): evaluate the final model on eval, export it to
 * JOB_DIR/export/<step>/, put eval, export and the job's aggregate samples/s (the training
 * set once per epoch over t_train seconds) into res, and wait (bounded) until the evaluator
 * has reported a checkpoint at or after step. */
dt_err dt__role_chief_finish(const dt__role *r, dt_model *model, const dt_dataset *train,
                             const dt_dataset *eval, int64_t batch, const dt__batch_bufs *b,
                             int64_t step, int64_t epoch, double t_train, json_t *res);

/* A trainer's progress, posted to the master every PROGRESS_EVERY_S (its live table, status,
 * ETA and metrics): the step, the epoch (1-based), the mean loss and this replica's own
 * samples/s since the last post, and its samples in all. A post that fails is dropped. */
struct dt_shard_client;
typedef struct dt__role_progress {
    double last;          /* monotonic time of the last post (0: none yet) */
    double loss_sum;
    int64_t loss_n, samples_at_last;
} dt__role_progress;
void dt__role_progress_step(struct dt_shard_client *sc, dt__role_progress *p, int64_t step, int64_t epoch, double loss, int64_t samples);

/* A checkpoint that fails (a full disk) stops no trainer: the cause is logged and the next
 * try put off, 1 s doubling to 60 s, while training goes on. retry_at > 0: the last one
 * failed. dt__ckpt_retry_due says whether the put-off try is due (1), not yet (0), or
 * nothing is put off (-1: the trainer's own schedule decides). */
typedef struct dt__ckpt_retry {
    double retry_at, backoff;
} dt__ckpt_retry;
int dt__ckpt_retry_due(const dt__ckpt_retry *c);
/* After a checkpoint at step with result e: logs a failure (and a success after one). */
void dt__ckpt_retry_after(dt__ckpt_retry *c, const dt__role *r, int64_t step, dt_err e);
/* The final checkpoint, the job's result: save(ctx) tried until it succeeds, with the same
 * backoff, for up to 10 minutes. */
dt_err dt__role_final_checkpoint(const dt__role *r, dt_err (*save)(void *ctx), void *ctx);
/* The checkpoint of a role asked to stop (SIGTERM): one try within the grace period, its
 * outcome said either way, at *step as it is after the save. */
void dt__role_stop_checkpoint(const dt__role *r, const int64_t *step,
                              dt_err (*save)(void *ctx), void *ctx);

/* Checkpoints written by a thread of their own from a snapshot (ckpt_writer.c), so the step
 * that takes one goes on at once. The writer's shadow model and optimizer are built from the
 * role's spec for the model's per-sample input shape and the optimizer settings oc. */
typedef struct dt__ckpt_writer dt__ckpt_writer;
dt_err dt__ckpt_writer_start(dt__ckpt_writer **w, const dt__role *r, const dt_shape *input,
                             const dt_optim_conf *oc);
/* Copy m's values, o's slots and steps and st now, and write them to r->ckpt_dir on the
 * thread; waits first for the write in flight. The last write's result must have been
 * taken. */
void dt__ckpt_writer_put(dt__ckpt_writer *w, dt_model *m, dt_optim *o, const dt_train_state *st);
/* The result of the write that finished since the last take: *step its step (-1: none
 * finished, DT_OK) and its error (message recorded). With wait, waits for the write in
 * flight first. w may be NULL (nothing finished). */
dt_err dt__ckpt_writer_take(dt__ckpt_writer *w, int wait, int64_t *step);
/* Finish the write in flight, stop the thread and free w (NULL: nothing). */
void dt__ckpt_writer_end(dt__ckpt_writer *w);

dt_err dt__role_ps(dt__role *r);
dt_err dt__role_allreduce(dt__role *r);
dt_err dt__role_trainer(dt__role *r);
dt_err dt__role_evaluator(dt__role *r);

#endif

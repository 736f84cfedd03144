/*
 * allreduce.c - worker-i and the chief of an all-reduce job: every trainer holds the whole
 * model and its optimizer; each step the trainers' gradients are summed round a ring
 * (src/ring) and every trainer applies the same mean, so the copies stay bitwise equal.
 *
 * Membership: a trainer joins a ring through the master's rendezvous (src/master). A watcher
 * thread asks the master every WATCH_MS whether the ring must be left (a replica waits to
 * join, a member died or left); it then aborts the ring, which fails the step in flight. A
 * failed step is abandoned: its gradients are not applied and its batch is kept for the next
 * step. After every (re)formation rank 0 - the member with the most steps done - sends its
 * model, optimizer state and step to every member, so survivors that differ by the abandoned
 * step and newcomers all continue from the same state.
 *
 * Exactly-once steps. A ring can break after some members finished a step's all-gather
 * (they applied it) and before others did (they abandoned it). The step's sum holds every
 * member's batch either way, so when the state a member takes after re-forming includes the
 * step it abandoned, its batch counts as trained and is not trained again. Whether it does
 * is read from the state itself: it carries the generation in which each of the last
 * GEN_HISTORY steps was done, and a member's abandoned step S of generation G is in the
 * state exactly when the state's step S was done in generation G (all of that ring's members'
 * batches are in it). A member that is out of rings for more than GEN_HISTORY steps trains
 * its batch again (the only case left, with members that die holding a shard in part).
 *
 * A step: each member takes micro-batches from the shard in hand (one with globalBatch
 * scale; with fixed, as many as keep the spec's global batch for the ring's size), sums
 * gradient x samples into a flat buffer, and the buffer is all-reduced in buckets. The
 * buffer holds the parameters last layer first, so the backward hook hands the comm thread
 * each bucket as soon as its layers are done (overlap with the rest of the backward pass).
 * The buckets holding the first layer's parameters are ready only when the pass ends: the
 * step's own thread sums those (nothing is left to overlap, and a hand-off to the comm
 * thread and back costs two thread wake-ups on the step's path, 50-70 us each measured on
 * a 2-core VM against a 1.4 ms step).
 * The first micro-batch's backward writes its gradients (of the summed loss: grad x samples,
 * dt_model_set_loss_grad_scale) straight into the buffer (dt_model_bind_grads) and later
 * ones add theirs (it is never cleared but when this member has no batch), and the
 * optimizer reads the reduced sums where they lie, scaled to the mean as it reads them
 * (dt_optim_step_grads): no pass copies them back. In a ring of two members on one host the
 * buffer lives in the ring's segment (dt_ring_shared_buffer), where the other member reads it
 * (back in the member's own buffer before the ring closes), and no bucket goes to the comm
 * thread: after the backward pass the members meet once (dt_ring_allreduce_pair) and each
 * one's optimizer sums both buffers as it reads them (dt_optim_step_grads2), then releases
 * the other's; a member writes its buffer again (the next step's first backward) only after
 * the other released it (dt_ring_settle).
 * Two counters ride in the first bucket: samples (the mean divides by the ring's total) and
 * "not done" members (when both are zero every member's data is exhausted: the end). With
 * allreduce.wireDtype bfloat16 the counters are a bucket of their own, summed in float32
 * (dt_ring_allreduce_exact): bfloat16 holds integers exactly only up to 256, and a sample
 * count rounded would break the mean and the exactly-once accounting; it goes first, while
 * the backward pass still runs.
 *
 * Data: shards come from the master's shard service (dataset "training") without blocking:
 * a member with nothing to do yet contributes zeros and keeps stepping with its ring. A
 * shard is reported done only after the step that used its last batch completed. A fetch
 * costs about a millisecond on a busy host (the master must be scheduled), and every other
 * member of the ring waits it out at the next sum; so a prefetcher thread (prefetch.c)
 * reports the finished shard as soon as the next one is taken, and fetches the one after it
 * in the same request: both off the step's path. A member thus holds one shard ahead; not in
 * the last epoch, where the member asks for it PREFETCH_STEPS steps before the shard in hand
 * ends, so the last shards stay spread over the members. A member that leaves its ring keeps
 * the shard ahead while it joins the next. A prefetch that finds nothing to hand out yet is
 * dropped and the member asks again itself when its shard ends.
 *
 * Duties: rank 0 writes whole-model checkpoints (with the optimizer state) every
 * checkpoint.every_steps, every allreduce.checkpointSeconds and at each epoch's end - a
 * snapshot that a thread of its own writes while the ring trains on (ckpt_writer.c) - and at
 * the end; any member that stops (SIGTERM) writes one when its state is past the newest (it
 * may hold the only copy of steps whose shards are reported: saves_at_stop); the chief
 * replica (chief, or worker-0 without one) evaluates, exports and waits for the evaluator
 * at the end.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/assert-impl.h"
#include "core/clock-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"
#include "core/stop-impl.h"
#include "core/thread-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/optim.h"
#include "dtrain/rendezvous.h"
#include "dtrain/ring.h"
#include "dtrain/shard.h"
#include "dtrain/threadpool.h"
#include "net/sock-impl.h"
#include "role/prefetch-impl.h"
#include "role/role-impl.h"
#include "train/train-impl.h"

#define DATASET "training"
#define WATCH_MS 100     /* how often the watcher asks the master about the ring */
#define IDLE_MS 20       /* a step in which no member had data: wait this long */
/* The counters in bucket 0: samples, members not done, members asked to stop, members
 * holding a shard not yet finished after this step. */
#define TRAILER 4
#define JOIN_TIMEOUT_MS (10 * 60 * 1000)
#define GEN_HISTORY 1024 /* steps whose generation the state carries (16 KiB of it) */
/* The step's thread, summing the last buckets (in a pair: meeting the other member, and
 * settling before it writes its buffer), waits for the ring's slowest member with
 * nothing else to do. Where each member on this host has a core for every thread of its
 * pool, it spins through that wait instead of sleeping: members reach the sum 0.2-0.7 ms
 * apart and a wake-up from poll costs 50-70 us (a 2-core VM; docs/PERFORMANCE.md). */
#define TAIL_SPIN_US 1000
#define PREFETCH_STEPS 2 /* ask for the next shard when the one in hand ends within these */

typedef struct ar_conf {
    int fixed_global;     /* globalBatch fixed: micro-batches keep batch x spec trainers */
    size_t bucket_floats; /* bucket size */
    size_t chunk_bytes;
    int timeout_ms;
    double checkpoint_secs;
    int64_t minibatches_per_shard;
    int no_shm; /* allreduce.sharedMemory: false */
    dt_ring_wire_dtype wire_dtype; /* allreduce.wireDtype */
} ar_conf;

typedef struct bucket {
    size_t off, n;  /* floats of the flat buffer */
    int min_layer;  /* ready once the backward pass has done this layer */
    int exact;      /* the counters alone: summed in float32 whatever the wire dtype */
} bucket;

typedef struct trainer {
    dt__role *r;
    ar_conf conf;
    dt_dataset *train, *eval;
    dt_pool *pool;
    dt_model *model;
    dt_optim *optim;
    dt_param **params;
    int np;
    dt__batch_bufs b;
    int64_t batch;
    dt_rng rng;

    /* the flat gradient buffer: TRAILER counters, then the parameters last first; own_flat,
     * or the ring's shared buffer while the ring sums in place (dt_ring_shared_buffer) */
    float *flat, *own_flat;
    size_t nflat;
    float **sums; /* params[i]'s place in flat: its grad x samples, then the ring's sum (in
                   * a pair: the sum is it plus more[i]) */
    /* In a pair (in_pair) the step reads the other member's buffer itself
     * (dt_ring_allreduce_pair) and its optimizer sums as it reads; more[i] is params[i]'s
     * place there. */
    const float **more;
    bucket *buckets;
    int nbuckets;
    int tail; /* buckets [tail, nbuckets) hold the first layer's: the step's thread sums them */
    float *state;      /* the broadcast: step, then values, then optimizer slots */
    size_t nstate;

    /* the ring and the comm thread (mu guards the fields below it) */
    int listen_fd;
    char address[320];
    dt_ring *ring;
    dt_rdzv_ring rz;
    pthread_t comm;
    int comm_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int tail_spin_us; /* the step's thread's lane spin (TAIL_SPIN_US or the default) */
    int ready;        /* buckets handed to the comm thread this step */
    int done;         /* buckets all-reduced (by the comm thread, then the step's) */
    int comm_failed;  /* an all-reduce of the step failed (message in comm_msg) */
    int comm_stop;
    char comm_msg[1024];
    int hook_on;      /* hand buckets over on the hook (the step's last micro-batch) */
    int hook_add;     /* ... and add its gradients to flat (it is not the first) */

    dt__prefetch pf; /* the shard prefetcher (prefetch.c) */

    /* the watcher */
    pthread_t watch;
    int watch_started;
    int watch_stop;
    dt_shard_client *wc;

    dt_shard_client *sc;
    dt_shard sh;
    int64_t pos;            /* next sample of sh */
    int have_shard, data_end;
    /* Stop (SIGTERM): a member asked to stop says so in its step's counters; from the step
     * where the ring sees it, every member drains (finishes its shard, takes no new one)
     * until a step after which no member holds an unfinished shard (`clear`). There the
     * members asked to stop leave, with nothing half-trained. */
    int draining, clear;

    int64_t step, epoch, last_ckpt_step;
    /* step s was done in ring generation gen_of[s % GEN_HISTORY] (when step_of[...] == s):
     * part of the state, so the same on every member after a (re)formation */
    int64_t step_of[GEN_HISTORY], gen_of[GEN_HISTORY];
    /* the step this member abandoned last (0: none pending), its generation and what its
     * batch was, to count it once the new state shows whether the step was done */
    int64_t lost_step, lost_gen, lost_pos, lost_samples;
    double lost_loss;
    /* samples in all the ring's steps so far (every member's): the same on all, kept in
     * checkpoints; at the end, the data times the epochs when no batch was lost or twice */
    int64_t applied;
    double last_ckpt_time;
    dt__ckpt_retry ckpt_retry; /* a failed checkpoint's next try */
    /* rank 0's checkpoints between steps, written by a thread (NULL until the first; and
     * when it cannot start, they are written on the step's thread: writer_off) */
    dt__ckpt_writer *writer;
    int writer_off;
    int64_t ckpt_before; /* last_ckpt_step before the write in flight */
    int64_t samples, batches, abandoned, generations;
    double loss_sum, last_epoch_loss;
    int64_t loss_n;
    double t_start, t_train;
    dt__train_tb tb;  /* rank 0's TensorBoard run "train" (tb_open) */
    int tb_open;
    dt__role_progress progress; /* posted to the master */
    dt_optim_conf oc; /* the optimizer's settings (its learning rate) */
} trainer;

static ar_conf settings(const dt_job_spec *job) {
    const dt_allreduce_job_conf *a = &job->allreduce;
    ar_conf c = {.fixed_global = a->global_batch == DT_GLOBAL_BATCH_FIXED,
                 .bucket_floats = (size_t)a->bucket_bytes / sizeof(float),
                 .chunk_bytes = (size_t)a->chunk_bytes,
                 .timeout_ms = (int)a->timeout_ms,
                 .checkpoint_secs = (double)a->checkpoint_secs,
                 .minibatches_per_shard = a->minibatches_per_shard,
                 .no_shm = !a->shared_memory,
                 .wire_dtype = (dt_ring_wire_dtype)a->wire_dtype};
    if (c.bucket_floats < 1024) c.bucket_floats = 1024;
    return c;
}

/* ---- the flat buffer and its buckets ---- */

static dt_err layout(trainer *t) {
    size_t off = TRAILER;
    t->nflat = TRAILER;
    for (int i = 0; i < t->np; i++)
        t->nflat += (size_t)dt_tensor_numel(&t->params[i]->grad);
    t->flat = t->own_flat = malloc(t->nflat * sizeof *t->flat);
    t->sums = malloc((size_t)t->np * sizeof *t->sums);
    t->more = malloc((size_t)t->np * sizeof *t->more);
    t->buckets = malloc((size_t)(t->np + 2) * sizeof *t->buckets);
    if (!t->flat || !t->sums || !t->more || !t->buckets)
        return dt_err_set(DT_ERR_NOMEM, "out of memory for gradients");
    bucket cur = {.off = 0, .n = TRAILER, .min_layer = -1};
    if (t->conf.wire_dtype == DT_RING_WIRE_BF16) {
        /* ready at once: the counters are set before the backward pass */
        t->buckets[t->nbuckets++] = (bucket){.off = 0, .n = TRAILER, .min_layer = INT_MAX,
                                             .exact = 1};
        cur = (bucket){.off = TRAILER, .n = 0, .min_layer = -1};
    }
    for (int i = t->np - 1; i >= 0; i--) {
        size_t n = (size_t)dt_tensor_numel(&t->params[i]->grad);
        int layer = dt_model_param_layer(t->model, i);
        /* a layer's parameters share a bucket; a full bucket closes at a layer boundary */
        if (cur.n >= t->conf.bucket_floats && cur.min_layer != layer) {
            t->buckets[t->nbuckets++] = cur;
            cur = (bucket){.off = off, .n = 0, .min_layer = layer};
        }
        t->sums[i] = t->flat + off;
        off += n;
        cur.n += n;
        cur.min_layer = layer;
    }
    t->buckets[t->nbuckets++] = cur;
    DT_ASSERT(off == t->nflat);
    t->tail = t->nbuckets;
    while (t->tail > 0 && t->buckets[t->tail - 1].min_layer == cur.min_layer)
        t->tail--;
    size_t slots = 0;
    for (int i = 0; i < dt_optim_num_slots(t->optim); i++)
        slots += (size_t)dt_tensor_numel(dt_optim_slot(t->optim, i));
    t->nstate = 4 + 4 * GEN_HISTORY + (off - TRAILER) + slots;
    t->state = malloc(t->nstate * sizeof *t->state);
    if (!t->state) return dt_err_set(DT_ERR_NOMEM, "out of memory for the state");
    return DT_OK;
}

/* A ring of two that sums in place: flat lives in the ring's shared buffer (move_flat). */
static int in_pair(const trainer *t) {
    return t->flat != t->own_flat;
}

/* Move the flat buffer to `to` (what it holds goes along): into the ring's shared buffer
 * when a ring sums in place, back to this member's own before that ring closes. */
static void move_flat(trainer *t, float *to) {
    if (to == t->flat) return;
    memcpy(to, t->flat, t->nflat * sizeof *t->flat);
    for (int i = 0; i < t->np; i++)
        t->sums[i] = to + (t->sums[i] - t->flat);
    t->flat = to;
}

/* flat[param i] += its gradient, computed by a later micro-batch of the step in the model's
 * own buffer (the first one's backward writes into flat itself). */
static void add_param(trainer *t, int i) {
    float *dst = t->sums[i];
    const float *g = t->params[i]->grad.data; /* the model's own buffer: unbound */
    int64_t n = dt_tensor_numel(&t->params[i]->grad);
    for (int64_t k = 0; k < n; k++)
        dst[k] += g[k];
}

/* Hand buckets [t->ready, upto) to the comm thread. */
static void hand_over(trainer *t, int upto) {
    pthread_mutex_lock(&t->mu);
    if (upto > t->ready) {
        t->ready = upto;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
}

/* The backward hook: layer `layer` is done; add its gradients (a later micro-batch's) and
 * hand over every bucket whose layers are all done. */
static void on_layer_done(void *ctx, int layer) {
    trainer *t = ctx;
    if (!t->hook_on) return;
    if (t->hook_add)
        for (int i = 0; i < t->np; i++)
            if (dt_model_param_layer(t->model, i) == layer) add_param(t, i);
    if (in_pair(t)) return; /* the step's thread meets the other member once, at the end */
    int upto = t->ready;
    while (upto < t->tail && t->buckets[upto].min_layer >= layer)
        upto++;
    if (upto > t->ready) hand_over(t, upto);
}

/* All-reduce bucket b, called with mu held (dropped meanwhile); after a failure the step's
 * later buckets are skipped. */
static void reduce_bucket(trainer *t, int b, int spin_us) {
    dt_ring *ring = t->ring;
    int failed = t->comm_failed;
    pthread_mutex_unlock(&t->mu);
    const bucket *bk = &t->buckets[b];
    dt_ring_set_spin_us(ring, spin_us);
    dt_err e = failed      ? DT_ERR_STATE
               : bk->exact ? dt_ring_allreduce_exact(ring, t->flat + bk->off, bk->n)
                           : dt_ring_allreduce(ring, t->flat + bk->off, bk->n);
    pthread_mutex_lock(&t->mu);
    if (e && !t->comm_failed) {
        t->comm_failed = 1;
        snprintf(t->comm_msg, sizeof t->comm_msg, "%s", dt_errmsg());
    }
    t->done = b + 1;
}

static void *comm_main(void *arg) {
    trainer *t = arg;
    dt__thread_name("dt-ring-comm");
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->comm_stop && t->done >= t->ready)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->comm_stop) break;
        /* the step's thread computes meanwhile: a short spin */
        reduce_bucket(t, t->done, DT_RING_DEFAULT_SPIN_US);
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* The backward pass is over: wait for the comm thread to finish the buckets handed to it,
 * then all-reduce the rest on this thread (the comm thread sleeps on: done >= ready). Every
 * bucket is gone through, so the ring's other members are never left waiting. DT_ERR_IO
 * when an all-reduce failed. */
static dt_err finish_buckets(trainer *t) {
    pthread_mutex_lock(&t->mu);
    while (t->done < t->ready)
        pthread_cond_wait(&t->cv, &t->mu);
    while (t->done < t->nbuckets) /* the long spin for the tail's buckets only */
        reduce_bucket(t, t->done,
                      t->done >= t->tail ? t->tail_spin_us : DT_RING_DEFAULT_SPIN_US);
    int failed = t->comm_failed;
    pthread_mutex_unlock(&t->mu);
    if (failed) return dt_err_set(DT_ERR_IO, "%s", t->comm_msg);
    return DT_OK;
}

/* ---- the shard prefetcher ---- */

/* ---- the watcher ---- */

static void *watch_main(void *arg) {
    trainer *t = arg;
    dt__thread_background("dt-ring-watch");
    for (;;) {
        pthread_mutex_lock(&t->mu);
        int stop = t->watch_stop;
        int64_t gen = t->ring ? t->rz.generation : 0;
        pthread_mutex_unlock(&t->mu);
        if (stop) break;
        int64_t newest = 0;
        int leave = 0;
        if (gen > 0 && dt_rdzv_status(t->wc, gen, &newest, &leave) == DT_OK && leave) {
            pthread_mutex_lock(&t->mu);
            if (t->ring && t->rz.generation == gen) dt_ring_abort(t->ring);
            pthread_mutex_unlock(&t->mu);
        }
        usleep(WATCH_MS * 1000);
    }
    return NULL;
}

/* ---- state: checkpoints and the broadcast after a (re)formation ---- */

static dt_train_state train_state(const trainer *t) {
    return (dt_train_state){.step = t->step, .epoch = t->epoch, .seed = t->r->spec->seed,
                            .rng = t->rng, .samples = t->applied};
}

/* The outcome of the writer's checkpoint, once it is known (wait: wait for the write in
 * flight): as for one written here, a failure is said and the next try put off; the step it
 * was for no longer counts as saved. */
static void take_write(trainer *t, int wait) {
    int64_t step;
    dt_err e = dt__ckpt_writer_take(t->writer, wait, &step);
    if (step < 0) return;
    if (e && t->last_ckpt_step == step) t->last_ckpt_step = t->ckpt_before;
    dt__ckpt_retry_after(&t->ckpt_retry, t->r, step, e);
    dt_err_clear();
}

/* A checkpoint written here, now (at a stop, at the end: the caller needs it on disk). */
static dt_err checkpoint(trainer *t) {
    take_write(t, 1); /* one writer of the directory at a time */
    dt_train_state st = train_state(t);
    dt_err e = dt_checkpoint_dir_save(t->r->ckpt_dir, t->r->spec->checkpoint_keep, t->model,
                                      t->optim, &st);
    if (e) return e;
    t->last_ckpt_step = t->step;
    t->last_ckpt_time = dt__mono_s();
    return DT_OK;
}

static dt_err checkpoint_cb(void *t) { return checkpoint(t); }

/* Rank 0's checkpoint between steps: a snapshot the writer's thread writes while the ring
 * goes on (the other members would wait for a write here at the next sum). When it fails (a
 * full disk), the cause is said, the next try put off and training goes on (role.c). */
static void checkpoint_or_defer(trainer *t) {
    take_write(t, 1);
    if (!t->writer && !t->writer_off) {
        dt_shape input;
        dt_err e = dt__train_input_shape(t->r->spec, t->train, &input);
        if (!e) e = dt__ckpt_writer_start(&t->writer, t->r, &input, &t->oc);
        if (e) {
            fprintf(t->r->log, "%s: checkpoints are written on the step's thread: the writer's "
                    "thread could not start (%s)\n", t->r->name, dt_errmsg());
            fflush(t->r->log);
            dt_err_clear();
            t->writer_off = 1;
        }
    }
    if (!t->writer) {
        dt__ckpt_retry_after(&t->ckpt_retry, t->r, t->step, checkpoint(t));
        return;
    }
    dt_train_state st = train_state(t);
    dt__ckpt_writer_put(t->writer, t->model, t->optim, &st);
    t->ckpt_before = t->last_ckpt_step;
    t->last_ckpt_step = t->step;
    t->last_ckpt_time = dt__mono_s();
}

static int checkpoint_due(const trainer *t) {
    int retry = dt__ckpt_retry_due(&t->ckpt_retry);
    if (retry >= 0) return retry;
    int64_t every = t->r->spec->checkpoint_every_steps;
    if (every > 0 && t->step / every > t->last_ckpt_step / every) return 1;
    return t->conf.checkpoint_secs > 0 && dt__mono_s() - t->last_ckpt_time >= t->conf.checkpoint_secs;
}

/* state <-> model, optimizer, step, samples applied and the steps' generations (each int64
 * as two floats' bits: exact) */
static void state_pack(trainer *t, int out) {
    float *s = t->state;
    int64_t step = t->step, applied = t->applied;
    if (out) {
        memcpy(s, &step, sizeof step);
        memcpy(s + 2, &applied, sizeof applied);
        memcpy(s + 4, t->step_of, sizeof t->step_of);
        memcpy(s + 4 + 2 * GEN_HISTORY, t->gen_of, sizeof t->gen_of);
    } else {
        memcpy(&step, s, sizeof step);
        memcpy(&applied, s + 2, sizeof applied);
        memcpy(t->step_of, s + 4, sizeof t->step_of);
        memcpy(t->gen_of, s + 4 + 2 * GEN_HISTORY, sizeof t->gen_of);
    }
    size_t k = 4 + 4 * GEN_HISTORY;
    for (int i = 0; i < t->np; i++) {
        dt_tensor *v = &t->params[i]->value;
        size_t n = (size_t)dt_tensor_numel(v);
        if (out) memcpy(s + k, v->data, n * sizeof *s);
        else memcpy(v->data, s + k, n * sizeof *s);
        k += n;
    }
    for (int i = 0; i < dt_optim_num_slots(t->optim); i++) {
        dt_tensor *v = dt_optim_slot(t->optim, i);
        size_t n = (size_t)dt_tensor_numel(v);
        if (out) memcpy(s + k, v->data, n * sizeof *s);
        else memcpy(v->data, s + k, n * sizeof *s);
        k += n;
    }
    if (!out) {
        t->step = step;
        t->applied = applied;
        dt_optim_set_steps(t->optim, step);
    }
}

/* The newest checkpoint: its path in latest and its step in *at (-1 when there is none). */
static dt_err newest_checkpoint(const trainer *t, char *latest, size_t cap, long long *at) {
    *at = -1;
    dt_err e = dt_checkpoint_dir_latest(t->r->ckpt_dir, latest, cap);
    if (e == DT_ERR_NOTFOUND) {
        dt_err_clear();
        return DT_OK;
    }
    if (e) return e;
    const char *base = strrchr(latest, '/');
    if (sscanf(base ? base + 1 : latest, "ckpt-%lld", at) != 1) *at = -1;
    return DT_OK;
}

/* Load the newest checkpoint into the model and optimizer when it is past our step (a
 * trainer restarted or left alone after the others went on); *loaded says whether it did. */
static dt_err catch_up(trainer *t, int *loaded) {
    *loaded = 0;
    char latest[DT__PATH_MAX];
    long long at;
    dt_err e = newest_checkpoint(t, latest, sizeof latest, &at);
    if (e) return e;
    if (at <= t->step) return DT_OK;
    dt_train_state st;
    if ((e = dt_checkpoint_load(latest, t->model, t->optim, &st)))
        return dt_err_wrap(e, "resuming from %s", latest);
    t->step = st.step;
    t->applied = st.samples;
    if (st.epoch > t->epoch) t->epoch = st.epoch;
    dt_optim_set_steps(t->optim, st.step);
    fprintf(t->r->log, "%s: resuming from %s (step %lld)\n", t->r->name, latest,
            (long long)st.step);
    *loaded = 1;
    return DT_OK;
}

/* ---- setup and teardown ---- */

static dt_err setup(trainer *t) {
    dt__role *r = t->r;
    const dt_spec *s = r->spec;
    t->conf = settings(r->job);
    t->batch = s->batch_size;
    t->listen_fd = -1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    dt_err e = dt_pool_init(&t->pool, s->threads > 0 ? s->threads : 1);
    if (e) return e;
    if ((e = dt__role_model(r, t->batch, t->pool, &t->train, &t->eval, &t->model))) return e;
    if (!(t->params = dt__role_params(t->model, &t->np)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    dt_model_init_params(t->model, s->seed);
    dt_optim_conf oc = dt__role_optim(r, t->train->n);
    t->oc = oc;
    if ((e = dt_optim_init(&t->optim, &oc, t->params, t->np))) return e;
    dt_rng_seed2(&t->rng, s->seed, 0x616c6c72u ^ ((uint64_t)r->type << 32) ^ (uint64_t)r->index);
    int64_t row = dt_dataset_row(t->train);
    int64_t tdim = t->train->target_dim > 0 ? t->train->target_dim : 1;
    t->b.x = malloc((size_t)(t->batch * row) * sizeof(float));
    t->b.y = malloc((size_t)t->batch * sizeof(int32_t));
    t->b.t = malloc((size_t)(t->batch * tdim) * sizeof(float));
    t->b.idx = malloc((size_t)t->batch * sizeof(int64_t));
    if (!t->b.x || !t->b.y || !t->b.t || !t->b.idx)
        return dt_err_set(DT_ERR_NOMEM, "out of memory for batch buffers");
    if ((e = layout(t))) return e;
    dt_model_set_backward_hook(t->model, on_layer_done, t);

    /* Every trainer resumes from the newest checkpoint when there is one: the ring then
     * starts from the member with the most steps. */
    if ((e = dt__mkdirs(r->ckpt_dir))) return e;
    int loaded;
    if ((e = catch_up(t, &loaded))) return e;
    t->last_ckpt_step = t->step;
    t->last_ckpt_time = dt__mono_s();

    if (!r->token || !*r->token)
        return dt_err_set(DT_ERR_ARG, "DTRAIN_JOB_TOKEN is not set: the data plane needs the "
                                      "job's token");
    if (!r->self_addr[0] || !r->self_port)
        return dt_err_set(DT_ERR_ARG, "TF_CONFIG: cluster.%s[%d]: this replica has no "
                                      "\"host:port\" to listen on",
                          dt_replica_type_name(r->type), r->index);
    int port = 0;
    for (int tries = 0;; tries++) { /* a restarted replica's port may still be held a moment */
        e = dt_ring_listen(r->self_host, r->self_port, &t->listen_fd, &port);
        if (!e || tries >= 20) break;
        usleep(500 * 1000);
    }
    if (e) return e;
    snprintf(t->address, sizeof t->address, "%s", r->self_addr);

    dt_shard_client_opts so = {.no_wait = 1};
    if ((e = dt_shard_client_open(&t->sc, &so))) return e;
    dt_shard_client_opts wo = {.heartbeat_ms = -1};
    if ((e = dt_shard_client_open(&t->wc, &wo))) return e;
    dt_dataset_spec ds;
    dt_dataset_spec_init(&ds);
    ds.name = DATASET;
    ds.dataset_size = t->train->n;
    ds.batch_size = t->batch;
    ds.num_epochs = s->epochs;
    ds.num_minibatches_per_shard = t->conf.minibatches_per_shard;
    ds.shuffle = s->shuffle;
    ds.seed = s->seed;
    if ((e = dt_shard_register(t->sc, &ds))) return e;
    if (pthread_create(&t->comm, NULL, comm_main, t) != 0)
        return dt_err_set(DT_ERR_NOMEM, "cannot start the communication thread");
    t->comm_started = 1;
    if ((e = dt__prefetch_start(&t->pf, &ds, r->name, r->log))) return e;
    if (pthread_create(&t->watch, NULL, watch_main, t) != 0)
        return dt_err_set(DT_ERR_NOMEM, "cannot start the watcher thread");
    t->watch_started = 1;
    return DT_OK;
}

static void leave_ring(trainer *t) {
    pthread_mutex_lock(&t->mu);
    dt_ring *ring = t->ring;
    t->ring = NULL;
    pthread_mutex_unlock(&t->mu);
    move_flat(t, t->own_flat); /* out of the ring's segment before it goes */
    dt_ring_close(ring);
}

static void teardown(trainer *t) {
    /* the write in flight is finished; its outcome was taken already unless the role is
     * failing (whose message must stay the recorded error) */
    dt__ckpt_writer_end(t->writer);
    if (t->tb_open) dt__tb_close(&t->tb);
    pthread_mutex_lock(&t->mu);
    t->comm_stop = 1;
    t->watch_stop = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->comm_started) pthread_join(t->comm, NULL);
    dt__prefetch_end(&t->pf);
    if (t->watch_started) pthread_join(t->watch, NULL);
    leave_ring(t);
    dt_rdzv_ring_free(&t->rz);
    if (t->listen_fd >= 0) close(t->listen_fd);
    dt_shard_free(&t->sh);
    dt_shard_client_close(t->wc);
    dt_shard_client_close(t->sc);
    free(t->b.x);
    free(t->b.y);
    free(t->b.t);
    free(t->b.idx);
    if (t->model) dt_model_bind_grads(t->model, NULL);
    free(t->own_flat);
    free(t->sums);
    free(t->more);
    free(t->state);
    free(t->buckets);
    free(t->params);
    dt_optim_free(t->optim);
    dt_model_free(t->model);
    dt_pool_free(t->pool);
    dt_dataset_free(t->train);
    dt_dataset_free(t->eval);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
}

/* ---- joining a ring ---- */

/* Do the ring's members on this host (those whose address names this member's host) have
 * a core for each thread of their pools? */
static int threads_fit(const trainer *t, const dt_rdzv_ring *rz) {
    char me[256], host[256];
    int port;
    if (dt__hostport_split(rz->peers[rz->rank], me, sizeof me, &port)) return 0;
    long here = 0;
    for (int i = 0; i < rz->size; i++)
        here += !dt__hostport_split(rz->peers[i], host, sizeof host, &port) && !strcmp(host, me);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu > 0 && here * dt_pool_size(t->pool) <= ncpu;
}

/* Micro-batches per step: one, or with a fixed global batch as many as keep the spec's
 * trainers x batch over this ring's size (rounded, at least one). */
static int micro_batches(const trainer *t) {
    if (!t->conf.fixed_global || t->rz.size <= 0) return 1;
    int k = (t->r->spec_trainers + t->rz.size / 2) / t->rz.size;
    return k > 0 ? k : 1;
}

/* A member asked to stop while it waits for a ring goes at once, unless it holds a shard it
 * has trained in part: it waits to drain it in a ring (a stopped job still forms them). */
static int partial_shard; /* of the one process's trainer; read by stop_waiting */
static int stop_waiting(void) { return dt__stop_signal() && !partial_shard; }

/* After taking a ring's state: the step this member abandoned, if the state shows it was done
 * (by the members that finished it in the same ring), had this member's batch in it: count
 * the batch as trained instead of training it again. */
static void count_lost_step(trainer *t) {
    int64_t s = t->lost_step;
    t->lost_step = 0;
    if (!s || t->step < s || t->step_of[s % GEN_HISTORY] != s ||
        t->gen_of[s % GEN_HISTORY] != t->lost_gen)
        return;
    t->pos = t->lost_pos;
    t->samples += t->lost_samples;
    t->batches += t->lost_samples > 0;
    t->loss_sum += t->lost_loss;
    t->loss_n += t->lost_samples;
    t->abandoned--; /* it was not, in the end */
    fprintf(t->r->log,
            "%s: step %lld, which this member abandoned in ring generation %lld, was done by "
            "the members that finished it: its batch (%lld samples) counts and is not trained "
            "again\n",
            t->r->name, (long long)s, (long long)t->lost_gen, (long long)t->lost_samples);
}

/* Join the next ring (naming the member we lost, if any), open it and take rank 0's state. */
static dt_err join(trainer *t, const char *lost_member) {
    dt__role *r = t->r;
    char lost[64] = ""; /* a copy: the names live in t->rz, replaced by each answer */
    if (lost_member) snprintf(lost, sizeof lost, "%s", lost_member);
    /* a finished shard's report held back would keep the others from the next epoch while
     * this member waits for a ring */
    dt__prefetch_quiet(&t->pf);
    for (;;) {
        dt_rdzv_join_req req = {.address = t->address,
                                .generation = t->rz.generation,
                                .step = t->step,
                                .unreachable = lost[0] ? lost : NULL,
                                .cancel = stop_waiting};
        dt_rdzv_ring rz = {0};
        double t0 = dt__mono_s();
        dt_err e = dt_rdzv_join(t->sc, &req, JOIN_TIMEOUT_MS, &rz);
        if (e) return e;
        dt_rdzv_ring_free(&t->rz);
        t->rz = rz;
        dt_ring_conf rc = {.token = r->token,
                           .generation = rz.generation,
                           .rank = rz.rank,
                           .size = rz.size,
                           .peers = (const char *const *)rz.peers,
                           .timeout_ms = t->conf.timeout_ms,
                           .chunk_bytes = t->conf.chunk_bytes,
                           .log = r->log,
                           .no_shm = t->conf.no_shm,
                           .wire_dtype = t->conf.wire_dtype,
                           .shared_floats = t->nflat};
        dt_ring *ring = NULL;
        e = dt_ring_open(&ring, t->listen_fd, &rc);
        if (!e) {
            pthread_mutex_lock(&t->mu);
            t->ring = ring;
            pthread_mutex_unlock(&t->mu);
            /* 2 members on one host: the gradients live where the other member reads them */
            float *shared = dt_ring_shared_buffer(ring);
            if (shared) move_flat(t, shared);
            t->tail_spin_us = threads_fit(t, &rz) ? TAIL_SPIN_US : DT_RING_DEFAULT_SPIN_US;
            /* rank 0's state goes to all: not older than the newest checkpoint */
            int loaded;
            if (rz.rank == 0 && (e = catch_up(t, &loaded))) return e;
            state_pack(t, 1);
            e = dt_ring_broadcast(ring, t->state, t->nstate * sizeof *t->state, 0);
            if (!e) {
                state_pack(t, 0);
                count_lost_step(t);
                t->generations++;
                fprintf(r->log,
                        "%s: ring generation %lld: rank %d of %d, step %lld (formed in %.2f s); "
                        "%d micro-batches a step\n",
                        r->name, (long long)rz.generation, rz.rank, rz.size, (long long)t->step,
                        dt__mono_s() - t0, micro_batches(t));
                fflush(r->log);
                return DT_OK;
            }
            int fp = dt_ring_failed_peer(ring);
            snprintf(lost, sizeof lost, "%s", fp >= 0 && fp < rz.size ? rz.members[fp] : "");
            leave_ring(t);
        } else {
            lost[0] = '\0';
        }
        fprintf(r->log, "%s: ring generation %lld did not form: %s; joining again\n", r->name,
                (long long)rz.generation, dt_errmsg());
        fflush(r->log);
    }
}

/* ---- a step ---- */

/* The next shard on this thread (the finished one reported in the same request). */
static dt_err fetch_shard(trainer *t) {
    dt_shard_fetch_status st;
    dt_err e = t->have_shard ? dt_shard_report_fetch(t->sc, DATASET, &t->sh, 1, NULL, &st)
                             : dt_shard_fetch(t->sc, DATASET, &t->sh, &st);
    if (e == DT_ERR_STATE && t->have_shard) {
        /* the report was refused (the shard was re-queued while we held it): go on */
        dt_err_clear();
        e = dt_shard_fetch(t->sc, DATASET, &t->sh, &st);
    }
    if (e) return e;
    t->have_shard = st == DT_SHARD_FETCH_SHARD;
    t->data_end = st == DT_SHARD_FETCH_END;
    t->pos = 0;
    return DT_OK;
}

/* The next shard: the prefetcher's when it brought one (the prefetcher then reports the
 * finished shard, with the fetch of the one after in the same request unless the one taken
 * is of the last epoch or this member stops), else fetched here with the finished shard's
 * report in the same request. Never blocks on the data. */
static dt_err next_shard(trainer *t) {
    int got;
    dt_err e = dt__prefetch_take(&t->pf, &t->sh, t->have_shard, !dt__stop_signal(), &got);
    if (e) return e;
    if (got) { /* the prefetcher reports the finished shard right away */
        t->have_shard = 1;
        t->data_end = 0;
        t->pos = 0;
        return DT_OK;
    }
    dt__prefetch_quiet(&t->pf); /* one request of this replica's at a time */
    return fetch_shard(t);
}

/* The epoch's figures when the shard in hand starts a new one; rank 0 checkpoints. */
static void epoch_turn(trainer *t) {
    if (!t->have_shard || t->sh.epoch <= t->epoch) return;
    if (t->loss_n > 0) {
        t->last_epoch_loss = t->loss_sum / (double)t->loss_n;
        fprintf(t->r->log, "%s: epoch %lld done here: %lld samples, loss %.4f, step %lld\n",
                t->r->name, (long long)t->epoch + 1, (long long)t->loss_n, t->last_epoch_loss,
                (long long)t->step);
        fflush(t->r->log);
    }
    t->loss_sum = 0;
    t->loss_n = 0;
    if (t->rz.rank == 0 && t->step > t->last_ckpt_step) checkpoint_or_defer(t);
    t->epoch = t->sh.epoch;
}

/* Rank 0 writes the TensorBoard run "train" (its batch's loss, the ring's samples): a member
 * that becomes rank 0 continues the run from its step, one that stops being it closes it. */
static void tensorboard_step(trainer *t, double loss, int64_t samples) {
    dt__role *r = t->r;
    if (t->rz.rank != 0) {
        if (t->tb_open) dt__tb_close(&t->tb);
        t->tb_open = 0;
        return;
    }
    if (!t->tb_open) {
        dt__tb_open(&t->tb, r->spec, r->job_dir, t->step - 1, DT__TB_TRAIN, r->log);
        t->tb_open = 1;
    }
    dt__tb_step(&t->tb, t->step, loss, samples, &t->oc);
}

/* Before this member writes flat: in a pair, the other member may still read it from the
 * last step (dt_ring_settle). 1 when the ring failed meanwhile (its message in comm_msg). */
static int settle_failed(trainer *t) {
    if (!in_pair(t) || !dt_ring_settle(t->ring)) return 0;
    snprintf(t->comm_msg, sizeof t->comm_msg, "%s", dt_errmsg());
    return 1;
}

/* The step's all-reduce, after the backward pass: in a pair, the other member's data in
 * *peer (the sums are flat + *peer); else the buckets' sums in flat and *peer NULL. DT_ERR_IO
 * (the message in comm_msg too) when the ring failed. */
static dt_err reduce(trainer *t, const float **peer) {
    *peer = NULL;
    if (!in_pair(t)) return finish_buckets(t);
    dt_ring_set_spin_us(t->ring, t->tail_spin_us);
    if (!dt_ring_allreduce_pair(t->ring, t->flat, t->nflat, peer)) return DT_OK;
    snprintf(t->comm_msg, sizeof t->comm_msg, "%s", dt_errmsg());
    return dt_err_set(DT_ERR_IO, "%s", t->comm_msg);
}

/* One step. *ring_failed = 1 when the ring failed (the step is abandoned, nothing changed
 * but the data position kept for the next try); *end = 1 when every member's data is done. */
static dt_err step(trainer *t, int *ring_failed, int *end) {
    *ring_failed = 0;
    *end = 0;
    dt_err e;
    if (t->draining) {
        /* no new shard while the ring drains */
    } else if (t->have_shard && t->pos >= t->sh.count) {
        if ((e = next_shard(t))) return e;
    } else if (!t->have_shard && !t->data_end) {
        if ((e = next_shard(t))) return e;
    }
    float stopping = dt__stop_signal() ? 1.0f : 0.0f;
    epoch_turn(t);
    int k = micro_batches(t);
    int64_t pos0 = t->pos, nb_total = 0;
    double loss_sum = 0;
    pthread_mutex_lock(&t->mu);
    t->ready = 0;
    t->done = 0;
    t->comm_failed = 0;
    pthread_mutex_unlock(&t->mu);
    for (int j = 0; j < k; j++) {
        int64_t left = t->have_shard ? t->sh.count - t->pos : 0;
        int64_t nb = left < t->batch ? left : t->batch;
        if (nb <= 0) break;
        dt_dataset_gather_on(t->pool, t->train, t->sh.indices + t->pos, nb, t->b.x, t->b.y, t->b.t);
        t->pos += nb;
        double loss;
        e = dt_model_forward(t->model, t->b.x, nb, 1, &t->rng, NULL);
        /* gradients x nb: the sum over members, divided by the total, is the mean over the
         * global batch; the first micro-batch's backward writes them into flat itself */
        dt_model_set_loss_grad_scale(t->model, (float)nb);
        dt_model_bind_grads(t->model, j == 0 ? t->sums : NULL);
        if (!e)
            e = dt_model_loss(t->model, t->train->labels ? t->b.y : NULL,
                              t->train->targets ? t->b.t : NULL, &loss, NULL);
        if (j == 0 && settle_failed(t)) { /* from here on, this step writes flat */
            t->pos = pos0;
            *ring_failed = 1;
            return e;
        }
        if (e) {
            t->pos = pos0;
            memset(t->flat, 0, t->nflat * sizeof *t->flat); /* this member brings nothing */
            const float *peer;
            if (!reduce(t, &peer)) dt_ring_release(t->ring); /* run out this step with the ring */
            return e;
        }
        nb_total += nb;
        loss_sum += loss * (double)nb;
        int last = j == k - 1 || t->sh.count - t->pos <= 0;
        if (last) { /* the counters first: bucket 0 may leave during the backward pass */
            t->flat[0] = (float)nb_total;
            t->flat[1] = 1;
            t->flat[2] = stopping;
            t->flat[3] = t->sh.count - t->pos > 0 ? 1.0f : 0.0f;
        }
        t->hook_on = last;
        t->hook_add = j > 0;
        dt_model_backward(t->model);
        t->hook_on = 0;
        if (!last && j > 0)
            for (int i = 0; i < t->np; i++)
                add_param(t, i);
        if (last) break;
    }
    if (nb_total == 0) {
        if (settle_failed(t)) {
            *ring_failed = 1;
            return DT_OK;
        }
        memset(t->flat, 0, t->nflat * sizeof *t->flat); /* no batch: this member adds zeros */
        t->flat[0] = 0;
        t->flat[1] = t->data_end ? 0 : 1;
        t->flat[2] = stopping;
        t->flat[3] = 0;
    }
    /* now, while this thread waits for the ring's other members: the request's own work
     * (a third thread on cores that both compute) takes little from the step */
    if (t->have_shard && !t->draining &&
        t->sh.count - t->pos <= (int64_t)PREFETCH_STEPS * k * t->batch)
        dt__prefetch_ask(&t->pf);
    const float *peer;
    if ((e = reduce(t, &peer))) {
        t->lost_step = t->step + 1;
        t->lost_gen = t->rz.generation;
        t->lost_pos = t->pos;
        t->lost_samples = nb_total;
        t->lost_loss = loss_sum;
        t->pos = pos0;
        *ring_failed = 1;
        return DT_OK;
    }
    float c[TRAILER]; /* the counters' sums */
    for (int i = 0; i < TRAILER; i++)
        c[i] = peer ? t->flat[i] + peer[i] : t->flat[i];
    double total = c[0], not_done = c[1];
    /* every member reads the same sums: they agree on where the drain starts and ends */
    if (c[2] > 0) t->draining = 1;
    t->clear = c[3] <= 0;
    if (t->clear) t->draining = 0;
    if (total <= 0) {
        dt_ring_release(t->ring);
        if (not_done <= 0) *end = 1;
        else usleep(IDLE_MS * 1000); /* members wait for shards others hold */
        return DT_OK;
    }
    /* the optimizer reads the sums where the ring left them (in a pair: sums both members'
     * gradients as it reads them), scaled to their mean */
    if (peer) {
        for (int i = 0; i < t->np; i++)
            t->more[i] = peer + (t->sums[i] - t->flat);
        dt_optim_step_grads2(t->optim, t->pool, t->sums, t->more, (float)(1.0 / total));
        dt_ring_release(t->ring);
    } else {
        dt_optim_step_grads(t->optim, t->pool, t->sums, (float)(1.0 / total));
    }
    t->step++;
    t->step_of[t->step % GEN_HISTORY] = t->step;
    t->gen_of[t->step % GEN_HISTORY] = t->rz.generation;
    t->applied += (int64_t)total;
    t->samples += nb_total;
    t->batches += nb_total > 0;
    t->loss_sum += loss_sum;
    t->loss_n += nb_total;
    tensorboard_step(t, nb_total ? loss_sum / (double)nb_total : 0, (int64_t)total);
    dt__role_progress_step(t->sc, &t->progress, t->step, t->epoch + 1,
                           nb_total ? loss_sum / (double)nb_total : NAN, t->samples);
    take_write(t, 0);
    if (t->rz.rank == 0 && checkpoint_due(t)) checkpoint_or_defer(t);
    return DT_OK;
}

/* ---- the end ---- */

/* Does a member that stops save its state? Rank 0 and the chief of a ring do. Any other
 * member does when its state is past the newest checkpoint: it may hold the only copy of its
 * last steps, whose shards were reported done (a shard is, at the start of the step after
 * its last batch's), so without this save a continued job would start from the older
 * checkpoint and their batches would never be trained. When a job is stopped:
 *   - the members whose SIGTERM has come leave at a drained step (or at once after a step
 *     that left the ring drained); one whose SIGTERM comes a moment later - rank 0, the
 *     chief - goes on, fails its next step alone and stops outside a ring;
 *   - a member can finish a step that rank 0 and the chief failed (the ring broke in its
 *     last exchange: their all-gather missed a part, its own had all it needed) and stop
 *     after it, in a ring it does not know is broken.
 * A member holds the state after the last step it completed: the ring's, or one step more
 * when the ring broke in the middle of a step it finished (every member's batch is in it). */
static int saves_at_stop(const trainer *t) {
    if (t->ring && (t->rz.rank == 0 || t->r->is_chief)) return t->step > t->last_ckpt_step;
    char latest[DT__PATH_MAX];
    long long at;
    if (newest_checkpoint(t, latest, sizeof latest, &at)) {
        dt_err_clear(); /* an unreadable directory: try to save (it says why if it fails) */
        at = -1;
    }
    return t->step > at;
}

/* Asked to stop (SIGTERM: the job is stopped, or the node is being taken away), at a step
 * after which this member holds no unfinished shard: the state is saved (saves_at_stop),
 * then the shard in hand is reported done. The others of the ring keep the model and
 * re-form without this member; a replacement takes the state of rank 0 when it joins. A
 * member stopped while outside a ring (joining one) with a shard it has not started gives it
 * back as it is. */
static void stop_here(trainer *t) {
    dt__role *r = t->r;
    int sig = dt__stop_signal();
    int finished = t->have_shard && t->pos >= t->sh.count;
    /* before the report: a shard reported done is never trained again */
    take_write(t, 1); /* the newest checkpoint on disk, or its failure known */
    if (saves_at_stop(t)) dt__role_stop_checkpoint(r, &t->step, checkpoint_cb, t);
    dt__prefetch_quiet(&t->pf); /* a shard it fetched is held until this replica exits: re-queued */
    if (finished) {
        if (dt_shard_report(t->sc, DATASET, &t->sh, 1, NULL) == DT_ERR_STATE) dt_err_clear();
        t->have_shard = 0;
    }
    fprintf(r->log, "%s: stopped (%s) at step %lld%s\n", r->name, strsignal(sig),
            (long long)t->step,
            finished ? ", the shard in hand finished and reported"
            : t->have_shard ? ", outside a ring: the shard in hand goes back whole"
                            : "");
    fflush(r->log);
    leave_ring(t);
    r->stopped_by = sig;
}

dt_err dt__role_allreduce(dt__role *r) {
    trainer t = {.r = r, .t_start = dt__mono_s()};
    /* before setup starts any thread: they inherit the blocked signals */
    dt_err e = dt__stop_watch();
    if (!e) e = setup(&t);
    if (e) goto end;
    fprintf(r->log, "%s: all-reduce training%s from step %lld, listening on %s\n", r->name,
            r->is_chief ? " (chief)" : "", (long long)t.step, t.address);
    fflush(r->log);
    const char *lost = NULL;
    double t0 = 0;
    for (;;) {
        /* Asked to stop: where the ring has drained, or out of a ring with no shard half
         * trained. */
        if (dt__stop_signal() &&
            (t.clear || (!t.ring && !(t.have_shard && t.pos > 0 && t.pos < t.sh.count)))) {
            stop_here(&t);
            goto end;
        }
        if (!t.ring) {
            partial_shard = t.have_shard && t.pos > 0 && t.pos < t.sh.count;
            if ((e = join(&t, lost))) {
                if (!dt__stop_signal()) break;
                dt_err_clear(); /* asked to stop while waiting for a ring */
                e = DT_OK;
                stop_here(&t);
                goto end;
            }
            lost = NULL;
            if (t0 == 0) t0 = dt__mono_s();
        }
        int failed, end;
        if ((e = step(&t, &failed, &end))) break;
        if (end) break;
        if (failed) {
            t.draining = t.clear = 0;
            int fp = dt_ring_failed_peer(t.ring);
            lost = fp >= 0 && fp < t.rz.size ? t.rz.members[fp] : NULL;
            t.abandoned++;
            fprintf(r->log, "%s: step %lld abandoned: %s\n", r->name, (long long)t.step + 1,
                    t.comm_msg);
            fflush(r->log);
            leave_ring(&t);
        }
    }
    if (e) goto end;
    t.t_train = dt__mono_s() - t0;
    if (t.loss_n > 0) t.last_epoch_loss = t.loss_sum / (double)t.loss_n;
    t.epoch = r->spec->epochs;
    /* The final state, for the evaluator and for a chief restarted after this point. */
    /* rank 0 writes it; so does the chief (the same bits), which the master's end of the job
     * may not let a rank 0 still writing finish */
    if ((t.rz.rank == 0 || r->is_chief) && (e = dt__role_final_checkpoint(r, checkpoint_cb, &t)))
        goto end;
    dt__prefetch_quiet(&t.pf);
    if (t.have_shard) {
        dt_shard_report(t.sc, DATASET, &t.sh, 1, NULL);
        t.have_shard = 0;
    }
    json_t *res = json_pack(
        "{s:s, s:s, s:s, s:{s:I, s:I, s:I, s:I, s:f, s:f, s:f}, s:{s:I, s:I, s:I}}", "status",
        "Succeeded", "name", r->spec->name, "role", r->is_chief ? "chief" : "worker", "train",
        "steps", (json_int_t)t.step, "samples_applied", (json_int_t)t.applied, "samples",
        (json_int_t)t.samples, "batches",
        (json_int_t)t.batches, "samples_per_sec",
        t.t_train > 0 ? (double)t.samples / t.t_train : 0, "seconds", t.t_train, "loss",
        t.last_epoch_loss, "ring", "generations", (json_int_t)t.generations, "abandoned_steps",
        (json_int_t)t.abandoned, "last_size", (json_int_t)t.rz.size);
    if (res && r->is_chief &&
        (e = dt__role_chief_finish(r, t.model, t.train, t.eval, t.batch, &t.b, t.step, t.epoch,
                                   t.t_train, res))) {
        json_decref(res);
        goto end;
    }
    if (res) json_object_set_new(res, "wall_seconds", json_real(dt__mono_s() - t.t_start));
    e = dt__role_write_result(r, res);
end:
    if (e) dt__role_write_failure(r, e);
    teardown(&t);
    return e;
}

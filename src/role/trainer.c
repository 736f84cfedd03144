/*
 * trainer.c - worker-i and the chief: train on shards from the master against the PS.
 *
 * Design: a trainer holds a full copy of the model for computing gradients; the PS hold the
 * truth. Each batch is one push-pull per PS (the gradient goes out, the values after the
 * update come back), so a step costs one round trip. Which samples a trainer sees comes
 * from the master's shard service (dataset "training"): a trainer that dies loses nothing,
 * its shards go to the others, and a restarted one just asks for more.
 *
 * The chief also offers the initial values (its seeded initialization, or the newest
 * checkpoint of the whole model when restarted), checkpoints the whole model (asking every
 * PS to checkpoint its partition at the same moment) every training.checkpoint.every_steps
 * steps, every parameterServer.checkpointSeconds and when an epoch ends, and at the end
 * evaluates the final model, exports it and writes the job's training figures. A
 * checkpoint that fails (a full disk) stops nothing: the chief says why and tries again
 * after a backoff, training on meanwhile; the final one is retried for a while before the
 * chief gives up (dt__ckpt_retry, role.c).
 *
 * Stop and preemption: SIGTERM (the master stopping the job, or Kubernetes before it evicts
 * the pod) lets the shard in hand finish (at most minibatchesPerShard batches), reports it,
 * and the chief checkpoints; the process then exits 143 and its replacement asks for the
 * next shard. No batch is lost or trained twice.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"
#include "core/stop-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/ps.h"
#include "dtrain/shard.h"
#include "dtrain/threadpool.h"
#include "role/prefetch-impl.h"
#include "role/role-impl.h"
#include "train/train-impl.h"

#define DATASET "training"
#define PREFETCH_BATCHES 2 /* ask for the next shard when the one in hand ends within these */

typedef struct trainer {
    dt__role *r;
    dt_dataset *train, *eval;
    dt_pool *pool;
    dt_model *model;
    dt_param **params;
    int np;
    dt_ps_client *ps;
    dt_shard_client *sc;
    dt__batch_bufs b;
    int64_t batch;
    dt_rng rng;
    int64_t step;      /* the PS's optimizer steps after our last push (the global step) */
    int64_t epoch;     /* the epoch of the shard in hand */
    int64_t last_ckpt_step;
    double last_ckpt_time;
    dt__ckpt_retry ckpt_retry;  /* a failed checkpoint's next try */
    int64_t samples, batches;   /* this process's own */
    double loss_sum;            /* over the current epoch's batches */
    int64_t loss_n;
    double last_epoch_loss;
    double t_start, t_train;    /* t_train: from the first pull to the end of the data */
    dt__train_tb tb;            /* the chief's TensorBoard run "train" */
    dt_optim_conf oc;           /* the optimizer as the PS applies it (its learning rate) */
    int64_t tb_step;            /* the global step at the last dt__tb_step */
    dt__role_progress progress; /* posted to the master */
    dt__prefetch pf;            /* the next shard asked for while this one trains */
} trainer;

static dt_err setup(trainer *t) {
    dt__role *r = t->r;
    const dt_spec *s = r->spec;
    t->batch = s->batch_size;
    /* The spec's threads per trainer, one when unset: a job's parallelism is its replicas. */
    dt_err e = dt_pool_init(&t->pool, s->threads > 0 ? s->threads : 1);
    if (e) return e;
    if ((e = dt__role_model(r, t->batch, t->pool, &t->train, &t->eval, &t->model))) return e;
    if (!(t->params = dt__role_params(t->model, &t->np)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    dt_model_init_params(t->model, s->seed);
    dt_rng_seed2(&t->rng, s->seed, 0x64726f70u ^ ((uint64_t)r->type << 32) ^ (uint64_t)r->index);
    int64_t row = dt_dataset_row(t->train);
    int64_t tdim = t->train->target_dim > 0 ? t->train->target_dim : 1;
    t->b.x = malloc((size_t)(t->batch * row) * sizeof(float));
    t->b.y = malloc((size_t)t->batch * sizeof(int32_t));
    t->b.t = malloc((size_t)(t->batch * tdim) * sizeof(float));
    t->b.idx = malloc((size_t)t->batch * sizeof(int64_t));
    if (!t->b.x || !t->b.y || !t->b.t || !t->b.idx)
        return dt_err_set(DT_ERR_NOMEM, "out of memory for batch buffers");

    if (r->is_chief) {
        if ((e = dt__mkdirs(r->ckpt_dir))) return e;
        char latest[DT__PATH_MAX];
        e = dt_checkpoint_dir_latest(r->ckpt_dir, latest, sizeof latest);
        if (e == DT_OK) {
            dt_train_state st;
            if ((e = dt_checkpoint_load(latest, t->model, NULL, &st)))
                return dt_err_wrap(e, "resuming from %s", latest);
            fprintf(r->log, "%s: resuming from %s (step %lld)\n", r->name, latest,
                    (long long)st.step);
        } else if (e != DT_ERR_NOTFOUND) {
            return e;
        }
        dt_err_clear();
    }
    if (!r->token || !*r->token)
        return dt_err_set(DT_ERR_ARG, "DTRAIN_JOB_TOKEN is not set: the data plane needs the "
                                      "job's token");
    dt_ps_client_conf pc = {.addrs = (const char *const *)r->ps_addrs,
                            .nps = r->nps,
                            .token = r->token,
                            .replica = r->name,
                            .max_frame = r->job->ps.max_frame,
                            /* Every trainer gives a PS that lost its values (restarted without
                             * a checkpoint) the ones it pulled last; the first one wins. */
                            .offer_init = 1,
                            .no_shm = !r->job->ps.shared_memory,
                            .wire_dtype = (dt_ps_wire_dtype)r->job->ps.wire_dtype,
                            /* forward and backward work in the lane's segment */
                            .zero_copy = 1,
                            .log = r->log};
    if ((e = dt_ps_client_open(&t->ps, &pc, t->params, t->np))) return e;
    if (r->is_chief) {
        int taken = 0;
        if ((e = dt_ps_client_init(t->ps, &taken))) return e;
        fprintf(r->log, "%s: %d of %d parameter servers took the initial values\n", r->name,
                taken, r->nps);
    }
    if ((e = dt_ps_client_pull(t->ps, &t->step))) return e;
    t->last_ckpt_step = t->step;
    t->last_ckpt_time = dt__mono_s();
    if (r->is_chief) {
        t->oc = dt__role_optim(r, t->train->n);
        t->tb_step = t->step;
        dt__tb_open(&t->tb, s, r->job_dir, t->step, DT__TB_TRAIN, r->log);
    }

    /* a stop request ends a wait for a shard */
    dt_shard_client_opts so = {.cancel = dt__stop_signal};
    if ((e = dt_shard_client_open(&t->sc, &so))) return e;
    dt_dataset_spec ds;
    dt_dataset_spec_init(&ds);
    ds.name = DATASET;
    ds.dataset_size = t->train->n;
    ds.batch_size = t->batch;
    ds.num_epochs = s->epochs;
    ds.num_minibatches_per_shard = r->job->ps.minibatches_per_shard;
    ds.shuffle = s->shuffle;
    ds.seed = s->seed;
    if ((e = dt_shard_register(t->sc, &ds))) return e;
    return dt__prefetch_start(&t->pf, &ds, r->name, r->log);
}

static void teardown(trainer *t) {
    dt__tb_close(&t->tb);
    dt__prefetch_end(&t->pf);
    dt_shard_client_close(t->sc);
    dt_ps_client_close(t->ps);
    free(t->b.x);
    free(t->b.y);
    free(t->b.t);
    free(t->b.idx);
    free(t->params);
    dt_model_free(t->model);
    dt_pool_free(t->pool);
    dt_dataset_free(t->train);
    dt_dataset_free(t->eval);
}

/* The chief's checkpoint: every PS saves its partition (values and optimizer state), then
 * the whole model's values go to JOB_DIR/checkpoints/ckpt-<step>.safetensors for the
 * evaluator and for a restarted chief. The model holds the values of our last push-pull,
 * so pull first to include every other trainer's updates up to now. */
static dt_err checkpoint(trainer *t) {
    dt_err e;
    if ((e = dt_ps_client_save(t->ps)) || (e = dt_ps_client_pull(t->ps, &t->step))) return e;
    dt_train_state st = {.step = t->step, .epoch = t->epoch, .seed = t->r->spec->seed,
                         .rng = t->rng};
    if ((e = dt_checkpoint_dir_save(t->r->ckpt_dir, t->r->spec->checkpoint_keep, t->model, NULL,
                                    &st)))
        return e;
    t->last_ckpt_step = t->step;
    t->last_ckpt_time = dt__mono_s();
    return DT_OK;
}

/* A checkpoint; when it fails, the cause is said and the next try put off. */
static void checkpoint_or_defer(trainer *t) {
    dt__ckpt_retry_after(&t->ckpt_retry, t->r, t->step, checkpoint(t));
}

static dt_err checkpoint_cb(void *t) { return checkpoint(t); }

static int checkpoint_due(const trainer *t) {
    const dt__role *r = t->r;
    int retry = dt__ckpt_retry_due(&t->ckpt_retry);
    if (retry >= 0) return retry;
    int64_t every = r->spec->checkpoint_every_steps;
    if (every > 0 && t->step / every > t->last_ckpt_step / every) return 1;
    return r->job->ps.checkpoint_secs > 0 &&
           dt__mono_s() - t->last_ckpt_time >= (double)r->job->ps.checkpoint_secs;
}

static dt_err train_shard(trainer *t, const dt_shard *sh) {
    for (int64_t lo = 0; lo < sh->count; lo += t->batch) {
        int64_t nb = sh->count - lo < t->batch ? sh->count - lo : t->batch;
        dt_dataset_gather_on(t->pool, t->train, sh->indices + lo, nb, t->b.x, t->b.y, t->b.t);
        const dt_tensor *out;
        double loss;
        dt_err e = dt_model_forward(t->model, t->b.x, nb, 1, &t->rng, &out);
        if (!e)
            e = dt_model_loss(t->model, t->train->labels ? t->b.y : NULL,
                              t->train->targets ? t->b.t : NULL, &loss, NULL);
        if (e) return e;
        dt_model_backward(t->model);
        /* the next shard asked for now, fetched while this thread waits for the PS */
        if (sh->count - lo <= PREFETCH_BATCHES * t->batch && !dt__stop_signal())
            dt__prefetch_ask(&t->pf);
        if ((e = dt_ps_client_push_pull(t->ps, &t->step))) return e;
        t->samples += nb;
        t->batches++;
        t->loss_sum += loss * (double)nb;
        t->loss_n += nb;
        dt__role_progress_step(t->sc, &t->progress, t->step, t->epoch + 1, loss, t->samples);
        if (t->r->is_chief) {
            /* every global step since the last is a batch of some trainer's: the job's rate */
            int64_t d = t->step > t->tb_step ? t->step - t->tb_step : 0;
            dt__tb_step(&t->tb, t->step, loss, d * t->batch, &t->oc);
            t->tb_step = t->step;
        }
        if (t->r->is_chief && checkpoint_due(t)) checkpoint_or_defer(t);
    }
    return DT_OK;
}

/* A new epoch begins with this shard: close the last one's figures (and checkpoint). */
static void epoch_turn(trainer *t, int64_t epoch) {
    dt__role *r = t->r;
    if (t->loss_n > 0) {
        t->last_epoch_loss = t->loss_sum / (double)t->loss_n;
        fprintf(r->log, "%s: epoch %lld done here: %lld samples, loss %.4f, global step %lld\n",
                r->name, (long long)t->epoch + 1, (long long)t->loss_n, t->last_epoch_loss,
                (long long)t->step);
        fflush(r->log);
    }
    t->loss_sum = 0;
    t->loss_n = 0;
    if (r->is_chief && epoch > t->epoch) checkpoint_or_defer(t);
    t->epoch = epoch;
}

/* The end: the values after every trainer's last push, a final checkpoint, then the chief's
 * last duties (evaluate, export, figures). */
static dt_err finish(trainer *t, json_t *res) {
    dt__role *r = t->r;
    dt_err e = dt_ps_client_pull(t->ps, &t->step);
    if (e) return e;
    t->epoch = r->spec->epochs;
    if ((e = dt__role_final_checkpoint(r, checkpoint_cb, t))) return e;
    json_object_set_new(json_object_get(res, "train"), "steps", json_integer(t->step));
    return dt__role_chief_finish(r, t->model, t->train, t->eval, t->batch, &t->b, t->step,
                                 t->epoch, t->t_train, res);
}

/* A late report, refused (HTTP 409): the master re-queued the shard while this process
 * was silent (stopped, or cut off past the heartbeat timeout), and another trainer takes
 * it. It is dropped. */
static void dropped(trainer *t, const dt_shard *sh) {
    dt__shard_dropped(t->r->log, t->r->name, sh);
}

/* The next shard into sh, after reporting sh done when `report`: the prefetcher's when it
 * brought one (it then reports sh), else asked for here with sh's report in the same
 * request. A stop request ends a wait for one (*st is then DT_SHARD_FETCH_WAIT). */
static dt_err next_shard(trainer *t, dt_shard *sh, int report, dt_shard_fetch_status *st) {
    int got;
    dt_err e = dt__prefetch_take(&t->pf, sh, report, !dt__stop_signal(), &got);
    if (!e && got) {
        *st = DT_SHARD_FETCH_SHARD;
        return DT_OK;
    }
    dt_err_clear(); /* a prefetch that failed: asked again here, which says why if it fails */
    dt__prefetch_quiet(&t->pf); /* one request of this replica's at a time */
    e = report ? dt_shard_report_fetch(t->sc, DATASET, sh, 1, NULL, st)
               : dt_shard_fetch(t->sc, DATASET, sh, st);
    if (e == DT_ERR_STATE && report) {
        dropped(t, sh);
        e = dt_shard_fetch(t->sc, DATASET, sh, st);
    }
    return e;
}

/* Asked to stop (the job is stopped, or the node is being taken away): the shard just
 * trained (sh; NULL: none in hand) is reported, so that no other trainer does it again, and
 * the chief checkpoints the whole model; the PS keep the values (they save their partitions
 * when they are stopped in turn). A replacement goes on from there. */
static void stop_here(trainer *t, const dt_shard *sh) {
    dt__role *r = t->r;
    int sig = dt__stop_signal();
    dt__prefetch_quiet(&t->pf); /* a shard it fetched is held until this replica exits: re-queued */
    if (sh && dt_shard_report(t->sc, DATASET, sh, 1, NULL) == DT_ERR_STATE) dropped(t, sh);
    if (r->is_chief) dt__role_stop_checkpoint(r, &t->step, checkpoint_cb, t);
    fprintf(r->log, "%s: stopped (%s) at global step %lld after %lld samples here%s\n", r->name,
            strsignal(sig), (long long)t->step, (long long)t->samples,
            sh ? ", the shard in hand finished and reported" : "");
    fflush(r->log);
    r->stopped_by = sig;
}

dt_err dt__role_trainer(dt__role *r) {
    trainer t = {.r = r, .t_start = dt__mono_s()};
    dt_shard sh = {0};
    dt_shard_fetch_status st = DT_SHARD_FETCH_END;
    /* before setup starts any thread: they inherit the blocked signals */
    dt_err e = dt__stop_watch();
    if (!e) e = setup(&t);
    if (e) goto end;
    fprintf(r->log, "%s: training%s against %d parameter server%s from global step %lld\n",
            r->name, r->is_chief ? " (chief)" : "", r->nps, r->nps > 1 ? "s" : "",
            (long long)t.step);
    fflush(r->log);
    double t0 = dt__mono_s();
    if (!dt__stop_signal()) e = next_shard(&t, &sh, 0, &st);
    if (!e && st == DT_SHARD_FETCH_SHARD) t.epoch = sh.epoch;
    while (!e && st == DT_SHARD_FETCH_SHARD) {
        if (sh.epoch != t.epoch) epoch_turn(&t, sh.epoch);
        dt_err te = train_shard(&t, &sh);
        if (te) {
            /* Tell the master this shard failed (it re-queues it), then give up. */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", dt_errmsg());
            dt__prefetch_quiet(&t.pf); /* one request of this replica's at a time */
            dt_shard_report(t.sc, DATASET, &sh, 0, msg);
            e = dt_err_set(te, "%s", msg);
            break;
        }
        if (dt__stop_signal()) break;
        e = next_shard(&t, &sh, 1, &st);
    }
    if (e) goto end;
    if (dt__stop_signal()) {
        stop_here(&t, st == DT_SHARD_FETCH_SHARD ? &sh : NULL);
        goto end;
    }
    t.t_train = dt__mono_s() - t0;
    if (t.loss_n > 0) t.last_epoch_loss = t.loss_sum / (double)t.loss_n;
    json_t *res = json_pack("{s:s, s:s, s:s, s:{s:I, s:I, s:I, s:f, s:f, s:f}}", "status",
                            "Succeeded", "name", r->spec->name, "role",
                            r->is_chief ? "chief" : "worker", "train", "steps", (json_int_t)t.step,
                            "samples", (json_int_t)t.samples, "batches", (json_int_t)t.batches,
                            "samples_per_sec", t.t_train > 0 ? (double)t.samples / t.t_train : 0,
                            "seconds", t.t_train, "loss", t.last_epoch_loss);
    if (res && r->is_chief && (e = finish(&t, res))) {
        json_decref(res);
        goto end;
    }
    if (res) json_object_set_new(res, "wall_seconds", json_real(dt__mono_s() - t.t_start));
    e = dt__role_write_result(r, res);
end:
    if (e) dt__role_write_failure(r, e);
    dt_shard_free(&sh);
    teardown(&t);
    return e;
}

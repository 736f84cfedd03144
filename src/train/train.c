/*
 * train.c - the single-process training loop.
 *
 * Design: everything a step needs is allocated before the first step (the model's arena,
 * one batch buffer, the epoch's index order), so the loop itself never allocates. The
 * order of samples in an epoch is a pure function of (seed, epoch), and the only other
 * randomness (dropout) comes from state.rng, which checkpoints carry; with the model and
 * optimizer state that makes a resumed run continue exactly where the interrupted one was.
 *
 * A job dir that already holds a checkpoint is resumed from its newest one (as
 * TensorFlow's Estimator resumes from its model_dir).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "core/stop-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/data.h"
#include "dtrain/export.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"
#include "dtrain/threadpool.h"
#include "train/train-impl.h"

struct run {
    const dt_spec *spec;
    const dt_train_opts *opts;
    dt_dataset *train, *eval;
    dt_pool *pool;
    dt_model *model;
    dt_optim *optim;
    dt_optim_conf optim_conf; /* the spec's, with the schedule's length filled in */
    dt_train_state state;
    int64_t epochs, batch, steps_per_epoch;
    int threads;
    char ckpt_dir[DT__PATH_MAX];
    float *xbuf;
    int32_t *ybuf;
    float *tbuf;
    int64_t *order;
};

/* Build the model; on a shape error find the first layer that fails, so the message can
 * point at its line in the spec. */
dt_err dt__train_build_model(const dt_spec *s, const dt_shape *input, int64_t batch, dt_pool *pool,
                             dt_model **out) {
    dt_err e = dt_model_init(out, input, s->layers, s->nlayers, s->loss, batch, pool);
    if (e != DT_ERR_SHAPE && e != DT_ERR_SPEC) return e;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dt_errmsg());
    int bad = s->nlayers - 1;
    for (int n = 1; n < s->nlayers; n++) {
        dt_model *m = NULL;
        /* mse accepts any output shape, so only the layers themselves can fail here */
        dt_err e2 = dt_model_init(&m, input, s->layers, n, DT_LOSS_MSE, 1, NULL);
        dt_model_free(m);
        if (e2) {
            bad = n - 1;
            break;
        }
    }
    return dt_err_set(e, "%s:%d: spec.model.layers[%d]: %s", s->path, s->layers[bad].line, bad,
                      msg);
}

dt_err dt__train_input_shape(const dt_spec *s, const dt_dataset *train, dt_shape *input) {
    char a[64], b[64];
    *input = train->sample;
    if (s->input.ndim > 0) {
        if (dt_shape_numel(&s->input) != dt_dataset_row(train))
            return dt_err_set(DT_ERR_SHAPE,
                              "%s:%d: spec.model.input: %s does not match the data's samples %s",
                              s->path, s->input_line, dt_shape_str(&s->input, a, sizeof a),
                              dt_shape_str(&train->sample, b, sizeof b));
        *input = s->input; /* same size, the spec's layout (e.g. 784 as 28x28x1) */
    }
    return DT_OK;
}

dt_err dt__train_check_labels(const dt_spec *s, const dt_dataset *train, const dt_dataset *eval,
                              const dt_model *model) {
    const dt_shape *out = dt_model_output_shape(model);
    int64_t k = dt_shape_numel(out);
    if (s->loss == DT_LOSS_SOFTMAX_CROSS_ENTROPY) {
        if (!train->labels)
            return dt_err_set(DT_ERR_SPEC,
                              "%s: spec.loss: softmax_cross_entropy needs class labels, but the "
                              "data has numeric targets (use mse)",
                              s->path);
        int nc = train->num_classes > eval->num_classes ? train->num_classes : eval->num_classes;
        if (out->ndim != 1 || k < nc)
            return dt_err_set(DT_ERR_SHAPE,
                              "%s: spec.model.layers: the model outputs %lld values per sample "
                              "but the data has %d classes",
                              s->path, (long long)k, nc);
        if (s->num_class_names && s->num_class_names != k)
            return dt_err_set(DT_ERR_SPEC,
                              "%s:%d: spec.data.classes: %d names, but the model outputs %lld "
                              "classes",
                              s->path, s->classes_line, s->num_class_names, (long long)k);
        if (s->num_class_names && train->class_names)
            return dt_err_set(DT_ERR_SPEC,
                              "%s:%d: spec.data.classes: the data names its classes already "
                              "(CSV labels); leave this out",
                              s->path, s->classes_line);
    } else if (s->num_class_names) {
        return dt_err_set(DT_ERR_SPEC, "%s:%d: spec.data.classes: only for a classifier (loss "
                          "softmax_cross_entropy)", s->path, s->classes_line);
    } else {
        int64_t want = train->targets ? train->target_dim : train->num_classes;
        if (k != want)
            return dt_err_set(DT_ERR_SHAPE,
                              "%s: spec.model.layers: the model outputs %lld values per sample "
                              "but the mse targets have %lld",
                              s->path, (long long)k, (long long)want);
    }
    return DT_OK;
}

dt_err dt__train_evaluate(dt_model *model, const dt_dataset *d, int64_t batch,
                          const dt__batch_bufs *b, double *loss_out, double *acc_out) {
    double loss_sum = 0;
    int64_t correct_sum = 0;
    for (int64_t i = 0; i < d->n; i += batch) {
        int64_t nb = d->n - i < batch ? d->n - i : batch;
        for (int64_t j = 0; j < nb; j++)
            b->idx[j] = i + j;
        dt_dataset_gather(d, b->idx, nb, b->x, b->y, b->t);
        const dt_tensor *out;
        dt_err e = dt_model_forward(model, b->x, nb, 0, NULL, &out);
        if (e) return e;
        double loss;
        int64_t correct = 0;
        e = dt_model_loss(model, d->labels ? b->y : NULL, d->targets ? b->t : NULL, &loss,
                          &correct);
        if (e) return e;
        loss_sum += loss * (double)nb;
        correct_sum += correct;
    }
    *loss_out = d->n ? loss_sum / (double)d->n : 0;
    *acc_out = d->n ? (double)correct_sum / (double)d->n : 0;
    return DT_OK;
}

static dt_err save_checkpoint(struct run *r) {
    return dt_checkpoint_dir_save(r->ckpt_dir, r->spec->checkpoint_keep, r->model, r->optim,
                                  &r->state);
}

dt_err dt_train_check(const dt_spec *s) {
    dt_dataset *train = NULL, *eval = NULL;
    dt_model *model = NULL;
    dt_shape input;
    dt_err e = dt__train_load_data(s, s->seed, &train, &eval);
    if (!e) e = dt__train_input_shape(s, train, &input);
    if (!e) e = dt__train_build_model(s, &input, 1, NULL, &model);
    if (!e) e = dt__train_check_labels(s, train, eval, model);
    dt_model_free(model);
    dt_dataset_free(train);
    dt_dataset_free(eval);
    return e;
}

static dt_err setup(struct run *r, uint64_t seed) {
    const dt_spec *s = r->spec;
    dt_err e = dt__train_load_data(s, seed, &r->train, &r->eval);
    if (e) return e;
    r->steps_per_epoch = (r->train->n + r->batch - 1) / r->batch;
    dt_shape input;
    if ((e = dt__train_input_shape(s, r->train, &input))) return e;
    if ((e = dt_pool_init(&r->pool, r->threads))) return e;
    if ((e = dt__train_build_model(s, &input, r->batch, r->pool, &r->model))) return e;
    if ((e = dt__train_check_labels(s, r->train, r->eval, r->model))) return e;
    dt_model_init_params(r->model, seed);

    dt_optim_conf oc = s->optimizer;
    if (oc.schedule.kind == DT_SCHED_COSINE && oc.schedule.total_steps == 0)
        oc.schedule.total_steps = r->epochs * r->steps_per_epoch;
    int np = dt_model_num_params(r->model);
    dt_param **params = malloc((size_t)(np ? np : 1) * sizeof *params);
    if (!params) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < np; i++)
        params[i] = dt_model_param(r->model, i);
    r->optim_conf = oc;
    e = dt_optim_init(&r->optim, &oc, params, np);
    free(params);
    if (e) return dt_err_wrap(e, "%s: spec.optimizer", s->path);

    int64_t row = dt_dataset_row(r->train);
    int64_t nmax = r->train->n > r->eval->n ? r->train->n : r->eval->n;
    int64_t tdim = r->train->target_dim > 0 ? r->train->target_dim : 1;
    r->xbuf = malloc((size_t)(r->batch * row) * sizeof(float));
    r->ybuf = malloc((size_t)r->batch * sizeof(int32_t));
    r->tbuf = malloc((size_t)(r->batch * tdim) * sizeof(float));
    r->order = malloc((size_t)nmax * sizeof(int64_t));
    if (!r->xbuf || !r->ybuf || !r->tbuf || !r->order)
        return dt_err_set(DT_ERR_NOMEM, "out of memory for batch buffers");

    r->state = (dt_train_state){.seed = seed};
    dt_rng_seed2(&r->state.rng, seed, 0x64726f70 /* "drop" */);
    if ((e = dt__path(r->ckpt_dir, sizeof r->ckpt_dir, "%s/checkpoints", r->opts->job_dir)) ||
        (e = dt__mkdirs(r->ckpt_dir)))
        return e;
    char latest[DT__PATH_MAX];
    e = dt_checkpoint_dir_latest(r->ckpt_dir, latest, sizeof latest);
    if (e == DT_OK) {
        if ((e = dt_checkpoint_load(latest, r->model, r->optim, &r->state)))
            return dt_err_wrap(e, "resuming from %s", latest);
        if (r->state.seed != seed)
            return dt_err_set(DT_ERR_STATE,
                              "%s was written by a run with seed %llu, this run has seed %llu; "
                              "use another --job-dir or the same seed",
                              latest, (unsigned long long)r->state.seed, (unsigned long long)seed);
        fprintf(r->opts->log, "resuming from %s (step %lld, epoch %lld)\n", latest,
                (long long)r->state.step, (long long)r->state.epoch + 1);
    } else if (e != DT_ERR_NOTFOUND) {
        return e;
    }
    dt_err_clear();
    return DT_OK;
}

/* A finished run exports its model to JOB_DIR/export/<step>/ (include/dtrain/export.h). */
static dt_err export_final(struct run *r, char *dir, size_t len) {
    char base[DT__PATH_MAX];
    char *text = NULL;
    size_t tlen = 0;
    dt_err e = dt__path(base, sizeof base, "%s/export", r->opts->job_dir);
    if (!e) e = dt__read_file(r->spec->path, &text, &tlen);
    if (e) return dt_err_wrap(e, "export");
    dt_export_src src;
    dt__export_src_init(&src, r->spec, r->model, r->train, text, tlen, r->state.step,
                        r->state.epoch);
    e = dt_export_write(base, &src, DT_EXPORT_FORMAT_DTRAIN | DT_EXPORT_FORMAT_ONNX, dir, len);
    free(text);
    if (!e) fprintf(r->opts->log, "exported %s\n", dir);
    return e;
}

static void teardown(struct run *r) {
    free(r->xbuf);
    free(r->ybuf);
    free(r->tbuf);
    free(r->order);
    dt_optim_free(r->optim);
    dt_model_free(r->model);
    dt_pool_free(r->pool);
    dt_dataset_free(r->train);
    dt_dataset_free(r->eval);
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

dt_err dt_train_run(const dt_spec *spec, const dt_train_opts *opts_in, dt_train_result *res) {
    dt_train_opts opts = *opts_in;
    if (!opts.log) opts.log = stderr;
    struct run r = {.spec = spec, .opts = &opts};
    double t_start = dt__now();
    uint64_t seed = opts.has_seed ? opts.seed : spec->seed;
    r.epochs = opts.epochs > 0 ? opts.epochs : spec->epochs;
    r.batch = spec->batch_size;
    r.threads = opts.threads > 0 ? opts.threads : spec->threads > 0 ? spec->threads : online_cpus();
    memset(res, 0, sizeof *res);
    dt__train_tb tb = {0};

    /* The job dir leaves room for every path made in it (dt__tb_open cannot fail on one). */
    dt_err e = dt__path_room(opts.job_dir, DT__JOB_DIR_ROOM, "job dir");
    if (e || (e = dt__mkdirs(opts.job_dir))) return e;
    if ((e = setup(&r, seed))) goto end;

    dt__progress prog = {.out = opts.log,
                         .bar = opts.progress_bar,
                         .epochs = r.epochs,
                         .steps_per_epoch = r.steps_per_epoch};
    const dt__batch_bufs bufs = {.x = r.xbuf, .y = r.ybuf, .t = r.tbuf, .idx = r.order};
    double train_time = 0, last_epoch_loss = 0;
    int64_t samples_session = 0;
    int stopped = 0;
    double eval_loss = 0, eval_acc = 0;
    dt__tb_open(&tb, spec, opts.job_dir, r.state.step, DT__TB_TRAIN | DT__TB_EVAL, opts.log);
    while (r.state.epoch < r.epochs && !stopped) {
        int64_t epoch = r.state.epoch;
        double t0 = dt__now();
        dt_epoch_order(r.order, r.train->n, seed, epoch, spec->shuffle);
        dt__progress_epoch_start(&prog);
        dt__tb_resume(&tb);
        double loss_sum = 0;
        int64_t loss_n = 0;
        for (int64_t b = r.state.epoch_batch; b < r.steps_per_epoch; b++) {
            int64_t lo = b * r.batch;
            int64_t nb = r.train->n - lo < r.batch ? r.train->n - lo : r.batch;
            dt_dataset_gather_on(r.pool, r.train, r.order + lo, nb, r.xbuf, r.ybuf, r.tbuf);
            const dt_tensor *out;
            if ((e = dt_model_forward(r.model, r.xbuf, nb, 1, &r.state.rng, &out))) goto end;
            double loss;
            if ((e = dt_model_loss(r.model, r.train->labels ? r.ybuf : NULL,
                                   r.train->targets ? r.tbuf : NULL, &loss, NULL)))
                goto end;
            dt_model_backward(r.model);
            dt_optim_step(r.optim, r.pool);
            r.state.step++;
            r.state.epoch_batch = b + 1;
            samples_session += nb;
            loss_sum += loss * (double)nb;
            loss_n += nb;
            if (opts.loss_log) fprintf(opts.loss_log, "%lld %.9g\n", (long long)r.state.step, loss);
            dt__progress_step(&prog, epoch, b, nb, loss);
            dt__tb_step(&tb, r.state.step, loss, nb, &r.optim_conf);
            int at_max = opts.max_steps > 0 && r.state.step >= opts.max_steps;
            int asked = dt__stop_signal() != 0; /* a stop, or a preemption */
            if ((spec->checkpoint_every_steps > 0 &&
                 r.state.step % spec->checkpoint_every_steps == 0) ||
                at_max || asked) {
                if ((e = save_checkpoint(&r))) goto end;
            }
            if (at_max || asked) {
                stopped = 1;
                res->stopped_by = asked ? dt__stop_signal() : 0;
                break;
            }
        }
        train_time += dt__now() - t0;
        if (stopped) break;
        dt__tb_pause(&tb);
        last_epoch_loss = loss_n ? loss_sum / (double)loss_n : 0;
        if ((e = dt__train_evaluate(r.model, r.eval, r.batch, &bufs, &eval_loss, &eval_acc))) goto end;
        dt__tb_eval(&tb, r.state.step, eval_acc, eval_loss);
        r.state.epoch++;
        r.state.epoch_batch = 0;
        if ((e = save_checkpoint(&r))) goto end;
        dt__progress_epoch_end(&prog, epoch, last_epoch_loss, eval_loss, eval_acc, dt__now() - t0);
    }
    if (!stopped && samples_session == 0) {
        /* resumed a finished run: report its figures again */
        if ((e = dt__train_evaluate(r.model, r.eval, r.batch, &bufs, &eval_loss, &eval_acc))) goto end;
        dt__tb_eval(&tb, r.state.step, eval_acc, eval_loss);
        fprintf(opts.log, "all %lld epochs were already done\n", (long long)r.epochs);
    }
    res->eval_accuracy = eval_acc;
    res->eval_loss = eval_loss;
    res->train_loss = last_epoch_loss;
    res->steps = r.state.step;
    res->samples = samples_session;
    res->epochs_done = r.state.epoch;
    if (res->stopped_by)
        fprintf(opts.log, "stopped (%s) at step %lld: checkpoint written; the same job dir "
                          "continues from it\n",
                strsignal(res->stopped_by), (long long)r.state.step);
    if (!stopped && (e = export_final(&r, res->export_dir, sizeof res->export_dir))) goto end;
    res->samples_per_sec = train_time > 0 ? (double)samples_session / train_time : 0;
    res->wall_seconds = dt__now() - t_start;
    e = dt__write_result(opts.job_dir, stopped ? "Stopped" : "Succeeded", NULL, spec, res,
                         r.threads, seed);
end:
    dt__tb_close(&tb);
    if (e) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dt_errmsg());
        dt_train_result failed = *res;
        failed.wall_seconds = dt__now() - t_start;
        dt__write_result(opts.job_dir, "Failed", msg, spec, &failed, r.threads, seed);
        dt_err_set(e, "%s", msg); /* keep the original message */
    }
    teardown(&r);
    return e;
}

/*
 * summaries.c - what a training run tells TensorBoard (docs/TENSORBOARD.md): run "train"
 * gets loss (the mean over the last SUMMARY_EVERY steps), learning_rate, samples_per_sec and
 * step_time_ms; run "eval" gets accuracy and loss after each evaluation, at the step of the
 * weights evaluated. A summary that cannot be written never fails the training: the run
 * says why once, and goes on without them.
 */
#include <stdio.h>

#include "core/clock-impl.h"
#include "core/path-impl.h"
#include "dtrain/summary.h"
#include "train/train-impl.h"

#define SUMMARY_EVERY 10

static void off(dt__train_tb *tb) {
    fprintf(tb->log, "tensorboard: %s; no more summaries this run\n", dt_errmsg());
    dt_summary_close(tb->train);
    dt_summary_close(tb->eval);
    tb->train = tb->eval = NULL;
}

void dt__tb_open(dt__train_tb *tb, const dt_spec *s, const char *job_dir, int64_t start_step,
                 unsigned runs, FILE *log) {
    *tb = (dt__train_tb){.log = log,
                         .t0 = dt__mono_s(),
                         .last_point = start_step,
                         .last_eval = start_step};
    if (!s->tensorboard) return; /* training.tensorboard: false */
    /* fits: the job dir leaves DT__JOB_DIR_ROOM (dt_train_run, the roles check it), a
     * spec's logdir is at most DT_PATH_MAX */
    char base[DT__PATH_MAX], dir[DT__PATH_MAX];
    if ((s->logdir[0] ? dt__path(base, sizeof base, "%s", s->logdir)
                      : dt__path(base, sizeof base, "%s/tensorboard", job_dir)) ||
        dt__path(dir, sizeof dir, "%s/train", base))
        return off(tb);
    if ((runs & DT__TB_TRAIN) && dt_summary_open(&tb->train, dir, start_step)) return off(tb);
    if (dt__path(dir, sizeof dir, "%s/eval", base)) return off(tb);
    if ((runs & DT__TB_EVAL) && dt_summary_open(&tb->eval, dir, start_step)) return off(tb);
}

void dt__tb_step(dt__train_tb *tb, int64_t step, double loss, int64_t samples,
                 const dt_optim_conf *optim) {
    if (!tb->train) return;
    tb->loss_sum += loss;
    tb->samples += samples;
    tb->steps++;
    /* a point each time the step passes a multiple of SUMMARY_EVERY (a PS trainer's global
     * step moves by the other workers' pushes too); a step that went back (a PS restored to
     * its last save) waits until it is past the last point again */
    if (step / SUMMARY_EVERY <= tb->last_point / SUMMARY_EVERY) return;
    tb->last_point = step;
    double now = dt__mono_s(), dt = now - tb->t0;
    static const char *const tags[] = {"loss", "learning_rate", "samples_per_sec",
                                       "step_time_ms"};
    float v[] = {(float)(tb->loss_sum / (double)tb->steps), dt_optim_lr_at(optim, step - 1),
                 dt > 0 ? (float)((double)tb->samples / dt) : 0.0f,
                 (float)(dt * 1e3 / (double)tb->steps)};
    if (dt_summary_scalars(tb->train, step, 4, tags, v)) return off(tb);
    tb->loss_sum = 0;
    tb->samples = tb->steps = 0;
    tb->t0 = now;
}

void dt__tb_pause(dt__train_tb *tb) {
    tb->loss_sum = 0;
    tb->samples = tb->steps = 0;
}

void dt__tb_resume(dt__train_tb *tb) {
    tb->t0 = dt__mono_s();
}

void dt__tb_eval(dt__train_tb *tb, int64_t step, double accuracy, double loss) {
    if (!tb->eval || step < tb->last_eval) return; /* an older checkpoint: not a new point */
    tb->last_eval = step;
    static const char *const tags[] = {"accuracy", "loss"};
    float v[] = {(float)accuracy, (float)loss};
    if (dt_summary_scalars(tb->eval, step, 2, tags, v) || dt_summary_flush(tb->eval) ||
        (tb->train && dt_summary_flush(tb->train)))
        off(tb);
}

void dt__tb_close(dt__train_tb *tb) {
    dt_err e = dt_summary_close(tb->train);
    dt_err e2 = dt_summary_close(tb->eval);
    tb->train = tb->eval = NULL;
    if (e || e2) fprintf(tb->log, "tensorboard: %s\n", dt_errmsg());
}

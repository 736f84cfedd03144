/*
 * train.h - the single-process training loop behind `dtrain train`.
 *
 * dt_train_run loads the spec's data, builds the model, trains for the spec's epochs
 * (evaluating on the eval set after each), checkpoints into JOB_DIR/checkpoints/ and writes
 * JOB_DIR/result.json. A run whose job dir already holds a checkpoint resumes from it
 * exactly: same data order, same dropout masks, same loss curve as an uninterrupted run.
 */
#ifndef DTRAIN_TRAIN_H
#define DTRAIN_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "dtrain/err.h"
#include "dtrain/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_train_opts {
    const char *job_dir; /* required */
    int64_t epochs;      /* > 0 overrides the spec */
    int threads;         /* > 0 overrides the spec */
    int has_seed;
    uint64_t seed;     /* overrides the spec when has_seed */
    int64_t max_steps; /* > 0: stop after this many steps (tests of resume) */
    int progress_bar;  /* 1: redraw one line (a TTY); 0: plain lines */
    FILE *log;         /* progress output (stderr when NULL) */
    FILE *loss_log;    /* optional: one "step loss" line per step, %.9g */
} dt_train_opts;

typedef struct dt_train_result {
    double eval_accuracy, eval_loss;
    double train_loss; /* mean over the last epoch */
    int64_t steps, samples;
    double samples_per_sec, wall_seconds;
    int64_t epochs_done;
    int stopped_by; /* asked to stop (SIGTERM, SIGINT, when the caller watches for them:
                       src/core/stop-impl.h): the signal; a checkpoint of the last step is
                       written and a run on the same job dir continues from it */
    char export_dir[4096]; /* JOB_DIR/export/<step> when the run finished; "" otherwise */
} dt_train_result;

dt_err dt_train_run(const dt_spec *spec, const dt_train_opts *opts, dt_train_result *res);

/* What a trainer does before its first step that no restart can mend, done and undone:
 * load the spec's data (every file a regular readable one of the right format), take the
 * input shape, build the model, check the labels against its outputs. The error names the
 * spec's file and line. A job's master calls it before it launches anything. */
dt_err dt_train_check(const dt_spec *spec);

#ifdef __cplusplus
}
#endif
#endif

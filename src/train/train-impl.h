/* train-impl.h - the pieces of the training loop (one concern per file). */
#ifndef DTRAIN_TRAIN_IMPL_H
#define DTRAIN_TRAIN_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "dtrain/data.h"
#include "dtrain/spec.h"
#include "dtrain/train.h"

/* datasets.c: load the spec's train and eval sets (eval split off train when the spec has
 * none) and normalize both as the spec says (standard: statistics of the training set). */
dt_err dt__train_load_data(const dt_spec *spec, uint64_t seed, dt_dataset **train,
                           dt_dataset **eval);

/* progress.c: one line per update, or a redrawn bar on a TTY. */
typedef struct dt__progress {
    FILE *out;
    int bar;
    int64_t epochs, steps_per_epoch;
    double epoch_start, last_print;
    int64_t epoch_samples;
} dt__progress;

double dt__now(void); /* monotonic seconds */
void dt__progress_epoch_start(dt__progress *p);
void dt__progress_step(dt__progress *p, int64_t epoch, int64_t batch, int64_t samples, double loss);
void dt__progress_epoch_end(dt__progress *p, int64_t epoch, double train_loss, double eval_loss,
                            double eval_acc, double seconds);

/* result.c: write JOB_DIR/result.json atomically; message (may be NULL) says why it failed. */
dt_err dt__write_result(const char *job_dir, const char *status, const char *message,
                        const dt_spec *spec, const dt_train_result *res, int threads,
                        uint64_t seed);

#endif

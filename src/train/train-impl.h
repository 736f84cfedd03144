/* train-impl.h - the pieces of the training loop (one concern per file). */
#ifndef DTRAIN_TRAIN_IMPL_H
#define DTRAIN_TRAIN_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "dtrain/data.h"
#include "dtrain/nn.h"
#include "dtrain/threadpool.h"
#include "dtrain/spec.h"
#include "dtrain/train.h"

/* datasets.c: load the spec's train and eval sets (eval split off train when the spec has
 * none) and normalize both as the spec says (standard: statistics of the training set). */
dt_err dt__train_load_data(const dt_spec *spec, uint64_t seed, dt_dataset **train,
                           dt_dataset **eval);

/* train.c's pieces shared with the distributed roles (src/role/). */

/* The model's per-sample input shape: the spec's model.input (checked against the data's
 * sample size) or the data's own sample shape. */
dt_err dt__train_input_shape(const dt_spec *s, const dt_dataset *train, dt_shape *input);
/* The spec's model for batches of at most `batch`; shape errors name the layer's line. */
dt_err dt__train_build_model(const dt_spec *s, const dt_shape *input, int64_t batch, dt_pool *pool,
                             dt_model **out);
/* Does the model's output fit the data's labels or targets under the spec's loss? */
dt_err dt__train_check_labels(const dt_spec *s, const dt_dataset *train, const dt_dataset *eval,
                              const dt_model *model);
/* Batch buffers for `batch` samples: inputs, labels, targets, indices. */
typedef struct dt__batch_bufs {
    float *x;
    int32_t *y;
    float *t;
    int64_t *idx;
} dt__batch_bufs;
/* Mean loss and accuracy of the model over the whole of d. */
dt_err dt__train_evaluate(dt_model *model, const dt_dataset *d, int64_t batch,
                          const dt__batch_bufs *b, double *loss_out, double *acc_out);

/* An export of the model trained on `train` (its normalization, its or the spec's class
 * names) at step/epoch, with spec_text the spec file's bytes (export.c; include/dtrain/export.h). */
struct dt_export_src;
void dt__export_src_init(struct dt_export_src *src, const dt_spec *s, dt_model *model,
                         const dt_dataset *train, const char *spec_text, size_t spec_len,
                         int64_t step, int64_t epoch);

/* summaries.c: a run's TensorBoard runs "train" and "eval" under training.logdir, else
 * JOB_DIR/tensorboard (docs/TENSORBOARD.md). Never fails: a write error turns them off. */
typedef struct dt__train_tb {
    struct dt_summary *train, *eval;
    FILE *log;
    double t0, loss_sum;
    int64_t samples, steps, last_point, last_eval;
} dt__train_tb;
enum { DT__TB_TRAIN = 1, DT__TB_EVAL = 2 };
/* Open the runs asked for (a mask of DT__TB_*); start_step > 0: continuing from that step. */
void dt__tb_open(dt__train_tb *tb, const dt_spec *s, const char *job_dir, int64_t start_step,
                 unsigned runs, FILE *log);
/* One optimizer step done, the model now at `step`; a point each time step passes a
 * multiple of 10 (the loss, samples and time since the last point, and the learning rate
 * optim's schedule gave the last step, worked out only then). */
void dt__tb_step(dt__train_tb *tb, int64_t step, double loss, int64_t samples,
                 const dt_optim_conf *optim);
/* Between epochs (evaluation, checkpoints): the time is not the steps'. */
void dt__tb_pause(dt__train_tb *tb);
void dt__tb_resume(dt__train_tb *tb);
void dt__tb_eval(dt__train_tb *tb, int64_t step, double accuracy, double loss);
void dt__tb_close(dt__train_tb *tb);

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

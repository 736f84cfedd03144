/*
 * spec.h - the training spec: a YAML file that describes model, data and training.
 *
 * The spec is shaped like a Kubernetes object so that later it becomes a job spec by adding
 * replicas and a strategy under `spec:` (docs/SPEC.md has the full schema):
 *
 *   apiVersion: dtrain/v1
 *   kind: TrainJob
 *   metadata: {name: fashion-mnist-mlp}
 *   spec:
 *     seed: 1
 *     data: {train: {...}, eval: {...}, normalize: {...}, shuffle: true}
 *     model: {input: [28, 28, 1], layers: [...]}
 *     loss: softmax_cross_entropy
 *     optimizer: {type: adam, learning_rate: 0.001, schedule: {...}}
 *     training: {batch_size: 64, epochs: 10, threads: 2, checkpoint: {...}}
 *
 * Loading is strict: an unknown key, a value of the wrong type, a missing required field or
 * an out-of-range value gives DT_ERR_SPEC with one message "FILE:LINE: FIELD.PATH: what is
 * wrong" (e.g. "examples/x.yaml:14: spec.model.layers[2].units: expected a positive
 * integer, got 'ten'"). Shape errors that only the model can see are reported by the
 * trainer in the same form, using the layer's line.
 */
#ifndef DTRAIN_SPEC_H
#define DTRAIN_SPEC_H

#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"
#include "dtrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_PATH_MAX 1024

typedef enum dt_data_format {
    DT_DATA_IDX = 0, /* images + labels IDX files */
    DT_DATA_CSV,     /* one CSV file with a label column */
    DT_DATA_SYNTHETIC,
} dt_data_format;

typedef struct dt_data_source {
    dt_data_format format;
    char images[DT_PATH_MAX]; /* idx */
    char labels[DT_PATH_MAX]; /* idx */
    char path[DT_PATH_MAX];   /* csv */
    int label_column;         /* csv: 0-based, -1 = last (default) */
    int header;               /* csv: skip the first line */
    int64_t samples;          /* synthetic */
    dt_shape shape;           /* synthetic: per-sample shape */
    int num_classes;          /* synthetic */
    int line;                 /* where this source is in the spec */
} dt_data_source;

typedef enum dt_norm_kind {
    DT_NORM_NONE = 0,
    DT_NORM_SCALE,    /* x * scale + shift */
    DT_NORM_STANDARD, /* per-feature z-score with statistics of the training set */
    DT_NORM_MEAN_STD, /* (x * scale - mean) / std with given scalars */
} dt_norm_kind;

typedef struct dt_spec {
    char path[DT_PATH_MAX]; /* the file it was loaded from */
    char name[64];          /* metadata.name (DNS-1035 label) */
    uint64_t seed;          /* default 0 */

    dt_data_source train;
    int has_eval; /* 0: eval comes from a split of train */
    dt_data_source eval;
    double eval_fraction; /* used when !has_eval (default 0.2) */
    dt_norm_kind norm;
    float scale, shift; /* DT_NORM_SCALE, DT_NORM_MEAN_STD (scale default 1) */
    float mean, std;    /* DT_NORM_MEAN_STD */
    int shuffle;        /* default 1 */
    char **class_names; /* data.classes: names of the classes 0.., owned, or NULL */
    int num_class_names;
    int classes_line;

    dt_shape input;        /* per-sample input shape; ndim 0 = taken from the data */
    int input_line;        /* where model.input is in the spec (0: not given) */
    dt_layer_conf *layers; /* owned */
    int nlayers;
    dt_loss_kind loss;
    dt_optim_conf optimizer; /* defaults filled in */

    int64_t batch_size;             /* default 32 */
    int64_t epochs;                 /* default 1 */
    int threads;                    /* 0 = all online CPUs */
    int64_t checkpoint_every_steps; /* 0 = only at the end of each epoch */
    int checkpoint_keep;            /* default 3 */
    char logdir[DT_PATH_MAX];       /* training.logdir: TensorBoard runs (default JOB_DIR/tensorboard) */
    int tensorboard;                /* training.tensorboard: write event files (default 1) */
} dt_spec;

/* Load and validate a spec. Caller frees with dt_spec_free. */
dt_err dt_spec_load(dt_spec **out, const char *path);
/* The same from a string (path is used only in messages). */
dt_err dt_spec_parse(dt_spec **out, const char *yaml, size_t len, const char *path);
void dt_spec_free(dt_spec *spec);

#ifdef __cplusplus
}
#endif
#endif

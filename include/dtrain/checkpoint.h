/*
 * checkpoint.h - safetensors files and training checkpoints.
 *
 * Tensors are stored in the safetensors format so other tools can open them: an 8-byte
 * little-endian header length N, N bytes of JSON header
 *   {"__metadata__": {"k": "v", ...}, "<name>": {"dtype": "F32", "shape": [...],
 *    "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8, then the raw little-endian data. Files are written
 * atomically: to a temporary file in the same directory, fsync'ed, renamed over the target,
 * and the directory fsync'ed.
 *
 * A checkpoint is one such file holding the model's parameters (by parameter name), the
 * optimizer's slots ("optimizer/<slot name>") and, in the metadata, the training state:
 * format "dtrain-checkpoint", version, step, epoch, batch in epoch, seed, the RNG state and
 * the optimizer's step count. Reading checks every name, dtype, shape and offset; a file
 * that does not match the model is refused (DT_ERR_FORMAT naming the tensor) and leaves the
 * model and optimizer untouched.
 */
#ifndef DTRAIN_CHECKPOINT_H
#define DTRAIN_CHECKPOINT_H

#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"
#include "dtrain/rng.h"
#include "dtrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- safetensors ---- */

typedef struct dt_st_tensor {
    const char *name;
    const dt_tensor *t; /* written as F32 with t->shape */
} dt_st_tensor;

typedef struct dt_st_meta {
    const char *key;
    const char *value;
} dt_st_meta;

/* Write tensors and string metadata to path atomically. */
dt_err dt_safetensors_write(const char *path, const dt_st_tensor *tensors, int ntensors,
                            const dt_st_meta *meta, int nmeta);

typedef struct dt_safetensors dt_safetensors;

/* Read and validate a whole file (header JSON, F32 dtype only, offsets in bounds, contiguous
 * and non-overlapping). Caller frees with dt_safetensors_free. */
dt_err dt_safetensors_read(dt_safetensors **out, const char *path);
void dt_safetensors_free(dt_safetensors *st);
int dt_safetensors_count(const dt_safetensors *st);
/* The i-th tensor (in file order): name and a view of its data (owned by st). */
const char *dt_safetensors_name(const dt_safetensors *st, int i);
/* Find a tensor by name: *t views data owned by st. DT_ERR_NOTFOUND if absent. */
dt_err dt_safetensors_find(const dt_safetensors *st, const char *name, dt_tensor *t);
/* A metadata value, or NULL. */
const char *dt_safetensors_meta(const dt_safetensors *st, const char *key);

/* ---- training checkpoints ---- */

typedef struct dt_train_state {
    int64_t step;        /* optimizer steps done */
    int64_t epoch;       /* current epoch (0-based) */
    int64_t epoch_batch; /* batches of the current epoch already done */
    uint64_t seed;       /* the run's seed (shuffles derive from it) */
    dt_rng rng;          /* dropout and other in-step randomness */
    int64_t samples;     /* samples in all the steps done (all trainers'); 0: not kept */
} dt_train_state;

/* Save model parameters, optimizer slots (o may be NULL) and state to path atomically. */
dt_err dt_checkpoint_save(const char *path, dt_model *m, dt_optim *o, const dt_train_state *s);
/* Load into m (and o, s when non-NULL). All-or-nothing: on error nothing is changed. */
dt_err dt_checkpoint_load(const char *path, dt_model *m, dt_optim *o, dt_train_state *s);

/* Checkpoint directories: dir/ckpt-<step 10 digits>.safetensors. Save one and delete all but
 * the newest `keep` (keep <= 0 keeps all). */
dt_err dt_checkpoint_dir_save(const char *dir, int keep, dt_model *m, dt_optim *o,
                              const dt_train_state *s);
/* The newest checkpoint in dir into path (len bytes); DT_ERR_NOTFOUND when there is none. */
dt_err dt_checkpoint_dir_latest(const char *dir, char *path, size_t len);

#ifdef __cplusplus
}
#endif
#endif

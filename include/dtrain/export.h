/*
 * export.h - exported models: what a trainer leaves for serving, and how it is read back.
 *
 * An export is a base directory of integer-named versions, TF Serving's layout:
 *
 *   <base>/<version>/model.safetensors   the parameters (checkpoint layout, docs/CHECKPOINTS.md)
 *   <base>/<version>/spec.yaml           the spec that describes the model
 *   <base>/<version>/input.safetensors   the input contract: "scale" and "shift", each shaped
 *                                        as one sample; a model's input is raw features (the
 *                                        pixel values 0..255 of an IDX image) and it applies
 *                                        x * scale + shift itself; metadata "classes" (a JSON
 *                                        list of class names, when the data had names)
 *   <base>/<version>/model.onnx          the same model for ONNX Runtime (docs/SERVING.md)
 *
 * A version is written into a hidden temporary directory beside it and renamed into place, so
 * a reader never sees half of one. The version is the optimizer step of the weights.
 */
#ifndef DTRAIN_EXPORT_H
#define DTRAIN_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/nn.h"
#include "dtrain/spec.h"
#include "dtrain/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The input contract: normalized = raw * scale[i] + shift[i] for each of n features. */
typedef struct dt_input_norm {
    int64_t n;
    float *scale; /* n floats */
    float *shift; /* n floats */
} dt_input_norm;

/* The names the exported model's tensors go by (ONNX graph input/output, serving signature). */
#define DT_EXPORT_INPUT_NAME "input"
/* "probabilities" for a softmax-cross-entropy model (softmax applied), "output" otherwise */
const char *dt_export_output_name(const dt_model *m);

/* Write `model` as ONNX (IR 8, opset 17) to path atomically: input DT_EXPORT_INPUT_NAME of
 * shape [batch, <per-sample input shape>] (NHWC images, raw features when norm is given: the
 * normalization is folded into the graph), output dt_export_output_name() [batch, classes]
 * (softmax applied for a softmax-cross-entropy model). Dropout is left out (inference).
 * doc (may be NULL) goes into the model's doc_string. */
dt_err dt_onnx_write(const char *path, dt_model *model, const dt_input_norm *norm,
                     const char *doc);

enum { DT_EXPORT_FORMAT_DTRAIN = 1, DT_EXPORT_FORMAT_ONNX = 2 };

typedef struct dt_export_src {
    dt_model *model;
    dt_input_norm norm;            /* borrowed arrays; n == 0: identity */
    char *const *class_names;      /* num_classes names, or NULL */
    int num_classes;
    const char *spec_text;         /* the spec file's bytes */
    size_t spec_len;
    int64_t step, epoch;
    uint64_t seed;
} dt_export_src;

/* Write version `step` under base (created if missing) in the given formats (a mask of
 * DT_EXPORT_FORMAT_*); a version of that number already there is replaced. dir gets the
 * version's path. */
dt_err dt_export_write(const char *base, const dt_export_src *src, unsigned formats, char *dir,
                       size_t dirlen);

/* A loaded export version, ready for inference. */
typedef struct dt_exported {
    dt_spec *spec;
    dt_model *model; /* built for batches of at most max_batch */
    dt_input_norm norm;
    char **class_names; /* num_classes, or NULL */
    int num_classes;    /* output width for a classifier */
    int64_t version;
} dt_exported;

/* Load <dir> (a version directory) for batches of at most max_batch on pool (may be NULL).
 * Every file is checked; errors name the file. */
dt_err dt_export_load(const char *dir, int64_t max_batch, dt_pool *pool, dt_exported **out);
void dt_exported_free(dt_exported *e);

/* The normalization a loaded training set was given (identity when none), for an export. */
void dt_input_norm_free(dt_input_norm *n);

#ifdef __cplusplus
}
#endif
#endif

/*
 * nn.h - layers, losses and the model (a sequential stack of layers).
 *
 * Batches are NHWC (image layers) or {N, F} (dense). Per-sample shapes exclude the batch
 * dimension. Weight layouts follow Keras/TensorFlow so that exported tensors mean the same
 * thing elsewhere: dense kernel [in, out], conv2d kernel [kh, kw, in_channels, filters]
 * (HWIO), biases [out].
 *
 * A model is built once for a maximum batch size: a measure pass over the layers sizes a
 * single arena that holds every activation, gradient and scratch buffer, so a training step
 * allocates nothing. Parameters and their gradients live in the model too.
 *
 * Threading: the model runs its kernels on the dt_pool it was given (and single-threaded
 * BLAS calls inside them); one training loop drives a model at a time.
 */
#ifndef DTRAIN_NN_H
#define DTRAIN_NN_H

#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/rng.h"
#include "dtrain/tensor.h"
#include "dtrain/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_act {
    DT_ACT_NONE = 0,
    DT_ACT_RELU,
    DT_ACT_TANH,
    DT_ACT_SIGMOID,
    DT_ACT_SOFTMAX, /* over the last dimension */
} dt_act;

typedef enum dt_layer_kind {
    DT_LAYER_DENSE = 0,
    DT_LAYER_CONV2D,
    DT_LAYER_MAXPOOL2D,
    DT_LAYER_FLATTEN,
    DT_LAYER_DROPOUT,
    DT_LAYER_ACTIVATION, /* a standalone activation */
} dt_layer_kind;

typedef enum dt_padding { DT_PADDING_VALID = 0, DT_PADDING_SAME } dt_padding;

typedef enum dt_init {
    DT_INIT_DEFAULT = 0, /* glorot_uniform for kernels, zeros for biases */
    DT_INIT_GLOROT_UNIFORM,
    DT_INIT_GLOROT_NORMAL,
    DT_INIT_HE_UNIFORM,
    DT_INIT_HE_NORMAL,
    DT_INIT_ZEROS,
} dt_init;

typedef enum dt_loss_kind {
    DT_LOSS_SOFTMAX_CROSS_ENTROPY = 0, /* logits + integer labels */
    DT_LOSS_MSE,                       /* outputs vs targets (or one-hot labels) */
} dt_loss_kind;

/* One layer as a spec describes it. Zeroed fields take their defaults. */
typedef struct dt_layer_conf {
    dt_layer_kind kind;
    char name[32];     /* unique within the model; "" = "<kind>_<i>" */
    dt_act activation; /* dense, conv2d: fused; activation layer: the function */
    int64_t units;     /* dense */
    int64_t filters;   /* conv2d */
    int64_t kernel[2]; /* conv2d, maxpool2d: {h, w} */
    int64_t stride[2]; /* conv2d (default 1), maxpool2d (default = kernel) */
    dt_padding padding;
    float rate;  /* dropout: fraction of units dropped while training */
    int no_bias; /* dense, conv2d */
    dt_init kernel_init;
    dt_init bias_init;
    int line; /* line in the spec file, for error messages (0 = unknown) */
} dt_layer_conf;

/* A trainable tensor and its gradient, both owned by the model. */
typedef struct dt_param {
    char name[64]; /* "<layer>/kernel", "<layer>/bias" */
    dt_tensor value;
    dt_tensor grad;
    int decay; /* 1 when L2 weight decay applies (kernels), 0 for biases */
} dt_param;

typedef struct dt_model dt_model;

/* Build a model for per-sample input shape `input` and batches of at most max_batch.
 * Shape errors (a kernel larger than its input, dense on an unflattened image, ...) return
 * DT_ERR_SHAPE naming the layer by index and name. pool may be NULL (single thread); the
 * model does not own it. Parameters start at zero: call dt_model_init_params. */
dt_err dt_model_init(dt_model **out, const dt_shape *input, const dt_layer_conf *layers,
                     int nlayers, dt_loss_kind loss, int64_t max_batch, dt_pool *pool);
void dt_model_free(dt_model *m);

/* Initialize every parameter by its layer's initializers from a stream of seed. */
void dt_model_init_params(dt_model *m, uint64_t seed);

int dt_model_num_params(const dt_model *m);
dt_param *dt_model_param(dt_model *m, int i);
/* The parameter of that name, or NULL. */
dt_param *dt_model_find_param(dt_model *m, const char *name);
/* Total number of trainable scalars. */
int64_t dt_model_param_count(const dt_model *m);
const dt_shape *dt_model_input_shape(const dt_model *m);
const dt_shape *dt_model_output_shape(const dt_model *m);
int64_t dt_model_max_batch(const dt_model *m);
/* The layers, for exporters: layer i's config (its name filled in), per-sample input and
 * output shapes. Parameters are found by name ("<layer>/kernel", "<layer>/bias"). */
int dt_model_num_layers(const dt_model *m);
const dt_layer_conf *dt_model_layer_conf(const dt_model *m, int i);
const dt_shape *dt_model_layer_input(const dt_model *m, int i);
const dt_shape *dt_model_layer_output(const dt_model *m, int i);
dt_loss_kind dt_model_loss_kind(const dt_model *m);
/* A one-line-per-layer summary (name, kind, output shape, parameter count) into buf. */
void dt_model_summary(const dt_model *m, char *buf, size_t len);

/* Forward pass over x (batch * numel(input) floats). training=1 enables dropout, drawing
 * masks from rng. *out points at the model's output buffer {batch, ...}, valid until the next
 * call. For a softmax-cross-entropy model the output is the logits (a final softmax
 * activation, if the spec has one, is left to dt_model_predict). */
dt_err dt_model_forward(dt_model *m, const float *x, int64_t batch, int training, dt_rng *rng,
                        const dt_tensor **out);

/* Loss of the last forward pass against labels (classification) or targets (regression);
 * also writes the gradient of the mean loss w.r.t. the output into the model, ready for
 * dt_model_backward. *correct (may be NULL) gets the number of argmax hits (classification). */
dt_err dt_model_loss(dt_model *m, const int32_t *labels, const float *targets, double *loss,
                     int64_t *correct);

/* Multiply the gradient dt_model_loss writes (and so every gradient backward computes) by
 * s; 1 by default. s = the batch's size makes them the gradients of the summed loss: what a
 * data-parallel trainer sums over its members before dividing by the global batch. */
void dt_model_set_loss_grad_scale(dt_model *m, float s);

/* Have backward write parameter i's gradient into grads[i] (numel of the parameter floats,
 * the caller's, valid while bound; dt_model_param(m, i)->grad points there), so a trainer
 * sums the gradients where backward leaves them; grads NULL: the model's own buffers again. */
void dt_model_bind_grads(dt_model *m, float *const *grads);

/* Backward pass of the last forward/loss: overwrites every parameter's grad. It reads the
 * forward's x again, so x must stay valid until then. */
void dt_model_backward(dt_model *m);

/* Called by dt_model_backward, on its thread, right after each layer that has parameters is
 * done: from then on that layer's parameter gradients are final for this step (layers run
 * last to first). Lets a data-parallel trainer start sending the last layers' gradients while the first layers'
 * are still being computed. fn NULL: none. */
typedef void (*dt_backward_hook)(void *ctx, int layer);
void dt_model_set_backward_hook(dt_model *m, dt_backward_hook fn, void *ctx);
/* The index of the layer that owns parameter i (for dt_backward_hook). */
int dt_model_param_layer(const dt_model *m, int i);

/* Ask backward to also compute the gradient w.r.t. the model's input (off by default; costs
 * one more product in the first layer). For gradient checks and input attribution. */
void dt_model_want_input_grad(dt_model *m, int on);
/* The gradient of the loss w.r.t. the input of the last forward (batch * numel(input)
 * floats) as computed by the last backward, or NULL when not asked for. */
const float *dt_model_input_grad(const dt_model *m);

/* Inference: forward (training=0) and, for softmax-cross-entropy models, softmax of the
 * logits. out gets batch * numel(output) floats. batch may exceed max_batch (it runs in
 * chunks). Overwrites the model's activations: dt_model_loss needs a new forward after it. */
dt_err dt_model_predict(dt_model *m, const float *x, int64_t batch, float *out);

/* ---- losses as functions (used by the model; exposed for tests and other runtimes) ---- */

/* Mean softmax cross-entropy of logits {n, k} against labels; dlogits (may be NULL) gets the
 * gradient of the mean. Returns DT_ERR_ARG if a label is outside [0, k). */
dt_err dt_loss_softmax_cross_entropy(const float *logits, const int32_t *labels, int64_t n,
                                     int64_t k, double *loss, float *dlogits, int64_t *correct);
/* Mean over all n*k elements of (y - t)^2; dy (may be NULL) gets its gradient. */
void dt_loss_mse(const float *y, const float *t, int64_t n, int64_t k, double *loss, float *dy);

#ifdef __cplusplus
}
#endif
#endif

/*
 * layer-impl.h - the contract between the model and its layers.
 *
 * Each layer kind is a table of functions (dt__layer_ops) built with designated
 * initializers; the model dispatches through it and never switches on the kind. The model
 * owns all memory: at build time it asks each layer for its output shape, its parameters'
 * shapes and how many floats of per-step state and scratch it needs for a batch of
 * max_batch, and allocates all of it from one arena.
 *
 * Per-step buffers the model hands a layer (shapes include the batch dimension, batch <=
 * max_batch):
 *   x   the input {batch, in...}          y   the output {batch, out...}
 *   dy  the gradient w.r.t. y             dx  the gradient w.r.t. x; dx.data == NULL for
 *                                             the first layer, whose dx nobody needs
 *   state  state_floats(max_batch) floats kept from forward to backward (pool indices,
 *          dropout masks)
 *   scratch  scratch_floats(max_batch, the pool's threads) floats, free to clobber within
 *            one call
 * backward may overwrite dy (the model does not read it afterwards).
 * Parameter gradients are overwritten (not accumulated) by backward.
 */
#ifndef DTRAIN_LAYER_IMPL_H
#define DTRAIN_LAYER_IMPL_H

#include "dtrain/nn.h"

#define DT_LAYER_MAX_PARAMS 2
/* Layers that keep per-thread partial results in scratch (conv2d's weight gradient) size
 * it for at most this many threads; threads of a larger pool beyond it sit idle. */
#define DT_LAYER_MAX_THREADS 64

typedef struct dt__layer dt__layer;

typedef struct dt__layer_step {
    dt_pool *pool;
    int64_t batch;
    int training;
    dt_rng *rng; /* dropout masks (forward, training only) */
    dt_tensor x, y, dx, dy;
    float *state;
    float *scratch;
} dt__layer_step;

typedef struct dt__layer_ops {
    const char *kind; /* "dense", as in specs */
    /* Check the config against the per-sample input shape; set l->out and declare params
     * (l->nparams, l->params[i].value.shape, .decay, and the names' suffix "kernel"/"bias").
     * Shape errors: DT_ERR_SHAPE with a message naming what does not fit. */
    dt_err (*setup)(dt__layer *l);
    /* Floats of forward-to-backward state for a batch, and of scratch for a batch on a
     * pool of `threads`. NULL means 0. */
    int64_t (*state_floats)(const dt__layer *l, int64_t batch);
    int64_t (*scratch_floats)(const dt__layer *l, int64_t batch, int threads);
    void (*forward)(dt__layer *l, dt__layer_step *s);
    void (*backward)(dt__layer *l, dt__layer_step *s);
} dt__layer_ops;

struct dt__layer {
    const dt__layer_ops *ops;
    dt_layer_conf conf; /* name filled in */
    int index;          /* position in the model */
    dt_shape in, out;   /* per-sample */
    int nparams;
    dt_param params[DT_LAYER_MAX_PARAMS]; /* storage assigned by the model */
};

/* The ops of each kind (one .c file each). */
extern const dt__layer_ops dt__dense_ops;
extern const dt__layer_ops dt__conv2d_ops;
extern const dt__layer_ops dt__maxpool2d_ops;
extern const dt__layer_ops dt__flatten_ops;
extern const dt__layer_ops dt__dropout_ops;
extern const dt__layer_ops dt__activation_ops;

/* Activations (activation.c), shared by the fused dense/conv2d and the standalone layer.
 * Forward in place over rows of `cols` floats; backward turns dy into dz = dy * f'(.) in
 * place, using the activation's output y. Both split rows over the pool. */
void dt__act_forward(dt_pool *pool, dt_act act, float *y, int64_t rows, int64_t cols);
void dt__act_backward(dt_pool *pool, dt_act act, const float *y, float *dy, int64_t rows,
                      int64_t cols);

/* Initialize a tensor per an initializer with fan_in/fan_out (init.c). */
void dt__init_tensor(dt_tensor *t, dt_init init, int64_t fan_in, int64_t fan_out, dt_rng *rng);

#endif

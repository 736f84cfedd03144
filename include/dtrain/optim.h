/*
 * optim.h - optimizers and learning-rate schedules.
 *
 * An optimizer updates a set of parameters (a whole model, or the partition that one
 * parameter server holds) from their gradients. Its state (slots such as Adam's m and v, and
 * the step count) is exposed by name so that checkpoints can save and restore it exactly.
 *
 * L2 weight decay adds weight_decay * w to the gradient of every parameter whose `decay`
 * flag is set (kernels, not biases), before the update rule.
 *
 * Threading: dt_optim_step splits its element loops over the pool (which may be NULL).
 */
#ifndef DTRAIN_OPTIM_H
#define DTRAIN_OPTIM_H

#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/nn.h"
#include "dtrain/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_optim_kind {
    DT_OPTIM_SGD = 0,
    DT_OPTIM_MOMENTUM, /* v = mu*v + g; w -= lr*v  (nesterov: w -= lr*(g + mu*v)) */
    DT_OPTIM_ADAM,     /* bias-corrected, as in Kingma & Ba and PyTorch: m = b1*m + (1-b1)*g;
                        * v = b2*v + (1-b2)*g^2; w -= lr * m_hat / (sqrt(v_hat) + eps) with
                        * m_hat = m/(1-b1^t), v_hat = v/(1-b2^t), t = step + 1 (eps outside
                        * the root; Keras' default eps 1e-7) */
    DT_OPTIM_ADAGRAD,  /* a += g^2; w -= lr*g/(sqrt(a)+eps) */
} dt_optim_kind;

typedef enum dt_sched_kind {
    DT_SCHED_CONSTANT = 0,
    DT_SCHED_STEP,   /* lr * gamma^floor(step / step_size) */
    DT_SCHED_COSINE, /* min_lr + (lr-min_lr)*(1+cos(pi*min(step,total)/total))/2 */
} dt_sched_kind;

typedef struct dt_sched_conf {
    dt_sched_kind kind;
    int64_t step_size;   /* step */
    float gamma;         /* step (default 0.1) */
    int64_t total_steps; /* cosine; 0 = the whole training run (the trainer fills it in) */
    float min_lr;        /* cosine */
} dt_sched_conf;

typedef struct dt_optim_conf {
    dt_optim_kind kind;
    float learning_rate;
    float momentum;            /* momentum (default 0.9) */
    int nesterov;              /* momentum */
    float beta1;               /* adam (default 0.9) */
    float beta2;               /* adam (default 0.999) */
    float epsilon;             /* adam (default 1e-7, as Keras), adagrad (default 1e-7) */
    float initial_accumulator; /* adagrad (default 0.1, as Keras) */
    float weight_decay;        /* L2 coefficient (default 0) */
    dt_sched_conf schedule;
} dt_optim_conf;

/* Fill the defaults named above into the zero fields of conf (learning_rate: 0.01 for SGD and
 * momentum, 0.001 for Adam and Adagrad). */
void dt_optim_conf_defaults(dt_optim_conf *conf);

typedef struct dt_optim dt_optim;

/* An optimizer over params[0..n) (not owned; they must outlive it). Validates conf
 * (DT_ERR_ARG naming the field). */
dt_err dt_optim_init(dt_optim **out, const dt_optim_conf *conf, dt_param *const *params, int n);
void dt_optim_free(dt_optim *o);

/* The learning rate the schedule gives at a step. */
float dt_optim_lr_at(const dt_optim_conf *conf, int64_t step);

/* Apply one update from the params' grads; the step count then increments. */
void dt_optim_step(dt_optim *o, dt_pool *pool);
/* The same step from gradients elsewhere: grads[i] (as many floats as params[i]) times scale
 * stands for params[i]'s grad, read where it lies - a data-parallel trainer's reduced sums,
 * scaled to their mean, with no copy into the params' grads. */
void dt_optim_step_grads(dt_optim *o, dt_pool *pool, float *const *grads, float scale);
/* dt_optim_step_grads from two members' gradients summed as they are read: (grads[i] +
 * more[i]) times scale - an in-place all-reduce of two members (dt_ring_allreduce_pair),
 * whose sum is taken by each member's optimizer itself. The sum is the same float either
 * way round (a + b == b + a, bar NaNs' payloads), so both members step the same bits. */
void dt_optim_step_grads2(dt_optim *o, dt_pool *pool, float *const *grads,
                          const float *const *more, float scale);
/* dt_optim_step that also writes params[i]'s new values to copy[i] (as many floats), a
 * block at a time while it is in cache: what a PS sends back after a push, without a second
 * pass over the model. */
void dt_optim_step_copy(dt_optim *o, dt_pool *pool, float *const *copy);
/* A step taken now and applied a range at a time by the caller's thread, for callers that
 * run several steps at once one block apart (the PS's concurrent pushes). Taking it counts
 * it and fixes its learning rate and Adam's corrections; then every element of every
 * parameter must be applied once, and two steps' ranges of one element in the order taken. */
typedef struct dt_optim_taken {
    int64_t step; /* dt_optim_steps before it */
    float lr, adam_step_size, adam_inv_sqrt_bc2;
} dt_optim_taken;
void dt_optim_take_step(dt_optim *o, dt_optim_taken *k);
/* Param p's elements [lo, hi) of step k from grad (p's whole gradient: element 0 first); its
 * new values also go to copy (likewise p's whole layout) unless NULL. */
void dt_optim_apply_range(dt_optim *o, const dt_optim_taken *k, int p, int64_t lo, int64_t hi,
                          const float *grad, float *copy);
int64_t dt_optim_steps(const dt_optim *o);
void dt_optim_set_steps(dt_optim *o, int64_t steps);

/* Named state tensors, e.g. "dense_1/kernel/m" (owned by the optimizer). */
int dt_optim_num_slots(const dt_optim *o);
const char *dt_optim_slot_name(const dt_optim *o, int i);
dt_tensor *dt_optim_slot(dt_optim *o, int i);

#ifdef __cplusplus
}
#endif
#endif

/*
 * dropout.c - inverted dropout: while training, each unit is kept with probability 1 - rate
 * and scaled by 1 / (1 - rate); at inference the layer is the identity.
 *
 * Design: the mask (0 or the scale, one float per unit) is kept in the layer's state for
 * backward, which multiplies dy by the same mask. The mask is drawn in parallel yet
 * independently of the thread count: forward takes one 64-bit word from the step's rng and
 * derives from it a stream per sample (dt_rng_seed2(word, sample)). Each training forward
 * therefore advances the caller's rng by exactly one draw (none at rate 0, where the layer is
 * the identity), which keeps resumed runs exact.
 */
#include <string.h>

#include "core/assert-impl.h"
#include "nn/layer-impl.h"

static dt_err dropout_setup(dt__layer *l) {
    float rate = l->conf.rate;
    if (!(rate >= 0.0f && rate < 1.0f))
        return dt_err_set(DT_ERR_SPEC, "rate: must be in [0, 1), got %g", (double)rate);
    l->out = l->in;
    l->nparams = 0;
    return DT_OK;
}

static int64_t dropout_state_floats(const dt__layer *l, int64_t batch) {
    return batch * dt_shape_numel(&l->in);
}

struct dropout_job {
    const float *x;
    float *y, *mask;
    int64_t batch, row;
    uint64_t base;
    float rate, scale;
};

static void dropout_kernel(void *arg, int ith, int nth) {
    const struct dropout_job *j = arg;
    int64_t lo, hi;
    dt_split(j->batch, ith, nth, &lo, &hi);
    for (int64_t b = lo; b < hi; b++) {
        dt_rng r;
        dt_rng_seed2(&r, j->base, (uint64_t)b);
        const float *x = j->x + b * j->row;
        float *y = j->y + b * j->row, *m = j->mask + b * j->row;
        for (int64_t i = 0; i < j->row; i++) {
            m[i] = dt_rng_uniform(&r) >= j->rate ? j->scale : 0.0f;
            y[i] = x[i] * m[i];
        }
    }
}

struct mul_job {
    const float *a, *b;
    float *out;
    int64_t n;
};

static void mul_kernel(void *arg, int ith, int nth) {
    const struct mul_job *j = arg;
    int64_t lo, hi;
    dt_split(j->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        j->out[i] = j->a[i] * j->b[i];
}

static void dropout_forward(dt__layer *l, dt__layer_step *s) {
    int64_t n = dt_tensor_numel(&s->x);
    if (!s->training || l->conf.rate == 0.0f) {
        if (s->y.data != s->x.data) memcpy(s->y.data, s->x.data, (size_t)n * sizeof(float));
        return;
    }
    DT_ASSERT(s->rng != NULL);
    struct dropout_job j = {
        .x = s->x.data,
        .y = s->y.data,
        .mask = s->state,
        .batch = s->batch,
        .row = n / s->batch,
        .base = dt_rng_u64(s->rng),
        .rate = l->conf.rate,
        .scale = 1.0f / (1.0f - l->conf.rate),
    };
    if (n < 4096)
        dropout_kernel(&j, 0, 1);
    else
        dt_pool_run(s->pool, dropout_kernel, &j);
}

static void dropout_backward(dt__layer *l, dt__layer_step *s) {
    if (!s->dx.data) return;
    int64_t n = dt_tensor_numel(&s->dy);
    if (!s->training || l->conf.rate == 0.0f) {
        if (s->dx.data != s->dy.data) memcpy(s->dx.data, s->dy.data, (size_t)n * sizeof(float));
        return;
    }
    struct mul_job j = {.a = s->dy.data, .b = s->state, .out = s->dx.data, .n = n};
    if (n < 16384)
        mul_kernel(&j, 0, 1);
    else
        dt_pool_run(s->pool, mul_kernel, &j);
}

const dt__layer_ops dt__dropout_ops = {
    .kind = "dropout",
    .setup = dropout_setup,
    .state_floats = dropout_state_floats,
    .forward = dropout_forward,
    .backward = dropout_backward,
};

/*
 * activation.c - activation functions (relu, tanh, sigmoid, softmax), forward and backward,
 * and the standalone activation layer.
 *
 * Design: one single-threaded kernel per direction works on a block of rows (act-impl.h);
 * dense and conv2d call it on blocks they already hold in cache, and dt__act_forward /
 * dt__act_backward split rows over the pool for everyone else. Backward works from the
 * activation's output y (relu' = y > 0, tanh' = 1 - y^2, sigmoid' = y (1 - y), softmax's
 * Jacobian y_i (d_ij - y_j)), so no layer keeps its pre-activation. Softmax runs over the last
 * dimension with the row maximum subtracted, so large logits do not overflow.
 *
 * The standalone layer computes y = f(x) and dx = dy * f'(y) out of place, one pass each.
 * Every output element depends on its own row only, so results do not depend on the number
 * of threads.
 */
#include <math.h>
#include <string.h>

#include "core/assert-impl.h"
#include "nn/act-impl.h"

static const char *const act_names[] = {
    [DT_ACT_NONE] = "none",       [DT_ACT_RELU] = "relu",       [DT_ACT_TANH] = "tanh",
    [DT_ACT_SIGMOID] = "sigmoid", [DT_ACT_SOFTMAX] = "softmax",
};

const char *dt__act_name(dt_act act) {
    return dt__act_valid(act) ? act_names[act] : "?";
}

static void softmax_row(const float *x, float *y, int64_t n) {
    float mx = x[0];
    for (int64_t i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - mx);
        sum += y[i];
    }
    float inv = 1.0f / sum; /* sum >= 1: the maximum contributes exp(0) */
    for (int64_t i = 0; i < n; i++)
        y[i] *= inv;
}

void dt__act_forward_st(dt_act act, const float *x, float *y, int64_t rows, int64_t cols,
                        int64_t ld) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ld;
        float *yr = y + r * ld;
        switch (act) {
        case DT_ACT_NONE:
            if (xr != yr) memcpy(yr, xr, (size_t)cols * sizeof *yr);
            break;
        case DT_ACT_RELU:
            for (int64_t i = 0; i < cols; i++)
                yr[i] = xr[i] > 0.0f ? xr[i] : 0.0f;
            break;
        case DT_ACT_TANH:
            for (int64_t i = 0; i < cols; i++)
                yr[i] = tanhf(xr[i]);
            break;
        case DT_ACT_SIGMOID:
            for (int64_t i = 0; i < cols; i++)
                yr[i] = 1.0f / (1.0f + expf(-xr[i]));
            break;
        case DT_ACT_SOFTMAX:
            softmax_row(xr, yr, cols);
            break;
        default:
            DT_ASSERT(!"unknown activation");
        }
    }
}

void dt__act_backward_st(dt_act act, const float *y, const float *dy, float *dx, int64_t rows,
                         int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * ld;
        const float *gr = dy + r * ld;
        float *dr = dx + r * ld;
        switch (act) {
        case DT_ACT_NONE:
            if (gr != dr) memcpy(dr, gr, (size_t)cols * sizeof *dr);
            break;
        case DT_ACT_RELU:
            for (int64_t i = 0; i < cols; i++)
                dr[i] = yr[i] > 0.0f ? gr[i] : 0.0f;
            break;
        case DT_ACT_TANH:
            for (int64_t i = 0; i < cols; i++)
                dr[i] = gr[i] * (1.0f - yr[i] * yr[i]);
            break;
        case DT_ACT_SIGMOID:
            for (int64_t i = 0; i < cols; i++)
                dr[i] = gr[i] * yr[i] * (1.0f - yr[i]);
            break;
        case DT_ACT_SOFTMAX: {
            float dot = 0.0f;
            for (int64_t i = 0; i < cols; i++)
                dot += gr[i] * yr[i];
            for (int64_t i = 0; i < cols; i++)
                dr[i] = yr[i] * (gr[i] - dot);
            break;
        }
        default:
            DT_ASSERT(!"unknown activation");
        }
    }
}

/* ---- split over the pool ---- */

struct act_job {
    dt_act act;
    int backward;
    const float *x; /* forward input, or backward's y */
    const float *g; /* backward: dy */
    float *out;
    int64_t rows, cols;
};

static void act_kernel(void *arg, int ith, int nth) {
    const struct act_job *j = arg;
    int64_t lo, hi;
    dt_split(j->rows, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    int64_t off = lo * j->cols;
    if (j->backward)
        dt__act_backward_st(j->act, j->x + off, j->g + off, j->out + off, hi - lo, j->cols,
                            j->cols);
    else
        dt__act_forward_st(j->act, j->x + off, j->out + off, hi - lo, j->cols, j->cols);
}

static void act_run(dt_pool *pool, struct act_job *j) {
    /* transcendental functions cost ~10x a relu: split them sooner */
    int64_t work = j->rows * j->cols * (j->act == DT_ACT_RELU || j->act == DT_ACT_NONE ? 1 : 8);
    if (work < DT_ACT_PAR_MIN || j->rows < 2)
        act_kernel(j, 0, 1);
    else
        dt_pool_run(pool, act_kernel, j);
}

void dt__act_forward(dt_pool *pool, dt_act act, float *y, int64_t rows, int64_t cols) {
    if (act == DT_ACT_NONE) return;
    struct act_job j = {.act = act, .x = y, .out = y, .rows = rows, .cols = cols};
    act_run(pool, &j);
}

void dt__act_backward(dt_pool *pool, dt_act act, const float *y, float *dy, int64_t rows,
                      int64_t cols) {
    if (act == DT_ACT_NONE) return;
    struct act_job j = {
        .act = act, .backward = 1, .x = y, .g = dy, .out = dy, .rows = rows, .cols = cols};
    act_run(pool, &j);
}

/* ---- the standalone layer ---- */

static dt_err activation_setup(dt__layer *l) {
    if (!dt__act_valid(l->conf.activation))
        return dt_err_set(DT_ERR_SPEC, "activation: unknown function %d", (int)l->conf.activation);
    l->out = l->in;
    l->nparams = 0;
    return DT_OK;
}

/* Softmax runs over the last dimension; the others are elementwise, any row length works. */
static int64_t act_cols(const dt__layer *l) {
    return l->in.dim[l->in.ndim - 1];
}

static void activation_forward(dt__layer *l, dt__layer_step *s) {
    int64_t cols = act_cols(l);
    int64_t rows = dt_tensor_numel(&s->x) / cols;
    struct act_job j = {
        .act = l->conf.activation, .x = s->x.data, .out = s->y.data, .rows = rows, .cols = cols};
    act_run(s->pool, &j);
}

static void activation_backward(dt__layer *l, dt__layer_step *s) {
    if (!s->dx.data) return;
    int64_t cols = act_cols(l);
    int64_t rows = dt_tensor_numel(&s->y) / cols;
    struct act_job j = {.act = l->conf.activation,
                        .backward = 1,
                        .x = s->y.data,
                        .g = s->dy.data,
                        .out = s->dx.data,
                        .rows = rows,
                        .cols = cols};
    act_run(s->pool, &j);
}

const dt__layer_ops dt__activation_ops = {
    .kind = "activation",
    .setup = activation_setup,
    .forward = activation_forward,
    .backward = activation_backward,
};

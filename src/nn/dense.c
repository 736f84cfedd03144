/*
 * dense.c - the fully connected layer: y = f(x W + b), x {batch, in}, W [in, out] (as Keras
 * stores it), b [out].
 *
 * Design. Forward is one pool run: each thread multiplies its block of y with single-threaded
 * BLAS and, while the block is still in cache, adds the bias and applies the activation.
 * Blocks are 16-aligned column blocks when every thread gets at least MIN_COLS columns: a
 * thread then packs only its own columns of W, where with rows every thread packs all of W
 * (the Fashion-MNIST MLP's step ran 1.15x faster on 2 threads with columns, though
 * dt__gemm's rows win when W stays in cache, as in bench/gemm_ceiling). Otherwise rows when
 * every thread gets at least MIN_ROWS of them, and columns for what is left; a softmax over
 * column blocks, which needs whole rows, then runs as one more row-split pass.
 *
 * Backward is one pool run over column blocks plus one GEMM. Each thread owns a block of
 * output columns j0..j1 and, for its block only: turns dy into dz = dy * f'(y) in place, sums
 * dz over the rows into db (each column summed in row order by one thread, so db does not
 * depend on the thread count), and computes dW[:, j0:j1] = x^T dz[:, j0:j1]; none of that
 * needs another thread's columns, so no barrier is needed. dx = dz W^T then needs every
 * column and runs as a separate dt__gemm, only when the model asks for dx. Softmax's
 * Jacobian mixes a row's columns, so it is applied by a row-split pass first.
 *
 * Small layers (fewer than SMALL_WORK multiply-adds) run on the calling thread: waking the
 * pool would cost more than the work. No step allocates memory.
 */
#include <string.h>

#include "core/gemm-impl.h"
#include "nn/act-impl.h"

#define MIN_ROWS 32
#define MIN_COLS 64
#define COL_ALIGN 16
#define SMALL_WORK (64 * 64 * 64)

static dt_err dense_setup(dt__layer *l) {
    const dt_layer_conf *c = &l->conf;
    char buf[96];
    if (l->in.ndim != 1)
        return dt_err_set(DT_ERR_SHAPE, "expects a flat input, got %s; add a flatten layer",
                          dt_shape_str(&l->in, buf, sizeof buf));
    if (c->units <= 0 || c->units > INT32_MAX)
        return dt_err_set(DT_ERR_SPEC, "units: must be in [1, %d], got %lld", INT32_MAX,
                          (long long)c->units);
    if (!dt__act_valid(c->activation))
        return dt_err_set(DT_ERR_SPEC, "activation: unknown function %d", (int)c->activation);
    l->out = dt_shape_make(1, &c->units);
    dt_param *k = &l->params[0];
    k->value.shape = dt_shape_make(2, (int64_t[]){l->in.dim[0], c->units});
    k->decay = 1;
    strcpy(k->name, "kernel");
    l->nparams = 1;
    if (!c->no_bias) {
        dt_param *b = &l->params[1];
        b->value.shape = dt_shape_make(1, &c->units);
        b->decay = 0;
        strcpy(b->name, "bias");
        l->nparams = 2;
    }
    return DT_OK;
}

static void col_block(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t blocks = (n + COL_ALIGN - 1) / COL_ALIGN;
    dt_split(blocks, ith, nth, lo, hi);
    *lo *= COL_ALIGN;
    *hi = *hi * COL_ALIGN < n ? *hi * COL_ALIGN : n;
}

/* y[r][0..cols) = f(y + b) for `rows` rows `ld` apart; b may be NULL. */
static void bias_act(const float *b, dt_act act, float *y, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * ld;
        if (act == DT_ACT_RELU) {
            if (b)
                for (int64_t c = 0; c < cols; c++) {
                    float v = yr[c] + b[c];
                    yr[c] = v > 0.0f ? v : 0.0f;
                }
            else
                for (int64_t c = 0; c < cols; c++)
                    yr[c] = yr[c] > 0.0f ? yr[c] : 0.0f;
            continue;
        }
        if (b)
            for (int64_t c = 0; c < cols; c++)
                yr[c] += b[c];
        if (act != DT_ACT_NONE) dt__act_forward_st(act, yr, yr, 1, cols, cols);
    }
}

struct dense_fwd {
    const float *x, *w, *b;
    float *y;
    int64_t batch, in, out;
    dt_act act; /* applied by the kernel (elementwise only when split by columns) */
    int split_rows;
};

static void dense_fwd_kernel(void *arg, int ith, int nth) {
    const struct dense_fwd *j = arg;
    int64_t lo, hi;
    if (j->split_rows) {
        dt_split(j->batch, ith, nth, &lo, &hi);
        if (lo >= hi) return;
        float *y = j->y + lo * j->out;
        dt__gemm_st(0, 0, hi - lo, j->out, j->in, 1.0f, j->x + lo * j->in, j->in, j->w, j->out,
                    0.0f, y, j->out);
        bias_act(j->b, j->act, y, hi - lo, j->out, j->out);
    } else {
        col_block(j->out, ith, nth, &lo, &hi);
        if (lo >= hi) return;
        dt__gemm_st(0, 0, j->batch, hi - lo, j->in, 1.0f, j->x, j->in, j->w + lo, j->out, 0.0f,
                    j->y + lo, j->out);
        bias_act(j->b ? j->b + lo : NULL, j->act, j->y + lo, j->batch, hi - lo, j->out);
    }
}

static void dense_forward(dt__layer *l, dt__layer_step *s) {
    dt_act act = l->conf.activation;
    struct dense_fwd j = {
        .x = s->x.data,
        .w = l->params[0].value.data,
        .b = l->nparams > 1 ? l->params[1].value.data : NULL,
        .y = s->y.data,
        .batch = s->batch,
        .in = l->in.dim[0],
        .out = l->out.dim[0],
        .act = act,
        .split_rows = 1,
    };
    int nth = dt_pool_size(s->pool);
    dt__blas_init();
    if (nth == 1 || j.batch * j.in * j.out < SMALL_WORK) {
        dense_fwd_kernel(&j, 0, 1);
    } else if (j.out < (int64_t)nth * MIN_COLS && j.batch >= (int64_t)nth * MIN_ROWS) {
        dt_pool_run(s->pool, dense_fwd_kernel, &j);
    } else {
        j.split_rows = 0;
        if (!dt__act_elementwise(act)) j.act = DT_ACT_NONE;
        dt_pool_run(s->pool, dense_fwd_kernel, &j);
        if (!dt__act_elementwise(act)) dt__act_forward(s->pool, act, j.y, j.batch, j.out);
    }
}

struct dense_bwd {
    const float *x, *y;
    float *dz, *dw, *db;
    int64_t batch, in, out;
    dt_act act; /* elementwise, or NONE when dy already is dz */
};

static void dense_bwd_kernel(void *arg, int ith, int nth) {
    const struct dense_bwd *j = arg;
    int64_t lo, hi;
    col_block(j->out, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    int64_t w = hi - lo;
    float *db = j->db ? j->db + lo : NULL;
    if (db) memset(db, 0, (size_t)w * sizeof *db);
    if (j->act != DT_ACT_NONE || db) {
        for (int64_t r = 0; r < j->batch; r++) {
            float *g = j->dz + r * j->out + lo;
            if (j->act != DT_ACT_NONE)
                dt__act_backward_st(j->act, j->y + r * j->out + lo, g, g, 1, w, w);
            if (db)
                for (int64_t c = 0; c < w; c++)
                    db[c] += g[c];
        }
    }
    dt__gemm_st(1, 0, j->in, w, j->batch, 1.0f, j->x, j->in, j->dz + lo, j->out, 0.0f, j->dw + lo,
                j->out);
}

static void dense_backward(dt__layer *l, dt__layer_step *s) {
    dt_act act = l->conf.activation;
    int64_t in = l->in.dim[0], out = l->out.dim[0];
    if (!dt__act_elementwise(act)) {
        dt__act_backward(s->pool, act, s->y.data, s->dy.data, s->batch, out);
        act = DT_ACT_NONE;
    }
    struct dense_bwd j = {
        .x = s->x.data,
        .y = s->y.data,
        .dz = s->dy.data,
        .dw = l->params[0].grad.data,
        .db = l->nparams > 1 ? l->params[1].grad.data : NULL,
        .batch = s->batch,
        .in = in,
        .out = out,
        .act = act,
    };
    dt__blas_init();
    int small = dt_pool_size(s->pool) == 1 || s->batch * in * out < SMALL_WORK;
    if (small)
        dense_bwd_kernel(&j, 0, 1);
    else
        dt_pool_run(s->pool, dense_bwd_kernel, &j);
    if (!s->dx.data) return;
    const float *w = l->params[0].value.data;
    if (small)
        dt__gemm_st(0, 1, s->batch, in, out, 1.0f, j.dz, out, w, out, 0.0f, s->dx.data, in);
    else
        dt__gemm(s->pool, 0, 1, s->batch, in, out, 1.0f, j.dz, out, w, out, 0.0f, s->dx.data, in);
}

const dt__layer_ops dt__dense_ops = {
    .kind = "dense",
    .setup = dense_setup,
    .forward = dense_forward,
    .backward = dense_backward,
};

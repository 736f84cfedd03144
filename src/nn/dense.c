/*
 * dense.c - the fully connected layer: y = f(x W + b), x {batch, in}, W [in, out] (as Keras
 * stores it), b [out].
 *
 * Design. With more than one thread, a layer with at least MIN_K_ROWS inputs per thread is
 * split by the rows of W: thread t owns rows dt_split(in, t) - the rows the optimizer gives
 * it too (optim.c splits every parameter of two or more dimensions at its rows) - so W, dW
 * and the optimizer's slots of a row stay in the cache of the core that works on them (on a
 * 2-vCPU VM the column split below moved a third of them between the cores every step and
 * made 2 threads no faster than one; the row split ran the Fashion-MNIST MLP 1.45x faster).
 *   forward: two pool runs. Each thread multiplies its columns of x by its rows of W into a
 *   partial product (thread 0's is y itself, the others' live in scratch); then each thread
 *   adds the partials of its rows of y in thread order, the bias and the activation.
 *   backward: two pool runs. Each thread turns dy into dz = dy * f'(y) in place for a block
 *   of output columns and sums dz over the batch into db (each column summed in row order by
 *   one thread, so db does not depend on the thread count); then each computes its rows of
 *   dW = x^T dz and its columns of dx = dz W^T, both from its own rows of W.
 * The partial products take (threads - 1) x batch x out floats of scratch. Above PARTIAL_CAP
 * of them (the backward still by rows of W), and for layers with fewer inputs, the forward
 * splits y instead: 16-aligned column blocks when every thread gets at least MIN_COLS columns
 * (a thread packs only its columns of W), else rows of the batch when every thread gets at
 * least MIN_ROWS of them, and columns for what is left; a softmax over column blocks, which
 * needs whole rows, then runs as one more row-split pass. A layer with fewer inputs also
 * runs its backward as one pool run over column blocks (dz, db and dW[:, j0:j1] =
 * x^T dz[:, j0:j1], which need no other thread's columns) and dx = dz W^T as a separate
 * dt__gemm, only when the model asks for dx. Softmax's Jacobian mixes a row's columns, so it
 * is applied by a row-split pass first.
 *
 * Results depend on the thread count (the order of the partial sums), never on timing.
 * Small layers (fewer than SMALL_WORK multiply-adds) run on the calling thread: waking the
 * pool would cost more than the work. No step allocates memory.
 */
#include <string.h>

#include "core/gemm-impl.h"
#include "nn/act-impl.h"

#define MIN_ROWS 32
#define MIN_COLS 64
#define MIN_K_ROWS 64
#define COL_ALIGN 16
#define SMALL_WORK (64 * 64 * 64)
#define PARTIAL_CAP ((int64_t)1 << 20) /* floats of forward partial products (4 MiB) */

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

/* Split by the rows of W (see the design above)? */
static int rows_of_w(int64_t in, int nth) {
    return nth > 1 && in >= (int64_t)nth * MIN_K_ROWS;
}

/* ... and the forward's partial products fit in scratch */
static int partials_fit(int64_t batch, int64_t out, int nth) {
    return (int64_t)(nth - 1) * batch <= PARTIAL_CAP / out;
}

/* Sized for max_batch, so that any smaller batch that fits PARTIAL_CAP fits here too, and
 * for any pool of up to `threads` (a pool smaller than 2 x MIN_K_ROWS / in never splits). */
static int64_t dense_scratch_floats(const dt__layer *l, int64_t batch, int threads) {
    int64_t in = l->in.dim[0], out = l->out.dim[0];
    if (threads < 2 || !rows_of_w(in, 2)) return 0;
    return partials_fit(batch, out, threads) ? (int64_t)(threads - 1) * batch * out
                                             : PARTIAL_CAP;
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
    float *partial; /* split by rows of W: threads 1.. put their products here */
};

/* Split by rows of W, first run: x[:, lo:hi] W[lo:hi, :] into y (thread 0) or a partial. */
static void dense_fwd_product_kernel(void *arg, int ith, int nth) {
    const struct dense_fwd *j = arg;
    int64_t lo, hi;
    dt_split(j->in, ith, nth, &lo, &hi); /* never empty: in >= nth * MIN_K_ROWS */
    float *p = ith == 0 ? j->y : j->partial + (size_t)(ith - 1) * (size_t)(j->batch * j->out);
    dt__gemm_st(0, 0, j->batch, j->out, hi - lo, 1.0f, j->x + lo, j->in, j->w + lo * j->out,
                j->out, 0.0f, p, j->out);
}

/* Second run: rows of y = the products summed in thread order, then f(. + b). */
static void dense_fwd_sum_kernel(void *arg, int ith, int nth) {
    const struct dense_fwd *j = arg;
    int64_t lo, hi;
    dt_split(j->batch, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    float *y = j->y + lo * j->out;
    int64_t n = (hi - lo) * j->out;
    for (int t = 1; t < nth; t++) {
        const float *p = j->partial + (size_t)(t - 1) * (size_t)(j->batch * j->out) + lo * j->out;
        for (int64_t i = 0; i < n; i++)
            y[i] += p[i];
    }
    bias_act(j->b, j->act, y, hi - lo, j->out, j->out);
}

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
    } else if (rows_of_w(j.in, nth) && partials_fit(j.batch, j.out, nth)) {
        j.partial = s->scratch;
        dt_pool_run(s->pool, dense_fwd_product_kernel, &j);
        dt_pool_run(s->pool, dense_fwd_sum_kernel, &j);
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
    const float *x, *y, *w;
    float *dz, *dw, *db, *dx; /* dx NULL: not wanted */
    int64_t batch, in, out;
    dt_act act; /* elementwise, or NONE when dy already is dz */
};

/* Output columns [lo, hi): dz = dy * f'(y) in place, db = dz summed over the batch. */
static void dz_and_db(const struct dense_bwd *j, int64_t lo, int64_t hi) {
    int64_t w = hi - lo;
    float *db = j->db ? j->db + lo : NULL;
    if (db) memset(db, 0, (size_t)w * sizeof *db);
    if (j->act == DT_ACT_NONE && !db) return;
    for (int64_t r = 0; r < j->batch; r++) {
        float *g = j->dz + r * j->out + lo;
        if (j->act != DT_ACT_NONE)
            dt__act_backward_st(j->act, j->y + r * j->out + lo, g, g, 1, w, w);
        if (db)
            for (int64_t c = 0; c < w; c++)
                db[c] += g[c];
    }
}

/* Split by columns of y: dz, db and dW[:, lo:hi] of one column block. */
static void dense_bwd_kernel(void *arg, int ith, int nth) {
    const struct dense_bwd *j = arg;
    int64_t lo, hi;
    col_block(j->out, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    dz_and_db(j, lo, hi);
    dt__gemm_st(1, 0, j->in, hi - lo, j->batch, 1.0f, j->x, j->in, j->dz + lo, j->out, 0.0f,
                j->dw + lo, j->out);
}

/* Split by rows of W, first run: dz and db of a column block. */
static void dense_bwd_dz_kernel(void *arg, int ith, int nth) {
    const struct dense_bwd *j = arg;
    int64_t lo, hi;
    col_block(j->out, ith, nth, &lo, &hi);
    if (lo < hi) dz_and_db(j, lo, hi);
}

/* Second run: dW[lo:hi, :] = x[:, lo:hi]^T dz and dx[:, lo:hi] = dz W[lo:hi, :]^T. */
static void dense_bwd_rows_kernel(void *arg, int ith, int nth) {
    const struct dense_bwd *j = arg;
    int64_t lo, hi;
    dt_split(j->in, ith, nth, &lo, &hi); /* never empty: in >= nth * MIN_K_ROWS */
    dt__gemm_st(1, 0, hi - lo, j->out, j->batch, 1.0f, j->x + lo, j->in, j->dz, j->out, 0.0f,
                j->dw + lo * j->out, j->out);
    if (j->dx)
        dt__gemm_st(0, 1, j->batch, hi - lo, j->out, 1.0f, j->dz, j->out, j->w + lo * j->out,
                    j->out, 0.0f, j->dx + lo, j->in);
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
        .w = l->params[0].value.data,
        .dw = l->params[0].grad.data,
        .db = l->nparams > 1 ? l->params[1].grad.data : NULL,
        .dx = s->dx.data,
        .batch = s->batch,
        .in = in,
        .out = out,
        .act = act,
    };
    dt__blas_init();
    int nth = dt_pool_size(s->pool);
    int small = nth == 1 || s->batch * in * out < SMALL_WORK;
    if (!small && rows_of_w(in, nth)) {
        if (j.act != DT_ACT_NONE || j.db) dt_pool_run(s->pool, dense_bwd_dz_kernel, &j);
        dt_pool_run(s->pool, dense_bwd_rows_kernel, &j);
        return;
    }
    if (small)
        dense_bwd_kernel(&j, 0, 1);
    else
        dt_pool_run(s->pool, dense_bwd_kernel, &j);
    if (!j.dx) return;
    if (small)
        dt__gemm_st(0, 1, s->batch, in, out, 1.0f, j.dz, out, j.w, out, 0.0f, j.dx, in);
    else
        dt__gemm(s->pool, 0, 1, s->batch, in, out, 1.0f, j.dz, out, j.w, out, 0.0f, j.dx, in);
}

const dt__layer_ops dt__dense_ops = {
    .kind = "dense",
    .setup = dense_setup,
    .scratch_floats = dense_scratch_floats,
    .forward = dense_forward,
    .backward = dense_backward,
};

/*
 * conv2d.c - 2-D convolution over NHWC batches, as im2col + single-threaded GEMM per thread.
 *
 * Design: x is {N, H, W, C}, the kernel [kh, kw, C, F] (HWIO, so that it is already the
 * [K = kh*kw*C, F] matrix of an im2col product) and y {N, OH, OW, F}. The rows of y
 * (N*OH*OW of them, F wide) are the output pixels; row r of the column matrix holds the
 * kh x kw x C input patch of pixel r in kernel order, zeros where it hangs over the padding.
 * Then y = col * W + b, one GEMM.
 *
 * Work split: every pool thread takes its own whole samples (dt_split over the batch) and
 * walks their pixel rows in chunks: im2col of the chunk into the thread's column buffer,
 * the bias copied into the chunk's rows of y, one dt__gemm_st accumulating onto it, then
 * the fused activation while the tile is still in cache. Chunks may straddle samples. Keeping whole
 * samples per thread means dx (scatter-add of overlapping patches) needs no locking.
 *
 * Backward, per chunk: dy becomes dz = dy * act'(y) in place (allowed by the contract);
 * db += column sums of dz; im2col again (cheaper than keeping N*OH*OW*K floats of state)
 * and dW += col^T dz; then, unless this is the first layer (dx.data == NULL), dcol = dz W^T
 * into the same column buffer and col2im scatter-adds it into dx. dW and db need a sum over
 * all samples: thread 0 accumulates straight into the gradients, thread t > 0 into its own
 * partial in scratch, and a second pool pass adds the partials 1..n-1 in that fixed order
 * (so results are deterministic for a given thread count).
 *
 * A 1x1 kernel with stride 1 needs no im2col: x itself is the column matrix.
 *
 * Scratch (scratch_floats does not know the pool size): column buffers for COL_THREADS full
 * chunks, which a larger pool splits into smaller chunks, then one K * F + F partial sum per
 * thread beyond the first, for up to min(max_batch, DT_LAYER_MAX_THREADS) threads.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/assert-impl.h"
#include "core/gemm-impl.h"
#include "nn/layer-impl.h"
#include "nn/window-impl.h"

/* Target size of one thread's column buffer, in floats: large enough that each GEMM call
 * amortizes BLAS packing of the kernel and runs long. Not const so that tests can shrink it
 * to exercise chunk boundaries (set it before setup). */
int64_t dt__conv2d_col_floats = 192 * 1024;

/* Column buffers are sized in full for this many threads; a larger pool splits the same
 * budget into smaller chunks (scratch_floats does not know the pool size). */
#define COL_THREADS 4

typedef struct conv_geom {
    int64_t h, w, c;  /* input */
    int64_t kh, kw, f;
    int64_t sh, sw;
    int64_t oh, ow;   /* output */
    int64_t pt, pl;   /* padding before: top, left */
    int64_t k;        /* kh * kw * c */
    int64_t ohow;     /* output pixels per sample */
    int direct;       /* 1x1 kernel, stride 1: x is the column matrix */
} conv_geom;

static inline int64_t round_up16(int64_t n) {
    return (n + 15) & ~(int64_t)15;
}

static inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

static inline int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* Geometry of a layer whose setup succeeded. */
static void conv_geometry(const dt__layer *l, conv_geom *g) {
    const dt_layer_conf *c = &l->conf;
    g->h = l->in.dim[0];
    g->w = l->in.dim[1];
    g->c = l->in.dim[2];
    g->kh = c->kernel[0];
    g->kw = c->kernel[1];
    g->f = c->filters;
    g->sh = c->stride[0] ? c->stride[0] : 1;
    g->sw = c->stride[1] ? c->stride[1] : 1;
    int okh = dt__window_dim(g->h, g->kh, g->sh, c->padding, &g->oh, &g->pt);
    int okw = dt__window_dim(g->w, g->kw, g->sw, c->padding, &g->ow, &g->pl);
    DT_ASSERT(okh && okw);
    g->k = g->kh * g->kw * g->c;
    g->ohow = g->oh * g->ow;
    g->direct = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1;
}

/* Rows of one chunk at most. */
static int64_t chunk_cap(const conv_geom *g) {
    return max64(dt__conv2d_col_floats / g->k, 1);
}

/* Threads that can take samples of a batch. */
static int64_t slot_count(int64_t batch) {
    return min64(batch, DT_LAYER_MAX_THREADS);
}

/* Floats of column buffers for a batch, shared by the threads: room for COL_THREADS full
 * chunks (or the whole batch, if less) and at least one row per slot. Non-decreasing in
 * batch, so that a smaller batch fits in scratch sized for the largest. */
static int64_t col_budget(const conv_geom *g, int64_t batch) {
    if (g->direct) return 0;
    int64_t rows = min64(batch * g->ohow, COL_THREADS * chunk_cap(g));
    return max64(round_up16(rows * g->k), slot_count(batch) * round_up16(g->k));
}

/* Floats of one thread's dW and db partial sums. */
static int64_t partial_floats(const conv_geom *g) {
    return round_up16(g->k * g->f) + round_up16(g->f);
}

static dt_err conv_setup(dt__layer *l) {
    const dt_layer_conf *c = &l->conf;
    char buf[64];
    if (l->in.ndim != 3)
        return dt_err_set(DT_ERR_SHAPE,
                          "conv2d '%s': input %s is not 3-D per sample (height, width, "
                          "channels)",
                          c->name, dt_shape_str(&l->in, buf, sizeof buf));
    for (int i = 0; i < 3; i++)
        if (l->in.dim[i] <= 0)
            return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': input %s has an empty dimension",
                              c->name, dt_shape_str(&l->in, buf, sizeof buf));
    if (c->filters <= 0)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': filters must be positive, got %lld",
                          c->name, (long long)c->filters);
    if (c->kernel[0] <= 0 || c->kernel[1] <= 0)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': kernel must be positive, got %lldx%lld",
                          c->name, (long long)c->kernel[0], (long long)c->kernel[1]);
    if (c->stride[0] < 0 || c->stride[1] < 0)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': stride must be positive, got %lldx%lld",
                          c->name, (long long)c->stride[0], (long long)c->stride[1]);
    if (c->padding != DT_PADDING_VALID && c->padding != DT_PADDING_SAME)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': unknown padding %d", c->name,
                          (int)c->padding);
    if (c->padding == DT_PADDING_VALID &&
        (c->kernel[0] > l->in.dim[0] || c->kernel[1] > l->in.dim[1]))
        return dt_err_set(DT_ERR_SHAPE,
                          "conv2d '%s': kernel %lldx%lld is larger than the input %lldx%lld "
                          "with valid padding",
                          c->name, (long long)c->kernel[0], (long long)c->kernel[1],
                          (long long)l->in.dim[0], (long long)l->in.dim[1]);
    /* BLAS takes int dimensions: keep every per-sample extent well inside. */
    int64_t lim = INT_MAX / 4;
    if (c->kernel[0] > lim || c->kernel[1] > lim || c->filters > lim ||
        c->kernel[0] * c->kernel[1] > lim / l->in.dim[2] ||
        c->kernel[0] * c->kernel[1] * l->in.dim[2] > lim / c->filters ||
        dt_shape_numel(&l->in) > lim)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': kernel %lldx%lldx%lldx%lld is too large",
                          c->name, (long long)c->kernel[0], (long long)c->kernel[1],
                          (long long)l->in.dim[2], (long long)c->filters);
    conv_geom g;
    conv_geometry(l, &g);
    if (g.ohow > lim / g.f)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': output %lldx%lldx%lld is too large",
                          c->name, (long long)g.oh, (long long)g.ow, (long long)g.f);

    l->out = dt_shape_make(3, (int64_t[]){g.oh, g.ow, g.f});
    l->nparams = c->no_bias ? 1 : 2;
    dt_param *kp = &l->params[0];
    snprintf(kp->name, sizeof kp->name, "kernel");
    kp->value.shape = dt_shape_make(4, (int64_t[]){g.kh, g.kw, g.c, g.f});
    kp->decay = 1;
    if (!c->no_bias) {
        dt_param *bp = &l->params[1];
        snprintf(bp->name, sizeof bp->name, "bias");
        bp->value.shape = dt_shape_make(1, (int64_t[]){g.f});
        bp->decay = 0;
    }
    dt__blas_init();
    return DT_OK;
}

/* Scratch: [column buffers: col_budget] [partials of threads 1..slots-1] (thread 0 sums
 * straight into the gradients). */
static int64_t conv_scratch_floats(const dt__layer *l, int64_t batch) {
    if (batch <= 0) return 0;
    conv_geom g;
    conv_geometry(l, &g);
    return col_budget(&g, batch) + (slot_count(batch) - 1) * partial_floats(&g);
}

/* Rows [r, r + m) of the column matrix of x into col (m x K, row-major). */
static void im2col(const conv_geom *g, const float *x, int64_t r, int64_t m, float *col) {
    const int64_t c = g->c, kwc = g->kw * g->c, sample = g->h * g->w * g->c;
    int64_t n = r / g->ohow, p = r % g->ohow;
    int64_t oh = p / g->ow, ow = p % g->ow;
    for (int64_t i = 0; i < m; i++) {
        const float *xs = x + n * sample;
        float *dst = col + i * g->k;
        int64_t ih0 = oh * g->sh - g->pt, iw0 = ow * g->sw - g->pl;
        int64_t kj0 = max64(0, -iw0), kj1 = min64(g->kw, g->w - iw0);
        for (int64_t ki = 0; ki < g->kh; ki++, dst += kwc) {
            int64_t ih = ih0 + ki;
            if (ih < 0 || ih >= g->h || kj0 >= kj1) {
                memset(dst, 0, (size_t)kwc * sizeof *dst);
                continue;
            }
            if (kj0 > 0) memset(dst, 0, (size_t)(kj0 * c) * sizeof *dst);
            const float *src = xs + (ih * g->w + iw0 + kj0) * c;
            int64_t len = (kj1 - kj0) * c;
            float *d = dst + kj0 * c;
            if (len <= 8)
                for (int64_t j = 0; j < len; j++) d[j] = src[j];
            else
                memcpy(d, src, (size_t)len * sizeof *d);
            if (kj1 < g->kw) memset(dst + kj1 * c, 0, (size_t)((g->kw - kj1) * c) * sizeof *dst);
        }
        if (++ow == g->ow) {
            ow = 0;
            if (++oh == g->oh) {
                oh = 0;
                n++;
            }
        }
    }
}

/* Scatter-add rows [r, r + m) of a column-matrix gradient into dx (inverse of im2col). */
static void col2im(const conv_geom *g, const float *col, int64_t r, int64_t m, float *dx) {
    const int64_t c = g->c, kwc = g->kw * g->c, sample = g->h * g->w * g->c;
    int64_t n = r / g->ohow, p = r % g->ohow;
    int64_t oh = p / g->ow, ow = p % g->ow;
    for (int64_t i = 0; i < m; i++) {
        float *xs = dx + n * sample;
        const float *src = col + i * g->k;
        int64_t ih0 = oh * g->sh - g->pt, iw0 = ow * g->sw - g->pl;
        int64_t kj0 = max64(0, -iw0), kj1 = min64(g->kw, g->w - iw0);
        if (kj0 < kj1)
            for (int64_t ki = 0; ki < g->kh; ki++, src += kwc) {
                int64_t ih = ih0 + ki;
                if (ih < 0 || ih >= g->h) continue;
                float *d = xs + (ih * g->w + iw0 + kj0) * c;
                const float *s = src + kj0 * c;
                int64_t len = (kj1 - kj0) * c;
                for (int64_t j = 0; j < len; j++) d[j] += s[j];
            }
        if (++ow == g->ow) {
            ow = 0;
            if (++oh == g->oh) {
                oh = 0;
                n++;
            }
        }
    }
}

struct conv_job {
    const dt__layer *l;
    const dt__layer_step *s;
    conv_geom g;
    int nslots;      /* threads taking samples: min(pool size, batch, max threads) */
    int64_t rows;    /* rows per chunk */
    int64_t col;     /* floats of one thread's column buffer */
    float *partials; /* partial sums of thread t >= 1 at partials + (t - 1) * partial */
    int64_t partial;
};

static void conv_job_init(struct conv_job *j, const dt__layer *l, const dt__layer_step *s) {
    j->l = l;
    j->s = s;
    conv_geometry(l, &j->g);
    j->nslots = (int)min64(min64(dt_pool_size(s->pool), s->batch), DT_LAYER_MAX_THREADS);
    /* Scratch was sized for the model's max batch; every size below is non-decreasing in
     * batch, so a smaller batch fits. */
    int64_t budget = col_budget(&j->g, s->batch);
    j->col = j->nslots ? budget / j->nslots / 16 * 16 : 0;
    j->rows = j->g.direct ? chunk_cap(&j->g) : min64(j->col / j->g.k, chunk_cap(&j->g));
    j->partials = s->scratch + budget;
    j->partial = partial_floats(&j->g);
}

static void conv_forward_kernel(void *arg, int ith, int nth) {
    const struct conv_job *j = arg;
    const conv_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const dt__layer *l = j->l;
    (void)nth;
    if (ith >= j->nslots) return;
    int64_t n0, n1;
    dt_split(s->batch, ith, j->nslots, &n0, &n1);
    const float *w = l->params[0].value.data;
    const float *b = l->nparams > 1 ? l->params[1].value.data : NULL;
    float *col = s->scratch + ith * j->col;
    const int64_t f = g->f, r1 = n1 * g->ohow;
    for (int64_t r = n0 * g->ohow; r < r1; r += j->rows) {
        int64_t m = min64(j->rows, r1 - r);
        float *y = s->y.data + r * f;
        const float *a = col;
        if (g->direct)
            a = s->x.data + r * g->c;
        else
            im2col(g, s->x.data, r, m, col);
        /* the bias goes in first, so that the GEMM accumulates onto it (beta = 1) */
        if (b)
            for (int64_t i = 0; i < m; i++) memcpy(y + i * f, b, (size_t)f * sizeof *y);
        dt__gemm_st(0, 0, m, f, g->k, 1.0f, a, g->k, w, f, b ? 1.0f : 0.0f, y, f);
        if (l->conf.activation != DT_ACT_NONE) dt__act_forward(NULL, l->conf.activation, y, m, f);
    }
}

static void conv_forward(dt__layer *l, dt__layer_step *s) {
    struct conv_job j;
    conv_job_init(&j, l, s);
    dt__blas_init();
    dt_pool_run(s->pool, conv_forward_kernel, &j);
}

static void conv_backward_kernel(void *arg, int ith, int nth) {
    const struct conv_job *j = arg;
    const conv_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const dt__layer *l = j->l;
    if (ith >= j->nslots) return;
    int64_t n0, n1;
    dt_split(s->batch, ith, j->nslots, &n0, &n1);
    const float *w = l->params[0].value.data;
    float *col = s->scratch + ith * j->col;
    float *part = ith > 0 ? j->partials + (ith - 1) * j->partial : NULL;
    float *dw = ith == 0 ? l->params[0].grad.data : part;
    float *db = l->nparams < 2 ? NULL
                : ith == 0     ? l->params[1].grad.data
                               : part + round_up16(g->k * g->f);
    const int64_t f = g->f, k = g->k, r0 = n0 * g->ohow, r1 = n1 * g->ohow;
    const int64_t sample = g->h * g->w * g->c;
    float *dx = s->dx.data;
    if (dx && !g->direct) memset(dx + n0 * sample, 0, (size_t)((n1 - n0) * sample) * sizeof *dx);
    if (db) memset(db, 0, (size_t)f * sizeof *db);
    for (int64_t r = r0; r < r1; r += j->rows) {
        int64_t m = min64(j->rows, r1 - r);
        float *dz = s->dy.data + r * f;
        if (l->conf.activation != DT_ACT_NONE)
            dt__act_backward(NULL, l->conf.activation, s->y.data + r * f, dz, m, f);
        if (db)
            for (int64_t i = 0; i < m; i++)
                for (int64_t o = 0; o < f; o++) db[o] += dz[i * f + o];
        const float *a = col;
        if (g->direct)
            a = s->x.data + r * g->c;
        else
            im2col(g, s->x.data, r, m, col);
        dt__gemm_st(1, 0, k, f, m, 1.0f, a, k, dz, f, r == r0 ? 0.0f : 1.0f, dw, f);
        if (!dx) continue;
        if (g->direct) {
            dt__gemm_st(0, 1, m, k, f, 1.0f, dz, f, w, f, 0.0f, dx + r * g->c, k);
        } else {
            dt__gemm_st(0, 1, m, k, f, 1.0f, dz, f, w, f, 0.0f, col, k);
            col2im(g, col, r, m, dx);
        }
    }
}

/* grad[i] += partial_1[i] + ... + partial_{n-1}[i], in that order, split over the pool. */
static void conv_reduce_kernel(void *arg, int ith, int nth) {
    const struct conv_job *j = arg;
    const dt__layer *l = j->l;
    const conv_geom *g = &j->g;
    for (int p = 0; p < l->nparams; p++) {
        int64_t len = p == 0 ? g->k * g->f : g->f;
        int64_t off = p == 0 ? 0 : round_up16(g->k * g->f);
        float *grad = l->params[p].grad.data;
        int64_t lo, hi;
        dt_split(len, ith, nth, &lo, &hi);
        for (int t = 1; t < j->nslots; t++) {
            const float *part = j->partials + (t - 1) * j->partial + off;
            for (int64_t i = lo; i < hi; i++) grad[i] += part[i];
        }
    }
}

static void conv_backward(dt__layer *l, dt__layer_step *s) {
    struct conv_job j;
    conv_job_init(&j, l, s);
    if (j.nslots == 0) { /* an empty batch: zero gradients */
        for (int p = 0; p < l->nparams; p++)
            memset(l->params[p].grad.data, 0,
                   (size_t)dt_tensor_numel(&l->params[p].value) * sizeof(float));
        return;
    }
    dt__blas_init();
    dt_pool_run(s->pool, conv_backward_kernel, &j);
    if (j.nslots > 1) dt_pool_run(s->pool, conv_reduce_kernel, &j);
}

const dt__layer_ops dt__conv2d_ops = {
    .kind = "conv2d",
    .setup = conv_setup,
    .scratch_floats = conv_scratch_floats,
    .forward = conv_forward,
    .backward = conv_backward,
};

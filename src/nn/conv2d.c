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

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_SMALL_PATH 1
#else
#define HAVE_SMALL_PATH 0
#endif

/* Target size of one thread's column buffer, in floats: large enough that each GEMM call
 * amortizes BLAS packing of the kernel and runs long. Not const so that tests can shrink it
 * to exercise chunk boundaries (set it before setup). */
int64_t dt__conv2d_col_floats = 192 * 1024;

/* Column buffers are sized in full for this many threads; a larger pool splits the same
 * budget into smaller chunks (scratch_floats does not know the pool size). */
#define COL_THREADS 4

/* The small-K path (see below) takes kernels of at most this many taps (K = kh*kw*C). Not
 * const so that tests can switch the path off and compare (0 = never). */
int64_t dt__conv2d_small_k = 64;
#define SMALL_MAX_TAPS 256

typedef struct conv_geom {
    int64_t h, w, c;  /* input */
    int64_t kh, kw, f;
    int64_t sh, sw;
    int64_t oh, ow;   /* output */
    int64_t pt, pl;   /* padding before: top, left */
    int64_t k;        /* kh * kw * c */
    int64_t ohow;     /* output pixels per sample */
    int direct;       /* 1x1 kernel, stride 1: x is the column matrix */
    int small;        /* few taps: the direct AVX2 kernels on a padded copy of each sample */
    int64_t hp, wp;   /* the padded sample's extent (small path) */
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
    g->small = HAVE_SMALL_PATH && !g->direct && g->k <= dt__conv2d_small_k &&
               g->k <= SMALL_MAX_TAPS && g->f % 8 == 0;
    g->hp = (g->oh - 1) * g->sh + g->kh;
    g->wp = (g->ow - 1) * g->sw + g->kw;
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

/* Floats of one thread's padded copy of a sample (small path). */
static int64_t pad_floats(const conv_geom *g) {
    return g->small ? round_up16(g->hp * g->wp * g->c) : 0;
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

/* Scratch: [column buffers: col_budget] [padded samples: one per slot] [partials of threads
 * 1..slots-1] (thread 0 sums straight into the gradients). */
static int64_t conv_scratch_floats(const dt__layer *l, int64_t batch) {
    if (batch <= 0) return 0;
    conv_geom g;
    conv_geometry(l, &g);
    return col_budget(&g, batch) + slot_count(batch) * pad_floats(&g) +
           (slot_count(batch) - 1) * partial_floats(&g);
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

/* ---- the small-K path ----
 *
 * With few taps (the first layer of an image model: C = 1 or 3) a GEMM call spends more
 * time packing its operands than multiplying. Instead each sample is copied once into a
 * zero-padded buffer, every tap t = (ki, kj, c) becomes an offset off[t] into it, and
 * register-blocked AVX2 kernels compute
 *   forward: y[p][f] = b[f] + sum_t pad[base(p) + off[t]] * W[t][f]  (3 pixels x 32 filters)
 *   dW:      dW[t][f] += sum_p pad[base(p) + off[t]] * dz[p][f]      (2 taps x 32 filters)
 * F must be a multiple of 8. dx (when needed) still goes through GEMM + col2im.
 */
#if HAVE_SMALL_PATH

#define SMALL_NP 3 /* output pixels per forward tile */
#define SMALL_TG 2 /* taps per dW tile */

/* Copy sample xs into pad (hp x wp x c, zeros around) and fill the tap offsets. */
static void pad_sample(const conv_geom *g, const float *xs, float *pad) {
    const int64_t c = g->c;
    memset(pad, 0, (size_t)(g->hp * g->wp * c) * sizeof *pad);
    int64_t cols = min64(g->w, g->wp - g->pl);
    for (int64_t ih = 0; ih < g->h && ih + g->pt < g->hp; ih++)
        memcpy(pad + ((ih + g->pt) * g->wp + g->pl) * c, xs + ih * g->w * c,
               (size_t)(cols * c) * sizeof *pad);
}

static void tap_offsets(const conv_geom *g, int32_t *off) {
    int64_t t = 0;
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++)
            for (int64_t ch = 0; ch < g->c; ch++) off[t++] = (int32_t)((ki * g->wp + kj) * g->c + ch);
}

/* np pixels (input bases in, in + pstride, ...) x nv*8 filters; np, nv constant after
 * inlining so that the accumulators live in registers. */
static inline __attribute__((always_inline)) void
small_fwd_tile(const float *in, int64_t pstride, const int32_t *off, int64_t k, const float *w,
               int64_t f, const float *b, float *y, const int np, const int nv) {
    __m256 acc[SMALL_NP][4];
    for (int v = 0; v < nv; v++) {
        __m256 init = b ? _mm256_loadu_ps(b + 8 * v) : _mm256_setzero_ps();
        for (int p = 0; p < np; p++) acc[p][v] = init;
    }
    for (int64_t t = 0; t < k; t++) {
        const float *wt = w + t * f;
        __m256 wv[4];
        for (int v = 0; v < nv; v++) wv[v] = _mm256_loadu_ps(wt + 8 * v);
        for (int p = 0; p < np; p++) {
            __m256 xb = _mm256_broadcast_ss(in + p * pstride + off[t]);
            for (int v = 0; v < nv; v++) acc[p][v] = _mm256_fmadd_ps(xb, wv[v], acc[p][v]);
        }
    }
    for (int p = 0; p < np; p++)
        for (int v = 0; v < nv; v++) _mm256_storeu_ps(y + p * f + 8 * v, acc[p][v]);
}

#define SMALL_FWD_CASES(np)                                                                    \
    switch (nv) {                                                                              \
    case 1: small_fwd_tile(in, pstride, off, g->k, w, g->f, b, y, np, 1); break;               \
    case 2: small_fwd_tile(in, pstride, off, g->k, w, g->f, b, y, np, 2); break;               \
    case 3: small_fwd_tile(in, pstride, off, g->k, w, g->f, b, y, np, 3); break;               \
    default: small_fwd_tile(in, pstride, off, g->k, w, g->f, b, y, np, 4); break;              \
    }

/* One output row (ow pixels x F) of a padded sample. */
static void small_forward_row(const conv_geom *g, const float *pad, const int32_t *off,
                              int64_t oh, const float *w0, const float *b0, float *yrow) {
    const int64_t pstride = g->sw * g->c;
    const float *row = pad + oh * g->sh * g->wp * g->c;
    for (int64_t f0 = 0; f0 < g->f; f0 += 32) {
        const int nv = (int)min64(4, (g->f - f0) / 8);
        const float *w = w0 + f0, *b = b0 ? b0 + f0 : NULL;
        int64_t o = 0;
        for (; o + SMALL_NP <= g->ow; o += SMALL_NP) {
            const float *in = row + o * pstride;
            float *y = yrow + o * g->f + f0;
            SMALL_FWD_CASES(SMALL_NP)
        }
        for (; o < g->ow; o++) {
            const float *in = row + o * pstride;
            float *y = yrow + o * g->f + f0;
            SMALL_FWD_CASES(1)
        }
    }
}

/* dw[t][f] += sum over the sample's pixels of pad[base(p) + off[t]] * dz[p][f], for tg taps
 * starting at off and nv*8 filters. */
static inline __attribute__((always_inline)) void
small_dw_tile(const conv_geom *g, const float *pad, const int32_t *off, const float *dz,
              float *dw, const int tg, const int nv) {
    __m256 acc[SMALL_TG][4];
    for (int t = 0; t < tg; t++)
        for (int v = 0; v < nv; v++) acc[t][v] = _mm256_loadu_ps(dw + t * g->f + 8 * v);
    int32_t o[SMALL_TG];
    for (int t = 0; t < tg; t++) o[t] = off[t];
    for (int64_t oh = 0; oh < g->oh; oh++) {
        const float *row = pad + oh * g->sh * g->wp * g->c;
        const float *dzr = dz + oh * g->ow * g->f;
        for (int64_t ow = 0; ow < g->ow; ow++) {
            const float *in = row + ow * g->sw * g->c;
            __m256 d[4];
            for (int v = 0; v < nv; v++) d[v] = _mm256_loadu_ps(dzr + ow * g->f + 8 * v);
            for (int t = 0; t < tg; t++) {
                __m256 xb = _mm256_broadcast_ss(in + o[t]);
                for (int v = 0; v < nv; v++) acc[t][v] = _mm256_fmadd_ps(xb, d[v], acc[t][v]);
            }
        }
    }
    for (int t = 0; t < tg; t++)
        for (int v = 0; v < nv; v++) _mm256_storeu_ps(dw + t * g->f + 8 * v, acc[t][v]);
}

#define SMALL_DW_CASES(tg)                                                                     \
    switch (nv) {                                                                              \
    case 1: small_dw_tile(g, pad, off + t, dzf, dwf, tg, 1); break;                           \
    case 2: small_dw_tile(g, pad, off + t, dzf, dwf, tg, 2); break;                           \
    case 3: small_dw_tile(g, pad, off + t, dzf, dwf, tg, 3); break;                           \
    default: small_dw_tile(g, pad, off + t, dzf, dwf, tg, 4); break;                          \
    }

/* dw (K x F) += the weight gradient of one padded sample with output gradient dz. */
static void small_dw_sample(const conv_geom *g, const float *pad, const int32_t *off,
                            const float *dz, float *dw) {
    for (int64_t f0 = 0; f0 < g->f; f0 += 32) {
        const int nv = (int)min64(4, (g->f - f0) / 8);
        const float *dzf = dz + f0;
        int64_t t = 0;
        for (; t + SMALL_TG <= g->k; t += SMALL_TG) {
            float *dwf = dw + t * g->f + f0;
            SMALL_DW_CASES(SMALL_TG)
        }
        for (; t < g->k; t++) {
            float *dwf = dw + t * g->f + f0;
            SMALL_DW_CASES(1)
        }
    }
}

#else /* !HAVE_SMALL_PATH: never taken (g->small is 0) */

static void pad_sample(const conv_geom *g, const float *xs, float *pad) {
    (void)g, (void)xs, (void)pad;
    DT_ASSERT(0);
}
static void tap_offsets(const conv_geom *g, int32_t *off) {
    (void)g, (void)off;
    DT_ASSERT(0);
}
static void small_forward_row(const conv_geom *g, const float *pad, const int32_t *off,
                              int64_t oh, const float *w0, const float *b0, float *yrow) {
    (void)g, (void)pad, (void)off, (void)oh, (void)w0, (void)b0, (void)yrow;
    DT_ASSERT(0);
}
static void small_dw_sample(const conv_geom *g, const float *pad, const int32_t *off,
                            const float *dz, float *dw) {
    (void)g, (void)pad, (void)off, (void)dz, (void)dw;
    DT_ASSERT(0);
}

#endif

struct conv_job {
    const dt__layer *l;
    const dt__layer_step *s;
    conv_geom g;
    int nslots;      /* threads taking samples: min(pool size, batch, max threads) */
    int64_t rows;    /* rows per chunk */
    int64_t col;     /* floats of one thread's column buffer */
    float *pads;     /* thread t's padded sample at pads + t * pad (small path) */
    int64_t pad;
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
    j->pads = s->scratch + budget;
    j->pad = pad_floats(&j->g);
    j->partials = j->pads + slot_count(s->batch) * j->pad;
    j->partial = partial_floats(&j->g);
}

static void conv_forward_kernel(void *arg, int ith, int nth) {
    const struct conv_job *j = arg;
    const conv_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const dt__layer *l = j->l;
    const dt_act act = l->conf.activation;
    (void)nth;
    if (ith >= j->nslots) return;
    int64_t n0, n1;
    dt_split(s->batch, ith, j->nslots, &n0, &n1);
    const float *w = l->params[0].value.data;
    const float *b = l->nparams > 1 ? l->params[1].value.data : NULL;
    const int64_t f = g->f, r1 = n1 * g->ohow;
    if (g->small) {
        float *pad = j->pads + ith * j->pad;
        int32_t off[SMALL_MAX_TAPS];
        tap_offsets(g, off);
        for (int64_t n = n0; n < n1; n++) {
            pad_sample(g, s->x.data + n * g->h * g->w * g->c, pad);
            for (int64_t oh = 0; oh < g->oh; oh++) {
                float *y = s->y.data + (n * g->ohow + oh * g->ow) * f;
                small_forward_row(g, pad, off, oh, w, b, y);
                if (act != DT_ACT_NONE) dt__act_forward(NULL, act, y, g->ow, f);
            }
        }
        return;
    }
    float *col = s->scratch + ith * j->col;
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
        if (act != DT_ACT_NONE) dt__act_forward(NULL, act, y, m, f);
    }
}

static void conv_forward(dt__layer *l, dt__layer_step *s) {
    struct conv_job j;
    conv_job_init(&j, l, s);
    dt__blas_init();
    dt_pool_run(s->pool, conv_forward_kernel, &j);
}

/* dz = dy * act'(y) in place and db += column sums of dz, over rows [r, r + m). */
static void conv_dz_rows(const struct conv_job *j, int64_t r, int64_t m, float *db) {
    const dt__layer_step *s = j->s;
    const dt_act act = j->l->conf.activation;
    const int64_t f = j->g.f;
    float *dz = s->dy.data + r * f;
    if (act != DT_ACT_NONE) dt__act_backward(NULL, act, s->y.data + r * f, dz, m, f);
    if (db)
        for (int64_t i = 0; i < m; i++)
            for (int64_t o = 0; o < f; o++) db[o] += dz[i * f + o];
}

/* dx rows [r, r + m) from dz: dcol = dz W^T, scattered back by col2im (dx zeroed before). */
static void conv_dx_rows(const struct conv_job *j, int64_t r, int64_t m, float *col) {
    const conv_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const float *w = j->l->params[0].value.data, *dz = s->dy.data + r * g->f;
    if (g->direct) {
        dt__gemm_st(0, 1, m, g->k, g->f, 1.0f, dz, g->f, w, g->f, 0.0f, s->dx.data + r * g->c,
                    g->k);
        return;
    }
    dt__gemm_st(0, 1, m, g->k, g->f, 1.0f, dz, g->f, w, g->f, 0.0f, col, g->k);
    col2im(g, col, r, m, s->dx.data);
}

static void conv_backward_kernel(void *arg, int ith, int nth) {
    const struct conv_job *j = arg;
    const conv_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const dt__layer *l = j->l;
    (void)nth;
    if (ith >= j->nslots) return;
    int64_t n0, n1;
    dt_split(s->batch, ith, j->nslots, &n0, &n1);
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
    if (g->small) {
        float *pad = j->pads + ith * j->pad;
        int32_t off[SMALL_MAX_TAPS];
        tap_offsets(g, off);
        memset(dw, 0, (size_t)(k * f) * sizeof *dw);
        for (int64_t n = n0; n < n1; n++) {
            int64_t rs = n * g->ohow;
            conv_dz_rows(j, rs, g->ohow, db);
            pad_sample(g, s->x.data + n * sample, pad);
            small_dw_sample(g, pad, off, s->dy.data + rs * f, dw);
            if (dx)
                for (int64_t r = rs; r < rs + g->ohow; r += j->rows)
                    conv_dx_rows(j, r, min64(j->rows, rs + g->ohow - r), col);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r += j->rows) {
        int64_t m = min64(j->rows, r1 - r);
        conv_dz_rows(j, r, m, db);
        const float *a = col;
        if (g->direct)
            a = s->x.data + r * g->c;
        else
            im2col(g, s->x.data, r, m, col);
        dt__gemm_st(1, 0, k, f, m, 1.0f, a, k, s->dy.data + r * f, f, r == r0 ? 0.0f : 1.0f,
                    dw, f);
        if (dx) conv_dx_rows(j, r, m, col);
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

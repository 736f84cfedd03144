/*
 * conv2d.c - 2-D convolution over NHWC batches: direct AVX2 kernels, or im2col + GEMM.
 *
 * Layouts: x is {N, H, W, C}, the kernel [kh, kw, C, F] (HWIO, which is already the
 * [K = kh*kw*C, F] matrix of an im2col product), y {N, OH, OW, F}. The rows of y (N*OH*OW,
 * F wide) are the output pixels, and every tap t = (ki, kj, c) of the kernel is a row of W.
 *
 * Work split: every pool thread takes its own whole samples (dt_split over the batch), so
 * that dx (overlapping patches) needs no locking. dW and db need a sum over all samples:
 * thread 0 accumulates straight into the gradients, thread t > 0 into its own partial in
 * scratch, and a second pool pass adds partials 1..n-1 in that fixed order (deterministic
 * for a given thread count).
 *
 * Direct path (AVX2 + FMA, F a multiple of 8, the usual case): each sample is copied once
 * into a zero-padded buffer (so that no tap needs a bounds check), tap t becomes an offset
 * off[t] into it, and register-blocked kernels compute
 *   forward  y[p][f]  = b[f] + sum_t pad[base(p) + off[t]] * W[t][f]  (6 pixels x 16 filters)
 *   dW       dW[t][f] += sum_p pad[base(p) + off[t]] * dz[p][f]      (6 taps x 16 filters)
 * each with 12 accumulators in registers, the other operand broadcast from the padded
 * sample: no im2col matrix, no BLAS packing. Forward walks the taps in blocks that keep
 * their rows of W in L1. With stride 1 and C a multiple of 8, dx is the same forward kernel
 * run on dz padded by (k - 1 - pad) with the kernel flipped and transposed ([kh, kw, F, C]),
 * written straight into dx. This beats OpenBLAS on these shapes (see bench/conv_bench.c).
 *
 * GEMM path (everything else): the pixel rows are walked in chunks: im2col of the chunk
 * into the thread's column buffer, the bias copied into the chunk's rows of y, one
 * single-threaded GEMM accumulating onto it, the activation while the tile is in cache.
 * Backward per chunk: dz = dy * act'(y) in place, db, im2col again (cheaper than keeping
 * N*OH*OW*K floats) and dW += col^T dz; dx (unless direct, or the first layer, whose
 * dx.data is NULL) as dcol = dz W^T into the same buffer, scattered back by col2im. A 1x1
 * kernel with stride 1 needs no im2col: x is the column matrix.
 *
 * Scratch (sized for any pool, whatever scratch_floats is told of it): column buffers for
 * COL_THREADS full chunks, which a larger pool splits into smaller chunks; per thread slot
 * (up to min(batch, DT_LAYER_MAX_THREADS)) a padded sample and a padded dz; the shared tap
 * offsets and flipped kernel; and one dW + db partial per slot after the first.
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
#define HAVE_DIRECT 1
#else
#define HAVE_DIRECT 0
#endif

/* Target size of one thread's column buffer (GEMM path), in floats: large enough that
 * each GEMM call runs long. Tests shrink it to exercise chunk boundaries and switch the
 * direct path off to compare; both must be set before setup and kept until the layer is
 * gone (they decide the scratch size). */
int64_t dt__conv2d_col_floats = 192 * 1024;
int dt__conv2d_direct = 1;

/* Column buffers are sized in full for this many threads; a larger pool splits them. */
#define COL_THREADS 4
/* The direct path's padded copies stay below this many floats per thread. */
#define DIRECT_MAX_PAD (128 * 1024)

#define DIRECT_NP 6   /* output pixels per forward tile (x 16 filters) */
#define DIRECT_TG 6   /* taps per dW tile (x 16 filters) */
#define DIRECT_KB 256 /* taps per forward block: 256 rows x 16 filters of W = 16 KB */

typedef struct conv_geom {
    int64_t h, w, c; /* input */
    int64_t kh, kw, f;
    int64_t sh, sw;
    int64_t oh, ow; /* output */
    int64_t pt, pl; /* padding before: top, left */
    int64_t k;      /* kh * kw * c */
    int64_t ohow;   /* output pixels per sample */
    int64_t hp, wp; /* the padded input's extent (direct path) */
    int pointwise;  /* 1x1 kernel, stride 1: x is the column matrix (GEMM path) */
    int direct;     /* forward and dW by the direct kernels */
    int direct_dx;  /* dx by the direct forward kernel on padded dz */
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
    g->hp = (g->oh - 1) * g->sh + g->kh;
    g->wp = (g->ow - 1) * g->sw + g->kw;
    g->pointwise = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1;
    int direct = HAVE_DIRECT && dt__conv2d_direct && !g->pointwise;
    g->direct = direct && g->f % 8 == 0 && g->hp * g->wp * g->c <= DIRECT_MAX_PAD;
    g->direct_dx = direct && g->sh == 1 && g->sw == 1 && g->c % 8 == 0 &&
                   (g->h + g->kh - 1) * (g->w + g->kw - 1) * g->f <= DIRECT_MAX_PAD;
}

/* The dx convolution of the direct path: dz padded by k - 1 - pad before (and to h + kh -
 * 1 in all), F channels in, C filters out, taps [kh, kw, F] of the flipped kernel. */
static void dx_geometry(const conv_geom *g, conv_geom *d) {
    memset(d, 0, sizeof *d);
    d->h = d->hp = g->h + g->kh - 1;
    d->w = d->wp = g->w + g->kw - 1;
    d->c = g->f;
    d->kh = g->kh;
    d->kw = g->kw;
    d->f = g->c;
    d->sh = d->sw = 1;
    d->oh = g->h;
    d->ow = g->w;
    d->pt = g->kh - 1 - g->pt; /* where dz starts in the padded buffer */
    d->pl = g->kw - 1 - g->pl;
    d->k = g->kh * g->kw * g->f;
    d->ohow = g->h * g->w;
}

/* ---- scratch layout ---- */

/* Rows of one chunk at most (GEMM path). */
static int64_t chunk_cap(const conv_geom *g) {
    return max64(dt__conv2d_col_floats / g->k, 1);
}

/* Threads that can take samples of a batch. */
static int64_t slot_count(int64_t batch) {
    return min64(batch, DT_LAYER_MAX_THREADS);
}

/* Floats of column buffers for a batch, shared by the threads: room for COL_THREADS full
 * chunks (or the whole batch, if less) and at least one row per slot. Every size here is
 * non-decreasing in batch, so that a smaller batch fits in scratch sized for the largest. */
static int64_t col_budget(const conv_geom *g, int64_t batch) {
    int needs_col = !g->pointwise && (!g->direct || !g->direct_dx);
    if (!needs_col) return 0;
    int64_t rows = min64(batch * g->ohow, COL_THREADS * chunk_cap(g));
    return max64(round_up16(rows * g->k), slot_count(batch) * round_up16(g->k));
}

/* One thread's padded sample and padded dz. */
static int64_t pad_floats(const conv_geom *g) {
    return g->direct ? round_up16(g->hp * g->wp * g->c) : 0;
}

static int64_t dzpad_floats(const conv_geom *g) {
    return g->direct_dx ? round_up16((g->h + g->kh - 1) * (g->w + g->kw - 1) * g->f) : 0;
}

/* Shared, read-only during a pass: tap offsets (int32) and the flipped kernel. */
static int64_t shared_floats(const conv_geom *g) {
    int64_t n = 0;
    if (g->direct) n += round_up16(g->k);
    if (g->direct_dx) n += round_up16(g->kh * g->kw * g->f) + round_up16(g->k * g->f);
    return n;
}

/* One thread's dW and db partial sums. */
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
            return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': input %s has an empty dimension", c->name,
                              dt_shape_str(&l->in, buf, sizeof buf));
    if (c->filters <= 0)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': filters must be positive, got %lld", c->name,
                          (long long)c->filters);
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
    /* BLAS takes int dimensions and tap offsets are int32: keep every extent well inside. */
    int64_t lim = INT_MAX / 4;
    if (c->kernel[0] > lim || c->kernel[1] > lim || c->filters > lim ||
        c->kernel[0] * c->kernel[1] > lim / l->in.dim[2] ||
        c->kernel[0] * c->kernel[1] * l->in.dim[2] > lim / c->filters ||
        c->kernel[0] * c->kernel[1] > lim / c->filters || dt_shape_numel(&l->in) > lim)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': kernel %lldx%lldx%lldx%lld is too large",
                          c->name, (long long)c->kernel[0], (long long)c->kernel[1],
                          (long long)l->in.dim[2], (long long)c->filters);
    conv_geom g;
    conv_geometry(l, &g);
    if (g.ohow > lim / g.f)
        return dt_err_set(DT_ERR_SHAPE, "conv2d '%s': output %lldx%lldx%lld is too large", c->name,
                          (long long)g.oh, (long long)g.ow, (long long)g.f);

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

/* Scratch: [column buffers] [padded samples, one per slot] [padded dz, one per slot]
 * [shared tables] [partials of slots 1..n-1] (slot 0 sums straight into the gradients). */
static int64_t conv_scratch_floats(const dt__layer *l, int64_t batch, int threads) {
    (void)threads; /* sized for DT_LAYER_MAX_THREADS slots */
    if (batch <= 0) return 0;
    conv_geom g;
    conv_geometry(l, &g);
    int64_t slots = slot_count(batch);
    return col_budget(&g, batch) + slots * (pad_floats(&g) + dzpad_floats(&g)) + shared_floats(&g) +
           (slots - 1) * partial_floats(&g);
}

/* ---- im2col / col2im (GEMM path) ---- */

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
                for (int64_t j = 0; j < len; j++)
                    d[j] = src[j];
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
                for (int64_t j = 0; j < len; j++)
                    d[j] += s[j];
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

/* ---- direct path ---- */

/* Copy one h x w x c sample into pad (hp x wp x c) at (pt, pl), zeros around; rows and
 * columns beyond the padded extent (valid padding leaves some unused) are dropped. */
static void pad_copy(const conv_geom *g, const float *src, float *pad) {
    const int64_t c = g->c;
    memset(pad, 0, (size_t)(g->hp * g->wp * c) * sizeof *pad);
    int64_t cols = min64(g->w, g->wp - g->pl);
    for (int64_t ih = 0; ih < g->h && ih + g->pt < g->hp; ih++)
        memcpy(pad + ((ih + g->pt) * g->wp + g->pl) * c, src + ih * g->w * c,
               (size_t)(cols * c) * sizeof *pad);
}

/* off[t] for every tap t = (ki, kj, ch) of a geometry, into its padded buffer. */
static void tap_offsets(const conv_geom *g, int32_t *off) {
    int64_t t = 0;
    for (int64_t ki = 0; ki < g->kh; ki++)
        for (int64_t kj = 0; kj < g->kw; kj++)
            for (int64_t ch = 0; ch < g->c; ch++)
                off[t++] = (int32_t)((ki * g->wp + kj) * g->c + ch);
}

#if HAVE_DIRECT

/* np pixels (padded-input bases in[0..np)) x nv*8 filters over taps [0, k): accumulators
 * start at the bias (or zero) when first, else at y. np and nv are constants after
 * inlining, so that the accumulators live in registers. */
static inline __attribute__((always_inline)) void
direct_fwd_tile(const float *const *in, const int32_t *off, int64_t k, const float *w, int64_t f,
                const float *b, int first, float *y, const int np, const int nv) {
    __m256 acc[DIRECT_NP][2];
    for (int v = 0; v < nv; v++)
        for (int p = 0; p < np; p++)
            acc[p][v] = !first ? _mm256_loadu_ps(y + p * f + 8 * v)
                        : b    ? _mm256_loadu_ps(b + 8 * v)
                               : _mm256_setzero_ps();
    for (int64_t t = 0; t < k; t++) {
        const float *wt = w + t * f;
        __m256 wv[2];
        for (int v = 0; v < nv; v++)
            wv[v] = _mm256_loadu_ps(wt + 8 * v);
        for (int p = 0; p < np; p++) {
            __m256 xb = _mm256_broadcast_ss(in[p] + off[t]);
            for (int v = 0; v < nv; v++)
                acc[p][v] = _mm256_fmadd_ps(xb, wv[v], acc[p][v]);
        }
    }
    for (int p = 0; p < np; p++)
        for (int v = 0; v < nv; v++)
            _mm256_storeu_ps(y + p * f + 8 * v, acc[p][v]);
}

#define DIRECT_FWD_NV(np)                                                                          \
    do {                                                                                           \
        if (nv == 2)                                                                               \
            direct_fwd_tile(in, off + k0, kb, w, g->f, b, k0 == 0, y, np, 2);                      \
        else                                                                                       \
            direct_fwd_tile(in, off + k0, kb, w, g->f, b, k0 == 0, y, np, 1);                      \
    } while (0)

/* ys (ohow x F, without the activation) of one padded sample; F a multiple of 8. */
static void direct_forward_sample(const conv_geom *g, const float *pad, const int32_t *off,
                                  const float *w0, const float *b0, float *ys) {
    for (int64_t f0 = 0; f0 < g->f; f0 += 16) {
        const int nv = (int)min64(2, (g->f - f0) / 8);
        const float *b = b0 ? b0 + f0 : NULL;
        for (int64_t k0 = 0; k0 < g->k; k0 += DIRECT_KB) {
            const int64_t kb = min64(DIRECT_KB, g->k - k0);
            const float *w = w0 + k0 * g->f + f0;
            int64_t oh = 0, ow = 0; /* of pixel p */
            for (int64_t p = 0; p < g->ohow;) {
                const float *in[DIRECT_NP];
                int np = (int)min64(DIRECT_NP, g->ohow - p);
                float *y = ys + p * g->f + f0;
                for (int i = 0; i < np; i++, p++) {
                    in[i] = pad + (oh * g->sh * g->wp + ow * g->sw) * g->c;
                    if (++ow == g->ow) {
                        ow = 0;
                        oh++;
                    }
                }
                switch (np) {
                case DIRECT_NP:
                    DIRECT_FWD_NV(DIRECT_NP);
                    break;
                case 5:
                    DIRECT_FWD_NV(5);
                    break;
                case 4:
                    DIRECT_FWD_NV(4);
                    break;
                case 3:
                    DIRECT_FWD_NV(3);
                    break;
                case 2:
                    DIRECT_FWD_NV(2);
                    break;
                default:
                    DIRECT_FWD_NV(1);
                    break;
                }
            }
        }
    }
}

/* dw[t][f] += sum over the sample's pixels of pad[base(p) + off[t]] * dz[p][f], for tg taps
 * from off and nv*8 filters (tg, nv constants after inlining). */
static inline __attribute__((always_inline)) void
direct_dw_tile(const conv_geom *g, const float *pad, const int32_t *off, const float *dz, float *dw,
               const int tg, const int nv) {
    const int64_t f = g->f, oh_n = g->oh, ow_n = g->ow;
    const int64_t step_w = g->sw * g->c, step_h = g->sh * g->wp * g->c;
    __m256 acc[DIRECT_TG][2];
    const float *xt[DIRECT_TG];
    for (int t = 0; t < tg; t++) {
        xt[t] = pad + off[t];
        for (int v = 0; v < nv; v++)
            acc[t][v] = _mm256_loadu_ps(dw + t * f + 8 * v);
    }
    const float *d = dz;
    for (int64_t oh = 0, row = 0; oh < oh_n; oh++, row += step_h)
        for (int64_t ow = 0, base = row; ow < ow_n; ow++, base += step_w, d += f) {
            __m256 dv[2];
            for (int v = 0; v < nv; v++)
                dv[v] = _mm256_loadu_ps(d + 8 * v);
            for (int t = 0; t < tg; t++) {
                __m256 xb = _mm256_broadcast_ss(xt[t] + base);
                for (int v = 0; v < nv; v++)
                    acc[t][v] = _mm256_fmadd_ps(xb, dv[v], acc[t][v]);
            }
        }
    for (int t = 0; t < tg; t++)
        for (int v = 0; v < nv; v++)
            _mm256_storeu_ps(dw + t * f + 8 * v, acc[t][v]);
}

#define DIRECT_DW_NV(tg)                                                                           \
    do {                                                                                           \
        if (nv == 2)                                                                               \
            direct_dw_tile(g, pad, off + t, dzf, dwf, tg, 2);                                      \
        else                                                                                       \
            direct_dw_tile(g, pad, off + t, dzf, dwf, tg, 1);                                      \
    } while (0)

/* dw (K x F) += the weight gradient of one padded sample whose output gradient is dz. */
static void direct_dw_sample(const conv_geom *g, const float *pad, const int32_t *off,
                             const float *dz, float *dw) {
    for (int64_t f0 = 0; f0 < g->f; f0 += 16) {
        const int nv = (int)min64(2, (g->f - f0) / 8);
        const float *dzf = dz + f0;
        for (int64_t t = 0; t < g->k; t += DIRECT_TG) {
            float *dwf = dw + t * g->f + f0;
            switch (min64(DIRECT_TG, g->k - t)) {
            case DIRECT_TG:
                DIRECT_DW_NV(DIRECT_TG);
                break;
            case 5:
                DIRECT_DW_NV(5);
                break;
            case 4:
                DIRECT_DW_NV(4);
                break;
            case 3:
                DIRECT_DW_NV(3);
                break;
            case 2:
                DIRECT_DW_NV(2);
                break;
            default:
                DIRECT_DW_NV(1);
                break;
            }
        }
    }
}

#else /* no AVX2: the direct path is never chosen (conv_geometry) */

static void direct_forward_sample(const conv_geom *g, const float *pad, const int32_t *off,
                                  const float *w0, const float *b0, float *ys) {
    (void)g, (void)pad, (void)off, (void)w0, (void)b0, (void)ys;
    DT_ASSERT(!"direct convolution without AVX2");
}

static void direct_dw_sample(const conv_geom *g, const float *pad, const int32_t *off,
                             const float *dz, float *dw) {
    (void)g, (void)pad, (void)off, (void)dz, (void)dw;
    DT_ASSERT(!"direct convolution without AVX2");
}

#endif

/* ---- the passes ---- */

struct conv_job {
    const dt__layer *l;
    const dt__layer_step *s;
    conv_geom g, gd;      /* the layer; the dx convolution (direct_dx) */
    int nslots;           /* threads taking samples: min(pool size, batch, max threads) */
    int64_t rows;         /* rows per chunk (GEMM path) */
    int64_t col;          /* floats of one thread's column buffer */
    float *cols;          /* thread t's column buffer at cols + t * col */
    float *pads, *dzpads; /* thread t's padded sample / dz at + t * pad / dzpad */
    int64_t pad, dzpad;
    int32_t *off;    /* tap offsets into a padded sample (direct) */
    int32_t *offd;   /* tap offsets into a padded dz (direct_dx) */
    float *wflip;    /* the flipped kernel [kh, kw, F, C] (direct_dx) */
    float *partials; /* partial sums of thread t >= 1 at partials + (t - 1) * partial */
    int64_t partial;
};

static void conv_job_init(struct conv_job *j, const dt__layer *l, const dt__layer_step *s) {
    memset(j, 0, sizeof *j);
    j->l = l;
    j->s = s;
    conv_geometry(l, &j->g);
    dx_geometry(&j->g, &j->gd);
    const conv_geom *g = &j->g;
    int64_t slots = slot_count(s->batch);
    j->nslots = (int)min64(dt_pool_size(s->pool), slots);
    /* Scratch was sized for the model's max batch; every size below is non-decreasing in
     * batch, so a smaller batch fits. */
    int64_t budget = col_budget(g, s->batch);
    j->col = j->nslots ? budget / j->nslots / 16 * 16 : 0;
    j->rows = g->pointwise ? chunk_cap(g) : min64(j->col / g->k, chunk_cap(g));
    j->cols = s->scratch;
    j->pad = pad_floats(g);
    j->dzpad = dzpad_floats(g);
    j->pads = s->scratch + budget;
    j->dzpads = j->pads + slots * j->pad;
    float *shared = j->dzpads + slots * j->dzpad;
    if (g->direct) {
        j->off = (int32_t *)(void *)shared;
        shared += round_up16(g->k);
    }
    if (g->direct_dx) {
        j->offd = (int32_t *)(void *)shared;
        shared += round_up16(j->gd.k);
        j->wflip = shared;
        shared += round_up16(g->k * g->f);
    }
    j->partials = shared;
    j->partial = partial_floats(g);
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
    if (g->direct) {
        float *pad = j->pads + ith * j->pad;
        for (int64_t n = n0; n < n1; n++) {
            float *y = s->y.data + n * g->ohow * f;
            pad_copy(g, s->x.data + n * g->h * g->w * g->c, pad);
            direct_forward_sample(g, pad, j->off, w, b, y);
            if (act != DT_ACT_NONE) dt__act_forward(NULL, act, y, g->ohow, f);
        }
        return;
    }
    float *col = j->cols + ith * j->col;
    for (int64_t r = n0 * g->ohow; r < r1; r += j->rows) {
        int64_t m = min64(j->rows, r1 - r);
        float *y = s->y.data + r * f;
        const float *a = col;
        if (g->pointwise)
            a = s->x.data + r * g->c;
        else
            im2col(g, s->x.data, r, m, col);
        /* the bias goes in first, so that the GEMM accumulates onto it (beta = 1) */
        if (b)
            for (int64_t i = 0; i < m; i++)
                memcpy(y + i * f, b, (size_t)f * sizeof *y);
        dt__gemm_st(0, 0, m, f, g->k, 1.0f, a, g->k, w, f, b ? 1.0f : 0.0f, y, f);
        if (act != DT_ACT_NONE) dt__act_forward(NULL, act, y, m, f);
    }
}

static void conv_forward(dt__layer *l, dt__layer_step *s) {
    struct conv_job j;
    conv_job_init(&j, l, s);
    if (j.g.direct) tap_offsets(&j.g, j.off);
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
            for (int64_t o = 0; o < f; o++)
                db[o] += dz[i * f + o];
}

/* dx rows [r, r + m) by GEMM: dcol = dz W^T, scattered back by col2im (dx zeroed before);
 * pointwise layers write dx directly. */
static void conv_dx_rows(const struct conv_job *j, int64_t r, int64_t m, float *col) {
    const conv_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const float *w = j->l->params[0].value.data, *dz = s->dy.data + r * g->f;
    if (g->pointwise) {
        dt__gemm_st(0, 1, m, g->k, g->f, 1.0f, dz, g->f, w, g->f, 0.0f, s->dx.data + r * g->c,
                    g->k);
        return;
    }
    dt__gemm_st(0, 1, m, g->k, g->f, 1.0f, dz, g->f, w, g->f, 0.0f, col, g->k);
    col2im(g, col, r, m, s->dx.data);
}

/* dx of sample n by the direct kernel: dz padded, convolved with the flipped kernel. */
static void conv_dx_direct(const struct conv_job *j, int64_t n, float *dzpad) {
    const conv_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    /* dz of the sample is oh x ow x F; the padded buffer holds it at (gd.pt, gd.pl) */
    conv_geom src = j->gd;
    src.h = g->oh;
    src.w = g->ow;
    pad_copy(&src, s->dy.data + n * g->ohow * g->f, dzpad);
    direct_forward_sample(&j->gd, dzpad, j->offd, j->wflip, NULL,
                          s->dx.data + n * g->h * g->w * g->c);
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
    float *col = j->cols + ith * j->col;
    float *part = ith > 0 ? j->partials + (ith - 1) * j->partial : NULL;
    float *dw = ith == 0 ? l->params[0].grad.data : part;
    float *db = l->nparams < 2 ? NULL
                : ith == 0     ? l->params[1].grad.data
                               : part + round_up16(g->k * g->f);
    const int64_t f = g->f, k = g->k, r0 = n0 * g->ohow, r1 = n1 * g->ohow;
    const int64_t sample = g->h * g->w * g->c;
    float *dx = s->dx.data;
    const int gemm_dx = dx && !g->direct_dx;
    if (gemm_dx && !g->pointwise)
        memset(dx + n0 * sample, 0, (size_t)((n1 - n0) * sample) * sizeof *dx);
    if (db) memset(db, 0, (size_t)f * sizeof *db);
    if (g->direct) {
        float *pad = j->pads + ith * j->pad;
        memset(dw, 0, (size_t)(k * f) * sizeof *dw);
        for (int64_t n = n0; n < n1; n++) {
            int64_t rs = n * g->ohow;
            conv_dz_rows(j, rs, g->ohow, db);
            pad_copy(g, s->x.data + n * sample, pad);
            direct_dw_sample(g, pad, j->off, s->dy.data + rs * f, dw);
            if (gemm_dx)
                for (int64_t r = rs; r < rs + g->ohow; r += j->rows)
                    conv_dx_rows(j, r, min64(j->rows, rs + g->ohow - r), col);
        }
    } else {
        for (int64_t r = r0; r < r1; r += j->rows) {
            int64_t m = min64(j->rows, r1 - r);
            conv_dz_rows(j, r, m, db);
            const float *a = col;
            if (g->pointwise)
                a = s->x.data + r * g->c;
            else
                im2col(g, s->x.data, r, m, col);
            dt__gemm_st(1, 0, k, f, m, 1.0f, a, k, s->dy.data + r * f, f, r == r0 ? 0.0f : 1.0f, dw,
                        f);
            if (gemm_dx) conv_dx_rows(j, r, m, col);
        }
    }
    if (dx && g->direct_dx)
        for (int64_t n = n0; n < n1; n++)
            conv_dx_direct(j, n, j->dzpads + ith * j->dzpad);
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
            for (int64_t i = lo; i < hi; i++)
                grad[i] += part[i];
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
    const conv_geom *g = &j.g;
    if (g->direct) tap_offsets(g, j.off);
    if (g->direct_dx && s->dx.data) {
        tap_offsets(&j.gd, j.offd);
        /* wflip[ki][kj][f][c] = W[kh-1-ki][kw-1-kj][c][f] */
        const float *w = l->params[0].value.data;
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                const float *src = w + ((g->kh - 1 - ki) * g->kw + (g->kw - 1 - kj)) * g->c * g->f;
                float *dst = j.wflip + (ki * g->kw + kj) * g->f * g->c;
                for (int64_t c = 0; c < g->c; c++)
                    for (int64_t f = 0; f < g->f; f++)
                        dst[f * g->c + c] = src[c * g->f + f];
            }
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

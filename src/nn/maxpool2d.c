/*
 * maxpool2d.c - 2-D max pooling over NHWC batches.
 *
 * Design: kernel {kh, kw} (default 2x2), stride default = kernel, valid or same padding by
 * the TensorFlow rules (window-impl.h). Padded cells never win: a window only looks at the
 * input cells it covers, and every window covers at least one.
 *
 * Forward records, for every output element, which input element won (its offset within
 * the sample, an int32 stored in the layer's state, which is sized one float per output
 * element). Ties go to the first cell in row-major window order, as in TensorFlow's CPU
 * kernels.
 * Backward zeroes dx and scatter-adds dy at those offsets; when the windows tile the input
 * (stride = kernel, the usual case) it writes every dx cell once instead. Forward splits the
 * (sample, output row) pairs over the pool; backward splits whole samples, so that
 * overlapping windows (stride < kernel) add into one sample's dx from one thread only, in a
 * fixed order.
 */
#include <limits.h>
#include <stdint.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "core/assert-impl.h"
#include "nn/layer-impl.h"
#include "nn/window-impl.h"

_Static_assert(sizeof(int32_t) == sizeof(float), "winner offsets live in float state");

typedef struct pool_geom {
    int64_t h, w, c;
    int64_t kh, kw, sh, sw;
    int64_t oh, ow;
    int64_t pt, pl;
} pool_geom;

static void pool_params(const dt_layer_conf *c, int64_t k[2], int64_t s[2]) {
    for (int i = 0; i < 2; i++) {
        k[i] = c->kernel[i] ? c->kernel[i] : 2;
        s[i] = c->stride[i] ? c->stride[i] : k[i];
    }
}

static void pool_geometry(const dt__layer *l, pool_geom *g) {
    int64_t k[2], s[2];
    pool_params(&l->conf, k, s);
    g->h = l->in.dim[0];
    g->w = l->in.dim[1];
    g->c = l->in.dim[2];
    g->kh = k[0];
    g->kw = k[1];
    g->sh = s[0];
    g->sw = s[1];
    int okh = dt__window_dim(g->h, g->kh, g->sh, l->conf.padding, &g->oh, &g->pt);
    int okw = dt__window_dim(g->w, g->kw, g->sw, l->conf.padding, &g->ow, &g->pl);
    DT_ASSERT(okh && okw);
}

static dt_err pool_setup(dt__layer *l) {
    const dt_layer_conf *c = &l->conf;
    char buf[64];
    if (l->in.ndim != 3)
        return dt_err_set(DT_ERR_SHAPE,
                          "maxpool2d '%s': input %s is not 3-D per sample (height, width, "
                          "channels)",
                          c->name, dt_shape_str(&l->in, buf, sizeof buf));
    for (int i = 0; i < 3; i++)
        if (l->in.dim[i] <= 0)
            return dt_err_set(DT_ERR_SHAPE, "maxpool2d '%s': input %s has an empty dimension",
                              c->name, dt_shape_str(&l->in, buf, sizeof buf));
    if (dt_shape_numel(&l->in) > INT32_MAX)
        return dt_err_set(DT_ERR_SHAPE, "maxpool2d '%s': input %s is too large", c->name,
                          dt_shape_str(&l->in, buf, sizeof buf));
    if (c->kernel[0] < 0 || c->kernel[1] < 0)
        return dt_err_set(DT_ERR_SHAPE, "maxpool2d '%s': kernel must be positive, got %lldx%lld",
                          c->name, (long long)c->kernel[0], (long long)c->kernel[1]);
    if (c->stride[0] < 0 || c->stride[1] < 0)
        return dt_err_set(DT_ERR_SHAPE, "maxpool2d '%s': stride must be positive, got %lldx%lld",
                          c->name, (long long)c->stride[0], (long long)c->stride[1]);
    if (c->padding != DT_PADDING_VALID && c->padding != DT_PADDING_SAME)
        return dt_err_set(DT_ERR_SHAPE, "maxpool2d '%s': unknown padding %d", c->name,
                          (int)c->padding);
    int64_t k[2], s[2];
    pool_params(c, k, s);
    if (c->padding == DT_PADDING_VALID && (k[0] > l->in.dim[0] || k[1] > l->in.dim[1]))
        return dt_err_set(DT_ERR_SHAPE,
                          "maxpool2d '%s': kernel %lldx%lld is larger than the input "
                          "%lldx%lld with valid padding",
                          c->name, (long long)k[0], (long long)k[1], (long long)l->in.dim[0],
                          (long long)l->in.dim[1]);
    pool_geom g;
    pool_geometry(l, &g);
    l->out = dt_shape_make(3, (int64_t[]){g.oh, g.ow, g.c});
    l->nparams = 0;
    return DT_OK;
}

static int64_t pool_state_floats(const dt__layer *l, int64_t batch) {
    /* one int32 winner offset per output element */
    return batch * dt_shape_numel(&l->out);
}

struct pool_job {
    const dt__layer_step *s;
    pool_geom g;
};

/* The max over one window of c-channel cells, the cells in row-major order, a later cell
 * replacing the running max only where it is strictly larger. With AVX2, channels go 8 at a
 * time in registers; the rest one by one. */
static void pool_window(const float *restrict xs, int64_t c, int64_t w, int64_t ih_lo,
                        int64_t ih_hi, int64_t iw_lo, int64_t iw_hi, float *restrict y,
                        int32_t *restrict idx) {
    int64_t ch0 = 0;
#ifdef __AVX2__
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (; ch0 + 8 <= c; ch0 += 8) {
        int32_t base = (int32_t)((ih_lo * w + iw_lo) * c + ch0);
        __m256 m = _mm256_loadu_ps(xs + base);
        __m256 id = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_set1_epi32(base), iota));
        for (int64_t ih = ih_lo; ih < ih_hi; ih++)
            for (int64_t iw = ih == ih_lo ? iw_lo + 1 : iw_lo; iw < iw_hi; iw++) {
                base = (int32_t)((ih * w + iw) * c + ch0);
                __m256 v = _mm256_loadu_ps(xs + base);
                __m256 gt = _mm256_cmp_ps(v, m, _CMP_GT_OQ); /* v > m, false for NaN */
                m = _mm256_blendv_ps(m, v, gt);
                __m256 vid = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_set1_epi32(base), iota));
                id = _mm256_blendv_ps(id, vid, gt);
            }
        _mm256_storeu_ps(y + ch0, m);
        _mm256_storeu_si256((__m256i *)(void *)(idx + ch0), _mm256_castps_si256(id));
    }
#endif
    for (int64_t ch = ch0; ch < c; ch++) {
        int32_t base = (int32_t)((ih_lo * w + iw_lo) * c + ch);
        float m = xs[base];
        int32_t id = base;
        for (int64_t ih = ih_lo; ih < ih_hi; ih++)
            for (int64_t iw = ih == ih_lo ? iw_lo + 1 : iw_lo; iw < iw_hi; iw++) {
                base = (int32_t)((ih * w + iw) * c + ch);
                if (xs[base] > m) {
                    m = xs[base];
                    id = base;
                }
            }
        y[ch] = m;
        idx[ch] = id;
    }
}

static void pool_forward_kernel(void *arg, int ith, int nth) {
    const struct pool_job *j = arg;
    const pool_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const int64_t c = g->c, sample = g->h * g->w * c;
    int32_t *idx_all = (int32_t *)(void *)s->state;
    int64_t lo, hi;
    dt_split(s->batch * g->oh, ith, nth, &lo, &hi);
    for (int64_t row = lo; row < hi; row++) {
        int64_t n = row / g->oh, oh = row % g->oh;
        int64_t ih0 = oh * g->sh - g->pt;
        int64_t ih_lo = ih0 > 0 ? ih0 : 0, ih_hi = ih0 + g->kh < g->h ? ih0 + g->kh : g->h;
        for (int64_t ow = 0; ow < g->ow; ow++) {
            int64_t iw0 = ow * g->sw - g->pl;
            int64_t iw_lo = iw0 > 0 ? iw0 : 0, iw_hi = iw0 + g->kw < g->w ? iw0 + g->kw : g->w;
            int64_t o = (row * g->ow + ow) * c;
            pool_window(s->x.data + n * sample, c, g->w, ih_lo, ih_hi, iw_lo, iw_hi, s->y.data + o,
                        idx_all + o);
        }
    }
}

static void pool_forward(dt__layer *l, dt__layer_step *s) {
    DT_ASSERT(s->state != NULL);
    struct pool_job j = {.s = s};
    pool_geometry(l, &j.g);
    dt_pool_run(s->pool, pool_forward_kernel, &j);
}

/* Windows that tile the input exactly (stride = kernel, the last window reaching the end):
 * every input cell is in exactly one window, so dx is written once, with no zeroing pass. */
static int pool_tiles(const pool_geom *g) {
    return g->sh == g->kh && g->sw == g->kw && (g->oh - 1) * g->sh - g->pt + g->kh >= g->h &&
           (g->ow - 1) * g->sw - g->pl + g->kw >= g->w;
}

static void pool_backward_kernel(void *arg, int ith, int nth) {
    const struct pool_job *j = arg;
    const pool_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const int64_t c = g->c, sample = g->h * g->w * c, out = g->oh * g->ow * c;
    const int32_t *idx_all = (const int32_t *)(const void *)s->state;
    const int tiles = pool_tiles(g);
    int64_t lo, hi;
    dt_split(s->batch, ith, nth, &lo, &hi);
    for (int64_t n = lo; n < hi; n++) {
        float *restrict dx = s->dx.data + n * sample;
        const float *restrict dy = s->dy.data + n * out;
        const int32_t *restrict idx = idx_all + n * out;
        if (!tiles) {
            memset(dx, 0, (size_t)sample * sizeof *dx);
            for (int64_t o = 0; o < out; o++)
                dx[idx[o]] += dy[o];
            continue;
        }
        for (int64_t oh = 0; oh < g->oh; oh++) {
            int64_t ih0 = oh * g->sh - g->pt;
            int64_t ih_lo = ih0 > 0 ? ih0 : 0, ih_hi = ih0 + g->kh < g->h ? ih0 + g->kh : g->h;
            for (int64_t ow = 0; ow < g->ow; ow++) {
                int64_t iw0 = ow * g->sw - g->pl;
                int64_t iw_lo = iw0 > 0 ? iw0 : 0;
                int64_t iw_hi = iw0 + g->kw < g->w ? iw0 + g->kw : g->w;
                const int64_t o = (oh * g->ow + ow) * c;
                for (int64_t ih = ih_lo; ih < ih_hi; ih++)
                    for (int64_t iw = iw_lo; iw < iw_hi; iw++) {
                        int32_t base = (int32_t)((ih * g->w + iw) * c);
                        int64_t ch = 0;
#ifdef __AVX2__
                        const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                        for (; ch + 8 <= c; ch += 8) {
                            __m256i want =
                                _mm256_add_epi32(_mm256_set1_epi32(base + (int32_t)ch), iota);
                            __m256i got =
                                _mm256_loadu_si256((const __m256i *)(const void *)(idx + o + ch));
                            __m256 won = _mm256_castsi256_ps(_mm256_cmpeq_epi32(got, want));
                            _mm256_storeu_ps(dx + base + ch,
                                             _mm256_and_ps(won, _mm256_loadu_ps(dy + o + ch)));
                        }
#endif
                        for (; ch < c; ch++)
                            dx[base + ch] = idx[o + ch] == base + (int32_t)ch ? dy[o + ch] : 0.0f;
                    }
            }
        }
    }
}

static void pool_backward(dt__layer *l, dt__layer_step *s) {
    if (!s->dx.data) return; /* the first layer: nothing to propagate */
    struct pool_job j = {.s = s};
    pool_geometry(l, &j.g);
    dt_pool_run(s->pool, pool_backward_kernel, &j);
}

const dt__layer_ops dt__maxpool2d_ops = {
    .kind = "maxpool2d",
    .setup = pool_setup,
    .state_floats = pool_state_floats,
    .forward = pool_forward,
    .backward = pool_backward,
};

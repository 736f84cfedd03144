/*
 * maxpool2d.c - 2-D max pooling over NHWC batches.
 *
 * Design: kernel {kh, kw} (default 2x2), stride default = kernel, valid or same padding by
 * the TensorFlow rules (window-impl.h). Padded cells never win: a window only looks at the
 * input cells it covers, and every window covers at least one.
 *
 * Forward records, for every output element, which input element won (its offset within
 * the sample, an int32 stored in the layer's state, which is sized one float per output
 * element). Ties go to the first cell in row-major window order, as TensorFlow's argmax.
 * Backward zeroes dx and scatter-adds dy at those offsets. Forward splits the
 * (sample, output row) pairs over the pool; backward splits whole samples, so that
 * overlapping windows (stride < kernel) add into one sample's dx from one thread only, in a
 * fixed order.
 */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "core/assert-impl.h"
#include "nn/layer-impl.h"
#include "nn/window-impl.h"

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
        return dt_err_set(DT_ERR_SHAPE,
                          "maxpool2d '%s': kernel must be positive, got %lldx%lld", c->name,
                          (long long)c->kernel[0], (long long)c->kernel[1]);
    if (c->stride[0] < 0 || c->stride[1] < 0)
        return dt_err_set(DT_ERR_SHAPE,
                          "maxpool2d '%s': stride must be positive, got %lldx%lld", c->name,
                          (long long)c->stride[0], (long long)c->stride[1]);
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
    DT_ASSERT(sizeof(int32_t) == sizeof(float));
    return batch * dt_shape_numel(&l->out);
}

struct pool_job {
    const dt__layer_step *s;
    pool_geom g;
};

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
        const float *xs = s->x.data + n * sample;
        int64_t ih0 = oh * g->sh - g->pt;
        int64_t ih_lo = ih0 > 0 ? ih0 : 0, ih_hi = ih0 + g->kh < g->h ? ih0 + g->kh : g->h;
        for (int64_t ow = 0; ow < g->ow; ow++) {
            int64_t iw0 = ow * g->sw - g->pl;
            int64_t iw_lo = iw0 > 0 ? iw0 : 0, iw_hi = iw0 + g->kw < g->w ? iw0 + g->kw : g->w;
            int64_t o = (row * g->ow + ow) * c;
            float *y = s->y.data + o;
            int32_t *idx = idx_all + o;
            int first = 1;
            for (int64_t ih = ih_lo; ih < ih_hi; ih++)
                for (int64_t iw = iw_lo; iw < iw_hi; iw++) {
                    int32_t base = (int32_t)((ih * g->w + iw) * c);
                    const float *xp = xs + base;
                    if (first) {
                        for (int64_t ch = 0; ch < c; ch++) {
                            y[ch] = xp[ch];
                            idx[ch] = base + (int32_t)ch;
                        }
                        first = 0;
                        continue;
                    }
                    for (int64_t ch = 0; ch < c; ch++)
                        if (xp[ch] > y[ch]) {
                            y[ch] = xp[ch];
                            idx[ch] = base + (int32_t)ch;
                        }
                }
            DT_ASSERT(!first);
        }
    }
}

static void pool_forward(dt__layer *l, dt__layer_step *s) {
    DT_ASSERT(s->state != NULL);
    struct pool_job j = {.s = s};
    pool_geometry(l, &j.g);
    dt_pool_run(s->pool, pool_forward_kernel, &j);
}

static void pool_backward_kernel(void *arg, int ith, int nth) {
    const struct pool_job *j = arg;
    const pool_geom *g = &j->g;
    const dt__layer_step *s = j->s;
    const int64_t sample = g->h * g->w * g->c, out = g->oh * g->ow * g->c;
    const int32_t *idx_all = (const int32_t *)(const void *)s->state;
    int64_t lo, hi;
    dt_split(s->batch, ith, nth, &lo, &hi);
    for (int64_t n = lo; n < hi; n++) {
        float *dx = s->dx.data + n * sample;
        const float *dy = s->dy.data + n * out;
        const int32_t *idx = idx_all + n * out;
        memset(dx, 0, (size_t)sample * sizeof *dx);
        for (int64_t o = 0; o < out; o++) dx[idx[o]] += dy[o];
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

/*
 * conv_test.c - conv2d and maxpool2d, driven directly through their ops tables.
 *
 * A small harness plays the model's part: it runs setup, allocates x, y, dy, dx, state,
 * scratch and the parameters with exactly the sizes the layer declares (so that ASan sees
 * any overrun) and fills dt__layer_step. Checks: hand-computed values, output shapes
 * against the TensorFlow formulas, a naive double-precision reference, finite-difference
 * gradients, agreement across thread counts and chunk sizes, and every setup error.
 */
#include <stdint.h>

#include "dtrain/rng.h"
#include "dtrain/threadpool.h"
#include "nn/layer-impl.h"
#include "testing/dt_test.h"

/* conv2d.c: the column-buffer size per thread, in floats (shrunk here to force chunking),
 * and whether the direct kernels may be used (0 here to force im2col + GEMM). */
extern int64_t dt__conv2d_col_floats;
extern int dt__conv2d_direct;

typedef struct harness {
    dt__layer l;
    int64_t max_batch, batch;
    int64_t nin, nout; /* per sample */
    float *x, *y, *dy, *dx, *state, *scratch;
    float *pv[DT_LAYER_MAX_PARAMS], *pg[DT_LAYER_MAX_PARAMS];
} harness;

static float *alloc_floats(int64_t n) {
    return n > 0 ? calloc((size_t)n, sizeof(float)) : NULL;
}

static void harness_free(harness *h) {
    free(h->x);
    free(h->y);
    free(h->dy);
    free(h->dx);
    free(h->state);
    free(h->scratch);
    for (int i = 0; i < DT_LAYER_MAX_PARAMS; i++) {
        free(h->pv[i]);
        free(h->pg[i]);
    }
    memset(h, 0, sizeof *h);
}

/* Set up a layer for per-sample input `in` and batches of at most max_batch. */
static dt_err harness_init(harness *h, const dt__layer_ops *ops, const dt_layer_conf *conf,
                           dt_shape in, int64_t max_batch) {
    memset(h, 0, sizeof *h);
    h->l.ops = ops;
    h->l.conf = *conf;
    if (!h->l.conf.name[0]) snprintf(h->l.conf.name, sizeof h->l.conf.name, "%s_0", ops->kind);
    h->l.in = in;
    dt_err err = ops->setup(&h->l);
    if (err) return err;
    h->max_batch = h->batch = max_batch;
    h->nin = dt_shape_numel(&in);
    h->nout = dt_shape_numel(&h->l.out);
    h->x = alloc_floats(max_batch * h->nin);
    h->dx = alloc_floats(max_batch * h->nin);
    h->y = alloc_floats(max_batch * h->nout);
    h->dy = alloc_floats(max_batch * h->nout);
    if (ops->state_floats) h->state = alloc_floats(ops->state_floats(&h->l, max_batch));
    if (ops->scratch_floats) /* conv2d sizes it for DT_LAYER_MAX_THREADS whatever it is told */
        h->scratch = alloc_floats(ops->scratch_floats(&h->l, max_batch, DT_LAYER_MAX_THREADS));
    for (int i = 0; i < h->l.nparams; i++) {
        dt_param *p = &h->l.params[i];
        int64_t n = dt_shape_numel(&p->value.shape);
        h->pv[i] = alloc_floats(n);
        h->pg[i] = alloc_floats(n);
        p->value.data = h->pv[i];
        p->grad.data = h->pg[i];
        p->grad.shape = p->value.shape;
    }
    return DT_OK;
}

static int64_t param_numel(const harness *h, int i) {
    return dt_shape_numel(&h->l.params[i].value.shape);
}

static dt__layer_step harness_step(harness *h, dt_pool *pool, int with_dx) {
    dt__layer_step s = {.pool = pool, .batch = h->batch, .training = 1};
    s.x.data = h->x;
    s.x.shape.ndim = h->l.in.ndim + 1;
    s.x.shape.dim[0] = h->batch;
    for (int i = 0; i < h->l.in.ndim; i++)
        s.x.shape.dim[i + 1] = h->l.in.dim[i];
    s.dx = s.x;
    s.dx.data = with_dx ? h->dx : NULL;
    s.y.data = h->y;
    s.y.shape.ndim = h->l.out.ndim + 1;
    s.y.shape.dim[0] = h->batch;
    for (int i = 0; i < h->l.out.ndim; i++)
        s.y.shape.dim[i + 1] = h->l.out.dim[i];
    s.dy = s.y;
    s.dy.data = h->dy;
    s.state = h->state;
    s.scratch = h->scratch;
    return s;
}

static void harness_forward(harness *h, dt_pool *pool) {
    dt__layer_step s = harness_step(h, pool, 1);
    h->l.ops->forward(&h->l, &s);
}

static void harness_backward(harness *h, dt_pool *pool, int with_dx) {
    dt__layer_step s = harness_step(h, pool, with_dx);
    h->l.ops->backward(&h->l, &s);
}

static void fill_uniform(float *v, int64_t n, dt_rng *r, float lo, float hi) {
    for (int64_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * dt_rng_uniform(r);
}

static void harness_randomize(harness *h, uint64_t seed) {
    dt_rng r;
    dt_rng_seed(&r, seed);
    fill_uniform(h->x, h->max_batch * h->nin, &r, -1.0f, 1.0f);
    for (int i = 0; i < h->l.nparams; i++)
        fill_uniform(h->pv[i], param_numel(h, i), &r, -0.5f, 0.5f);
}

static dt_layer_conf conv_conf(int64_t filters, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                               dt_padding pad, dt_act act) {
    dt_layer_conf c = {.kind = DT_LAYER_CONV2D,
                       .filters = filters,
                       .kernel = {kh, kw},
                       .stride = {sh, sw},
                       .padding = pad,
                       .activation = act};
    snprintf(c.name, sizeof c.name, "conv");
    return c;
}

static dt_layer_conf pool_conf(int64_t kh, int64_t kw, int64_t sh, int64_t sw, dt_padding pad) {
    dt_layer_conf c = {
        .kind = DT_LAYER_MAXPOOL2D, .kernel = {kh, kw}, .stride = {sh, sw}, .padding = pad};
    snprintf(c.name, sizeof c.name, "pool");
    return c;
}

static dt_shape shape3(int64_t h, int64_t w, int64_t c) {
    return dt_shape_make(3, (int64_t[]){h, w, c});
}

/* ---- hand-computed conv2d ---- */

static const float X33[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const float K22[4] = {1, 2, 3, 4}; /* [kh=2][kw=2][c=1][f=1] */

/* 1x3x3x1 input, 2x2 kernel, bias 0.5: y must equal want + 0.5. */
static int conv_hand_case(dt_padding pad, int64_t stride, int64_t oh, int64_t ow,
                          const float *want) {
    harness h;
    dt_layer_conf c = conv_conf(1, 2, 2, stride, stride, pad, DT_ACT_NONE);
    int ok = harness_init(&h, &dt__conv2d_ops, &c, shape3(3, 3, 1), 1) == DT_OK;
    ok = ok && h.l.out.dim[0] == oh && h.l.out.dim[1] == ow && h.l.out.dim[2] == 1;
    if (ok) {
        memcpy(h.x, X33, sizeof X33);
        memcpy(h.pv[0], K22, sizeof K22);
        h.pv[1][0] = 0.5f;
        harness_forward(&h, NULL);
        for (int64_t i = 0; i < oh * ow; i++)
            if (h.y[i] != want[i] + 0.5f) {
                fprintf(stderr, "y[%lld] = %g, want %g\n", (long long)i, h.y[i], want[i] + 0.5f);
                ok = 0;
            }
    }
    harness_free(&h);
    return ok;
}

static void test_conv_forward_hand(void) {
    /* valid, stride 1: every full 2x2 window */
    DT_CHECK(conv_hand_case(DT_PADDING_VALID, 1, 2, 2, (const float[]){37, 47, 67, 77}));
    /* same, stride 1: pad_total 1, all of it bottom/right */
    DT_CHECK(conv_hand_case(DT_PADDING_SAME, 1, 3, 3,
                            (const float[]){37, 47, 21, 67, 77, 33, 23, 26, 9}));
    /* valid, stride 2: floor((3 - 2) / 2) + 1 = 1 */
    DT_CHECK(conv_hand_case(DT_PADDING_VALID, 2, 1, 1, (const float[]){37}));
    /* same, stride 2: ceil(3 / 2) = 2, pad_total = 1 at the bottom/right */
    DT_CHECK(conv_hand_case(DT_PADDING_SAME, 2, 2, 2, (const float[]){37, 21, 23, 9}));
}

static void test_conv_forward_same_3x3_pads_both_sides(void) {
    /* a 3x3 kernel of ones over the 3x3 input, same: pad 1 on every side */
    harness h;
    dt_layer_conf c = conv_conf(1, 3, 3, 1, 1, DT_PADDING_SAME, DT_ACT_NONE);
    DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(3, 3, 1), 1));
    memcpy(h.x, X33, sizeof X33);
    for (int i = 0; i < 9; i++)
        h.pv[0][i] = 1;
    harness_forward(&h, NULL);
    const float want[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28};
    int ok = 1;
    for (int i = 0; i < 9; i++)
        ok &= h.y[i] == want[i];
    harness_free(&h);
    DT_CHECK(ok);
}

static void test_conv_relu_and_channels_hand(void) {
    /* C=2, F=2, 1x1 spatial kernel over a 1x2 image: y = relu(x W + b) per pixel */
    harness h;
    dt_layer_conf c = conv_conf(2, 1, 1, 1, 1, DT_PADDING_VALID, DT_ACT_RELU);
    DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(1, 2, 2), 1));
    const float x[4] = {1, 2, 3, -1};  /* pixel 0: (1, 2); pixel 1: (3, -1) */
    const float w[4] = {1, -1, 1, -2}; /* [c][f]: c0 -> (1, -1), c1 -> (1, -2) */
    memcpy(h.x, x, sizeof x);
    memcpy(h.pv[0], w, sizeof w);
    h.pv[1][0] = 0.5f;
    h.pv[1][1] = 1.0f;
    harness_forward(&h, NULL);
    /* pixel 0: (3.5, -4) -> (3.5, 0); pixel 1: (2.5, 0) -> (2.5, 0) */
    const float want[4] = {3.5f, 0.0f, 2.5f, 0.0f};
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= h.y[i] == want[i];
    /* backward through relu: dy of ones; only the positive outputs pass */
    for (int i = 0; i < 4; i++)
        h.dy[i] = 1;
    harness_backward(&h, NULL, 1);
    const float dw[4] = {4, 0, 1, 0}, db[2] = {2, 0}, dx[4] = {1, 1, 1, 1};
    for (int i = 0; i < 4; i++)
        ok &= h.pg[0][i] == dw[i] && h.dx[i] == dx[i];
    ok &= h.pg[1][0] == db[0] && h.pg[1][1] == db[1];
    harness_free(&h);
    DT_CHECK(ok);
}

static void test_conv_backward_hand(void) {
    harness h;
    dt_layer_conf c = conv_conf(1, 2, 2, 1, 1, DT_PADDING_VALID, DT_ACT_NONE);
    DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(3, 3, 1), 1));
    memcpy(h.x, X33, sizeof X33);
    memcpy(h.pv[0], K22, sizeof K22);
    harness_forward(&h, NULL);
    for (int i = 0; i < 4; i++)
        h.dy[i] = 1;
    harness_backward(&h, NULL, 1);
    const float dw[4] = {12, 16, 24, 28};
    const float dx[9] = {1, 3, 2, 4, 10, 6, 3, 7, 4};
    int ok = h.pg[1][0] == 4.0f;
    for (int i = 0; i < 4; i++)
        ok &= h.pg[0][i] == dw[i];
    for (int i = 0; i < 9; i++)
        ok &= h.dx[i] == dx[i];
    harness_free(&h);
    DT_CHECK(ok);
}

/* ---- shapes ---- */

static int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

static void test_output_shapes(void) {
    /* {h, w, kh, kw, sh, sw}; expected: valid ceil((n - k + 1) / s), same ceil(n / s) */
    static const int64_t cases[][6] = {
        {28, 28, 5, 5, 1, 1}, {28, 28, 5, 5, 2, 2}, {7, 9, 3, 2, 2, 3},  {13, 11, 4, 4, 3, 2},
        {5, 5, 5, 5, 1, 1},   {6, 7, 1, 1, 4, 5},   {10, 3, 3, 3, 3, 1}, {9, 9, 2, 3, 5, 4},
        {1, 8, 1, 3, 1, 2},   {17, 4, 6, 2, 1, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t *q = cases[i];
        for (int pad = 0; pad < 2; pad++) {
            int64_t wh = pad ? ceil_div(q[0], q[4]) : ceil_div(q[0] - q[2] + 1, q[4]);
            int64_t ww = pad ? ceil_div(q[1], q[5]) : ceil_div(q[1] - q[3] + 1, q[5]);
            harness h;
            dt_layer_conf c = conv_conf(3, q[2], q[3], q[4], q[5], (dt_padding)pad, DT_ACT_NONE);
            DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(q[0], q[1], 2), 1));
            int ok = h.l.out.ndim == 3 && h.l.out.dim[0] == wh && h.l.out.dim[1] == ww &&
                     h.l.out.dim[2] == 3;
            harness_free(&h);
            if (!ok)
                DT_FAIL("conv case %zu pad %d: want %lldx%lld", i, pad, (long long)wh,
                        (long long)ww);
            dt_layer_conf p = pool_conf(q[2], q[3], q[4], q[5], (dt_padding)pad);
            DT_CHECK_OK(harness_init(&h, &dt__maxpool2d_ops, &p, shape3(q[0], q[1], 2), 1));
            ok = h.l.out.ndim == 3 && h.l.out.dim[0] == wh && h.l.out.dim[1] == ww &&
                 h.l.out.dim[2] == 2;
            harness_free(&h);
            if (!ok)
                DT_FAIL("pool case %zu pad %d: want %lldx%lld", i, pad, (long long)wh,
                        (long long)ww);
        }
    }
}

static void test_conv_params_declared(void) {
    harness h;
    dt_layer_conf c = conv_conf(32, 5, 3, 0, 0, DT_PADDING_SAME, DT_ACT_RELU);
    DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(28, 28, 4), 1));
    int ok = h.l.nparams == 2 && !strcmp(h.l.params[0].name, "kernel") &&
             !strcmp(h.l.params[1].name, "bias") && h.l.params[0].decay == 1 &&
             h.l.params[1].decay == 0 && h.l.params[0].value.shape.ndim == 4 &&
             h.l.params[0].value.shape.dim[0] == 5 && h.l.params[0].value.shape.dim[1] == 3 &&
             h.l.params[0].value.shape.dim[2] == 4 && h.l.params[0].value.shape.dim[3] == 32 &&
             h.l.params[1].value.shape.ndim == 1 && h.l.params[1].value.shape.dim[0] == 32 &&
             h.l.out.dim[0] == 28 && h.l.out.dim[1] == 28 && h.l.out.dim[2] == 32;
    harness_free(&h);
    DT_CHECK(ok);
    c.no_bias = 1;
    DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(28, 28, 4), 1));
    ok = h.l.nparams == 1 && !strcmp(h.l.params[0].name, "kernel");
    harness_free(&h);
    DT_CHECK(ok);
    /* maxpool: no parameters, defaults 2x2 / stride = kernel */
    dt_layer_conf p = pool_conf(0, 0, 0, 0, DT_PADDING_VALID);
    DT_CHECK_OK(harness_init(&h, &dt__maxpool2d_ops, &p, shape3(28, 28, 32), 1));
    ok = h.l.nparams == 0 && h.l.out.dim[0] == 14 && h.l.out.dim[1] == 14 && h.l.out.dim[2] == 32;
    harness_free(&h);
    DT_CHECK(ok);
}

/* ---- a naive reference in double ---- */

static void conv_reference(const harness *h, double *out) {
    const dt__layer *l = &h->l;
    int64_t H = l->in.dim[0], W = l->in.dim[1], C = l->in.dim[2];
    int64_t OH = l->out.dim[0], OW = l->out.dim[1], F = l->out.dim[2];
    int64_t kh = l->conf.kernel[0], kw = l->conf.kernel[1];
    int64_t sh = l->conf.stride[0] ? l->conf.stride[0] : 1;
    int64_t sw = l->conf.stride[1] ? l->conf.stride[1] : 1;
    int64_t pt = 0, pl = 0;
    if (l->conf.padding == DT_PADDING_SAME) {
        int64_t th = (OH - 1) * sh + kh - H, tw = (OW - 1) * sw + kw - W;
        pt = th > 0 ? th / 2 : 0;
        pl = tw > 0 ? tw / 2 : 0;
    }
    for (int64_t n = 0; n < h->batch; n++)
        for (int64_t i = 0; i < OH; i++)
            for (int64_t j = 0; j < OW; j++)
                for (int64_t f = 0; f < F; f++) {
                    double acc = l->nparams > 1 ? l->params[1].value.data[f] : 0.0;
                    for (int64_t a = 0; a < kh; a++)
                        for (int64_t b = 0; b < kw; b++) {
                            int64_t y = i * sh - pt + a, x = j * sw - pl + b;
                            if (y < 0 || y >= H || x < 0 || x >= W) continue;
                            for (int64_t c = 0; c < C; c++)
                                acc += (double)h->x[((n * H + y) * W + x) * C + c] *
                                       l->params[0].value.data[((a * kw + b) * C + c) * F + f];
                        }
                    if (l->conf.activation == DT_ACT_RELU && acc < 0) acc = 0;
                    out[((n * OH + i) * OW + j) * F + f] = acc;
                }
}

static void test_conv_forward_matches_reference(void) {
    /* {h, w, c, f, kh, kw, sh, sw, pad, relu} */
    static const int64_t cases[][10] = {
        {7, 7, 3, 4, 3, 3, 1, 1, 1, 1},
        {8, 6, 2, 3, 3, 2, 2, 2, 1, 0},
        {9, 8, 4, 2, 4, 3, 2, 3, 0, 1},
        {5, 5, 1, 6, 5, 5, 1, 1, 1, 0},
        {6, 6, 3, 2, 1, 1, 1, 1, 0, 1},
        {7, 5, 2, 3, 1, 1, 2, 2, 1, 0},
        {4, 4, 2, 2, 6, 6, 1, 1, 1, 0},
        {11, 13, 5, 7, 5, 3, 3, 2, 1, 1},
        /* F a multiple of 8: the direct kernels (with the default mode) */
        {9, 10, 1, 8, 5, 5, 1, 1, 1, 1},
        {8, 7, 3, 16, 3, 3, 2, 2, 1, 0},
        {6, 5, 2, 40, 2, 2, 1, 1, 0, 1},
        {7, 8, 1, 24, 3, 4, 2, 3, 0, 0},
        {9, 9, 16, 32, 5, 5, 1, 1, 1, 1},
        {7, 6, 8, 8, 4, 4, 1, 1, 1, 0},
        {5, 5, 8, 16, 17, 17, 1, 1, 1, 0}, /* 2312 taps: several tap blocks */
    };
    int64_t saved = dt__conv2d_col_floats;
    int saved_direct = dt__conv2d_direct;
    /* mode 0: as configured; 1: im2col + GEMM; 2: GEMM in many chunks straddling samples */
    for (int mode = 0; mode < 3; mode++) {
        dt__conv2d_direct = mode == 0 ? saved_direct : 0;
        dt__conv2d_col_floats = mode == 2 ? 50 : saved;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int64_t *q = cases[i];
            harness h;
            dt_layer_conf c = conv_conf(q[3], q[4], q[5], q[6], q[7], (dt_padding)q[8],
                                        q[9] ? DT_ACT_RELU : DT_ACT_NONE);
            DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(q[0], q[1], q[2]), 3));
            harness_randomize(&h, 100 + i);
            harness_forward(&h, NULL);
            int64_t n = h.batch * h.nout;
            double *ref = malloc((size_t)n * sizeof *ref);
            conv_reference(&h, ref);
            double worst = 0;
            for (int64_t e = 0; e < n; e++) {
                double d = fabs(ref[e] - h.y[e]);
                if (d > worst) worst = d;
            }
            free(ref);
            harness_free(&h);
            if (worst > 2e-5) {
                dt__conv2d_col_floats = saved;
                dt__conv2d_direct = saved_direct;
                DT_FAIL("case %zu (mode %d): off by %g", i, mode, worst);
            }
        }
    }
    dt__conv2d_col_floats = saved;
    dt__conv2d_direct = saved_direct;
}

/* ---- finite-difference gradient check ---- */

/* L = sum(r . y) in double after a forward pass; sig gets the piecewise-linear region the
 * point is in (relu signs, pool winners) so that a step across a kink can be told apart. */
static double grad_loss(harness *h, dt_pool *pool, const float *r, unsigned char *sig) {
    harness_forward(h, pool);
    int64_t n = h->batch * h->nout;
    double loss = 0;
    for (int64_t i = 0; i < n; i++)
        loss += (double)r[i] * h->y[i];
    int64_t k = 0;
    if (h->l.conf.activation == DT_ACT_RELU)
        for (int64_t i = 0; i < n; i++)
            sig[k++] = h->y[i] > 0;
    if (h->state) {
        int64_t ns = h->l.ops->state_floats(&h->l, h->batch) * (int64_t)sizeof(float);
        memcpy(sig + k, h->state, (size_t)ns);
    }
    return loss;
}

static int64_t sig_bytes(const harness *h) {
    int64_t n = h->l.conf.activation == DT_ACT_RELU ? h->batch * h->nout : 0;
    if (h->state) n += h->l.ops->state_floats(&h->l, h->batch) * (int64_t)sizeof(float);
    return n > 0 ? n : 1;
}

#define GRADCHECK_MAX 300

/* Compare backward's gradients with central differences for the input and parameter
 * elements; returns the worst relative error, or -1 when too many steps crossed a kink. */
static double gradcheck(harness *h, dt_pool *pool, float eps, uint64_t seed) {
    int64_t ny = h->batch * h->nout, nsig = sig_bytes(h);
    float *r = malloc((size_t)ny * sizeof *r);
    unsigned char *s0 = malloc((size_t)nsig), *s1 = malloc((size_t)nsig),
                  *s2 = malloc((size_t)nsig);
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    fill_uniform(r, ny, &rng, -1.0f, 1.0f);
    memset(s0, 0, (size_t)nsig);
    memset(s1, 0, (size_t)nsig);
    memset(s2, 0, (size_t)nsig);

    /* analytic */
    grad_loss(h, pool, r, s0);
    memcpy(h->dy, r, (size_t)ny * sizeof *r);
    harness_backward(h, pool, 1);
    int64_t nx = h->batch * h->nin;
    float *ax = malloc((size_t)nx * sizeof *ax);
    memcpy(ax, h->dx, (size_t)nx * sizeof *ax);
    float *ag[DT_LAYER_MAX_PARAMS] = {0};
    for (int p = 0; p < h->l.nparams; p++) {
        ag[p] = malloc((size_t)param_numel(h, p) * sizeof(float));
        memcpy(ag[p], h->pg[p], (size_t)param_numel(h, p) * sizeof(float));
    }

    double worst = 0;
    int64_t checked = 0, skipped = 0;
    for (int t = -1; t < h->l.nparams; t++) {
        float *v = t < 0 ? h->x : h->pv[t];
        const float *a = t < 0 ? ax : ag[t];
        int64_t n = t < 0 ? nx : param_numel(h, t);
        /* every element of small tensors; a seeded sample of GRADCHECK_MAX from larger ones */
        int64_t steps = n < GRADCHECK_MAX ? n : GRADCHECK_MAX;
        for (int64_t step = 0; step < steps; step++) {
            int64_t i = n <= GRADCHECK_MAX ? step : (int64_t)dt_rng_below(&rng, (uint64_t)n);
            float keep = v[i];
            v[i] = keep + eps;
            double lp = grad_loss(h, pool, r, s1);
            v[i] = keep - eps;
            double lm = grad_loss(h, pool, r, s2);
            v[i] = keep;
            checked++;
            if (memcmp(s1, s0, (size_t)nsig) || memcmp(s2, s0, (size_t)nsig)) {
                skipped++;
                continue;
            }
            /* the step actually taken in float */
            double num = (lp - lm) / ((double)(keep + eps) - (double)(keep - eps));
            double den = fmax(1.0, fmax(fabs(num), fabs((double)a[i])));
            double err = fabs(num - a[i]) / den;
            if (err > worst) worst = err;
        }
    }
    free(r);
    free(s0);
    free(s1);
    free(s2);
    free(ax);
    for (int p = 0; p < h->l.nparams; p++)
        free(ag[p]);
    if (getenv("DT_GRADCHECK_VERBOSE"))
        fprintf(stderr, "gradcheck: %lld checked, %lld skipped, worst %g\n", (long long)checked,
                (long long)skipped, worst);
    return skipped * 10 > checked ? -1.0 : worst;
}

static void test_conv_gradcheck(void) {
    /* {h, w, c, f, kh, kw, sh, sw, pad, relu, no_bias, batch} */
    static const int64_t cases[][12] = {
        {5, 5, 2, 3, 3, 3, 1, 1, 0, 0, 0, 2}, /* C>1, F>1, valid */
        {6, 5, 3, 2, 3, 2, 2, 2, 1, 1, 0, 2}, /* same, stride 2, relu */
        {7, 7, 1, 4, 5, 5, 1, 1, 1, 1, 0, 2}, /* C=1, 5x5 same, relu (first CNN layer) */
        {5, 6, 2, 2, 2, 3, 2, 3, 0, 0, 1, 3}, /* valid, strides (2, 3), no bias */
        {4, 3, 3, 4, 1, 1, 1, 1, 0, 1, 0, 2}, /* 1x1 stride 1: GEMM without im2col */
        {5, 5, 2, 3, 1, 1, 2, 2, 1, 0, 0, 2}, /* 1x1 stride 2 */
        {6, 6, 4, 3, 4, 4, 1, 1, 1, 0, 0, 1}, /* even kernel, same: asymmetric padding */
        /* F a multiple of 8: direct forward and dW */
        {7, 7, 1, 8, 5, 5, 1, 1, 1, 1, 0, 2},  /* C=1, 5x5 same, relu */
        {6, 7, 3, 16, 3, 3, 2, 2, 1, 0, 0, 2}, /* stride 2 */
        {5, 5, 2, 40, 2, 2, 1, 1, 0, 1, 1, 1}, /* F = 32 + 8, no bias */
        /* C a multiple of 8 and stride 1: direct dx as well */
        {6, 6, 8, 8, 3, 3, 1, 1, 1, 1, 0, 2},  /* same, relu */
        {5, 6, 16, 8, 2, 3, 1, 1, 1, 0, 0, 1}, /* even kernel, same: asymmetric padding */
        {6, 5, 8, 16, 3, 2, 1, 1, 0, 0, 0, 2}, /* valid */
        {5, 5, 8, 3, 3, 3, 1, 1, 1, 0, 0, 2},  /* F = 3: GEMM forward, direct dx */
    };
    int64_t saved = dt__conv2d_col_floats;
    int saved_direct = dt__conv2d_direct;
    dt_pool *pool = NULL;
    DT_CHECK_OK(dt_pool_init(&pool, 2));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t *q = cases[i];
        for (int mode = 0; mode < 3; mode++) {
            /* mode 0: as configured; 1: two threads, tiny chunks; 2: that with GEMM only */
            dt__conv2d_col_floats = mode ? 40 : saved;
            dt__conv2d_direct = mode == 2 ? 0 : saved_direct;
            harness h;
            dt_layer_conf c = conv_conf(q[3], q[4], q[5], q[6], q[7], (dt_padding)q[8],
                                        q[9] ? DT_ACT_RELU : DT_ACT_NONE);
            c.no_bias = (int)q[10];
            DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(q[0], q[1], q[2]), q[11]));
            harness_randomize(&h, 7 + i);
            /* relu: a smaller step, so that few steps cross a kink */
            double worst = gradcheck(&h, mode ? pool : NULL, q[9] ? 1e-3f : 1e-2f, 31 + i);
            harness_free(&h);
            if (!(worst >= 0 && worst < 1e-3)) {
                dt__conv2d_col_floats = saved;
                dt__conv2d_direct = saved_direct;
                dt_pool_free(pool);
                DT_FAIL("case %zu mode %d: worst relative error %g", i, mode, worst);
            }
        }
    }
    dt__conv2d_col_floats = saved;
    dt__conv2d_direct = saved_direct;
    dt_pool_free(pool);
}

static void test_conv_first_layer_skips_dx(void) {
    /* dx.data == NULL: the weight gradients are the same and nothing touches dx */
    harness h;
    dt_layer_conf c = conv_conf(3, 3, 3, 1, 1, DT_PADDING_SAME, DT_ACT_RELU);
    DT_CHECK_OK(harness_init(&h, &dt__conv2d_ops, &c, shape3(6, 6, 2), 2));
    harness_randomize(&h, 5);
    harness_forward(&h, NULL);
    fill_uniform(h.dy, 2 * h.nout, &(dt_rng){{1, 2, 3, 4}}, -1, 1);
    float *dy = malloc((size_t)(2 * h.nout) * sizeof *dy);
    memcpy(dy, h.dy, (size_t)(2 * h.nout) * sizeof *dy);
    harness_backward(&h, NULL, 1);
    float *dw = malloc((size_t)param_numel(&h, 0) * sizeof *dw);
    memcpy(dw, h.pg[0], (size_t)param_numel(&h, 0) * sizeof *dw);
    float db0 = h.pg[1][0];
    for (int64_t i = 0; i < 2 * h.nin; i++)
        h.dx[i] = 42.0f;
    memcpy(h.dy, dy, (size_t)(2 * h.nout) * sizeof *dy);
    harness_backward(&h, NULL, 0);
    int ok = h.pg[1][0] == db0;
    for (int64_t i = 0; i < param_numel(&h, 0); i++)
        ok &= h.pg[0][i] == dw[i];
    for (int64_t i = 0; i < 2 * h.nin; i++)
        ok &= h.dx[i] == 42.0f;
    free(dy);
    free(dw);
    harness_free(&h);
    DT_CHECK(ok);
}

/* ---- threads ---- */

/* Forward + backward of one config with a pool of nth threads (0 = no pool); the results
 * (y, dx, dW, db) are appended to out. */
static int64_t run_threads(const dt_layer_conf *c, dt_shape in, int64_t max_batch, int64_t batch,
                           int nth, float *out) {
    harness h;
    dt_pool *pool = NULL;
    if (nth > 0 && dt_pool_init(&pool, nth)) return -1;
    if (harness_init(&h, c->kind == DT_LAYER_CONV2D ? &dt__conv2d_ops : &dt__maxpool2d_ops, c, in,
                     max_batch)) {
        dt_pool_free(pool);
        return -1;
    }
    harness_randomize(&h, 99);
    h.batch = batch;
    harness_forward(&h, pool);
    dt_rng r;
    dt_rng_seed(&r, 3);
    fill_uniform(h.dy, batch * h.nout, &r, -1, 1);
    int64_t k = 0;
    memcpy(out + k, h.y, (size_t)(batch * h.nout) * sizeof(float));
    k += batch * h.nout;
    harness_backward(&h, pool, 1);
    memcpy(out + k, h.dx, (size_t)(batch * h.nin) * sizeof(float));
    k += batch * h.nin;
    for (int p = 0; p < h.l.nparams; p++) {
        memcpy(out + k, h.pg[p], (size_t)param_numel(&h, p) * sizeof(float));
        k += param_numel(&h, p);
    }
    harness_free(&h);
    dt_pool_free(pool);
    return k;
}

/* The direct kernels and the im2col + GEMM path give the same results (y, dx, dW, db), up
 * to float summation order. */
static void test_conv_direct_matches_gemm(void) {
    enum { MAXN = 200000 };
    float *a = malloc(MAXN * sizeof *a), *b = malloc(MAXN * sizeof *b);
    int saved = dt__conv2d_direct;
    struct {
        dt_layer_conf c;
        dt_shape in;
        int nth;
    } cases[] = {
        {conv_conf(32, 5, 5, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(28, 28, 1), 0},
        {conv_conf(32, 5, 5, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(28, 28, 1), 2},
        {conv_conf(16, 3, 3, 2, 2, DT_PADDING_SAME, DT_ACT_NONE), shape3(11, 10, 3), 2},
        {conv_conf(48, 3, 2, 1, 2, DT_PADDING_VALID, DT_ACT_RELU), shape3(9, 8, 2), 0},
        {conv_conf(8, 4, 4, 3, 3, DT_PADDING_SAME, DT_ACT_NONE), shape3(10, 10, 4), 0},
        {conv_conf(64, 5, 5, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(14, 14, 32), 2},
        {conv_conf(24, 3, 3, 1, 1, DT_PADDING_VALID, DT_ACT_NONE), shape3(9, 7, 16), 0},
        {conv_conf(12, 2, 2, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(6, 7, 8), 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt__conv2d_direct = saved;
        int64_t na = run_threads(&cases[i].c, cases[i].in, 5, 5, cases[i].nth, a);
        dt__conv2d_direct = 0;
        int64_t nb = run_threads(&cases[i].c, cases[i].in, 5, 5, cases[i].nth, b);
        dt__conv2d_direct = saved;
        double worst = 0;
        for (int64_t e = 0; na == nb && na > 0 && e < na; e++)
            worst = fmax(worst, fabs((double)a[e] - b[e]) / fmax(1.0, fabs((double)b[e])));
        /* relative: dW sums thousands of terms in a different order on the two paths */
        if (na < 0 || na != nb || na > MAXN || worst > 1e-4) {
            free(a);
            free(b);
            DT_FAIL("case %zu: sizes %lld, %lld, differ by %g", i, (long long)na, (long long)nb,
                    worst);
        }
    }
    free(a);
    free(b);
}

static void test_threads_agree(void) {
    enum { MAXN = 200000 };
    float *a = malloc(MAXN * sizeof *a), *b = malloc(MAXN * sizeof *b);
    int64_t saved = dt__conv2d_col_floats;
    struct {
        dt_layer_conf c;
        dt_shape in;
        int64_t max_batch, batch;
        int64_t col_floats;
    } cases[] = {
        {conv_conf(5, 3, 3, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(6, 7, 3), 7, 7, 100},
        {conv_conf(5, 3, 3, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(6, 7, 3), 7, 4, 100},
        {conv_conf(4, 5, 5, 2, 2, DT_PADDING_VALID, DT_ACT_NONE), shape3(11, 9, 2), 9, 9, 0},
        {conv_conf(6, 1, 1, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(5, 5, 3), 5, 2, 0},
        {conv_conf(16, 3, 3, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(6, 7, 1), 7, 7, 0},
        {conv_conf(16, 3, 3, 1, 1, DT_PADDING_SAME, DT_ACT_RELU), shape3(6, 5, 8), 7, 5, 0},
        {conv_conf(40, 2, 3, 2, 1, DT_PADDING_VALID, DT_ACT_NONE), shape3(7, 7, 2), 7, 3, 40},
        {pool_conf(3, 3, 2, 2, DT_PADDING_SAME), shape3(7, 6, 3), 5, 5, 0},
        {pool_conf(2, 2, 1, 1, DT_PADDING_VALID), shape3(5, 5, 2), 3, 2, 0},
        {pool_conf(2, 2, 2, 2, DT_PADDING_SAME), shape3(7, 8, 12), 5, 5, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt__conv2d_col_floats = cases[i].col_floats ? cases[i].col_floats : saved;
        int64_t na =
            run_threads(&cases[i].c, cases[i].in, cases[i].max_batch, cases[i].batch, 0, a);
        for (int nth = 1; nth <= 3; nth++) {
            int64_t nb =
                run_threads(&cases[i].c, cases[i].in, cases[i].max_batch, cases[i].batch, nth, b);
            if (na < 0 || na != nb || na > MAXN) {
                dt__conv2d_col_floats = saved;
                free(a);
                free(b);
                DT_FAIL("case %zu: sizes %lld vs %lld", i, (long long)na, (long long)nb);
            }
            double worst = 0;
            for (int64_t e = 0; e < na; e++)
                worst = fmax(worst, fabs((double)a[e] - b[e]));
            if (worst > 1e-5) {
                dt__conv2d_col_floats = saved;
                free(a);
                free(b);
                DT_FAIL("case %zu, %d threads: differ by %g", i, nth, worst);
            }
        }
    }
    dt__conv2d_col_floats = saved;
    free(a);
    free(b);
}

/* ---- maxpool ---- */

static void test_maxpool_hand(void) {
    harness h;
    /* 4x4x1, 2x2 stride 2 valid */
    dt_layer_conf p = pool_conf(2, 2, 0, 0, DT_PADDING_VALID);
    DT_CHECK_OK(harness_init(&h, &dt__maxpool2d_ops, &p, shape3(4, 4, 1), 1));
    const float x[16] = {1, 5, 2, 0, 3, 4, 8, 8, -1, -2, 0, 7, -3, -4, 6, 1};
    memcpy(h.x, x, sizeof x);
    harness_forward(&h, NULL);
    const float want[4] = {5, 8, -1, 7};
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= h.y[i] == want[i];
    const float dy[4] = {10, 20, 30, 40};
    memcpy(h.dy, dy, sizeof dy);
    harness_backward(&h, NULL, 1);
    /* winners: 5 at 1; 8 at 6 (the first of the tie 8, 8); -1 at 8; 7 at 11 */
    const float dx[16] = {0, 10, 0, 0, 0, 0, 20, 0, 30, 0, 0, 40, 0, 0, 0, 0};
    for (int i = 0; i < 16; i++)
        ok &= h.dx[i] == dx[i];
    harness_free(&h);
    DT_CHECK(ok);
}

static void test_maxpool_same_padding_never_wins(void) {
    /* 3x3x2 all negative, 2x2 stride 2 same: out 2x2, padding at the bottom/right */
    harness h;
    dt_layer_conf p = pool_conf(2, 2, 2, 2, DT_PADDING_SAME);
    DT_CHECK_OK(harness_init(&h, &dt__maxpool2d_ops, &p, shape3(3, 3, 2), 1));
    DT_CHECK(h.l.out.dim[0] == 2 && h.l.out.dim[1] == 2 && h.l.out.dim[2] == 2);
    for (int i = 0; i < 9; i++) {
        h.x[2 * i] = -(float)(i + 1);     /* channel 0: -1 .. -9 */
        h.x[2 * i + 1] = -(float)(9 - i); /* channel 1: -9 .. -1 */
    }
    harness_forward(&h, NULL);
    /* windows: {0,1,3,4} {2,5} {6,7} {8} */
    const float want[8] = {-1, -5, -3, -4, -7, -2, -9, -1};
    int ok = 1;
    for (int i = 0; i < 8; i++)
        ok &= h.y[i] == want[i];
    for (int i = 0; i < 8; i++)
        h.dy[i] = (float)(i + 1);
    harness_backward(&h, NULL, 1);
    float dx[18] = {0};
    dx[2 * 0] = 1;     /* ch0 window 0 -> cell 0 */
    dx[2 * 4 + 1] = 2; /* ch1 window 0 -> cell 4 */
    dx[2 * 2] = 3;     /* ch0 window 1 -> cell 2 */
    dx[2 * 5 + 1] = 4; /* ch1 window 1 -> cell 5 */
    dx[2 * 6] = 5;
    dx[2 * 7 + 1] = 6;
    dx[2 * 8] = 7;
    dx[2 * 8 + 1] = 8;
    for (int i = 0; i < 18; i++)
        ok &= h.dx[i] == dx[i];
    harness_free(&h);
    DT_CHECK(ok);
}

static void test_maxpool_overlapping_windows_accumulate(void) {
    /* 1x3, kernel 1x2 stride 1: the middle max wins both windows */
    harness h;
    dt_layer_conf p = pool_conf(1, 2, 1, 1, DT_PADDING_VALID);
    DT_CHECK_OK(harness_init(&h, &dt__maxpool2d_ops, &p, shape3(1, 3, 1), 1));
    h.x[0] = 1;
    h.x[1] = 9;
    h.x[2] = 2;
    harness_forward(&h, NULL);
    DT_CHECK(h.y[0] == 9 && h.y[1] == 9);
    h.dy[0] = 1.5f;
    h.dy[1] = 2.0f;
    harness_backward(&h, NULL, 1);
    int ok = h.dx[0] == 0 && h.dx[1] == 3.5f && h.dx[2] == 0;
    harness_free(&h);
    DT_CHECK(ok);
}

/* Naive max pooling with first-max ties and its scatter-add backward, against the layer:
 * covers the vector paths (8 channels at a time), their remainders, and both backward
 * paths (windows tiling the input, and overlapping or gapped windows). */
static void test_maxpool_matches_reference(void) {
    static const int64_t cases[][8] = {
        /* h, w, c, kh, kw, sh, sw, pad */
        {8, 8, 8, 2, 2, 2, 2, 0},    {7, 9, 11, 2, 2, 2, 2, 1}, {7, 7, 16, 3, 3, 2, 2, 1},
        {9, 6, 19, 3, 2, 3, 2, 0},   {6, 6, 9, 2, 2, 3, 3, 0},  {5, 7, 8, 3, 3, 1, 1, 1},
        {28, 28, 32, 2, 2, 2, 2, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t *q = cases[i];
        harness h;
        dt_layer_conf p = pool_conf(q[3], q[4], q[5], q[6], (dt_padding)q[7]);
        DT_CHECK_OK(harness_init(&h, &dt__maxpool2d_ops, &p, shape3(q[0], q[1], q[2]), 2));
        dt_rng r;
        dt_rng_seed(&r, 70 + i);
        /* values from a small set, so that windows hold ties */
        for (int64_t e = 0; e < h.batch * h.nin; e++)
            h.x[e] = (float)dt_rng_below(&r, 9) - 4.0f;
        fill_uniform(h.dy, h.batch * h.nout, &r, -1, 1);
        harness_forward(&h, NULL);
        harness_backward(&h, NULL, 1);
        int64_t H = q[0], W = q[1], C = q[2], OH = h.l.out.dim[0], OW = h.l.out.dim[1];
        int64_t pt = 0, pl = 0;
        if (q[7]) {
            int64_t th = (OH - 1) * q[5] + q[3] - H, tw = (OW - 1) * q[6] + q[4] - W;
            pt = th > 0 ? th / 2 : 0;
            pl = tw > 0 ? tw / 2 : 0;
        }
        double *dx = calloc((size_t)(h.batch * h.nin), sizeof *dx);
        int ok = 1;
        for (int64_t n = 0; n < h.batch; n++)
            for (int64_t a = 0; a < OH; a++)
                for (int64_t b = 0; b < OW; b++)
                    for (int64_t ch = 0; ch < C; ch++) {
                        int64_t best = -1;
                        for (int64_t u = 0; u < q[3]; u++)
                            for (int64_t v = 0; v < q[4]; v++) {
                                int64_t y = a * q[5] - pt + u, x = b * q[6] - pl + v;
                                if (y < 0 || y >= H || x < 0 || x >= W) continue;
                                int64_t e = ((n * H + y) * W + x) * C + ch;
                                if (best < 0 || h.x[e] > h.x[best]) best = e;
                            }
                        int64_t o = ((n * OH + a) * OW + b) * C + ch;
                        ok &= best >= 0 && h.y[o] == h.x[best];
                        if (best >= 0) dx[best] += h.dy[o];
                    }
        for (int64_t e = 0; e < h.batch * h.nin; e++)
            ok &= fabs(dx[e] - h.dx[e]) < 1e-6;
        free(dx);
        harness_free(&h);
        if (!ok) DT_FAIL("case %zu differs from the reference", i);
    }
}

static void test_maxpool_gradcheck(void) {
    static const int64_t cases[][8] = {
        /* h, w, c, kh, kw, sh, sw, pad */
        {6, 6, 3, 2, 2, 2, 2, 0}, {7, 5, 2, 3, 3, 2, 2, 1},  {5, 6, 2, 2, 3, 1, 2, 0},
        {5, 5, 1, 3, 2, 3, 1, 1}, {6, 6, 10, 2, 2, 2, 2, 0},
    };
    dt_pool *pool = NULL;
    DT_CHECK_OK(dt_pool_init(&pool, 2));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t *q = cases[i];
        harness h;
        dt_layer_conf p = pool_conf(q[3], q[4], q[5], q[6], (dt_padding)q[7]);
        DT_CHECK_OK(harness_init(&h, &dt__maxpool2d_ops, &p, shape3(q[0], q[1], q[2]), 2));
        harness_randomize(&h, 50 + i);
        double worst = gradcheck(&h, i % 2 ? pool : NULL, 1e-3f, 60 + i);
        harness_free(&h);
        if (!(worst >= 0 && worst < 1e-3)) {
            dt_pool_free(pool);
            DT_FAIL("case %zu: worst relative error %g", i, worst);
        }
    }
    dt_pool_free(pool);
}

/* ---- setup errors ---- */

static dt_err setup_only(const dt__layer_ops *ops, dt_layer_conf c, dt_shape in) {
    dt__layer l = {.ops = ops, .conf = c, .in = in};
    return ops->setup(&l);
}

static void test_conv_setup_errors(void) {
    const dt__layer_ops *o = &dt__conv2d_ops;
    dt_layer_conf ok = conv_conf(4, 3, 3, 1, 1, DT_PADDING_VALID, DT_ACT_NONE);
    snprintf(ok.name, sizeof ok.name, "c7");
    DT_CHECK_OK(setup_only(o, ok, shape3(5, 5, 2)));
    DT_CHECK_ERR(setup_only(o, ok, dt_shape_make(2, (int64_t[]){5, 5})), DT_ERR_SHAPE,
                 "conv2d 'c7': input [5, 5] is not 3-D");
    DT_CHECK_ERR(setup_only(o, ok, dt_shape_make(1, (int64_t[]){25})), DT_ERR_SHAPE, "is not 3-D");
    DT_CHECK_ERR(setup_only(o, ok, dt_shape_make(4, (int64_t[]){1, 5, 5, 2})), DT_ERR_SHAPE,
                 "input [1, 5, 5, 2] is not 3-D");
    DT_CHECK_ERR(setup_only(o, ok, shape3(5, 0, 2)), DT_ERR_SHAPE, "empty dimension");
    DT_CHECK_ERR(setup_only(o, ok, shape3(2, 5, 2)), DT_ERR_SHAPE,
                 "conv2d 'c7': kernel 3x3 is larger than the input 2x5 with valid padding");
    DT_CHECK_ERR(setup_only(o, ok, shape3(5, 2, 2)), DT_ERR_SHAPE, "larger than the input 5x2");
    dt_layer_conf same = ok;
    same.padding = DT_PADDING_SAME;
    DT_CHECK_OK(setup_only(o, same, shape3(2, 2, 2))); /* same padding: allowed */
    dt_layer_conf c = ok;
    c.filters = 0;
    DT_CHECK_ERR(setup_only(o, c, shape3(5, 5, 2)), DT_ERR_SHAPE,
                 "conv2d 'c7': filters must be positive, got 0");
    c.filters = -3;
    DT_CHECK_ERR(setup_only(o, c, shape3(5, 5, 2)), DT_ERR_SHAPE, "filters must be positive");
    c = ok;
    c.kernel[0] = 0;
    DT_CHECK_ERR(setup_only(o, c, shape3(5, 5, 2)), DT_ERR_SHAPE,
                 "conv2d 'c7': kernel must be positive, got 0x3");
    c = ok;
    c.kernel[1] = -2;
    DT_CHECK_ERR(setup_only(o, c, shape3(5, 5, 2)), DT_ERR_SHAPE, "kernel must be positive");
    c = ok;
    c.stride[1] = -1;
    DT_CHECK_ERR(setup_only(o, c, shape3(5, 5, 2)), DT_ERR_SHAPE,
                 "conv2d 'c7': stride must be positive, got 1x-1");
    c = ok;
    c.padding = (dt_padding)7;
    DT_CHECK_ERR(setup_only(o, c, shape3(5, 5, 2)), DT_ERR_SHAPE, "unknown padding 7");
    c = ok;
    c.kernel[0] = c.kernel[1] = 1 << 20;
    c.padding = DT_PADDING_SAME;
    DT_CHECK_ERR(setup_only(o, c, shape3(5, 5, 2)), DT_ERR_SHAPE, "too large");
}

static void test_maxpool_setup_errors(void) {
    const dt__layer_ops *o = &dt__maxpool2d_ops;
    dt_layer_conf ok = pool_conf(0, 0, 0, 0, DT_PADDING_VALID);
    snprintf(ok.name, sizeof ok.name, "p2");
    DT_CHECK_OK(setup_only(o, ok, shape3(2, 2, 1)));
    DT_CHECK_ERR(setup_only(o, ok, dt_shape_make(1, (int64_t[]){100})), DT_ERR_SHAPE,
                 "maxpool2d 'p2': input [100] is not 3-D");
    DT_CHECK_ERR(setup_only(o, ok, shape3(0, 4, 1)), DT_ERR_SHAPE, "empty dimension");
    DT_CHECK_ERR(setup_only(o, ok, shape3(1, 4, 1)), DT_ERR_SHAPE,
                 "maxpool2d 'p2': kernel 2x2 is larger than the input 1x4 with valid padding");
    dt_layer_conf same = ok;
    same.padding = DT_PADDING_SAME;
    DT_CHECK_OK(setup_only(o, same, shape3(1, 1, 1)));
    dt_layer_conf c = ok;
    c.kernel[1] = -2;
    DT_CHECK_ERR(setup_only(o, c, shape3(4, 4, 1)), DT_ERR_SHAPE,
                 "maxpool2d 'p2': kernel must be positive, got 0x-2");
    c = ok;
    c.stride[0] = -1;
    DT_CHECK_ERR(setup_only(o, c, shape3(4, 4, 1)), DT_ERR_SHAPE,
                 "maxpool2d 'p2': stride must be positive, got -1x0");
    c = ok;
    c.padding = (dt_padding)-1;
    DT_CHECK_ERR(setup_only(o, c, shape3(4, 4, 1)), DT_ERR_SHAPE, "unknown padding -1");
    DT_CHECK_ERR(setup_only(o, ok, shape3(1 << 16, 1 << 16, 1)), DT_ERR_SHAPE, "too large");
}

DT_TEST_MAIN(DT_T(test_conv_forward_hand), DT_T(test_conv_forward_same_3x3_pads_both_sides),
             DT_T(test_conv_relu_and_channels_hand), DT_T(test_conv_backward_hand),
             DT_T(test_output_shapes), DT_T(test_conv_params_declared),
             DT_T(test_conv_forward_matches_reference), DT_T(test_conv_gradcheck),
             DT_T(test_conv_first_layer_skips_dx), DT_T(test_conv_direct_matches_gemm),
             DT_T(test_threads_agree), DT_T(test_maxpool_hand),
             DT_T(test_maxpool_same_padding_never_wins),
             DT_T(test_maxpool_overlapping_windows_accumulate),
             DT_T(test_maxpool_matches_reference), DT_T(test_maxpool_gradcheck),
             DT_T(test_conv_setup_errors), DT_T(test_maxpool_setup_errors))

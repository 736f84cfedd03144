/* nn_test.c - layers, losses, initializers and the model. */
#include <float.h>

#include "dtrain/nn.h"
#include "nn/layer-impl.h"
#include "testing/dt_test.h"
#include "testing/gradcheck.h"

#define SHAPE(...)                                                                                 \
    dt_shape_make((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                       \
                  (int64_t[]){__VA_ARGS__})

static const dt_act all_acts[] = {DT_ACT_NONE, DT_ACT_RELU, DT_ACT_TANH, DT_ACT_SIGMOID,
                                  DT_ACT_SOFTMAX};

static void fill_uniform(float *v, int64_t n, float scale, uint64_t seed) {
    dt_rng r;
    dt_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        v[i] = scale * (2.0f * dt_rng_uniform(&r) - 1.0f);
}

/* ---- gradient checks ---- */

static void test_dense_gradcheck_each_activation(void) {
    dt_shape in = SHAPE(4);
    for (size_t a = 0; a < sizeof all_acts / sizeof all_acts[0]; a++) {
        for (int no_bias = 0; no_bias < 2; no_bias++) {
            dt_layer_conf c = {
                .kind = DT_LAYER_DENSE, .units = 5, .activation = all_acts[a], .no_bias = no_bias};
            dt_gradcheck_opts o = {.max_nonsmooth = all_acts[a] == DT_ACT_RELU ? 0.15 : 0};
            int fails = dt_gradcheck_layer(&c, &in, &o);
            if (fails)
                DT_FAIL("dense act %d no_bias %d: %d failures", (int)all_acts[a], no_bias, fails);
        }
    }
}

static void test_dense_gradcheck_on_two_threads(void) {
    dt_pool *pool = NULL;
    DT_CHECK_OK(dt_pool_init(&pool, 2));
    dt_shape in = SHAPE(7);
    dt_layer_conf c = {.kind = DT_LAYER_DENSE, .units = 33, .activation = DT_ACT_TANH};
    dt_gradcheck_opts o = {.batch = 9, .pool = pool};
    int fails = dt_gradcheck_layer(&c, &in, &o);
    dt_pool_free(pool);
    DT_CHECK(fails == 0);
}

static void test_flatten_gradcheck(void) {
    dt_shape in = SHAPE(2, 3, 2);
    dt_layer_conf flat = {.kind = DT_LAYER_FLATTEN};
    DT_CHECK(dt_gradcheck_layer(&flat, &in, NULL) == 0);
    dt_layer_conf two[] = {{.kind = DT_LAYER_FLATTEN},
                           {.kind = DT_LAYER_DENSE, .units = 3, .activation = DT_ACT_SIGMOID}};
    DT_CHECK(dt_gradcheck_model(two, 2, &in, NULL) == 0);
}

static void test_activation_layer_gradcheck(void) {
    dt_shape in = SHAPE(2, 5); /* softmax runs over the last dimension */
    for (size_t a = 0; a < sizeof all_acts / sizeof all_acts[0]; a++) {
        dt_layer_conf c = {.kind = DT_LAYER_ACTIVATION, .activation = all_acts[a]};
        dt_gradcheck_opts o = {.max_nonsmooth = all_acts[a] == DT_ACT_RELU ? 0.15 : 0};
        int fails = dt_gradcheck_layer(&c, &in, &o);
        if (fails) DT_FAIL("activation %d: %d failures", (int)all_acts[a], fails);
    }
}

static void test_dropout_gradcheck_with_fixed_mask(void) {
    dt_shape in = SHAPE(8);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 6, .activation = DT_ACT_TANH},
                              {.kind = DT_LAYER_DROPOUT, .rate = 0.5f},
                              {.kind = DT_LAYER_DENSE, .units = 3}};
    dt_gradcheck_opts o = {.training = 1, .batch = 4};
    DT_CHECK(dt_gradcheck_model(layers, 3, &in, &o) == 0);
    o.training = 0;
    DT_CHECK(dt_gradcheck_model(layers, 3, &in, &o) == 0);
}

static void test_two_layer_model_gradcheck(void) {
    dt_shape in = SHAPE(6);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 7, .activation = DT_ACT_TANH},
                              {.kind = DT_LAYER_DENSE, .units = 4, .activation = DT_ACT_SOFTMAX}};
    /* cross-entropy: the final softmax moves into the loss */
    dt_gradcheck_opts o = {.cross_entropy = 1, .batch = 5};
    DT_CHECK(dt_gradcheck_model(layers, 2, &in, &o) == 0);
    /* mean squared error: the softmax stays in the model */
    o.cross_entropy = 0;
    DT_CHECK(dt_gradcheck_model(layers, 2, &in, &o) == 0);
    /* a standalone final softmax under cross-entropy, a relu and a dropout on the way */
    dt_shape img = SHAPE(3, 2, 2);
    dt_layer_conf deep[] = {{.kind = DT_LAYER_FLATTEN},
                            {.kind = DT_LAYER_DENSE, .units = 9, .activation = DT_ACT_RELU},
                            {.kind = DT_LAYER_DROPOUT, .rate = 0.25f},
                            {.kind = DT_LAYER_DENSE, .units = 5},
                            {.kind = DT_LAYER_ACTIVATION, .activation = DT_ACT_SOFTMAX}};
    dt_gradcheck_opts d = {.cross_entropy = 1, .training = 1, .max_nonsmooth = 0.05, .batch = 4};
    DT_CHECK(dt_gradcheck_model(deep, 5, &img, &d) == 0);
}

/* ---- dense against a double-precision reference, on every split path ---- */

static double act_ref(dt_act act, double v) {
    switch (act) {
    case DT_ACT_RELU:
        return v > 0 ? v : 0;
    case DT_ACT_TANH:
        return tanh(v);
    case DT_ACT_SIGMOID:
        return 1.0 / (1.0 + exp(-v));
    default:
        return v;
    }
}

/* One dense layer (batch n, in -> out) through the model against a plain double
 * implementation: output, weight, bias and input gradients under MSE. */
/* One forward and backward of a batch of n on a model built for max_batch (>= n). */
static int dense_vs_reference_at(dt_pool *pool, int64_t n, int64_t max_batch, int64_t in,
                                 int64_t out, dt_act act) {
    int bad = 1;
    dt_model *m = NULL;
    dt_shape shp = SHAPE(in);
    dt_layer_conf c = {.kind = DT_LAYER_DENSE, .units = out, .activation = act};
    float *x = malloc(sizeof(float) * (size_t)(n * in));
    float *t = malloc(sizeof(float) * (size_t)(n * out));
    double *y = calloc((size_t)(n * out), sizeof *y), *dz = calloc((size_t)(n * out), sizeof *dz);
    if (!x || !t || !y || !dz || dt_model_init(&m, &shp, &c, 1, DT_LOSS_MSE, max_batch, pool))
        goto out;
    dt_model_init_params(m, 5);
    dt_param *w = dt_model_param(m, 0), *b = dt_model_param(m, 1);
    fill_uniform(b->value.data, out, 0.5f, 6);
    fill_uniform(x, n * in, 1.0f, 7);
    fill_uniform(t, n * out, 1.0f, 8);
    dt_model_want_input_grad(m, 1);
    const dt_tensor *yt;
    double loss;
    if (dt_model_forward(m, x, n, 1, NULL, &yt) || dt_model_loss(m, NULL, t, &loss, NULL)) goto out;
    dt_model_backward(m);
    /* reference */
    for (int64_t r = 0; r < n; r++) {
        for (int64_t j = 0; j < out; j++) {
            double s = b->value.data[j];
            for (int64_t i = 0; i < in; i++)
                s += (double)x[r * in + i] * w->value.data[i * out + j];
            y[r * out + j] = act == DT_ACT_SOFTMAX ? s : act_ref(act, s);
        }
        if (act == DT_ACT_SOFTMAX) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < out; j++)
                mx = fmax(mx, y[r * out + j]);
            for (int64_t j = 0; j < out; j++)
                sum += y[r * out + j] = exp(y[r * out + j] - mx);
            for (int64_t j = 0; j < out; j++)
                y[r * out + j] /= sum;
        }
    }
    double worst = 0;
    for (int64_t i = 0; i < n * out; i++)
        worst = fmax(worst, fabs(y[i] - yt->data[i]) / (1e-3 + fabs(y[i])));
    for (int64_t r = 0; r < n; r++) {
        double dot = 0;
        for (int64_t j = 0; j < out; j++) {
            double yy = y[r * out + j], g = 2.0 * (yy - t[r * out + j]) / (double)(n * out);
            dz[r * out + j] = g;
            dot += g * yy;
        }
        for (int64_t j = 0; j < out; j++) {
            double yy = y[r * out + j], g = dz[r * out + j];
            switch (act) {
            case DT_ACT_RELU:
                g = yy > 0 ? g : 0;
                break;
            case DT_ACT_TANH:
                g *= 1 - yy * yy;
                break;
            case DT_ACT_SIGMOID:
                g *= yy * (1 - yy);
                break;
            case DT_ACT_SOFTMAX:
                g = yy * (g - dot);
                break;
            default:
                break;
            }
            dz[r * out + j] = g;
        }
    }
    double gscale = 0;
    for (int64_t i = 0; i < n * out; i++)
        gscale = fmax(gscale, fabs(dz[i]));
    const float *dx = dt_model_input_grad(m);
    for (int64_t j = 0; j < out; j++) {
        double db = 0;
        for (int64_t r = 0; r < n; r++)
            db += dz[r * out + j];
        worst = fmax(worst, fabs(db - b->grad.data[j]) / (1e-3 * gscale + fabs(db)));
        for (int64_t i = 0; i < in; i++) {
            double dw = 0;
            for (int64_t r = 0; r < n; r++)
                dw += (double)x[r * in + i] * dz[r * out + j];
            worst = fmax(worst, fabs(dw - w->grad.data[i * out + j]) / (1e-3 * gscale + fabs(dw)));
        }
    }
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < in; i++) {
            double d = 0;
            for (int64_t j = 0; j < out; j++)
                d += dz[r * out + j] * w->value.data[i * out + j];
            worst = fmax(worst, fabs(d - dx[r * in + i]) / (1e-3 * gscale + fabs(d)));
        }
    bad = worst > 1e-3;
    if (bad)
        fprintf(stderr, "dense %lldx%lld->%lld act %d: worst relative error %g\n", (long long)n,
                (long long)in, (long long)out, (int)act, worst);
out:
    dt_model_free(m);
    free(x);
    free(t);
    free(y);
    free(dz);
    return bad;
}

static int dense_vs_reference(dt_pool *pool, int64_t n, int64_t in, int64_t out, dt_act act) {
    return dense_vs_reference_at(pool, n, n, in, out, act);
}

static void test_dense_matches_reference_on_every_split(void) {
    for (int threads = 1; threads <= 3; threads++) {
        dt_pool *pool = NULL;
        DT_CHECK_OK(dt_pool_init(&pool, threads));
        int bad = 0;
        for (size_t a = 0; a < sizeof all_acts / sizeof all_acts[0]; a++) {
            bad += dense_vs_reference(pool, 3, 5, 4, all_acts[a]);      /* small: one thread */
            bad += dense_vs_reference(pool, 70, 50, 80, all_acts[a]);   /* batch rows split */
            bad += dense_vs_reference(pool, 16, 100, 200, all_acts[a]); /* columns split */
            bad += dense_vs_reference(pool, 70, 50, 160, all_acts[a]);  /* wide: columns */
            bad += dense_vs_reference(pool, 24, 300, 40, all_acts[a]);  /* rows of W */
            bad += dense_vs_reference(pool, 24, 301, 40, all_acts[a]);  /* ... split unevenly */
        }
        if (threads == 2) {
            /* rows of W backward, but the forward's partial products (259 x 4100 floats)
             * above its scratch cap: columns */
            bad += dense_vs_reference(pool, 259, 130, 4100, DT_ACT_RELU);
            /* the same model at a batch whose partials fit the capped scratch: rows of W */
            bad += dense_vs_reference_at(pool, 255, 259, 130, 4100, DT_ACT_RELU);
        }
        dt_pool_free(pool);
        DT_CHECK(bad == 0);
    }
}

/* ---- dropout ---- */

static void test_dropout_mask_forward_backward(void) {
    enum { B = 50, F = 400 };
    dt_shape in = SHAPE(F);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DROPOUT, .rate = 0.3f}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 1, DT_LOSS_MSE, B, NULL));
    static float x[B * F], t[B * F];
    for (int i = 0; i < B * F; i++)
        x[i] = 1.0f + (float)(i % 7);
    dt_rng rng, ref;
    dt_rng_seed(&rng, 42);
    ref = rng;
    const dt_tensor *y;
    DT_CHECK_OK(dt_model_forward(m, x, B, 1, &rng, &y));
    dt_rng_u64(&ref); /* a training forward takes exactly one draw */
    DT_CHECK(!memcmp(&rng, &ref, sizeof rng));
    float scale = 1.0f / 0.7f;
    int dropped = 0;
    for (int i = 0; i < B * F; i++) {
        int keep = y->data[i] != 0.0f;
        dropped += !keep;
        if (keep) DT_CHECK_NEAR(y->data[i], x[i] * scale, 1e-5 * x[i]);
        t[i] = y->data[i] - 1.0f; /* dL/dy = 2 / (B F) everywhere */
    }
    DT_CHECK_NEAR((double)dropped / (B * F), 0.3, 0.02);
    dt_model_want_input_grad(m, 1);
    DT_CHECK_OK(dt_model_loss(m, NULL, t, NULL, NULL));
    dt_model_backward(m);
    const float *dx = dt_model_input_grad(m);
    float g = 2.0f / (B * F);
    for (int i = 0; i < B * F; i++) {
        if (y->data[i] == 0.0f)
            DT_CHECK(dx[i] == 0.0f);
        else
            DT_CHECK_NEAR(dx[i], g * scale, 1e-6 * g);
    }
    /* the same rng state gives the same mask, on any pool */
    dt_pool *pool = NULL;
    DT_CHECK_OK(dt_pool_init(&pool, 2));
    dt_model *m2 = NULL;
    DT_CHECK_OK(dt_model_init(&m2, &in, layers, 1, DT_LOSS_MSE, B, pool));
    dt_rng_seed(&rng, 42);
    const dt_tensor *y2;
    DT_CHECK_OK(dt_model_forward(m2, x, B, 1, &rng, &y2));
    DT_CHECK(!memcmp(y->data, y2->data, sizeof(float) * B * F));
    /* inference: identity */
    DT_CHECK_OK(dt_model_forward(m, x, B, 0, NULL, &y));
    DT_CHECK(!memcmp(y->data, x, sizeof x));
    /* training needs an rng */
    DT_CHECK_ERR(dt_model_forward(m, x, B, 1, NULL, &y), DT_ERR_ARG, "rng");
    /* ... unless the rate is 0: then dropout is the identity */
    dt_model *m0 = NULL;
    dt_layer_conf zero[] = {{.kind = DT_LAYER_DROPOUT}};
    DT_CHECK_OK(dt_model_init(&m0, &in, zero, 1, DT_LOSS_MSE, B, NULL));
    DT_CHECK_OK(dt_model_forward(m0, x, B, 1, NULL, &y));
    DT_CHECK(!memcmp(y->data, x, sizeof x));
    dt_model_free(m0);
    dt_model_free(m2);
    dt_pool_free(pool);
    dt_model_free(m);
}

static void test_dropout_rate_checked(void) {
    dt_shape in = SHAPE(4);
    float bad[] = {1.0f, -0.1f, 1.5f, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_layer_conf c[] = {{.kind = DT_LAYER_DENSE, .units = 4},
                             {.kind = DT_LAYER_DROPOUT, .rate = bad[i]}};
        dt_model *m = NULL;
        DT_CHECK_ERR(dt_model_init(&m, &in, c, 2, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                     "layer 1 (dropout_1): rate: must be in [0, 1)");
        DT_CHECK(m == NULL);
    }
}

/* ---- losses ---- */

static void test_softmax_cross_entropy_values(void) {
    const float logits[] = {1, 2, 3, 1, 1, 1};
    const int32_t labels[] = {2, 0};
    double loss;
    float d[6];
    int64_t correct;
    DT_CHECK_OK(dt_loss_softmax_cross_entropy(logits, labels, 2, 3, &loss, d, &correct));
    /* row 0: log(e + e^2 + e^3) - 3; row 1: log 3 */
    double l0 = log(exp(1.0) + exp(2.0) + exp(3.0)) - 3.0, l1 = log(3.0);
    DT_CHECK_NEAR(loss, (l0 + l1) / 2, 1e-6);
    DT_CHECK(correct == 2); /* row 1 ties: argmax is the first, label 0 */
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    DT_CHECK_NEAR(d[0], exp(1.0) / z / 2, 1e-7);
    DT_CHECK_NEAR(d[2], (exp(3.0) / z - 1) / 2, 1e-7);
    DT_CHECK_NEAR(d[3], (1.0 / 3 - 1) / 2, 1e-7);
    DT_CHECK_NEAR(d[4], 1.0 / 3 / 2, 1e-7);
    /* finite differences of the loss */
    float lg[12];
    int32_t lb[3] = {1, 3, 0};
    fill_uniform(lg, 12, 3.0f, 9);
    float dl[12];
    DT_CHECK_OK(dt_loss_softmax_cross_entropy(lg, lb, 3, 4, &loss, dl, NULL));
    for (int i = 0; i < 12; i++) {
        double lp, lm;
        float keep = lg[i];
        lg[i] = keep + 1e-2f;
        DT_CHECK_OK(dt_loss_softmax_cross_entropy(lg, lb, 3, 4, &lp, NULL, NULL));
        lg[i] = keep - 1e-2f;
        DT_CHECK_OK(dt_loss_softmax_cross_entropy(lg, lb, 3, 4, &lm, NULL, NULL));
        lg[i] = keep;
        DT_CHECK_NEAR(dl[i], (lp - lm) / 2e-2, 1e-4);
    }
}

static void test_softmax_cross_entropy_is_stable(void) {
    const float logits[] = {1000, 0, -1000, 88.8f, 89.0f, -1e30f};
    double loss;
    float d[6];
    DT_CHECK_OK(dt_loss_softmax_cross_entropy(logits, (int32_t[]){0, 1}, 2, 3, &loss, d, NULL));
    DT_CHECK(isfinite(loss));
    /* row 0 costs ~0, row 1 costs log(1 + e^-0.2) */
    DT_CHECK_NEAR(loss, log(1 + exp(-0.2)) / 2, 1e-5);
    for (int i = 0; i < 6; i++)
        DT_CHECK(isfinite(d[i]));
    DT_CHECK_OK(dt_loss_softmax_cross_entropy(logits, (int32_t[]){1, 1}, 2, 3, &loss, d, NULL));
    DT_CHECK_NEAR(loss, (1000 + log(1 + exp(-0.2))) / 2, 1e-3);
}

static void test_softmax_cross_entropy_rejects_labels(void) {
    const float logits[9] = {0};
    float d[9] = {0};
    double loss;
    DT_CHECK_ERR(dt_loss_softmax_cross_entropy(logits, (int32_t[]){0, 3, 1}, 3, 3, &loss, d, NULL),
                 DT_ERR_ARG, "label 3 of sample 1 is outside [0, 3)");
    DT_CHECK_ERR(dt_loss_softmax_cross_entropy(logits, (int32_t[]){0, 1, -1}, 3, 3, &loss, d, NULL),
                 DT_ERR_ARG, "sample 2");
    for (int i = 0; i < 9; i++)
        DT_CHECK(d[i] == 0.0f); /* untouched */
}

static void test_mse_values_and_gradient(void) {
    const float y[] = {1, 2, 0.5f, -1};
    const float t[] = {0, 4, 0.5f, 1};
    double loss;
    float d[4];
    dt_loss_mse(y, t, 2, 2, &loss, d);
    DT_CHECK_NEAR(loss, (1 + 4 + 0 + 4) / 4.0, 1e-9);
    DT_CHECK_NEAR(d[0], 0.5, 1e-7);
    DT_CHECK_NEAR(d[1], -1.0, 1e-7);
    DT_CHECK_NEAR(d[2], 0.0, 1e-7);
    DT_CHECK_NEAR(d[3], -1.0, 1e-7);
    float v[6], tt[6], g[6];
    fill_uniform(v, 6, 2.0f, 3);
    fill_uniform(tt, 6, 2.0f, 4);
    dt_loss_mse(v, tt, 3, 2, &loss, g);
    for (int i = 0; i < 6; i++) {
        double lp, lm;
        float keep = v[i];
        v[i] = keep + 1e-2f;
        dt_loss_mse(v, tt, 3, 2, &lp, NULL);
        v[i] = keep - 1e-2f;
        dt_loss_mse(v, tt, 3, 2, &lm, NULL);
        v[i] = keep;
        DT_CHECK_NEAR(g[i], (lp - lm) / 2e-2, 1e-4);
    }
}

static void test_model_mse_with_onehot_labels(void) {
    dt_shape in = SHAPE(3);
    dt_layer_conf c = {.kind = DT_LAYER_ACTIVATION, .activation = DT_ACT_NONE};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, &c, 1, DT_LOSS_MSE, 2, NULL));
    const float x[] = {0.5f, 1, 0, 0, 0, 2};
    double loss;
    int64_t correct;
    DT_CHECK_OK(dt_model_forward(m, x, 2, 0, NULL, NULL));
    DT_CHECK_OK(dt_model_loss(m, (int32_t[]){1, 0}, NULL, &loss, &correct));
    /* (0.25 + 0 + 0) + (1 + 0 + 4) over 6 */
    DT_CHECK_NEAR(loss, 5.25 / 6, 1e-7);
    DT_CHECK(correct == 1);
    DT_CHECK_ERR(dt_model_loss(m, (int32_t[]){1, 3}, NULL, &loss, NULL), DT_ERR_ARG,
                 "label 3 of sample 1");
    DT_CHECK_ERR(dt_model_loss(m, NULL, NULL, &loss, NULL), DT_ERR_ARG, "targets or labels");
    dt_model_free(m);
}

/* ---- model building and errors ---- */

static void test_mlp_param_names_and_count(void) {
    dt_shape in = SHAPE(28, 28, 1);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_FLATTEN},
                              {.kind = DT_LAYER_DENSE, .units = 256, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DENSE, .units = 128, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DENSE, .units = 10, .activation = DT_ACT_SOFTMAX}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 4, DT_LOSS_SOFTMAX_CROSS_ENTROPY, 64, NULL));
    DT_CHECK(dt_model_param_count(m) == 235146);
    DT_CHECK(dt_model_num_params(m) == 6);
    const char *names[] = {"dense_1/kernel", "dense_1/bias",   "dense_2/kernel",
                           "dense_2/bias",   "dense_3/kernel", "dense_3/bias"};
    for (int i = 0; i < 6; i++) {
        dt_param *p = dt_model_param(m, i);
        DT_CHECK(!strcmp(p->name, names[i]));
        DT_CHECK(p->decay == (i % 2 == 0));
        DT_CHECK(dt_shape_eq(&p->value.shape, &p->grad.shape));
        DT_CHECK(dt_model_find_param(m, names[i]) == p);
        for (int64_t j = 0; j < dt_tensor_numel(&p->value); j++)
            DT_CHECK(p->value.data[j] == 0);
    }
    dt_param *k1 = dt_model_find_param(m, "dense_1/kernel");
    DT_CHECK(dt_shape_eq(&k1->value.shape, &(dt_shape){2, {784, 256}}));
    DT_CHECK(
        dt_shape_eq(&dt_model_find_param(m, "dense_3/bias")->value.shape, &(dt_shape){1, {10}}));
    DT_CHECK(dt_model_find_param(m, "dense_4/kernel") == NULL);
    DT_CHECK(dt_shape_eq(dt_model_output_shape(m), &(dt_shape){1, {10}}));
    DT_CHECK(dt_shape_eq(dt_model_input_shape(m), &in));
    DT_CHECK(dt_model_max_batch(m) == 64);
    char buf[1024];
    dt_model_summary(m, buf, sizeof buf);
    DT_CHECK(strstr(buf, "flatten_1"));
    DT_CHECK(strstr(buf, "[784]"));
    DT_CHECK(strstr(buf, "200960"));
    DT_CHECK(strstr(buf, "softmax (in the loss)"));
    DT_CHECK(strstr(buf, "total params: 235146"));
    char tiny[16];
    dt_model_summary(m, tiny, sizeof tiny); /* truncates without overflowing */
    DT_CHECK(strlen(tiny) == sizeof tiny - 1);
    dt_model_free(m);
    dt_model_free(NULL);
}

static void test_layer_names(void) {
    dt_shape in = SHAPE(4);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 3, .name = "hidden"},
                              {.kind = DT_LAYER_ACTIVATION, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DENSE, .units = 2, .no_bias = 1}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 3, DT_LOSS_MSE, 4, NULL));
    DT_CHECK(dt_model_num_params(m) == 3);
    DT_CHECK(!strcmp(dt_model_param(m, 0)->name, "hidden/kernel"));
    DT_CHECK(!strcmp(dt_model_param(m, 1)->name, "hidden/bias"));
    DT_CHECK(!strcmp(dt_model_param(m, 2)->name, "dense_2/kernel"));
    DT_CHECK(dt_model_param_count(m) == 4 * 3 + 3 + 3 * 2);
    char buf[512];
    dt_model_summary(m, buf, sizeof buf);
    DT_CHECK(strstr(buf, "activation_1"));
    dt_model_free(m);
}

static void test_build_errors(void) {
    dt_model *m = NULL;
    dt_shape img = SHAPE(14, 14, 32), flat = SHAPE(8);
    dt_layer_conf unflat[] = {{.kind = DT_LAYER_ACTIVATION, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DENSE, .units = 10}};
    DT_CHECK_ERR(dt_model_init(&m, &img, unflat, 2, DT_LOSS_MSE, 8, NULL), DT_ERR_SHAPE,
                 "layer 1 (dense_1): expects a flat input, got [14, 14, 32]; add a flatten layer");
    DT_CHECK(m == NULL);
    dt_layer_conf act_only[] = {{.kind = DT_LAYER_ACTIVATION, .activation = DT_ACT_SOFTMAX}};
    DT_CHECK_ERR(dt_model_init(&m, &img, act_only, 1, DT_LOSS_SOFTMAX_CROSS_ENTROPY, 8, NULL),
                 DT_ERR_SHAPE, "layer 0 (activation_1): softmax cross-entropy needs one logit");
    dt_layer_conf no_units[] = {{.kind = DT_LAYER_DENSE}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, no_units, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                 "layer 0 (dense_1): units: must be in [1, ");
    dt_layer_conf huge[] = {{.kind = DT_LAYER_DENSE, .units = INT32_MAX}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, huge, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SHAPE,
                 "layer 0 (dense_1)");
    dt_layer_conf bad_kind[] = {{.kind = (dt_layer_kind)42}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, bad_kind, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                 "layer 0: unknown kind 42");
    dt_layer_conf bad_act[] = {{.kind = DT_LAYER_DENSE, .units = 2, .activation = (dt_act)9}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, bad_act, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                 "layer 0 (dense_1): activation: unknown function 9");
    dt_layer_conf bad_init[] = {{.kind = DT_LAYER_DENSE, .units = 2, .bias_init = (dt_init)17}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, bad_init, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                 "layer 0 (dense_1): bias_init: unknown initializer 17");
    dt_layer_conf dup[] = {{.kind = DT_LAYER_DENSE, .units = 2, .name = "a"},
                           {.kind = DT_LAYER_DENSE, .units = 2, .name = "a"}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, dup, 2, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                 "layer 1 (a): duplicate name (layer 0 has it)");
    dt_layer_conf clash[] = {{.kind = DT_LAYER_DENSE, .units = 2, .name = "dense_2"},
                             {.kind = DT_LAYER_DENSE, .units = 2}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, clash, 2, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                 "layer 1 (dense_2): duplicate name");
    dt_layer_conf slash[] = {{.kind = DT_LAYER_DENSE, .units = 2, .name = "a/b"}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, slash, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC, "'/'");
    dt_layer_conf longname[] = {{.kind = DT_LAYER_DENSE, .units = 2}};
    memset(longname[0].name, 'x', sizeof longname[0].name);
    DT_CHECK_ERR(dt_model_init(&m, &flat, longname, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                 "longer than 31");
    DT_CHECK_ERR(dt_model_init(&m, &flat, no_units, 0, DT_LOSS_MSE, 8, NULL), DT_ERR_SPEC,
                 "no layers");
    dt_layer_conf ok[] = {{.kind = DT_LAYER_DENSE, .units = 2}};
    DT_CHECK_ERR(dt_model_init(&m, &flat, ok, 1, (dt_loss_kind)5, 8, NULL), DT_ERR_SPEC, "loss");
    DT_CHECK_ERR(dt_model_init(&m, &flat, ok, 1, DT_LOSS_MSE, 0, NULL), DT_ERR_ARG, "max batch");
    dt_shape dims[] = {{.ndim = 0}, {.ndim = -1}, {.ndim = 9}, SHAPE(2, 2, 2, 2)};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        DT_CHECK_ERR(dt_model_init(&m, &dims[i], ok, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SHAPE,
                     "dimensions, not 1 to 3");
    dt_shape shapes[] = {SHAPE(3, 0), SHAPE(-2), SHAPE(INT32_MAX, INT32_MAX)};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        DT_CHECK_ERR(dt_model_init(&m, &shapes[i], ok, 1, DT_LOSS_MSE, 8, NULL), DT_ERR_SHAPE,
                     "input shape");
    DT_CHECK(m == NULL);
}

static void test_step_errors(void) {
    dt_shape in = SHAPE(3);
    dt_layer_conf c[] = {{.kind = DT_LAYER_DENSE, .units = 4}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, c, 1, DT_LOSS_SOFTMAX_CROSS_ENTROPY, 4, NULL));
    float x[15] = {0};
    double loss;
    DT_CHECK_ERR(dt_model_loss(m, (int32_t[]){0}, NULL, &loss, NULL), DT_ERR_STATE, "forward");
    DT_CHECK_ERR(dt_model_forward(m, x, 5, 1, NULL, NULL), DT_ERR_ARG,
                 "batch size 5 is not in [1, 4]");
    DT_CHECK_ERR(dt_model_forward(m, x, 0, 1, NULL, NULL), DT_ERR_ARG, "batch size 0");
    DT_CHECK_ERR(dt_model_forward(m, NULL, 2, 1, NULL, NULL), DT_ERR_ARG, "input");
    DT_CHECK_OK(dt_model_forward(m, x, 3, 1, NULL, NULL)); /* no dropout: no rng needed */
    DT_CHECK_ERR(dt_model_loss(m, (int32_t[]){0, 1, 4}, NULL, &loss, NULL), DT_ERR_ARG,
                 "label 4 of sample 2 is outside [0, 4)");
    DT_CHECK_ERR(dt_model_loss(m, NULL, NULL, &loss, NULL), DT_ERR_ARG, "labels");
    DT_CHECK_OK(dt_model_loss(m, (int32_t[]){0, 1, 3}, NULL, &loss, NULL));
    DT_CHECK_NEAR(loss, log(4.0), 1e-6); /* zero parameters: uniform softmax */
    DT_CHECK(dt_model_input_grad(m) == NULL);
    DT_CHECK_ERR(dt_model_predict(m, x, 0, x), DT_ERR_ARG, "batch size");
    float p[5 * 4];
    DT_CHECK_OK(dt_model_predict(m, x, 5, p));
    /* predict clobbered the step: loss needs a new forward */
    DT_CHECK_ERR(dt_model_loss(m, (int32_t[]){0, 1, 3}, NULL, &loss, NULL), DT_ERR_STATE,
                 "forward");
    dt_model_free(m);
}

/* ---- initializers and determinism ---- */

static void moments(const float *v, int64_t n, double *mean, double *std, double *maxabs) {
    double s = 0, s2 = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        s2 += (double)v[i] * v[i];
        mx = fmax(mx, fabs(v[i]));
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
    *maxabs = mx;
}

static void test_initializer_statistics(void) {
    enum { FI = 400, FO = 300 };
    static float data[FI * FO];
    dt_tensor t = {.data = data, .shape = SHAPE(FI, FO)};
    dt_rng r;
    double mean, std, mx;

    dt_rng_seed(&r, 1);
    dt__init_tensor(&t, DT_INIT_HE_NORMAL, FI, FO, &r);
    moments(data, FI * FO, &mean, &std, &mx);
    DT_CHECK(fabs(std / sqrt(2.0 / FI) - 1) < 0.05);
    DT_CHECK(fabs(mean) < 0.01 * std);
    DT_CHECK(mx <= 2 * sqrt(2.0 / FI) / 0.87962566103423978 * 1.0001); /* truncated at 2 sigma */

    dt__init_tensor(&t, DT_INIT_GLOROT_NORMAL, FI, FO, &r);
    moments(data, FI * FO, &mean, &std, &mx);
    DT_CHECK(fabs(std / sqrt(2.0 / (FI + FO)) - 1) < 0.05);

    double limit = sqrt(6.0 / (FI + FO));
    dt__init_tensor(&t, DT_INIT_GLOROT_UNIFORM, FI, FO, &r);
    moments(data, FI * FO, &mean, &std, &mx);
    DT_CHECK(mx <= limit);
    DT_CHECK(mx > 0.999 * limit);
    DT_CHECK(fabs(std / (limit / sqrt(3.0)) - 1) < 0.02);

    limit = sqrt(6.0 / FI);
    dt__init_tensor(&t, DT_INIT_HE_UNIFORM, FI, FO, &r);
    moments(data, FI * FO, &mean, &std, &mx);
    DT_CHECK(mx <= limit && mx > 0.999 * limit);

    dt__init_tensor(&t, DT_INIT_ZEROS, FI, FO, &r);
    moments(data, FI * FO, &mean, &std, &mx);
    DT_CHECK(mx == 0);
}

static void test_model_init_params_by_layer(void) {
    dt_shape in = SHAPE(500);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 200},
                              {.kind = DT_LAYER_DENSE,
                               .units = 100,
                               .kernel_init = DT_INIT_HE_NORMAL,
                               .bias_init = DT_INIT_GLOROT_UNIFORM}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 2, DT_LOSS_MSE, 1, NULL));
    dt_model_init_params(m, 3);
    double mean, std, mx;
    dt_param *p = dt_model_find_param(m, "dense_1/kernel");
    moments(p->value.data, 500 * 200, &mean, &std, &mx);
    DT_CHECK(mx <= sqrt(6.0 / 700) && mx > 0.99 * sqrt(6.0 / 700)); /* default glorot_uniform */
    p = dt_model_find_param(m, "dense_1/bias");
    moments(p->value.data, 200, &mean, &std, &mx);
    DT_CHECK(mx == 0); /* default zeros */
    p = dt_model_find_param(m, "dense_2/kernel");
    moments(p->value.data, 200 * 100, &mean, &std, &mx);
    DT_CHECK(fabs(std / sqrt(2.0 / 200) - 1) < 0.05);
    p = dt_model_find_param(m, "dense_2/bias");
    moments(p->value.data, 100, &mean, &std, &mx);
    DT_CHECK(mx > 0 && mx <= sqrt(6.0 / 200)); /* a vector: fan_in = fan_out = 100 */
    dt_model_free(m);
}

static void test_determinism(void) {
    dt_shape in = SHAPE(20);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 30, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DROPOUT, .rate = 0.2f},
                              {.kind = DT_LAYER_DENSE, .units = 5}};
    dt_model *a = NULL, *b = NULL;
    DT_CHECK_OK(dt_model_init(&a, &in, layers, 3, DT_LOSS_SOFTMAX_CROSS_ENTROPY, 16, NULL));
    DT_CHECK_OK(dt_model_init(&b, &in, layers, 3, DT_LOSS_SOFTMAX_CROSS_ENTROPY, 16, NULL));
    dt_model_init_params(a, 77);
    dt_model_init_params(b, 77);
    for (int i = 0; i < dt_model_num_params(a); i++) {
        dt_tensor *va = &dt_model_param(a, i)->value, *vb = &dt_model_param(b, i)->value;
        DT_CHECK(!memcmp(va->data, vb->data, sizeof(float) * (size_t)dt_tensor_numel(va)));
    }
    dt_model_init_params(b, 78);
    DT_CHECK(memcmp(dt_model_param(a, 0)->value.data, dt_model_param(b, 0)->value.data,
                    sizeof(float) * 20 * 30));
    float x[16 * 20];
    fill_uniform(x, 16 * 20, 1.0f, 5);
    const dt_tensor *y;
    float first[16 * 5];
    dt_rng r;
    dt_rng_seed(&r, 9);
    DT_CHECK_OK(dt_model_forward(a, x, 16, 1, &r, &y));
    memcpy(first, y->data, sizeof first);
    dt_rng_seed(&r, 9);
    DT_CHECK_OK(dt_model_forward(a, x, 16, 1, &r, &y));
    DT_CHECK(!memcmp(first, y->data, sizeof first));
    DT_CHECK_OK(dt_model_forward(a, x, 16, 0, NULL, &y));
    memcpy(first, y->data, sizeof first);
    DT_CHECK_OK(dt_model_forward(a, x, 16, 0, NULL, &y));
    DT_CHECK(!memcmp(first, y->data, sizeof first));
    dt_model_free(a);
    dt_model_free(b);
}

/* ---- predict ---- */

static void test_predict_applies_softmax_and_chunks(void) {
    dt_shape in = SHAPE(6);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 8, .activation = DT_ACT_TANH},
                              {.kind = DT_LAYER_DENSE, .units = 4, .activation = DT_ACT_SOFTMAX}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 2, DT_LOSS_SOFTMAX_CROSS_ENTROPY, 3, NULL));
    dt_model_init_params(m, 1);
    float x[7 * 6], p[7 * 4], logits[7 * 4];
    fill_uniform(x, 7 * 6, 2.0f, 2);
    for (int64_t off = 0; off < 7; off += 3) {
        const dt_tensor *y;
        int64_t nb = 7 - off < 3 ? 7 - off : 3;
        DT_CHECK_OK(dt_model_forward(m, x + off * 6, nb, 0, NULL, &y));
        memcpy(logits + off * 4, y->data, sizeof(float) * (size_t)(nb * 4));
    }
    DT_CHECK_OK(dt_model_predict(m, x, 7, p));
    int some_negative = 0;
    for (int i = 0; i < 7; i++) {
        double sum = 0, z = 0;
        for (int j = 0; j < 4; j++)
            z += exp(logits[i * 4 + j]);
        for (int j = 0; j < 4; j++) {
            sum += p[i * 4 + j];
            DT_CHECK_NEAR(p[i * 4 + j], exp(logits[i * 4 + j]) / z, 1e-6);
            some_negative |= logits[i * 4 + j] < 0;
        }
        DT_CHECK_NEAR(sum, 1.0, 1e-6);
    }
    DT_CHECK(some_negative); /* forward gave logits, not probabilities */
    dt_model_free(m);
}

/* ---- threads ---- */

static void test_one_and_two_threads_agree(void) {
    enum { B = 64, IN = 784 };
    dt_shape in = SHAPE(28, 28, 1);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_FLATTEN},
                              {.kind = DT_LAYER_DENSE, .units = 256, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DROPOUT, .rate = 0.1f},
                              {.kind = DT_LAYER_DENSE, .units = 128, .activation = DT_ACT_SIGMOID},
                              {.kind = DT_LAYER_DENSE, .units = 10, .activation = DT_ACT_SOFTMAX}};
    static float x[B * IN];
    int32_t labels[B];
    fill_uniform(x, B * IN, 1.0f, 11);
    for (int i = 0; i < B; i++)
        labels[i] = i % 10;
    dt_pool *p1 = NULL, *p2 = NULL;
    dt_model *m1 = NULL, *m2 = NULL;
    DT_CHECK_OK(dt_pool_init(&p1, 1));
    DT_CHECK_OK(dt_pool_init(&p2, 2));
    DT_CHECK_OK(dt_model_init(&m1, &in, layers, 5, DT_LOSS_SOFTMAX_CROSS_ENTROPY, B, p1));
    DT_CHECK_OK(dt_model_init(&m2, &in, layers, 5, DT_LOSS_SOFTMAX_CROSS_ENTROPY, B, p2));
    dt_model_init_params(m1, 4);
    dt_model_init_params(m2, 4);
    int64_t batches[] = {B, 20, 1}; /* the first two split by rows of W; 1: one thread */
    for (int bi = 0; bi < 3; bi++) {
        int64_t n = batches[bi];
        dt_rng r1, r2;
        dt_rng_seed(&r1, 3);
        dt_rng_seed(&r2, 3);
        const dt_tensor *y1, *y2;
        double l1, l2;
        DT_CHECK_OK(dt_model_forward(m1, x, n, 1, &r1, &y1));
        DT_CHECK_OK(dt_model_forward(m2, x, n, 1, &r2, &y2));
        for (int64_t i = 0; i < n * 10; i++)
            DT_CHECK_NEAR(y1->data[i], y2->data[i], 1e-5);
        DT_CHECK_OK(dt_model_loss(m1, labels, NULL, &l1, NULL));
        DT_CHECK_OK(dt_model_loss(m2, labels, NULL, &l2, NULL));
        DT_CHECK_NEAR(l1, l2, 1e-5);
        dt_model_backward(m1);
        dt_model_backward(m2);
        for (int pi = 0; pi < dt_model_num_params(m1); pi++) {
            dt_tensor *g1 = &dt_model_param(m1, pi)->grad, *g2 = &dt_model_param(m2, pi)->grad;
            for (int64_t i = 0; i < dt_tensor_numel(g1); i++)
                DT_CHECK_NEAR(g1->data[i], g2->data[i], 1e-5);
        }
    }
    dt_model_free(m1);
    dt_model_free(m2);
    dt_pool_free(p1);
    dt_pool_free(p2);
}

/* ---- training ---- */

/* Three Gaussian blobs in 2-D, trained by plain SGD written here. */
/* The backward hook: called once per layer with parameters, last layer first, when that
 * layer's gradients are final (a copy taken then equals the gradient after backward). */
typedef struct hook_log {
    dt_model *m;
    int layers[8], n;
    float first_grad[8]; /* grad[0] of the layer's kernel when the hook ran */
} hook_log;

static void record_layer(void *ctx, int layer) {
    hook_log *h = ctx;
    if (h->n >= 8) return;
    for (int i = 0; i < dt_model_num_params(h->m); i++)
        if (dt_model_param_layer(h->m, i) == layer) {
            h->first_grad[h->n] = dt_model_param(h->m, i)->grad.data[0];
            break;
        }
    h->layers[h->n++] = layer;
}

static void test_backward_hook_order(void) {
    dt_shape in = SHAPE(3);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 4, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DROPOUT, .rate = 0},
                              {.kind = DT_LAYER_DENSE, .units = 2}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 3, DT_LOSS_SOFTMAX_CROSS_ENTROPY, 2, NULL));
    dt_model_init_params(m, 3);
    DT_CHECK(dt_model_param_layer(m, 0) == 0 && dt_model_param_layer(m, 3) == 2);
    hook_log h = {.m = m};
    dt_model_set_backward_hook(m, record_layer, &h);
    float x[6] = {1, -2, 0.5f, 0.3f, 0.7f, -1};
    int32_t y[2] = {0, 1};
    double loss;
    DT_CHECK_OK(dt_model_forward(m, x, 2, 1, NULL, NULL));
    DT_CHECK_OK(dt_model_loss(m, y, NULL, &loss, NULL));
    dt_model_backward(m);
    DT_CHECK(h.n == 2 && h.layers[0] == 2 && h.layers[1] == 0);
    DT_CHECK(h.first_grad[0] == dt_model_param(m, 2)->grad.data[0]);
    DT_CHECK(h.first_grad[1] == dt_model_param(m, 0)->grad.data[0]);
    DT_CHECK(h.first_grad[0] != 0);
    dt_model_set_backward_hook(m, NULL, NULL);
    DT_CHECK_OK(dt_model_forward(m, x, 2, 1, NULL, NULL));
    DT_CHECK_OK(dt_model_loss(m, y, NULL, &loss, NULL));
    dt_model_backward(m);
    DT_CHECK(h.n == 2);
    dt_model_free(m);
}

/* Gradients of the summed loss (scale = batch) written into the caller's buffers: the same
 * values as the mean's times the batch, in the buffers bound, the model's own left as they
 * were; unbound, backward writes the model's own again. */
static void test_bound_grads_and_loss_scale(void) {
    dt_shape in = SHAPE(3);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 4, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DENSE, .units = 2}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 2, DT_LOSS_SOFTMAX_CROSS_ENTROPY, 3, NULL));
    dt_model_init_params(m, 7);
    float x[9] = {1, -2, 0.5f, 0.3f, 0.7f, -1, 2, 0.1f, -0.4f};
    int32_t y[3] = {0, 1, 1};
    double loss, scaled_loss;
    int np = dt_model_num_params(m);
    DT_CHECK(np == 4);
    float mean[4][16], bound[4][16];
    float *bufs[4];
    DT_CHECK_OK(dt_model_forward(m, x, 3, 1, NULL, NULL));
    DT_CHECK_OK(dt_model_loss(m, y, NULL, &loss, NULL));
    dt_model_backward(m);
    for (int i = 0; i < np; i++) {
        const dt_param *p = dt_model_param(m, i);
        DT_CHECK(dt_tensor_numel(&p->grad) <= 16);
        memcpy(mean[i], p->grad.data, (size_t)dt_tensor_numel(&p->grad) * sizeof(float));
        memset(bound[i], 0, sizeof bound[i]);
        bufs[i] = bound[i];
    }
    dt_model_bind_grads(m, bufs);
    dt_model_set_loss_grad_scale(m, 3);
    DT_CHECK_OK(dt_model_forward(m, x, 3, 1, NULL, NULL));
    DT_CHECK_OK(dt_model_loss(m, y, NULL, &scaled_loss, NULL));
    DT_CHECK(scaled_loss == loss); /* the loss itself is the mean still */
    dt_model_backward(m);
    for (int i = 0; i < np; i++) {
        const dt_param *p = dt_model_param(m, i);
        DT_CHECK(p->grad.data == bound[i]);
        for (int64_t k = 0; k < dt_tensor_numel(&p->grad); k++)
            DT_CHECK(fabsf(bound[i][k] - 3 * mean[i][k]) <= 1e-5f * (1 + fabsf(bound[i][k])));
    }
    DT_CHECK(bound[0][0] != 0);
    dt_model_bind_grads(m, NULL);
    for (int i = 0; i < np; i++) /* the model's own still hold the first backward's */
        DT_CHECK(memcmp(dt_model_param(m, i)->grad.data, mean[i],
                        (size_t)dt_tensor_numel(&dt_model_param(m, i)->grad) * sizeof(float)) == 0);
    dt_model_set_loss_grad_scale(m, 1);
    memset(bound, 0, sizeof bound);
    DT_CHECK_OK(dt_model_forward(m, x, 3, 1, NULL, NULL));
    DT_CHECK_OK(dt_model_loss(m, y, NULL, &loss, NULL));
    dt_model_backward(m);
    for (int i = 0; i < np; i++)
        for (int k = 0; k < 16; k++)
            DT_CHECK(bound[i][k] == 0);
    DT_CHECK(memcmp(dt_model_param(m, 0)->grad.data, mean[0], 12 * sizeof(float)) == 0);
    dt_model_free(m);
}

static void test_sgd_training_reduces_loss(void) {
    enum { N = 150, K = 3, B = 30 };
    static const float centers[K][2] = {{2, 0}, {-1, 1.7f}, {-1, -1.7f}};
    float x[N * 2];
    int32_t labels[N];
    dt_rng r;
    dt_rng_seed(&r, 12);
    for (int i = 0; i < N; i++) {
        labels[i] = i % K;
        x[2 * i] = centers[i % K][0] + 0.5f * dt_rng_normal(&r);
        x[2 * i + 1] = centers[i % K][1] + 0.5f * dt_rng_normal(&r);
    }
    dt_shape in = SHAPE(2);
    dt_layer_conf layers[] = {{.kind = DT_LAYER_DENSE, .units = 16, .activation = DT_ACT_RELU},
                              {.kind = DT_LAYER_DENSE, .units = K, .activation = DT_ACT_SOFTMAX}};
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 2, DT_LOSS_SOFTMAX_CROSS_ENTROPY, B, NULL));
    dt_model_init_params(m, 5);
    double first = 0, last = 0;
    int64_t correct = 0, total_correct = 0;
    for (int epoch = 0; epoch < 40; epoch++) {
        double sum = 0;
        total_correct = 0;
        for (int off = 0; off < N; off += B) {
            double loss;
            DT_CHECK_OK(dt_model_forward(m, x + 2 * off, B, 1, &r, NULL));
            DT_CHECK_OK(dt_model_loss(m, labels + off, NULL, &loss, &correct));
            dt_model_backward(m);
            for (int p = 0; p < dt_model_num_params(m); p++) {
                dt_param *prm = dt_model_param(m, p);
                for (int64_t i = 0; i < dt_tensor_numel(&prm->value); i++)
                    prm->value.data[i] -= 0.2f * prm->grad.data[i];
            }
            sum += loss;
            total_correct += correct;
        }
        if (epoch == 0) first = sum / (N / B);
        last = sum / (N / B);
    }
    DT_CHECK(first > 0.5);
    DT_CHECK(last < 0.1);
    DT_CHECK(total_correct >= N - 3);
    dt_model_free(m);
}

DT_TEST_MAIN(DT_T(test_dense_gradcheck_each_activation), DT_T(test_dense_gradcheck_on_two_threads),
             DT_T(test_flatten_gradcheck), DT_T(test_activation_layer_gradcheck),
             DT_T(test_dropout_gradcheck_with_fixed_mask), DT_T(test_two_layer_model_gradcheck),
             DT_T(test_dense_matches_reference_on_every_split),
             DT_T(test_dropout_mask_forward_backward), DT_T(test_dropout_rate_checked),
             DT_T(test_softmax_cross_entropy_values), DT_T(test_softmax_cross_entropy_is_stable),
             DT_T(test_softmax_cross_entropy_rejects_labels), DT_T(test_mse_values_and_gradient),
             DT_T(test_model_mse_with_onehot_labels), DT_T(test_mlp_param_names_and_count),
             DT_T(test_layer_names), DT_T(test_build_errors), DT_T(test_step_errors),
             DT_T(test_initializer_statistics), DT_T(test_model_init_params_by_layer),
             DT_T(test_determinism), DT_T(test_predict_applies_softmax_and_chunks),
             DT_T(test_one_and_two_threads_agree), DT_T(test_sgd_training_reduces_loss),
             DT_T(test_backward_hook_order), DT_T(test_bound_grads_and_loss_scale))

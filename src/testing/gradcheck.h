/*
 * gradcheck.h - finite-difference gradient checks of layers, through dt_model (tests only).
 *
 *     dt_layer_conf c = {.kind = DT_LAYER_DENSE, .units = 5, .activation = DT_ACT_TANH};
 *     dt_shape in = dt_shape_make(1, (int64_t[]){4});
 *     DT_CHECK(dt_gradcheck_layer(&c, &in, NULL) == 0);
 *
 * The layers are built into a dt_model exactly as training builds them (dt_model_init),
 * parameters initialized from a seed plus noise (so biases are not zero), inputs drawn from
 * U(-s, s). The loss L is the model's own: mean squared error against random targets (every
 * output gets an independent random weight in dL/dy, as a random projection would give) or
 * softmax cross-entropy against random labels. One forward/loss/backward gives the analytic
 * gradients of the input (dt_model_want_input_grad) and of every parameter; each entry e is
 * then compared with the central difference
 *
 *     c = (L(e + h) - L(e - h)) / 2h            (L summed in double; h = 1e-2 by default)
 *
 * and passes when |a - c| <= rtol * max(|a|, |c|) + atol * max|a over the tensor|.
 * Kinks (relu at 0, a max switching in maxpool) make a few entries fail legitimately; such
 * an entry shows one-sided differences that disagree by more than |a - c| (a kink inside
 * [e - h, e + h] makes them differ by ~2|a - c|, a wrong gradient on a smooth function does
 * not), and up to max_nonsmooth of the entries may be skipped that way.
 *
 * It also checks that backward overwrites rather than accumulates: a second identical step
 * must give bitwise-identical gradients. Forward passes in training mode (dropout) reseed
 * their rng before every call, so every evaluation sees the same mask.
 *
 * Returns the number of failed entries (0 = pass), -1 when the model cannot be built; the
 * details go to stderr.
 */
#ifndef DTRAIN_GRADCHECK_H
#define DTRAIN_GRADCHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/nn.h"
#include "dtrain/rng.h"

typedef struct dt_gradcheck_opts {
    int64_t batch;        /* samples (default 3) */
    double eps;           /* h (default 1e-2) */
    double rtol;          /* default 1e-2 */
    double atol;          /* times the tensor's largest |analytic| (default 1e-3) */
    double max_nonsmooth; /* fraction of entries that may be skipped as kinks (default 0) */
    float input_scale;    /* inputs from U(-s, s) (default 1) */
    float param_noise;    /* U(-n, n) added to every parameter after init (default 0.1) */
    int cross_entropy;    /* 1: softmax cross-entropy vs random labels; 0: MSE vs targets */
    int training;         /* run forward with training = 1 (same rng each time) */
    uint64_t seed;        /* default 1 */
    dt_pool *pool;        /* may be NULL */
} dt_gradcheck_opts;

struct dt__gradcheck {
    dt_model *m;
    dt_gradcheck_opts o;
    float *x, *targets;
    int32_t *labels;
    int64_t nx;
};

/* The loss at the current inputs and parameters; NAN on error. */
__attribute__((unused)) static double dt__gradcheck_loss(struct dt__gradcheck *g) {
    dt_rng rng;
    dt_rng_seed2(&rng, g->o.seed, 0xd0);
    double loss = NAN;
    if (dt_model_forward(g->m, g->x, g->o.batch, g->o.training, &rng, NULL) != DT_OK ||
        dt_model_loss(g->m, g->labels, g->targets, &loss, NULL) != DT_OK) {
        fprintf(stderr, "gradcheck: %s\n", dt_errmsg());
        return NAN;
    }
    return loss;
}

/* Compare analytic grad[0..n) with central differences of the entries v[0..n). Returns the
 * failures; *nonsmooth counts the entries skipped as kinks. */
__attribute__((unused)) static int dt__gradcheck_tensor(struct dt__gradcheck *g, const char *what,
                                                        float *v, const float *grad, int64_t n,
                                                        double f0, int64_t *nonsmooth) {
    double h = g->o.eps, gmax = 0.0;
    int fails = 0;
    for (int64_t i = 0; i < n; i++)
        gmax = fabs(grad[i]) > gmax ? fabs(grad[i]) : gmax;
    for (int64_t i = 0; i < n; i++) {
        float orig = v[i];
        v[i] = (float)(orig + h);
        double hp = (double)v[i] - orig; /* the step float can represent */
        double fp = dt__gradcheck_loss(g);
        v[i] = (float)(orig - h);
        double hm = orig - (double)v[i];
        double fm = dt__gradcheck_loss(g);
        v[i] = orig;
        double c = (fp - fm) / (hp + hm), a = grad[i];
        double diff = fabs(a - c);
        double tol = g->o.rtol * fmax(fabs(a), fabs(c)) + g->o.atol * gmax + 1e-12;
        if (diff <= tol) continue;
        double fwd = (fp - f0) / hp, bwd = (f0 - fm) / hm;
        if (fabs(fwd - bwd) > diff) {
            ++*nonsmooth;
            continue;
        }
        if (fails++ < 8)
            fprintf(stderr,
                    "gradcheck %s[%lld]: analytic %.7g, numeric %.7g (one-sided %.7g, %.7g)\n",
                    what, (long long)i, a, c, fwd, bwd);
    }
    return fails;
}

__attribute__((unused)) static int dt_gradcheck_model(const dt_layer_conf *layers, int nlayers,
                                                      const dt_shape *input,
                                                      const dt_gradcheck_opts *opts) {
    struct dt__gradcheck g = {0};
    if (opts) g.o = *opts;
    if (!g.o.batch) g.o.batch = 3;
    if (!g.o.eps) g.o.eps = 1e-2;
    if (!g.o.rtol) g.o.rtol = 1e-2;
    if (!g.o.atol) g.o.atol = 1e-3;
    if (!g.o.input_scale) g.o.input_scale = 1.0f;
    if (!g.o.param_noise) g.o.param_noise = 0.1f;
    if (!g.o.seed) g.o.seed = 1;
    int fails = -1, nparams = 0;
    float **analytic = NULL;
    float *gx = NULL;
    if (dt_model_init(&g.m, input, layers, nlayers,
                      g.o.cross_entropy ? DT_LOSS_SOFTMAX_CROSS_ENTROPY : DT_LOSS_MSE, g.o.batch,
                      g.o.pool) != DT_OK) {
        fprintf(stderr, "gradcheck: %s\n", dt_errmsg());
        return -1;
    }
    dt_rng rng;
    dt_rng_seed2(&rng, g.o.seed, 0x9c);
    dt_model_init_params(g.m, g.o.seed);
    nparams = dt_model_num_params(g.m);
    for (int p = 0; p < nparams; p++) {
        dt_tensor *t = &dt_model_param(g.m, p)->value;
        for (int64_t i = 0; i < dt_tensor_numel(t); i++)
            t->data[i] += g.o.param_noise * (2.0f * dt_rng_uniform(&rng) - 1.0f);
    }
    int64_t k = dt_shape_numel(dt_model_output_shape(g.m));
    g.nx = g.o.batch * dt_shape_numel(input);
    g.x = malloc((size_t)g.nx * sizeof *g.x);
    gx = malloc((size_t)g.nx * sizeof *gx);
    analytic = calloc((size_t)nparams + 1, sizeof *analytic);
    if (!g.x || !gx || !analytic) goto done;
    for (int64_t i = 0; i < g.nx; i++)
        g.x[i] = g.o.input_scale * (2.0f * dt_rng_uniform(&rng) - 1.0f);
    if (g.o.cross_entropy) {
        g.labels = malloc((size_t)g.o.batch * sizeof *g.labels);
        if (!g.labels) goto done;
        for (int64_t i = 0; i < g.o.batch; i++)
            g.labels[i] = (int32_t)dt_rng_below(&rng, (uint64_t)k);
    } else {
        g.targets = malloc((size_t)(g.o.batch * k) * sizeof *g.targets);
        if (!g.targets) goto done;
        for (int64_t i = 0; i < g.o.batch * k; i++)
            g.targets[i] = dt_rng_normal(&rng);
    }

    /* analytic gradients, twice: backward must overwrite, not accumulate */
    dt_model_want_input_grad(g.m, 1);
    double f0 = 0.0;
    for (int round = 0; round < 2; round++) {
        f0 = dt__gradcheck_loss(&g);
        if (isnan(f0)) goto done;
        dt_model_backward(g.m);
        const float *dx = dt_model_input_grad(g.m);
        for (int p = 0; p < nparams; p++) {
            dt_param *prm = dt_model_param(g.m, p);
            size_t bytes = (size_t)dt_tensor_numel(&prm->grad) * sizeof(float);
            if (round == 0) {
                if (!(analytic[p] = malloc(bytes))) goto done;
                memcpy(analytic[p], prm->grad.data, bytes);
            } else if (memcmp(analytic[p], prm->grad.data, bytes)) {
                fprintf(stderr, "gradcheck %s: a second identical step changed the gradient\n",
                        prm->name);
                fails = 1;
                goto done;
            }
        }
        if (round == 0)
            memcpy(gx, dx, (size_t)g.nx * sizeof *gx);
        else if (memcmp(gx, dx, (size_t)g.nx * sizeof *gx)) {
            fprintf(stderr, "gradcheck input: a second identical step changed the gradient\n");
            fails = 1;
            goto done;
        }
    }

    fails = 0;
    int64_t nonsmooth = 0, entries = g.nx;
    fails += dt__gradcheck_tensor(&g, "input", g.x, gx, g.nx, f0, &nonsmooth);
    for (int p = 0; p < nparams; p++) {
        dt_param *prm = dt_model_param(g.m, p);
        int64_t n = dt_tensor_numel(&prm->value);
        fails +=
            dt__gradcheck_tensor(&g, prm->name, prm->value.data, analytic[p], n, f0, &nonsmooth);
        entries += n;
    }
    if ((double)nonsmooth > g.o.max_nonsmooth * (double)entries) {
        fprintf(stderr, "gradcheck: %lld of %lld entries look non-smooth (allowed %.3g)\n",
                (long long)nonsmooth, (long long)entries, g.o.max_nonsmooth);
        fails += (int)nonsmooth;
    }
done:
    if (analytic)
        for (int p = 0; p < nparams; p++)
            free(analytic[p]);
    free(analytic);
    free(gx);
    free(g.x);
    free(g.targets);
    free(g.labels);
    dt_model_free(g.m);
    return fails;
}

/* The check of one layer on a per-sample input shape. */
__attribute__((unused)) static int dt_gradcheck_layer(const dt_layer_conf *conf,
                                                      const dt_shape *input,
                                                      const dt_gradcheck_opts *opts) {
    return dt_gradcheck_model(conf, 1, input, opts);
}

#endif

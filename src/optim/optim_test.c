/* optim_test.c - optimizers and learning-rate schedules. */
#include <float.h>

#include "core/fpenv-impl.h"
#include "dtrain/optim.h"
#include "testing/dt_test.h"

/* A parameter with malloc'd value and grad (the model owns them in real use). */
static dt_param *param_new(const char *name, int64_t n, const float *w0, int decay) {
    dt_param *p = calloc(1, sizeof *p);
    if (!p) abort();
    snprintf(p->name, sizeof p->name, "%s", name);
    p->value.shape = dt_shape_make(1, (int64_t[]){n});
    p->grad.shape = p->value.shape;
    p->value.data = calloc((size_t)(n ? n : 1), sizeof(float));
    p->grad.data = calloc((size_t)(n ? n : 1), sizeof(float));
    if (!p->value.data || !p->grad.data) abort();
    if (w0)
        for (int64_t i = 0; i < n; i++) p->value.data[i] = w0[i];
    p->decay = decay;
    return p;
}

static void param_free(dt_param *p) {
    if (!p) return;
    free(p->value.data);
    free(p->grad.data);
    free(p);
}

static dt_optim_conf conf_of(dt_optim_kind kind, float lr) {
    dt_optim_conf c = {.kind = kind, .learning_rate = lr};
    dt_optim_conf_defaults(&c);
    return c;
}

/* ---- the update rules against the formulas, evaluated in double ---- */

#define N6 6
static const float W0[N6] = {0.5f, -1.2f, 2.0f, 0.0f, 3.3f, -0.07f};
static const float G[3][N6] = {{0.1f, -0.4f, 1.5f, -2.0f, 0.03f, 0.0f},
                               {0.2f, 0.3f, -1.0f, -1.0f, 0.05f, 1e-3f},
                               {-0.3f, 0.1f, 0.5f, 2.5f, -0.02f, 0.0f}};

/* Runs conf for 3 steps over W0 with grads G and leaves the result in *out_p / *out_o. */
static dt_err run3(const dt_optim_conf *c, int decay, dt_param **out_p, dt_optim **out_o) {
    dt_param *p = param_new("dense/kernel", N6, W0, decay);
    dt_optim *o = NULL;
    dt_err err = dt_optim_init(&o, c, &p, 1);
    if (err) {
        param_free(p);
        return err;
    }
    for (int s = 0; s < 3; s++) {
        memcpy(p->grad.data, G[s], sizeof G[s]);
        dt_optim_step(o, NULL);
    }
    *out_p = p;
    *out_o = o;
    return DT_OK;
}

static void test_sgd_matches_formula(void) {
    dt_optim_conf c = conf_of(DT_OPTIM_SGD, 0.1f);
    dt_param *p = NULL;
    dt_optim *o = NULL;
    DT_CHECK_OK(run3(&c, 0, &p, &o));
    DT_CHECK(dt_optim_num_slots(o) == 0);
    DT_CHECK(dt_optim_steps(o) == 3);
    for (int i = 0; i < N6; i++) {
        double w = W0[i];
        for (int s = 0; s < 3; s++) w -= 0.1 * G[s][i];
        DT_CHECK_NEAR(p->value.data[i], w, 1e-6);
    }
    dt_optim_free(o);
    param_free(p);
}

static void test_momentum_matches_formula(void) {
    for (int nesterov = 0; nesterov <= 1; nesterov++) {
        dt_optim_conf c = conf_of(DT_OPTIM_MOMENTUM, 0.1f);
        c.momentum = 0.8f;
        c.nesterov = nesterov;
        dt_param *p = NULL;
        dt_optim *o = NULL;
        DT_CHECK_OK(run3(&c, 0, &p, &o));
        DT_CHECK(dt_optim_num_slots(o) == 1);
        DT_CHECK(!strcmp(dt_optim_slot_name(o, 0), "dense/kernel/v"));
        const float *vs = dt_optim_slot(o, 0)->data;
        for (int i = 0; i < N6; i++) {
            double w = W0[i], v = 0, mu = 0.8f;
            for (int s = 0; s < 3; s++) {
                v = mu * v + G[s][i];
                w -= 0.1 * (nesterov ? G[s][i] + mu * v : v);
            }
            DT_CHECK_NEAR(p->value.data[i], w, 1e-6);
            DT_CHECK_NEAR(vs[i], v, 1e-6);
        }
        dt_optim_free(o);
        param_free(p);
    }
}

/* From zero velocity, one Nesterov step moves (1 + mu) times as far as plain momentum;
 * on the second step plain uses v2 = mu*g1 + g2, Nesterov g2 + mu*v2. */
static void test_nesterov_differs_from_momentum(void) {
    dt_param *pp = param_new("a/kernel", 1, (float[]){1.0f}, 0);
    dt_param *pn = param_new("b/kernel", 1, (float[]){1.0f}, 0);
    dt_optim *op = NULL, *on = NULL;
    dt_optim_conf c = conf_of(DT_OPTIM_MOMENTUM, 0.1f);
    c.momentum = 0.5f;
    DT_CHECK_OK(dt_optim_init(&op, &c, &pp, 1));
    c.nesterov = 1;
    DT_CHECK_OK(dt_optim_init(&on, &c, &pn, 1));
    pp->grad.data[0] = pn->grad.data[0] = 2.0f;
    dt_optim_step(op, NULL);
    dt_optim_step(on, NULL);
    DT_CHECK_NEAR(1.0f - pp->value.data[0], 0.1 * 2.0, 1e-6);
    DT_CHECK_NEAR(1.0f - pn->value.data[0], 0.1 * 2.0 * 1.5, 1e-6);
    pp->grad.data[0] = pn->grad.data[0] = 1.0f;
    dt_optim_step(op, NULL);
    dt_optim_step(on, NULL);
    /* v2 = 0.5*2 + 1 = 2; plain: 0.8 - 0.1*2 = 0.6; nesterov: 0.7 - 0.1*(1 + 0.5*2) = 0.5 */
    DT_CHECK_NEAR(pp->value.data[0], 0.6, 1e-6);
    DT_CHECK_NEAR(pn->value.data[0], 0.5, 1e-6);
    dt_optim_free(op);
    dt_optim_free(on);
    param_free(pp);
    param_free(pn);
}

static void test_adam_matches_formula(void) {
    dt_optim_conf c = conf_of(DT_OPTIM_ADAM, 0.01f);
    c.beta1 = 0.8f;
    c.beta2 = 0.95f;
    c.epsilon = 1e-3f; /* large enough to matter in the comparison */
    dt_param *p = NULL;
    dt_optim *o = NULL;
    DT_CHECK_OK(run3(&c, 0, &p, &o));
    DT_CHECK(dt_optim_num_slots(o) == 2);
    DT_CHECK(!strcmp(dt_optim_slot_name(o, 0), "dense/kernel/m"));
    DT_CHECK(!strcmp(dt_optim_slot_name(o, 1), "dense/kernel/v"));
    for (int i = 0; i < N6; i++) {
        double w = W0[i], m = 0, v = 0, b1 = c.beta1, b2 = c.beta2;
        for (int s = 0; s < 3; s++) {
            double g = G[s][i];
            m = b1 * m + (1 - b1) * g;
            v = b2 * v + (1 - b2) * g * g;
            double mh = m / (1 - pow(b1, s + 1)), vh = v / (1 - pow(b2, s + 1));
            w -= 0.01 * mh / (sqrt(vh) + (double)c.epsilon);
        }
        DT_CHECK_NEAR(p->value.data[i], w, 1e-6);
        DT_CHECK_NEAR(dt_optim_slot(o, 0)->data[i], m, 1e-6);
        DT_CHECK_NEAR(dt_optim_slot(o, 1)->data[i], v, 1e-6);
    }
    dt_optim_free(o);
    param_free(p);
}

/* At step 1, m_hat = g and v_hat = g^2: the update is lr * g / (|g| + eps), i.e. about lr
 * whatever the gradient's scale. */
static void test_adam_bias_correction_first_step(void) {
    const float w0[4] = {1, 1, 1, 1};
    dt_param *p = param_new("x/kernel", 4, w0, 0);
    const float g[4] = {1e-3f, -50.0f, 0.2f, -7.0f};
    memcpy(p->grad.data, g, sizeof g);
    dt_optim *o = NULL;
    dt_optim_conf c = conf_of(DT_OPTIM_ADAM, 0.001f);
    DT_CHECK(c.epsilon == 1e-7f && c.beta1 == 0.9f && c.beta2 == 0.999f);
    DT_CHECK_OK(dt_optim_init(&o, &c, &p, 1));
    dt_optim_step(o, NULL);
    for (int i = 0; i < 4; i++) {
        double step = 1.0 - p->value.data[i];
        DT_CHECK_NEAR(fabs(step), 0.001, 1e-6);
        DT_CHECK((step > 0) == (g[i] > 0));
    }
    dt_optim_free(o);
    param_free(p);
}

static void test_adagrad_matches_formula(void) {
    dt_optim_conf c = conf_of(DT_OPTIM_ADAGRAD, 0.1f);
    DT_CHECK(c.initial_accumulator == 0.1f && c.epsilon == 1e-7f);
    dt_param *p = param_new("dense/kernel", N6, W0, 0);
    dt_optim *o = NULL;
    DT_CHECK_OK(dt_optim_init(&o, &c, &p, 1));
    DT_CHECK(dt_optim_num_slots(o) == 1);
    DT_CHECK(!strcmp(dt_optim_slot_name(o, 0), "dense/kernel/accumulator"));
    const float *acc = dt_optim_slot(o, 0)->data;
    for (int i = 0; i < N6; i++) DT_CHECK(acc[i] == 0.1f);
    double w[N6], a[N6];
    for (int i = 0; i < N6; i++) w[i] = W0[i], a[i] = 0.1f;
    for (int s = 0; s < 3; s++) {
        memcpy(p->grad.data, G[s], sizeof G[s]);
        dt_optim_step(o, NULL);
        for (int i = 0; i < N6; i++) {
            double g = G[s][i];
            a[i] += g * g;
            w[i] -= 0.1 * g / (sqrt(a[i]) + 1e-7);
            DT_CHECK_NEAR(acc[i], a[i], 1e-6);
            DT_CHECK_NEAR(p->value.data[i], w[i], 1e-6);
        }
    }
    dt_optim_free(o);
    param_free(p);
}

/* Every optimizer descends f(w) = 0.5 * a * (w - c)^2 to its minimum. */
static void test_quadratic_converges(void) {
    const struct {
        dt_optim_kind kind;
        float lr;
        int nesterov;
    } cases[] = {
        {DT_OPTIM_SGD, 0.1f, 0},      {DT_OPTIM_MOMENTUM, 0.05f, 0},
        {DT_OPTIM_MOMENTUM, 0.05f, 1}, {DT_OPTIM_ADAM, 0.05f, 0},
        {DT_OPTIM_ADAGRAD, 0.5f, 0},
    };
    const double a = 3.0, target = -1.5;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dt_optim_conf c = conf_of(cases[k].kind, cases[k].lr);
        c.nesterov = cases[k].nesterov;
        dt_param *p = param_new("q/kernel", 1, (float[]){4.0f}, 0);
        dt_optim *o = NULL;
        DT_CHECK_OK(dt_optim_init(&o, &c, &p, 1));
        for (int s = 0; s < 2000; s++) {
            p->grad.data[0] = (float)(a * (p->value.data[0] - target));
            dt_optim_step(o, NULL);
        }
        double err = fabs(p->value.data[0] - target);
        dt_optim_free(o);
        param_free(p);
        if (!(err < 1e-3)) DT_FAIL("optimizer case %zu: |w - c| = %g after 2000 steps", k, err);
    }
}

/* ---- weight decay ---- */

static void test_weight_decay_only_on_decay_params(void) {
    const dt_optim_kind kinds[] = {DT_OPTIM_SGD, DT_OPTIM_MOMENTUM, DT_OPTIM_ADAM,
                                   DT_OPTIM_ADAGRAD};
    for (size_t k = 0; k < 4; k++) {
        dt_optim_conf c = conf_of(kinds[k], 0.1f);
        c.weight_decay = 0.5f;
        dt_param *ps[2] = {param_new("d/kernel", N6, W0, 1), param_new("d/bias", N6, W0, 0)};
        dt_optim_conf c0 = c;
        c0.weight_decay = 0;
        dt_param *ref = param_new("r/kernel", N6, W0, 1); /* decay=1, but wd = 0 */
        dt_optim *o = NULL, *o0 = NULL;
        DT_CHECK_OK(dt_optim_init(&o, &c, ps, 2));
        DT_CHECK_OK(dt_optim_init(&o0, &c0, &ref, 1));
        memcpy(ps[0]->grad.data, G[0], sizeof G[0]);
        memcpy(ps[1]->grad.data, G[0], sizeof G[0]);
        memcpy(ref->grad.data, G[0], sizeof G[0]);
        dt_optim_step(o, NULL);
        dt_optim_step(o0, NULL);
        /* the kernel's gradient was g + wd * w */
        if (kinds[k] == DT_OPTIM_SGD) {
            for (int i = 0; i < N6; i++)
                DT_CHECK_NEAR(ps[0]->value.data[i], W0[i] - 0.1 * (G[0][i] + 0.5 * W0[i]), 1e-6);
        }
        for (int s = 1; s < 3; s++) {
            memcpy(ps[0]->grad.data, G[s], sizeof G[s]);
            memcpy(ps[1]->grad.data, G[s], sizeof G[s]);
            memcpy(ref->grad.data, G[s], sizeof G[s]);
            dt_optim_step(o, NULL);
            dt_optim_step(o0, NULL);
        }
        /* the bias (decay 0) moves exactly as without weight decay */
        DT_CHECK(!memcmp(ps[1]->value.data, ref->value.data, N6 * sizeof(float)));
        /* every kernel element moved differently (Adam's first step, about lr * sign(g),
         * hides the decay, hence three steps) */
        for (int i = 0; i < N6; i++)
            if (ps[0]->value.data[i] == ref->value.data[i])
                DT_FAIL("optimizer %d: weight decay did not change element %d", (int)kinds[k],
                        i);
        dt_optim_free(o);
        dt_optim_free(o0);
        param_free(ps[0]);
        param_free(ps[1]);
        param_free(ref);
    }
}

/* ---- against PyTorch 1.13 (numbers generated once by a script run by hand; see below) ----
 *
 *   w = torch.tensor(W0, requires_grad=True); opt = torch.optim.<...>([w])
 *   for g in G: w.grad = torch.tensor(g); opt.step()
 */

static void check_against(const char *what, const dt_optim_conf *c, int decay,
                          const float *want_w, const float *want_slot, int slot) {
    dt_param *p = NULL;
    dt_optim *o = NULL;
    DT_CHECK_OK(run3(c, decay, &p, &o));
    for (int i = 0; i < N6; i++) {
        double tol = 2e-6 * (1 + fabs(want_w[i]));
        if (!(fabs(p->value.data[i] - want_w[i]) <= tol))
            DT_FAIL("%s: w[%d] = %.9g, torch %.9g", what, i, p->value.data[i], want_w[i]);
        double got = dt_optim_slot(o, slot)->data[i];
        tol = 2e-6 * (1 + fabs(want_slot[i]));
        if (!(fabs(got - want_slot[i]) <= tol))
            DT_FAIL("%s: slot %s[%d] = %.9g, torch %.9g", what, dt_optim_slot_name(o, slot), i,
                    got, want_slot[i]);
    }
    dt_optim_free(o);
    param_free(p);
}

static void test_against_torch(void) {
    /* torch.optim.Adam(lr=0.01, betas=(0.9, 0.999), eps=1e-7): w and exp_avg_sq */
    static const float adam_w[N6] = {4.810141921e-01f, -1.189683557e+00f, 1.985769749e+00f,
                                     1.935990155e-02f, 3.275060415e+00f,  -8.319151402e-02f};
    static const float adam_v[N6] = {1.399400207e-04f, 2.595901897e-04f, 3.494502278e-03f,
                                     1.124100480e-02f, 3.795701332e-06f, 9.990002159e-10f};
    /* the same with weight_decay=0.05 (L2 added to the gradient): w and exp_avg */
    static const float adamwd_w[N6] = {4.797765315e-01f, -1.186093092e+00f, 1.984221101e+00f,
                                       1.935646310e-02f, 3.270211458e+00f,  -4.086882994e-02f};
    static const float adamwd_m[N6] = {2.731195884e-03f,  -1.155255828e-02f, 1.084940657e-01f,
                                       -1.858361764e-03f, 4.949992895e-02f,  -7.159524830e-04f};
    /* torch.optim.SGD(lr=0.1, momentum=0.9): w and momentum_buffer */
    static const float mom_w[N6] = {4.648999870e-01f, -1.158600092e+00f, 1.733500004e+00f,
                                    4.819999933e-01f, 3.284369946e+00f,  -7.019000500e-02f};
    static const float mom_v[N6] = {-3.900003433e-02f, 4.600002617e-02f, 8.149999380e-01f,
                                    -1.999998093e-02f, 4.929999635e-02f, 9.000000427e-04f};
    /* torch.optim.SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05) */
    static const float nes_w[N6] = {4.493350983e-01f, -1.116373539e+00f, 1.586246490e+00f,
                                    4.717312753e-01f, 3.148513317e+00f,  -6.747632474e-02f};
    static const float nes_v[N6] = {2.386125922e-02f, -1.087554991e-01f, 1.059334278e+00f,
                                    3.351950645e-02f, 4.901155829e-01f,  -8.484215476e-03f};

    dt_optim_conf c = conf_of(DT_OPTIM_ADAM, 0.01f);
    check_against("adam", &c, 0, adam_w, adam_v, 1);
    if (dt__test_failed) return;
    c.weight_decay = 0.05f;
    check_against("adam+wd", &c, 1, adamwd_w, adamwd_m, 0);
    if (dt__test_failed) return;
    c = conf_of(DT_OPTIM_MOMENTUM, 0.1f);
    check_against("momentum", &c, 0, mom_w, mom_v, 0);
    if (dt__test_failed) return;
    c.nesterov = 1;
    c.weight_decay = 0.05f;
    check_against("nesterov+wd", &c, 1, nes_w, nes_v, 0);
}

/* ---- schedules ---- */

static void test_schedule_values(void) {
    dt_optim_conf c = conf_of(DT_OPTIM_SGD, 0.1f);
    DT_CHECK(dt_optim_lr_at(&c, 0) == 0.1f && dt_optim_lr_at(&c, 123456) == 0.1f);

    c.schedule = (dt_sched_conf){.kind = DT_SCHED_STEP, .step_size = 10, .gamma = 0.5f};
    DT_CHECK(dt_optim_lr_at(&c, 0) == 0.1f);
    DT_CHECK(dt_optim_lr_at(&c, 9) == 0.1f);
    DT_CHECK(dt_optim_lr_at(&c, 10) == 0.05f);
    DT_CHECK(dt_optim_lr_at(&c, 19) == 0.05f);
    DT_CHECK(dt_optim_lr_at(&c, 35) == 0.0125f);

    c.schedule = (dt_sched_conf){.kind = DT_SCHED_COSINE, .total_steps = 100, .min_lr = 0.02f};
    DT_CHECK_NEAR(dt_optim_lr_at(&c, 0), 0.1, 1e-7);
    DT_CHECK_NEAR(dt_optim_lr_at(&c, 50), 0.06, 1e-7); /* midpoint: (lr + min_lr) / 2 */
    DT_CHECK_NEAR(dt_optim_lr_at(&c, 25), 0.02 + 0.08 * (1 + cos(M_PI / 4)) / 2, 1e-7);
    DT_CHECK_NEAR(dt_optim_lr_at(&c, 100), 0.02, 1e-7);
    DT_CHECK_NEAR(dt_optim_lr_at(&c, 1000), 0.02, 1e-7); /* stays at min_lr after the end */
    for (int s = 1; s <= 100; s++) DT_CHECK(dt_optim_lr_at(&c, s) <= dt_optim_lr_at(&c, s - 1));
}

/* The step uses the scheduled rate at the optimizer's step count. */
static void test_step_uses_schedule(void) {
    dt_optim_conf c = conf_of(DT_OPTIM_SGD, 1.0f);
    c.schedule = (dt_sched_conf){.kind = DT_SCHED_STEP, .step_size = 2, .gamma = 0.5f};
    dt_param *p = param_new("s/kernel", 1, (float[]){0.0f}, 0);
    dt_optim *o = NULL;
    DT_CHECK_OK(dt_optim_init(&o, &c, &p, 1));
    p->grad.data[0] = -1.0f;
    const float want[] = {1.0f, 2.0f, 2.5f, 3.0f, 3.25f};
    for (int s = 0; s < 5; s++) {
        dt_optim_step(o, NULL);
        DT_CHECK(p->value.data[0] == want[s]);
    }
    dt_optim_free(o);
    param_free(p);
}

/* Copying the slots and the step count into a fresh optimizer continues the same run (what a
 * checkpoint does): Adam's bias correction and the schedule pick up at the right step. */
static void test_resume_via_slots_and_set_steps(void) {
    dt_optim_conf c = conf_of(DT_OPTIM_ADAM, 0.01f);
    c.schedule = (dt_sched_conf){.kind = DT_SCHED_COSINE, .total_steps = 3};
    dt_param *a = param_new("r/kernel", N6, W0, 1);
    dt_param *b = param_new("r/kernel", N6, W0, 1);
    dt_optim *oa = NULL, *ob = NULL;
    DT_CHECK_OK(dt_optim_init(&oa, &c, &a, 1));
    DT_CHECK_OK(dt_optim_init(&ob, &c, &b, 1));
    memcpy(a->grad.data, G[0], sizeof G[0]);
    dt_optim_step(oa, NULL);
    /* "restore" b from a */
    memcpy(b->value.data, a->value.data, N6 * sizeof(float));
    for (int i = 0; i < dt_optim_num_slots(oa); i++)
        memcpy(dt_optim_slot(ob, i)->data, dt_optim_slot(oa, i)->data, N6 * sizeof(float));
    dt_optim_set_steps(ob, dt_optim_steps(oa));
    DT_CHECK(dt_optim_steps(ob) == 1);
    for (int s = 1; s < 3; s++) {
        memcpy(a->grad.data, G[s], sizeof G[s]);
        memcpy(b->grad.data, G[s], sizeof G[s]);
        dt_optim_step(oa, NULL);
        dt_optim_step(ob, NULL);
    }
    DT_CHECK(!memcmp(a->value.data, b->value.data, N6 * sizeof(float)));
    DT_CHECK(dt_optim_steps(ob) == 3);
    dt_optim_free(oa);
    dt_optim_free(ob);
    param_free(a);
    param_free(b);
}

/* ---- configuration ---- */

static void test_defaults(void) {
    dt_optim_conf c = {.kind = DT_OPTIM_ADAM};
    dt_optim_conf_defaults(&c);
    DT_CHECK(c.learning_rate == 0.001f && c.beta1 == 0.9f && c.beta2 == 0.999f &&
             c.epsilon == 1e-7f && c.weight_decay == 0 && c.schedule.gamma == 0.1f);
    c = (dt_optim_conf){.kind = DT_OPTIM_MOMENTUM};
    dt_optim_conf_defaults(&c);
    DT_CHECK(c.learning_rate == 0.01f && c.momentum == 0.9f && !c.nesterov);
    c = (dt_optim_conf){.kind = DT_OPTIM_SGD, .learning_rate = 0.5f};
    dt_optim_conf_defaults(&c);
    DT_CHECK(c.learning_rate == 0.5f);
    c = (dt_optim_conf){.kind = DT_OPTIM_ADAGRAD};
    dt_optim_conf_defaults(&c);
    DT_CHECK(c.learning_rate == 0.001f && c.initial_accumulator == 0.1f && c.epsilon == 1e-7f);
}

static dt_err init_with(dt_optim_conf c) {
    dt_param *p = param_new("v/kernel", 3, NULL, 1);
    dt_optim *o = NULL;
    dt_err err = dt_optim_init(&o, &c, &p, 1);
    dt_optim_free(o);
    param_free(p);
    return err;
}

static void test_validation_errors(void) {
    dt_optim_conf c = conf_of(DT_OPTIM_MOMENTUM, 0.1f);
    c.momentum = 1.5f;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.momentum: must be in [0, 1), got 1.5");
    c.momentum = 1.0f;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.momentum");
    c.momentum = -0.1f;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.momentum");
    c.momentum = 0.0f; /* allowed: plain SGD through the momentum code */
    DT_CHECK_OK(init_with(c));

    c = conf_of(DT_OPTIM_SGD, -0.1f);
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.learning_rate: must be > 0, got -0.1");
    c.learning_rate = NAN;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.learning_rate");
    c = conf_of(DT_OPTIM_SGD, 0.1f);
    c.learning_rate = 0; /* defaults not applied */
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.learning_rate");

    c = conf_of(DT_OPTIM_ADAM, 0.1f);
    c.beta1 = 1.0f;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.beta1: must be in [0, 1), got 1");
    c = conf_of(DT_OPTIM_ADAM, 0.1f);
    c.beta2 = -0.5f;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.beta2: must be in [0, 1), got -0.5");
    c = conf_of(DT_OPTIM_ADAM, 0.1f);
    c.epsilon = 0;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.epsilon: must be > 0, got 0");
    c = conf_of(DT_OPTIM_ADAGRAD, 0.1f);
    c.epsilon = -1e-7f;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.epsilon");
    c = conf_of(DT_OPTIM_ADAGRAD, 0.1f);
    c.initial_accumulator = -1;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.initial_accumulator");
    c = conf_of(DT_OPTIM_SGD, 0.1f);
    c.weight_decay = -0.01f;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.weight_decay: must be >= 0, got -0.01");
    c = conf_of(DT_OPTIM_SGD, 0.1f);
    c.kind = (dt_optim_kind)42;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.type");

    c = conf_of(DT_OPTIM_SGD, 0.1f);
    c.schedule = (dt_sched_conf){.kind = DT_SCHED_STEP, .step_size = 0, .gamma = 0.5f};
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.schedule.step_size: must be > 0, got 0");
    c.schedule = (dt_sched_conf){.kind = DT_SCHED_STEP, .step_size = 5, .gamma = 1.5f};
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.schedule.gamma: must be in (0, 1], got 1.5");
    c.schedule.gamma = 0;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.schedule.gamma");
    c.schedule.gamma = 1;
    DT_CHECK_OK(init_with(c));
    c.schedule = (dt_sched_conf){.kind = DT_SCHED_COSINE, .total_steps = -1};
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.schedule.total_steps: must be >= 0");
    c.schedule.total_steps = 0;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.schedule.total_steps: is 0");
    c.schedule.total_steps = 10;
    c.schedule.min_lr = 0.5f;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.schedule.min_lr");
    c.schedule.min_lr = 0.01f;
    DT_CHECK_OK(init_with(c));
    c.schedule.kind = (dt_sched_kind)9;
    DT_CHECK_ERR(init_with(c), DT_ERR_ARG, "optimizer.schedule.type");
}

static void test_slots_named_per_param(void) {
    dt_param *ps[3] = {param_new("dense_1/kernel", 6, NULL, 1),
                       param_new("dense_1/bias", 2, NULL, 0),
                       param_new("conv2d_0/kernel", 0, NULL, 1)};
    ps[0]->value.shape = ps[0]->grad.shape = dt_shape_make(2, (int64_t[]){3, 2});
    dt_optim *o = NULL;
    dt_optim_conf c = conf_of(DT_OPTIM_ADAM, 0.1f);
    DT_CHECK_OK(dt_optim_init(&o, &c, ps, 3));
    DT_CHECK(dt_optim_num_slots(o) == 6);
    const char *want[] = {"dense_1/kernel/m",  "dense_1/kernel/v",  "dense_1/bias/m",
                          "dense_1/bias/v",    "conv2d_0/kernel/m", "conv2d_0/kernel/v"};
    for (int i = 0; i < 6; i++) {
        DT_CHECK(!strcmp(dt_optim_slot_name(o, i), want[i]));
        DT_CHECK(dt_shape_eq(&dt_optim_slot(o, i)->shape, &ps[i / 2]->value.shape));
        const dt_tensor *t = dt_optim_slot(o, i);
        for (int64_t j = 0; j < dt_tensor_numel(t); j++) DT_CHECK(t->data[j] == 0);
    }
    /* an empty parameter is stepped harmlessly */
    dt_optim_step(o, NULL);
    dt_optim_free(o);
    dt_optim_free(NULL);

    c = conf_of(DT_OPTIM_SGD, 0.1f);
    DT_CHECK_OK(dt_optim_init(&o, &c, ps, 3));
    DT_CHECK(dt_optim_num_slots(o) == 0);
    dt_optim_free(o);
    /* no parameters at all */
    DT_CHECK_OK(dt_optim_init(&o, &c, NULL, 0));
    dt_optim_step(o, NULL);
    DT_CHECK(dt_optim_steps(o) == 1);
    dt_optim_free(o);
    for (int i = 0; i < 3; i++) param_free(ps[i]);
}

/* The same run on no pool, a pool of 1 and a pool of 2 gives bit-identical results. */
/* The same results on 0, 1 and 2 pool threads, and from dt_optim_step_copy (runs 3 and 4:
 * its copies, a block at a time, equal the values after every step; 10007 elements span
 * two blocks). */
static void test_pool_threads_identical(void) {
    enum { NP = 3, STEPS = 4 };
    const int64_t sizes[NP] = {10007, 3, 2049};
    const dt_optim_kind kinds[] = {DT_OPTIM_SGD, DT_OPTIM_MOMENTUM, DT_OPTIM_ADAM,
                                   DT_OPTIM_ADAGRAD};
    dt_pool *pools[3] = {NULL, NULL, NULL};
    DT_CHECK_OK(dt_pool_init(&pools[1], 1));
    DT_CHECK_OK(dt_pool_init(&pools[2], 2));
    for (size_t k = 0; k < 4; k++) {
        float *result[5][NP];
        for (int run = 0; run < 5; run++) {
            dt_optim_conf c = conf_of(kinds[k], 0.01f);
            c.weight_decay = 0.01f;
            c.nesterov = 1;
            dt_param *ps[NP];
            for (int i = 0; i < NP; i++) {
                ps[i] = param_new(i == 1 ? "p/bias" : "p/kernel", sizes[i], NULL, i != 1);
                for (int64_t j = 0; j < sizes[i]; j++)
                    ps[i]->value.data[j] = (float)sin(0.37 * (double)j + i);
            }
            dt_optim *o = NULL;
            DT_CHECK_OK(dt_optim_init(&o, &c, ps, NP));
            float *copy[NP];
            for (int i = 0; i < NP; i++) {
                copy[i] = calloc((size_t)sizes[i], sizeof(float));
                DT_CHECK(copy[i]);
            }
            for (int s = 0; s < STEPS; s++) {
                for (int i = 0; i < NP; i++)
                    for (int64_t j = 0; j < sizes[i]; j++)
                        ps[i]->grad.data[j] = (float)cos(0.11 * (double)(j * (s + 1)) - i);
                if (run < 3) {
                    dt_optim_step(o, pools[run]);
                    continue;
                }
                dt_optim_step_copy(o, run == 3 ? NULL : pools[2], copy);
                for (int i = 0; i < NP; i++)
                    if (memcmp(copy[i], ps[i]->value.data, (size_t)sizes[i] * sizeof(float)))
                        DT_FAIL("optimizer %d, run %d, step %d: param %d's copy differs",
                                (int)kinds[k], run, s, i);
            }
            for (int i = 0; i < NP; i++)
                free(copy[i]);
            dt_optim_free(o);
            for (int i = 0; i < NP; i++) {
                result[run][i] = ps[i]->value.data;
                ps[i]->value.data = NULL;
                param_free(ps[i]);
            }
        }
        int same = 1;
        for (int i = 0; i < NP; i++) {
            same &= !memcmp(result[0][i], result[1][i], (size_t)sizes[i] * sizeof(float));
            for (int run = 2; run < 5; run++)
                same &= !memcmp(result[0][i], result[run][i], (size_t)sizes[i] * sizeof(float));
            /* and the update did something */
            same &= result[0][i][0] != (float)sin((double)i);
        }
        for (int run = 0; run < 5; run++)
            for (int i = 0; i < NP; i++) free(result[run][i]);
        if (!same)
            DT_FAIL("optimizer %d: results differ between pool sizes or with copies",
                    (int)kinds[k]);
    }
    dt_pool_free(pools[1]);
    dt_pool_free(pools[2]);
}

/* A moment decaying below FLT_MIN is flushed to zero (core/fpenv-impl.h), on the pool's
 * threads as on the caller's, and the caller's own floating-point mode is given back. */
static void test_adam_flushes_denormals(void) {
    dt_pool *pool = NULL;
    DT_CHECK_OK(dt_pool_init(&pool, 2));
    for (int withpool = 0; withpool < 2; withpool++) {
        enum { N = 64 };
        dt_param *p = param_new("x/kernel", N, NULL, 0);
        dt_optim *o = NULL;
        dt_optim_conf c = conf_of(DT_OPTIM_ADAM, 0.001f);
        DT_CHECK_OK(dt_optim_init(&o, &c, &p, 1));
        float *m = dt_optim_slot(o, 0)->data, *v = dt_optim_slot(o, 1)->data;
        for (int i = 0; i < N; i++) {
            m[i] = FLT_MIN; /* the smallest normal: beta1 times it is a denormal */
            v[i] = 1.0f;
        }
        DT_CHECK(!dt__fp_flushing());
        dt_optim_step(o, withpool ? pool : NULL); /* the grads are 0 */
        DT_CHECK(!dt__fp_flushing());
        for (int i = 0; i < N; i++)
            if (m[i] != 0.0f)
                DT_FAIL("element %d (pool %d): m = %g, not flushed to 0", i, withpool,
                        (double)m[i]);
        dt_optim_free(o);
        param_free(p);
    }
    dt_pool_free(pool);
}

/* dt_optim_step_grads reads scaled gradients from elsewhere: the same update as copying
 * them, scaled, into the params' grads (to rounding: the scaling may fuse into the kernel's
 * first multiply-add), and the params' own grads are not read. */
static void test_step_from_other_grads(void) {
    dt_optim_kind kinds[] = {DT_OPTIM_SGD, DT_OPTIM_MOMENTUM, DT_OPTIM_ADAM, DT_OPTIM_ADAGRAD};
    for (int k = 0; k < 4; k++) {
        dt_param *a = param_new("a/kernel", N6, W0, 1), *b = param_new("b/kernel", N6, W0, 1);
        dt_optim_conf c = conf_of(kinds[k], 0.01f);
        c.weight_decay = 0.1f;
        dt_optim *oa = NULL, *ob = NULL;
        DT_CHECK_OK(dt_optim_init(&oa, &c, &a, 1));
        DT_CHECK_OK(dt_optim_init(&ob, &c, &b, 1));
        for (int s = 0; s < 3; s++) {
            float sums[N6], scale = 0.25f;
            for (int i = 0; i < N6; i++) {
                sums[i] = G[s][i] * 4.0f;
                a->grad.data[i] = sums[i] * scale;
                b->grad.data[i] = 1e6f; /* not to be read */
            }
            dt_optim_step(oa, NULL);
            float *grads[1] = {sums};
            dt_optim_step_grads(ob, NULL, grads, scale);
        }
        for (int i = 0; i < N6; i++)
            DT_CHECK_NEAR(a->value.data[i], b->value.data[i], 1e-6);
        DT_CHECK(dt_optim_steps(ob) == 3);
        dt_optim_free(oa);
        dt_optim_free(ob);
        param_free(a);
        param_free(b);
    }
}

/* dt_optim_step_grads2 sums two members' gradients as it reads them: the same bits whichever
 * member's are first (what keeps two members' models equal), and the same bits as a step
 * from the stored sum; on the caller's thread and on a pool of 2, every optimizer, a parameter
 * larger than a pool thread's share. */
static void test_step_from_two_sources(void) {
    enum { N = 10007, STEPS = 3 };
    const dt_optim_kind kinds[] = {DT_OPTIM_SGD, DT_OPTIM_MOMENTUM, DT_OPTIM_ADAM,
                                   DT_OPTIM_ADAGRAD};
    dt_pool *pool = NULL;
    DT_CHECK_OK(dt_pool_init(&pool, 2));
    float *ga = malloc(N * sizeof(float)), *gb = malloc(N * sizeof(float)),
          *sum = malloc(N * sizeof(float));
    DT_CHECK(ga && gb && sum);
    for (int k = 0; k < 4; k++)
        for (int withpool = 0; withpool < 2; withpool++) {
            dt_param *ps[3];
            dt_optim *os[3];
            for (int v = 0; v < 3; v++) {
                ps[v] = param_new("p/kernel", N, NULL, 1);
                for (int64_t j = 0; j < N; j++)
                    ps[v]->value.data[j] = (float)sin(0.37 * (double)j);
                dt_optim_conf c = conf_of(kinds[k], 0.01f);
                c.weight_decay = 0.01f;
                DT_CHECK_OK(dt_optim_init(&os[v], &c, &ps[v], 1));
            }
            for (int s = 0; s < STEPS; s++) {
                for (int64_t j = 0; j < N; j++) {
                    ga[j] = (float)cos(0.11 * (double)(j * (s + 1))) * 64.0f;
                    gb[j] = (float)sin(0.07 * (double)(j + s)) * 64.0f;
                    sum[j] = ga[j] + gb[j];
                }
                float scale = 1.0f / 128.0f;
                float *one[1] = {sum}, *a[1] = {ga}, *b[1] = {gb};
                const float *ma[1] = {ga}, *mb[1] = {gb};
                dt_optim_step_grads(os[0], withpool ? pool : NULL, one, scale);
                dt_optim_step_grads2(os[1], withpool ? pool : NULL, a, mb, scale);
                dt_optim_step_grads2(os[2], withpool ? pool : NULL, b, ma, scale);
            }
            if (memcmp(ps[1]->value.data, ps[2]->value.data, N * sizeof(float)))
                DT_FAIL("optimizer %d, pool %d: the two members' orders differ", (int)kinds[k],
                        withpool);
            if (memcmp(ps[0]->value.data, ps[1]->value.data, N * sizeof(float)))
                DT_FAIL("optimizer %d, pool %d: summing as it reads differs from the stored sum",
                        (int)kinds[k], withpool);
            DT_CHECK(ps[1]->value.data[1] != (float)sin(0.37)); /* the steps did something */
            DT_CHECK(dt_optim_steps(os[1]) == STEPS);
            for (int v = 0; v < 3; v++) {
                dt_optim_free(os[v]);
                param_free(ps[v]);
            }
        }
    free(ga);
    free(gb);
    free(sum);
    dt_pool_free(pool);
}

DT_TEST_MAIN(DT_T(test_sgd_matches_formula), DT_T(test_momentum_matches_formula),
             DT_T(test_nesterov_differs_from_momentum), DT_T(test_adam_matches_formula),
             DT_T(test_adam_bias_correction_first_step), DT_T(test_adagrad_matches_formula),
             DT_T(test_quadratic_converges), DT_T(test_weight_decay_only_on_decay_params),
             DT_T(test_against_torch), DT_T(test_schedule_values), DT_T(test_step_uses_schedule),
             DT_T(test_resume_via_slots_and_set_steps), DT_T(test_defaults),
             DT_T(test_validation_errors), DT_T(test_slots_named_per_param),
             DT_T(test_pool_threads_identical), DT_T(test_adam_flushes_denormals),
             DT_T(test_step_from_other_grads), DT_T(test_step_from_two_sources))

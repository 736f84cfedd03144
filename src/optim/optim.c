/*
 * optim.c - SGD, momentum (plain and Nesterov), Adam and Adagrad.
 *
 * Design: dt_optim_init validates the configuration, copies it, and allocates every slot
 * tensor (momentum "v"; Adam "m" and "v"; Adagrad "accumulator") from one arena sized by
 * a measure pass, so dt_optim_step never allocates. A step computes the per-step scalars
 * (learning rate from the schedule, Adam's bias corrections) once, then makes ONE
 * dt_pool_run: each thread walks every parameter and updates its own dt_split share of
 * that parameter's rows (the rows of its last dimension) when it has at least MIN_ROWS of
 * them per thread, else of its elements. A dense kernel that nn/dense.c splits by rows is
 * thus updated by the thread that multiplied and differentiated those rows, so a row's
 * value, gradient and slots stay in one core's cache from step to step. The kernels are
 * plain element-wise loops over restrict pointers, so the compiler vectorizes them, and
 * since every element is updated by the same arithmetic whichever thread owns it, results
 * do not depend on the thread count.
 *
 * Update rules (g = grad + weight_decay * w for params with decay = 1, else grad; t is the
 * step number counting from 1; all arithmetic in float, scalars computed in double):
 *   SGD       w -= lr * g
 *   momentum  v = mu * v + g;  w -= lr * v            (PyTorch's SGD with momentum)
 *   Nesterov  v = mu * v + g;  w -= lr * (g + mu * v)
 *   Adam      m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2
 *             w -= lr * m_hat / (sqrt(v_hat) + eps),  m_hat = m / (1 - b1^t),
 *             v_hat = v / (1 - b2^t)
 *             (the Kingma & Ba / PyTorch form: eps is added to sqrt(v_hat). Keras' default
 *             epsilon 1e-7 is used; evaluated as torch does: lr/(1-b1^t) * m /
 *             (sqrt(v)/sqrt(1-b2^t) + eps).)
 *   Adagrad   a += g^2;  w -= lr * g / (sqrt(a) + eps),  a starts at initial_accumulator
 *             (Keras' defaults: 0.1 and 1e-7)
 */
#include "dtrain/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert-impl.h"
#include "core/fpenv-impl.h"

#define MAX_SLOTS_PER_PARAM 2
#define MIN_ROWS 8 /* rows per thread below which a parameter is split by elements */
#define SLOT_NAME_MAX 96

typedef struct slot {
    char name[SLOT_NAME_MAX]; /* "<param name>/<slot>" */
    dt_tensor t;
} slot;

struct dt_optim {
    dt_optim_conf conf;
    dt_param **params; /* not owned */
    int nparams;
    int slots_per_param;
    slot *slots;      /* nparams * slots_per_param, param-major */
    dt_arena *arena;  /* slot storage */
    int64_t steps;
};

/* ---- configuration ---- */

void dt_optim_conf_defaults(dt_optim_conf *c) {
    if (c->learning_rate == 0)
        c->learning_rate =
            (c->kind == DT_OPTIM_ADAM || c->kind == DT_OPTIM_ADAGRAD) ? 0.001f : 0.01f;
    if (c->momentum == 0) c->momentum = 0.9f;
    if (c->beta1 == 0) c->beta1 = 0.9f;
    if (c->beta2 == 0) c->beta2 = 0.999f;
    if (c->epsilon == 0) c->epsilon = 1e-7f;
    if (c->initial_accumulator == 0) c->initial_accumulator = 0.1f;
    if (c->schedule.gamma == 0) c->schedule.gamma = 0.1f;
}

/* Comparisons are written so that NaN fails them. */
static dt_err validate(const dt_optim_conf *c) {
    const char *what = "optimizer";
    if ((unsigned)c->kind > DT_OPTIM_ADAGRAD)
        return dt_err_set(DT_ERR_ARG, "%s.type: unknown optimizer %d", what, (int)c->kind);
    if (!(c->learning_rate > 0) || isinf(c->learning_rate))
        return dt_err_set(DT_ERR_ARG, "%s.learning_rate: must be > 0, got %g", what,
                          (double)c->learning_rate);
    if (!(c->weight_decay >= 0) || isinf(c->weight_decay))
        return dt_err_set(DT_ERR_ARG, "%s.weight_decay: must be >= 0, got %g", what,
                          (double)c->weight_decay);
    if (c->kind == DT_OPTIM_MOMENTUM && !(c->momentum >= 0 && c->momentum < 1))
        return dt_err_set(DT_ERR_ARG, "%s.momentum: must be in [0, 1), got %g", what,
                          (double)c->momentum);
    if (c->kind == DT_OPTIM_ADAM) {
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return dt_err_set(DT_ERR_ARG, "%s.beta1: must be in [0, 1), got %g", what,
                              (double)c->beta1);
        if (!(c->beta2 >= 0 && c->beta2 < 1))
            return dt_err_set(DT_ERR_ARG, "%s.beta2: must be in [0, 1), got %g", what,
                              (double)c->beta2);
    }
    if (c->kind == DT_OPTIM_ADAM || c->kind == DT_OPTIM_ADAGRAD) {
        if (!(c->epsilon > 0) || isinf(c->epsilon))
            return dt_err_set(DT_ERR_ARG, "%s.epsilon: must be > 0, got %g", what,
                              (double)c->epsilon);
    }
    if (c->kind == DT_OPTIM_ADAGRAD &&
        (!(c->initial_accumulator >= 0) || isinf(c->initial_accumulator)))
        return dt_err_set(DT_ERR_ARG, "%s.initial_accumulator: must be >= 0, got %g", what,
                          (double)c->initial_accumulator);

    const dt_sched_conf *s = &c->schedule;
    switch (s->kind) {
    case DT_SCHED_CONSTANT:
        break;
    case DT_SCHED_STEP:
        if (s->step_size <= 0)
            return dt_err_set(DT_ERR_ARG, "%s.schedule.step_size: must be > 0, got %lld", what,
                              (long long)s->step_size);
        if (!(s->gamma > 0 && s->gamma <= 1))
            return dt_err_set(DT_ERR_ARG, "%s.schedule.gamma: must be in (0, 1], got %g", what,
                              (double)s->gamma);
        break;
    case DT_SCHED_COSINE:
        if (s->total_steps < 0)
            return dt_err_set(DT_ERR_ARG, "%s.schedule.total_steps: must be >= 0, got %lld",
                              what, (long long)s->total_steps);
        if (s->total_steps == 0)
            return dt_err_set(DT_ERR_ARG,
                              "%s.schedule.total_steps: is 0 (the whole run) but was not "
                              "filled in before the optimizer was created",
                              what);
        if (!(s->min_lr >= 0 && s->min_lr <= c->learning_rate))
            return dt_err_set(DT_ERR_ARG,
                              "%s.schedule.min_lr: must be in [0, learning_rate = %g], got %g",
                              what, (double)c->learning_rate, (double)s->min_lr);
        break;
    default:
        return dt_err_set(DT_ERR_ARG, "%s.schedule.type: unknown schedule %d", what,
                          (int)s->kind);
    }
    return DT_OK;
}

/* ---- life cycle ---- */

static int slots_per_kind(dt_optim_kind k, const char **names) {
    switch (k) {
    case DT_OPTIM_MOMENTUM:
        names[0] = "v";
        return 1;
    case DT_OPTIM_ADAM:
        names[0] = "m";
        names[1] = "v";
        return 2;
    case DT_OPTIM_ADAGRAD:
        names[0] = "accumulator";
        return 1;
    default:
        return 0;
    }
}

dt_err dt_optim_init(dt_optim **out, const dt_optim_conf *conf, dt_param *const *params,
                     int n) {
    DT_ASSERT(out && conf && n >= 0 && (n == 0 || params));
    dt_err err = validate(conf);
    if (err) return err;

    dt_optim *o = calloc(1, sizeof *o);
    if (!o) return dt_err_set(DT_ERR_NOMEM, "optimizer: out of memory");
    o->conf = *conf;
    o->nparams = n;
    const char *names[MAX_SLOTS_PER_PARAM];
    o->slots_per_param = slots_per_kind(conf->kind, names);
    err = DT_ERR_NOMEM;
    if (n > 0) {
        o->params = malloc((size_t)n * sizeof *o->params);
        if (!o->params) goto nomem;
        memcpy(o->params, params, (size_t)n * sizeof *o->params);
    }

    int nslots = n * o->slots_per_param;
    if (nslots > 0) {
        o->slots = calloc((size_t)nslots, sizeof *o->slots);
        if (!o->slots) goto nomem;
        /* measure pass, then one arena */
        size_t bytes = 0;
        for (int i = 0; i < n; i++) {
            const dt_param *p = params[i];
            DT_ASSERT(dt_shape_numel(&p->value.shape) == dt_shape_numel(&p->grad.shape));
            bytes += (size_t)o->slots_per_param *
                     dt_arena_size_of((size_t)dt_tensor_numel(&p->value) * sizeof(float));
        }
        if ((err = dt_arena_init(&o->arena, bytes))) goto fail;
        for (int i = 0; i < n; i++) {
            const dt_param *p = params[i];
            for (int k = 0; k < o->slots_per_param; k++) {
                slot *s = &o->slots[i * o->slots_per_param + k];
                int len = snprintf(s->name, sizeof s->name, "%s/%s", p->name, names[k]);
                DT_ASSERT(len > 0 && (size_t)len < sizeof s->name);
                err = dt_arena_tensor(o->arena, &s->t, p->value.shape.ndim, p->value.shape.dim);
                DT_ASSERT(err == DT_OK); /* the measure pass sized it */
                if (conf->kind == DT_OPTIM_ADAGRAD) {
                    int64_t ne = dt_tensor_numel(&s->t);
                    for (int64_t j = 0; j < ne; j++) s->t.data[j] = conf->initial_accumulator;
                }
            }
        }
    }
    *out = o;
    return DT_OK;
nomem:
    dt_err_set(DT_ERR_NOMEM, "optimizer: out of memory");
fail:
    dt_optim_free(o);
    return err;
}

void dt_optim_free(dt_optim *o) {
    if (!o) return;
    dt_arena_free(o->arena);
    free(o->slots);
    free(o->params);
    free(o);
}

/* ---- kernels: one element range [lo, hi) of one parameter ---- */

/* Adam's and Adagrad's loops call sqrtf; GCC vectorizes them only without errno semantics,
 * which no function attribute or pragma can switch off (GCC 12), so CMakeLists.txt compiles
 * this file with -fno-math-errno. */

/* The gradient a kernel reads: g[i], or g[i] x gs when the step was given scaled sums
 * (dt_optim_step_grads); gs == 1 is g[i] itself, the same arithmetic as without. With a
 * second source h (dt_optim_step_grads2) it is (g[i] + h[i]) x gs: the float sum an
 * all-reduce would have stored, then scaled (this file is compiled without fused
 * multiply-adds: both ring members step the same bits). */
#define GRAD(i) (h ? (g[i] + h[i]) * gs : gs == 1.0f ? g[i] : g[i] * gs)

static void sgd_kernel(float *restrict w, const float *restrict g, const float *restrict h,
                       float gs, int64_t lo, int64_t hi, float lr, float wd) {
    for (int64_t i = lo; i < hi; i++)
        w[i] -= lr * (GRAD(i) + wd * w[i]);
}

static void momentum_kernel(float *restrict w, const float *restrict g, const float *restrict h,
                            float gs, float *restrict v, int64_t lo, int64_t hi, float lr,
                            float wd, float mu) {
    for (int64_t i = lo; i < hi; i++) {
        float gi = GRAD(i) + wd * w[i];
        float vi = mu * v[i] + gi;
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

static void nesterov_kernel(float *restrict w, const float *restrict g, const float *restrict h,
                            float gs, float *restrict v, int64_t lo, int64_t hi, float lr,
                            float wd, float mu) {
    for (int64_t i = lo; i < hi; i++) {
        float gi = GRAD(i) + wd * w[i];
        float vi = mu * v[i] + gi;
        v[i] = vi;
        w[i] -= lr * (gi + mu * vi);
    }
}

/* step_size = lr / (1 - b1^t), inv_sqrt_bc2 = 1 / sqrt(1 - b2^t) */
static void adam_kernel(float *restrict w, const float *restrict g, const float *restrict h,
                        float gs, float *restrict m, float *restrict v, int64_t lo, int64_t hi,
                        float wd, float b1, float b2, float eps, float step_size,
                        float inv_sqrt_bc2) {
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    for (int64_t i = lo; i < hi; i++) {
        float gi = GRAD(i) + wd * w[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] -= step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

static void adagrad_kernel(float *restrict w, const float *restrict g, const float *restrict h,
                           float gs, float *restrict a, int64_t lo, int64_t hi, float lr,
                           float wd, float eps) {
    for (int64_t i = lo; i < hi; i++) {
        float gi = GRAD(i) + wd * w[i];
        float ai = a[i] + gi * gi;
        a[i] = ai;
        w[i] -= lr * gi / (sqrtf(ai) + eps);
    }
}

/* ---- the step ---- */

/* dt_optim_step_copy: elements per block updated then copied out (32 KB: in L1) */
#define COPY_BLOCK 8192

typedef struct step_job {
    dt_optim *o;
    float *const *grads; /* NULL: the params' own */
    const float *const *more; /* NULL, or a second source added to grads (step_grads2) */
    float *const *copy;  /* NULL: none; else the new values also go to copy[p] */
    float scale;         /* the grads are multiplied by it as they are read */
    dt_optim_taken k;    /* the step's scalars */
} step_job;

/* Parameter p's elements [lo, hi) from its gradient g (plus h unless NULL, times gs); their
 * new values also to copy (p's whole layout) unless NULL, while they are in cache. Never
 * inlined: every step (whole, or a range at a time) runs this one body, so the compiler's
 * choices (which products it fuses into multiply-adds) are the same for all and so are the
 * results, bit for bit - the PS's pipelined steps against a plain one, say (a copy inlined
 * into dt_optim_apply_range with a scale argument of its own was seen to differ from
 * dt_optim_step's in the last bit). */
__attribute__((noinline)) static void step_range(const dt_optim *o, const dt_optim_taken *k,
                                                 int p, const float *g, const float *h,
                                                 float gs, int64_t lo, int64_t hi, float *copy) {
    const dt_optim_conf *c = &o->conf;
    dt_param *par = o->params[p];
    float *w = par->value.data;
    float wd = par->decay ? c->weight_decay : 0.0f;
    /* plain SGD has no slots (o->slots NULL): no offset from a null pointer */
    slot *s = o->slots ? o->slots + (size_t)p * (size_t)o->slots_per_param : NULL;
    switch (c->kind) {
    case DT_OPTIM_SGD:
        sgd_kernel(w, g, h, gs, lo, hi, k->lr, wd);
        break;
    case DT_OPTIM_MOMENTUM:
        if (c->nesterov)
            nesterov_kernel(w, g, h, gs, s[0].t.data, lo, hi, k->lr, wd, c->momentum);
        else
            momentum_kernel(w, g, h, gs, s[0].t.data, lo, hi, k->lr, wd, c->momentum);
        break;
    case DT_OPTIM_ADAM:
        adam_kernel(w, g, h, gs, s[0].t.data, s[1].t.data, lo, hi, wd, c->beta1, c->beta2,
                    c->epsilon, k->adam_step_size, k->adam_inv_sqrt_bc2);
        break;
    case DT_OPTIM_ADAGRAD:
        adagrad_kernel(w, g, h, gs, s[0].t.data, lo, hi, k->lr, wd, c->epsilon);
        break;
    }
    if (copy) memcpy(copy + lo, w + lo, (size_t)(hi - lo) * sizeof(float));
}

static void step_task(void *arg, int ith, int nth) {
    const step_job *j = arg;
    for (int p = 0; p < j->o->nparams; p++) {
        const dt_param *par = j->o->params[p];
        const float *g = j->grads ? j->grads[p] : par->grad.data;
        const dt_shape *sh = &par->value.shape;
        int64_t n = dt_tensor_numel(&par->value);
        int64_t row = sh->ndim >= 2 ? sh->dim[sh->ndim - 1] : 1;
        if (row <= 0 || n / row < (int64_t)nth * MIN_ROWS) row = 1; /* too few to share */
        int64_t lo, hi;
        dt_split(n / row, ith, nth, &lo, &hi);
        lo *= row;
        hi *= row;
        int64_t block = j->copy ? COPY_BLOCK : hi - lo; /* without copies: all at once */
        for (int64_t b = lo; b < hi; b += block) {
            int64_t e = hi - b < block ? hi : b + block;
            step_range(j->o, &j->k, p, g, j->more ? j->more[p] : NULL, j->scale, b, e,
                       j->copy ? j->copy[p] : NULL);
        }
    }
}

void dt_optim_step(dt_optim *o, dt_pool *pool) {
    dt_optim_step_grads(o, pool, NULL, 1.0f);
}

void dt_optim_take_step(dt_optim *o, dt_optim_taken *k) {
    *k = (dt_optim_taken){.step = o->steps, .lr = dt_optim_lr_at(&o->conf, o->steps)};
    if (o->conf.kind == DT_OPTIM_ADAM) {
        double t = (double)(o->steps + 1);
        double bc1 = 1.0 - pow((double)o->conf.beta1, t);
        double bc2 = 1.0 - pow((double)o->conf.beta2, t);
        k->adam_step_size = (float)((double)k->lr / bc1);
        k->adam_inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    }
    o->steps++;
}

void dt_optim_apply_range(dt_optim *o, const dt_optim_taken *k, int p, int64_t lo, int64_t hi,
                          const float *grad, float *copy) {
    DT_ASSERT(p >= 0 && p < o->nparams && lo >= 0 && lo <= hi &&
              hi <= dt_tensor_numel(&o->params[p]->value));
    unsigned fp = dt__fp_flush_denormals(); /* core/fpenv-impl.h */
    step_range(o, k, p, grad, NULL, 1.0f, lo, hi, copy);
    dt__fp_restore(fp);
}

static void run_step(dt_optim *o, dt_pool *pool, float *const *grads,
                     const float *const *more, float scale, float *const *copy) {
    step_job j = {.o = o, .grads = grads, .more = more, .copy = copy, .scale = scale};
    dt_optim_take_step(o, &j.k);
    unsigned fp = dt__fp_flush_denormals(); /* core/fpenv-impl.h */
    if (o->nparams > 0) dt_pool_run(pool, step_task, &j);
    dt__fp_restore(fp);
}

void dt_optim_step_grads(dt_optim *o, dt_pool *pool, float *const *grads, float scale) {
    run_step(o, pool, grads, NULL, scale, NULL);
}

void dt_optim_step_grads2(dt_optim *o, dt_pool *pool, float *const *grads,
                          const float *const *more, float scale) {
    DT_ASSERT(grads && more);
    run_step(o, pool, grads, more, scale, NULL);
}

void dt_optim_step_copy(dt_optim *o, dt_pool *pool, float *const *copy) {
    run_step(o, pool, NULL, NULL, 1.0f, copy);
}

int64_t dt_optim_steps(const dt_optim *o) {
    return o->steps;
}

void dt_optim_set_steps(dt_optim *o, int64_t steps) {
    DT_ASSERT(steps >= 0);
    o->steps = steps;
}

/* ---- slots ---- */

int dt_optim_num_slots(const dt_optim *o) {
    return o->nparams * o->slots_per_param;
}

const char *dt_optim_slot_name(const dt_optim *o, int i) {
    DT_ASSERT(i >= 0 && i < dt_optim_num_slots(o));
    return o->slots[i].name;
}

dt_tensor *dt_optim_slot(dt_optim *o, int i) {
    DT_ASSERT(i >= 0 && i < dt_optim_num_slots(o));
    return &o->slots[i].t;
}

/*
 * model.c - a sequential stack of layers: build, forward, loss, backward, predict.
 *
 * Design. dt_model_init copies the layer configs, names them ("<kind>_<i>", i counting the
 * layers of that kind from 1), and runs each layer's setup on the previous layer's output
 * shape; an error is wrapped as "layer <i> (<name>): ..." (i as in spec.model.layers[i]).
 * A measure pass then adds up every buffer the model will ever touch, for max_batch
 * samples:
 *
 *     per parameter        value, grad
 *     per layer            y, dy (dy of layer i is dx of layer i+1), state
 *     shared               scratch (the largest any layer asks for), dx of the input
 *
 * and carves them all from ONE dt_arena, so a training step allocates nothing. Parameters
 * start at zero.
 *
 * A softmax-cross-entropy model whose last layer ends in softmax (fused into dense/conv2d or
 * a standalone activation) has that softmax turned off at build time: forward yields
 * logits, the loss applies the softmax in its numerically stable form, and dt_model_predict
 * applies it to what it returns.
 *
 * Backward walks the layers in reverse and only asks a layer for dx when someone needs it:
 * a layer below it has parameters, or the caller wants the input's gradient. So an MLP that
 * starts with flatten never computes the first dense layer's dx.
 *
 * Threading: every kernel runs on the pool given at init; one caller at a time.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert-impl.h"
#include "core/fpenv-impl.h"
#include "nn/act-impl.h"

/* Every buffer (per layer, max_batch samples) and every parameter stays below 2^31 floats,
 * so that BLAS's int dimensions never overflow. */
#define MAX_FLOATS ((int64_t)INT32_MAX)

static const dt__layer_ops *const layer_ops[] = {
    [DT_LAYER_DENSE] = &dt__dense_ops,         [DT_LAYER_CONV2D] = &dt__conv2d_ops,
    [DT_LAYER_MAXPOOL2D] = &dt__maxpool2d_ops, [DT_LAYER_FLATTEN] = &dt__flatten_ops,
    [DT_LAYER_DROPOUT] = &dt__dropout_ops,     [DT_LAYER_ACTIVATION] = &dt__activation_ops,
};
#define NKINDS ((int)(sizeof layer_ops / sizeof layer_ops[0]))

struct dt_model {
    int nlayers;
    dt__layer *layers;
    float **y, **dy, **state; /* per layer; state may be NULL */
    float *scratch;
    float *dx0; /* gradient w.r.t. the input (want_input_grad) */
    dt_shape input;
    dt_loss_kind loss;
    int64_t max_batch;
    dt_pool *pool;
    dt_arena *arena;
    int nparams;
    dt_param **params;
    float **own_grad; /* params[i]'s own gradient buffer (dt_model_bind_grads) */
    int *param_layer; /* index of the layer owning params[i] */
    dt_backward_hook hook; /* dt_model_set_backward_hook */
    void *hook_ctx;
    int64_t param_count;
    int first_param_layer; /* lowest layer index with parameters (nlayers if none) */
    int softmax_in_loss;   /* a final softmax was turned off; predict applies it */
    int needs_rng;         /* a training forward draws dropout masks */
    int want_input_grad;
    float loss_grad_scale; /* dt_model_set_loss_grad_scale */
    /* the last step */
    int64_t batch; /* of the last forward; 0 = none (or predict clobbered it) */
    int training;
    const float *x;
    int have_loss;
    dt_tensor out;
};

/* ---- building ---- */

static dt_shape batched(int64_t batch, const dt_shape *s) {
    dt_shape b = {.ndim = s->ndim + 1};
    b.dim[0] = batch;
    for (int i = 0; i < s->ndim; i++)
        b.dim[i + 1] = s->dim[i];
    return b;
}

/* The number of floats of a per-sample shape, or -1 when a dimension is not positive or
 * the total exceeds MAX_FLOATS. */
static int64_t checked_numel(const dt_shape *s, int max_ndim) {
    if (s->ndim < 1 || s->ndim > max_ndim) return -1;
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) {
        if (s->dim[i] <= 0 || s->dim[i] > MAX_FLOATS / n) return -1;
        n *= s->dim[i];
    }
    return n;
}

/* Add the arena bytes of `floats` floats to *total; 0 on overflow. */
static int measure(size_t *total, int64_t floats) {
    if (floats < 0 || (uint64_t)floats > (SIZE_MAX - DT_ALIGN) / sizeof(float)) return 0;
    size_t b = dt_arena_size_of((size_t)floats * sizeof(float));
    if (*total > SIZE_MAX - b) return 0;
    *total += b;
    return 1;
}

static float *carve(dt_arena *a, int64_t floats) {
    if (floats <= 0) return NULL;
    float *p = dt_arena_alloc(a, (size_t)floats * sizeof(float));
    DT_ASSERT(p != NULL); /* the measure pass counted it */
    return p;
}

/* Keras's fans: [in, out] for a matrix; for a conv kernel [.., in, out] both times the
 * receptive field; a vector's own length for both. */
static void param_fans(const dt_shape *s, int64_t *fan_in, int64_t *fan_out) {
    if (s->ndim == 1) {
        *fan_in = *fan_out = s->dim[0];
        return;
    }
    int64_t receptive = 1;
    for (int i = 0; i < s->ndim - 2; i++)
        receptive *= s->dim[i];
    *fan_in = s->dim[s->ndim - 2] * receptive;
    *fan_out = s->dim[s->ndim - 1] * receptive;
}

static int uses_activation(dt_layer_kind kind) {
    return kind == DT_LAYER_DENSE || kind == DT_LAYER_CONV2D || kind == DT_LAYER_ACTIVATION;
}

static dt_err name_layers(dt_model *m, const dt_layer_conf *confs) {
    for (int i = 0; i < m->nlayers; i++) {
        dt__layer *l = &m->layers[i];
        const dt_layer_conf *c = &confs[i];
        if ((unsigned)c->kind >= (unsigned)NKINDS || !layer_ops[c->kind])
            return dt_err_set(DT_ERR_SPEC, "layer %d: unknown kind %d", i, (int)c->kind);
        l->ops = layer_ops[c->kind];
        l->conf = *c;
        l->index = i;
        if (c->name[0]) {
            if (!memchr(c->name, '\0', sizeof c->name))
                return dt_err_set(DT_ERR_SPEC, "layer %d: name is longer than %d characters", i,
                                  (int)sizeof c->name - 1);
            if (strchr(c->name, '/'))
                return dt_err_set(DT_ERR_SPEC, "layer %d (%s): name must not contain '/'", i,
                                  c->name);
        } else {
            int nth = 1;
            for (int j = 0; j < i; j++)
                nth += confs[j].kind == c->kind;
            snprintf(l->conf.name, sizeof l->conf.name, "%s_%d", l->ops->kind, nth);
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(m->layers[j].conf.name, l->conf.name))
                return dt_err_set(DT_ERR_SPEC, "layer %d (%s): duplicate name (layer %d has it)", i,
                                  l->conf.name, j);
    }
    return DT_OK;
}

/* Run each layer's setup and check what it declared. */
static dt_err setup_layers(dt_model *m) {
    char buf[96];
    dt_shape in = m->input;
    m->first_param_layer = m->nlayers;
    for (int i = 0; i < m->nlayers; i++) {
        dt__layer *l = &m->layers[i];
        const char *name = l->conf.name;
        l->in = in;
        if (m->loss == DT_LOSS_SOFTMAX_CROSS_ENTROPY && i == m->nlayers - 1 &&
            uses_activation(l->conf.kind) && l->conf.activation == DT_ACT_SOFTMAX) {
            l->conf.activation = DT_ACT_NONE;
            m->softmax_in_loss = 1;
        }
        dt_err err = l->ops->setup(l);
        if (err) return dt_err_wrap(err, "layer %d (%s)", i, name);
        DT_ASSERT(l->out.ndim >= 0 && l->out.ndim <= DT_MAX_DIMS);
        int64_t row = checked_numel(&l->out, DT_MAX_DIMS - 1);
        if (row < 0 || row > MAX_FLOATS / m->max_batch)
            return dt_err_set(DT_ERR_SHAPE,
                              "layer %d (%s): output %s is empty or too large for a batch of "
                              "%lld",
                              i, name, dt_shape_str(&l->out, buf, sizeof buf),
                              (long long)m->max_batch);
        DT_ASSERT(l->nparams >= 0 && l->nparams <= DT_LAYER_MAX_PARAMS);
        for (int p = 0; p < l->nparams; p++) {
            dt_param *prm = &l->params[p];
            if (checked_numel(&prm->value.shape, DT_MAX_DIMS) < 0)
                return dt_err_set(DT_ERR_SHAPE, "layer %d (%s): parameter %s %s is too large", i,
                                  name, prm->name,
                                  dt_shape_str(&prm->value.shape, buf, sizeof buf));
            char suffix[sizeof prm->name];
            memcpy(suffix, prm->name, sizeof suffix);
            int n = snprintf(prm->name, sizeof prm->name, "%s/%s", name, suffix);
            DT_ASSERT(n > 0 && (size_t)n < sizeof prm->name);
            prm->grad.shape = prm->value.shape;
        }
        if (l->nparams > 0) {
            static const char *const which[] = {"kernel_init", "bias_init"};
            dt_init inits[] = {l->conf.kernel_init, l->conf.bias_init};
            for (int k = 0; k < 2; k++)
                if ((unsigned)inits[k] > (unsigned)DT_INIT_ZEROS)
                    return dt_err_set(DT_ERR_SPEC, "layer %d (%s): %s: unknown initializer %d", i,
                                      name, which[k], (int)inits[k]);
            if (m->first_param_layer == m->nlayers) m->first_param_layer = i;
        }
        if (l->ops == &dt__dropout_ops && l->conf.rate > 0.0f) m->needs_rng = 1;
        m->nparams += l->nparams;
        in = l->out;
    }
    if (m->loss == DT_LOSS_SOFTMAX_CROSS_ENTROPY && in.ndim != 1) {
        const dt__layer *l = &m->layers[m->nlayers - 1];
        return dt_err_set(DT_ERR_SHAPE,
                          "layer %d (%s): softmax cross-entropy needs one logit per class, got "
                          "an output of %s; add a flatten layer",
                          l->index, l->conf.name, dt_shape_str(&in, buf, sizeof buf));
    }
    return DT_OK;
}

static int64_t state_of(const dt__layer *l, int64_t batch) {
    return l->ops->state_floats ? l->ops->state_floats(l, batch) : 0;
}

static int64_t scratch_of(const dt__layer *l, int64_t batch, int threads) {
    return l->ops->scratch_floats ? l->ops->scratch_floats(l, batch, threads) : 0;
}

/* Measure every buffer, allocate the arena and hand out the pieces. */
static dt_err allocate(dt_model *m) {
    size_t total = 0;
    int64_t scratch = 0;
    int ok = measure(&total, m->max_batch * dt_shape_numel(&m->input)); /* dx0 */
    for (int i = 0; i < m->nlayers && ok; i++) {
        const dt__layer *l = &m->layers[i];
        int64_t act = m->max_batch * dt_shape_numel(&l->out);
        int64_t st = state_of(l, m->max_batch);
        int64_t sc = scratch_of(l, m->max_batch, dt_pool_size(m->pool));
        DT_ASSERT(st >= 0 && sc >= 0);
        ok = measure(&total, act) && measure(&total, act) && measure(&total, st);
        scratch = sc > scratch ? sc : scratch;
        for (int p = 0; p < l->nparams && ok; p++) {
            int64_t n = dt_shape_numel(&l->params[p].value.shape);
            ok = measure(&total, n) && measure(&total, n);
        }
    }
    ok = ok && measure(&total, scratch);
    if (!ok)
        return dt_err_set(DT_ERR_NOMEM, "model: buffers for a batch of %lld overflow memory",
                          (long long)m->max_batch);
    dt_err err = dt_arena_init(&m->arena, total);
    if (err) return dt_err_wrap(err, "model: %zu bytes of buffers", total);

    m->params = calloc((size_t)(m->nparams ? m->nparams : 1), sizeof *m->params);
    m->param_layer = calloc((size_t)(m->nparams ? m->nparams : 1), sizeof *m->param_layer);
    m->own_grad = calloc((size_t)(m->nparams ? m->nparams : 1), sizeof *m->own_grad);
    if (!m->params || !m->param_layer || !m->own_grad)
        return dt_err_set(DT_ERR_NOMEM, "model: out of memory");
    int np = 0;
    for (int i = 0; i < m->nlayers; i++) {
        dt__layer *l = &m->layers[i];
        for (int p = 0; p < l->nparams; p++) {
            dt_param *prm = &l->params[p];
            int64_t n = dt_shape_numel(&prm->value.shape);
            prm->value.data = carve(m->arena, n);
            prm->grad.data = carve(m->arena, n);
            memset(prm->value.data, 0, (size_t)n * sizeof(float));
            memset(prm->grad.data, 0, (size_t)n * sizeof(float));
            m->param_count += n;
            m->own_grad[np] = prm->grad.data;
            m->param_layer[np] = i;
            m->params[np++] = prm;
        }
    }
    for (int i = 0; i < m->nlayers; i++) {
        const dt__layer *l = &m->layers[i];
        int64_t act = m->max_batch * dt_shape_numel(&l->out);
        m->y[i] = carve(m->arena, act);
        m->dy[i] = carve(m->arena, act);
        m->state[i] = carve(m->arena, state_of(l, m->max_batch));
    }
    m->scratch = carve(m->arena, scratch);
    m->dx0 = carve(m->arena, m->max_batch * dt_shape_numel(&m->input));
    return DT_OK;
}

dt_err dt_model_init(dt_model **out, const dt_shape *input, const dt_layer_conf *layers,
                     int nlayers, dt_loss_kind loss, int64_t max_batch, dt_pool *pool) {
    char buf[96];
    *out = NULL;
    if (nlayers <= 0 || !layers) return dt_err_set(DT_ERR_SPEC, "model: no layers");
    if ((unsigned)loss > (unsigned)DT_LOSS_MSE)
        return dt_err_set(DT_ERR_SPEC, "model: unknown loss %d", (int)loss);
    if (max_batch <= 0 || max_batch > MAX_FLOATS)
        return dt_err_set(DT_ERR_ARG, "model: max batch size %lld is not in [1, %lld]",
                          (long long)max_batch, (long long)MAX_FLOATS);
    if (input->ndim < 1 || input->ndim > DT_MAX_DIMS - 1)
        return dt_err_set(DT_ERR_SHAPE, "model: input shape has %d dimensions, not 1 to %d",
                          input->ndim, DT_MAX_DIMS - 1);
    int64_t in_row = checked_numel(input, DT_MAX_DIMS - 1);
    if (in_row < 0 || in_row > MAX_FLOATS / max_batch)
        return dt_err_set(DT_ERR_SHAPE,
                          "model: input shape %s must have 1 to %d positive dimensions and fit "
                          "a batch of %lld",
                          dt_shape_str(input, buf, sizeof buf), DT_MAX_DIMS - 1,
                          (long long)max_batch);
    dt_model *m = calloc(1, sizeof *m);
    if (!m) return dt_err_set(DT_ERR_NOMEM, "model: out of memory");
    m->nlayers = nlayers;
    m->input = *input;
    m->loss = loss;
    m->max_batch = max_batch;
    m->pool = pool;
    m->loss_grad_scale = 1.0f;
    m->layers = calloc((size_t)nlayers, sizeof *m->layers);
    m->y = calloc((size_t)nlayers, sizeof *m->y);
    m->dy = calloc((size_t)nlayers, sizeof *m->dy);
    m->state = calloc((size_t)nlayers, sizeof *m->state);
    dt_err err;
    if (!m->layers || !m->y || !m->dy || !m->state) {
        err = dt_err_set(DT_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    if ((err = name_layers(m, layers)) || (err = setup_layers(m)) || (err = allocate(m))) goto fail;
    *out = m;
    return DT_OK;
fail:
    dt_model_free(m);
    return err;
}

void dt_model_free(dt_model *m) {
    if (!m) return;
    dt_arena_free(m->arena);
    free(m->param_layer);
    free(m->own_grad);
    free(m->params);
    free(m->state);
    free(m->dy);
    free(m->y);
    free(m->layers);
    free(m);
}

void dt_model_init_params(dt_model *m, uint64_t seed) {
    for (int i = 0; i < m->nparams; i++) {
        dt_param *p = m->params[i];
        const dt_layer_conf *c = &m->layers[m->param_layer[i]].conf;
        const char *slash = strrchr(p->name, '/');
        int is_bias = slash && !strcmp(slash + 1, "bias");
        dt_init init = is_bias ? c->bias_init : c->kernel_init;
        if (init == DT_INIT_DEFAULT) init = is_bias ? DT_INIT_ZEROS : DT_INIT_GLOROT_UNIFORM;
        int64_t fan_in, fan_out;
        param_fans(&p->value.shape, &fan_in, &fan_out);
        /* a stream per parameter: one layer's values do not depend on the layers before it */
        dt_rng r;
        dt_rng_seed2(&r, seed, (uint64_t)i);
        dt__init_tensor(&p->value, init, fan_in, fan_out, &r);
    }
}

/* ---- accessors ---- */

int dt_model_num_params(const dt_model *m) {
    return m->nparams;
}

dt_param *dt_model_param(dt_model *m, int i) {
    DT_ASSERT(i >= 0 && i < m->nparams);
    return m->params[i];
}

dt_param *dt_model_find_param(dt_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i]->name, name)) return m->params[i];
    return NULL;
}

int64_t dt_model_param_count(const dt_model *m) {
    return m->param_count;
}

const dt_shape *dt_model_input_shape(const dt_model *m) {
    return &m->input;
}

const dt_shape *dt_model_output_shape(const dt_model *m) {
    return &m->layers[m->nlayers - 1].out;
}

int64_t dt_model_max_batch(const dt_model *m) {
    return m->max_batch;
}

int dt_model_num_layers(const dt_model *m) {
    return m->nlayers;
}

const dt_layer_conf *dt_model_layer_conf(const dt_model *m, int i) {
    return &m->layers[i].conf;
}

const dt_shape *dt_model_layer_input(const dt_model *m, int i) {
    return &m->layers[i].in;
}

const dt_shape *dt_model_layer_output(const dt_model *m, int i) {
    return &m->layers[i].out;
}

dt_loss_kind dt_model_loss_kind(const dt_model *m) {
    return m->loss;
}

void dt_model_want_input_grad(dt_model *m, int on) {
    m->want_input_grad = on != 0;
}

const float *dt_model_input_grad(const dt_model *m) {
    return m->want_input_grad ? m->dx0 : NULL;
}

/* Append to buf at *off, never past len. */
static void append(char *buf, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *off, const char *fmt, ...) {
    if (*off >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *off, len - *off, fmt, ap);
    va_end(ap);
    if (n > 0) *off = *off + (size_t)n < len ? *off + (size_t)n : len;
}

void dt_model_summary(const dt_model *m, char *buf, size_t len) {
    char shape[96];
    size_t off = 0;
    if (!len) return;
    buf[0] = '\0';
    append(buf, len, &off, "%-3s %-20s %-11s %-18s %10s\n", "#", "layer", "kind", "output",
           "params");
    append(buf, len, &off, "%-3s %-20s %-11s %-18s %10d\n", "", "input", "",
           dt_shape_str(&m->input, shape, sizeof shape), 0);
    for (int i = 0; i < m->nlayers; i++) {
        const dt__layer *l = &m->layers[i];
        int64_t n = 0;
        for (int p = 0; p < l->nparams; p++)
            n += dt_shape_numel(&l->params[p].value.shape);
        append(buf, len, &off, "%-3d %-20s %-11s %-18s %10lld", i, l->conf.name, l->ops->kind,
               dt_shape_str(&l->out, shape, sizeof shape), (long long)n);
        int last = i == m->nlayers - 1;
        if (last && m->softmax_in_loss)
            append(buf, len, &off, "  softmax (in the loss)");
        else if (uses_activation(l->conf.kind) && l->conf.activation != DT_ACT_NONE)
            append(buf, len, &off, "  %s", dt__act_name(l->conf.activation));
        append(buf, len, &off, "\n");
    }
    append(buf, len, &off, "total params: %lld\n", (long long)m->param_count);
}

/* ---- running ---- */

static void make_step(dt_model *m, int i, dt__layer_step *s) {
    dt__layer *l = &m->layers[i];
    s->pool = m->pool;
    s->batch = m->batch;
    s->training = m->training;
    s->x.data = i == 0 ? (float *)m->x : m->y[i - 1]; /* layers never write x */
    s->x.shape = batched(m->batch, &l->in);
    s->y.data = m->y[i];
    s->y.shape = batched(m->batch, &l->out);
    s->dy.data = m->dy[i];
    s->dy.shape = s->y.shape;
    s->dx.data = NULL;
    s->dx.shape = s->x.shape;
    s->state = m->state[i];
    s->scratch = m->scratch;
}

dt_err dt_model_forward(dt_model *m, const float *x, int64_t batch, int training, dt_rng *rng,
                        const dt_tensor **out) {
    if (batch <= 0 || batch > m->max_batch)
        return dt_err_set(DT_ERR_ARG, "forward: batch size %lld is not in [1, %lld] (max_batch)",
                          (long long)batch, (long long)m->max_batch);
    if (!x) return dt_err_set(DT_ERR_ARG, "forward: no input");
    if (training && m->needs_rng && !rng)
        return dt_err_set(DT_ERR_ARG, "forward: training with dropout needs an rng");
    m->x = x;
    m->batch = batch;
    m->training = training != 0;
    m->have_loss = 0;
    unsigned fp = dt__fp_flush_denormals(); /* core/fpenv-impl.h */
    for (int i = 0; i < m->nlayers; i++) {
        dt__layer_step s;
        make_step(m, i, &s);
        s.rng = training ? rng : NULL;
        m->layers[i].ops->forward(&m->layers[i], &s);
    }
    dt__fp_restore(fp);
    const dt__layer *last = &m->layers[m->nlayers - 1];
    m->out.data = m->y[m->nlayers - 1];
    m->out.shape = batched(batch, &last->out);
    if (out) *out = &m->out;
    return DT_OK;
}

static dt_err check_labels(const int32_t *labels, int64_t n, int64_t k) {
    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= k)
            return dt_err_set(DT_ERR_ARG, "label %ld of sample %lld is outside [0, %lld)",
                              (long)labels[i], (long long)i, (long long)k);
    return DT_OK;
}

static int64_t count_hits(const float *y, const int32_t *labels, int64_t n, int64_t k) {
    int64_t hits = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *r = y + i * k;
        int64_t arg = 0;
        for (int64_t j = 1; j < k; j++)
            if (r[j] > r[arg]) arg = j;
        hits += arg == labels[i];
    }
    return hits;
}

/* MSE against one-hot labels, without materializing the targets. */
static void mse_onehot(const float *y, const int32_t *labels, int64_t n, int64_t k, double *loss,
                       float *dy) {
    double total = 0.0;
    float g = 2.0f / (float)(n * k);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) {
            float d = y[i * k + j] - (j == labels[i] ? 1.0f : 0.0f);
            total += (double)d * (double)d;
            dy[i * k + j] = g * d;
        }
    *loss = total / (double)(n * k);
}

static dt_err model_loss(dt_model *m, const int32_t *labels, const float *targets, double *loss,
                         int64_t *correct) {
    if (m->batch == 0) return dt_err_set(DT_ERR_STATE, "loss: no forward pass to score");
    int last = m->nlayers - 1;
    int64_t n = m->batch, k = dt_shape_numel(&m->layers[last].out);
    const float *y = m->y[last];
    float *dy = m->dy[last];
    double l = 0.0;
    int64_t hits = 0;
    dt_err err;
    if (m->loss == DT_LOSS_SOFTMAX_CROSS_ENTROPY) {
        if (!labels) return dt_err_set(DT_ERR_ARG, "loss: softmax cross-entropy needs labels");
        if ((err = dt_loss_softmax_cross_entropy(y, labels, n, k, &l, dy, &hits)))
            return dt_err_wrap(err, "loss");
    } else {
        if (!labels && !targets)
            return dt_err_set(DT_ERR_ARG, "loss: mean squared error needs targets or labels");
        if (labels && (err = check_labels(labels, n, k))) return dt_err_wrap(err, "loss");
        if (targets)
            dt_loss_mse(y, targets, n, k, &l, dy);
        else
            mse_onehot(y, labels, n, k, &l, dy);
        if (labels) hits = count_hits(y, labels, n, k);
    }
    if (m->loss_grad_scale != 1.0f)
        for (int64_t i = 0; i < n * k; i++)
            dy[i] *= m->loss_grad_scale;
    if (loss) *loss = l;
    if (correct) *correct = hits;
    m->have_loss = 1;
    return DT_OK;
}

dt_err dt_model_loss(dt_model *m, const int32_t *labels, const float *targets, double *loss,
                     int64_t *correct) {
    unsigned fp = dt__fp_flush_denormals();
    dt_err err = model_loss(m, labels, targets, loss, correct);
    dt__fp_restore(fp);
    return err;
}

void dt_model_backward(dt_model *m) {
    DT_ASSERT(m->batch > 0 && m->have_loss); /* forward and loss come first */
    unsigned fp = dt__fp_flush_denormals();
    for (int i = m->nlayers - 1; i >= 0; i--) {
        dt__layer *l = &m->layers[i];
        int need_dx = m->want_input_grad || i > m->first_param_layer;
        if (!need_dx && l->nparams == 0) break; /* nothing below needs a gradient */
        dt__layer_step s;
        make_step(m, i, &s);
        s.rng = NULL;
        if (need_dx) s.dx.data = i == 0 ? m->dx0 : m->dy[i - 1];
        l->ops->backward(l, &s);
        if (m->hook && l->nparams > 0) m->hook(m->hook_ctx, i);
    }
    dt__fp_restore(fp);
}

void dt_model_set_backward_hook(dt_model *m, dt_backward_hook fn, void *ctx) {
    m->hook = fn;
    m->hook_ctx = ctx;
}

void dt_model_bind_grads(dt_model *m, float *const *grads) {
    for (int i = 0; i < m->nparams; i++)
        m->params[i]->grad.data = grads ? grads[i] : m->own_grad[i];
}

void dt_model_set_loss_grad_scale(dt_model *m, float s) {
    m->loss_grad_scale = s;
}

int dt_model_param_layer(const dt_model *m, int i) {
    DT_ASSERT(i >= 0 && i < m->nparams);
    return m->param_layer[i];
}

dt_err dt_model_predict(dt_model *m, const float *x, int64_t batch, float *out) {
    if (batch <= 0) return dt_err_set(DT_ERR_ARG, "predict: batch size %lld", (long long)batch);
    if (!x || !out) return dt_err_set(DT_ERR_ARG, "predict: no input or output buffer");
    int64_t in = dt_shape_numel(&m->input);
    int64_t k = dt_shape_numel(dt_model_output_shape(m));
    dt_err err = DT_OK;
    for (int64_t off = 0; off < batch; off += m->max_batch) {
        int64_t nb = batch - off < m->max_batch ? batch - off : m->max_batch;
        const dt_tensor *y;
        if ((err = dt_model_forward(m, x + off * in, nb, 0, NULL, &y))) break;
        float *o = out + off * k;
        memcpy(o, y->data, (size_t)(nb * k) * sizeof *o);
        if (m->loss == DT_LOSS_SOFTMAX_CROSS_ENTROPY)
            dt__act_forward(m->pool, DT_ACT_SOFTMAX, o, nb, k);
    }
    m->batch = 0; /* the buffers now hold the last chunk, not a training step */
    m->have_loss = 0;
    return err;
}

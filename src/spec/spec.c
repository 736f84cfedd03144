/*
 * spec.c - the training spec schema: YAML (via yaml_doc) onto dt_spec.
 *
 * Design: one function per mapping of the schema (document, metadata, data source,
 * normalize, model, layer, optimizer, schedule, training), each of which first checks the
 * mapping's keys against the allowed ones and then reads its fields with the typed
 * accessors of yaml_doc-impl.h, which format every error as "FILE:LINE: FIELD.PATH: ...".
 * Layer kinds are a designated-initializer table (type name, kind, allowed keys, parser),
 * and the optimizer's per-type keys are a table too, so adding a kind is a row in each table.
 *
 * Defaults: the dt_spec is zeroed, then given the documented defaults before reading; the
 * optimizer's defaults come from dt_optim_conf_defaults, applied as soon as the type is
 * known, so that an explicit value (even one equal to zero) is never overwritten. Values
 * that the optimizer would read as "use the default" when zero (momentum, beta1, beta2,
 * epsilon, initial_accumulator, gamma) must therefore be non-zero in a spec.
 *
 * Paths: dt_spec_load resolves relative data paths against the directory of the spec
 * file; dt_spec_parse keeps them as written (its path is only for messages).
 *
 * Job keys: a TrainJob job file (src/job) is a training spec plus spec.replicas, strategy,
 * runPolicy, successPolicy, elasticPolicy, pytorchEnv and metadata.namespace. The document
 * parser takes such extra keys as a list (spec-impl.h), and dt_spec_load allows exactly
 * these, unread, so that `dtrain train` runs a job file's training part as it is.
 *
 * Only the first YAML document of a stream is read; later documents are not even parsed.
 * Errors: the first problem found wins; everything allocated hangs off the dt_spec, which
 * dt_spec_free releases on every error path.
 */
#include "dtrain/spec.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec-impl.h"

#define API_VERSION "dtrain/v1"
#define KIND "TrainJob"
#define MAX_DIM (INT64_C(1) << 24) /* units, filters, kernel sizes, shape dimensions */
#define MAX_LAYERS 4096

static const dt__yrange POSITIVE = {0, HUGE_VAL, 1, 0};
static const dt__yrange NON_NEGATIVE = {0, HUGE_VAL, 0, 0};
static const dt__yrange ANY = {-HUGE_VAL, HUGE_VAL, 0, 0};
static const dt__yrange OPEN_UNIT = {0, 1, 1, 1};

/* A number that must also fit a float. */
static dt_err get_f32(const dt__yval *v, dt__yrange r, float *out) {
    double x;
    dt_err e = dt__yget_f64(v, r, &x);
    if (e) return e;
    if (fabs(x) > FLT_MAX) return dt__yerr(v, "%g is too large for a 32-bit float", x);
    *out = (float)x;
    return DT_OK;
}

/* Optional-field readers: absent leaves *out as it is. */
static dt_err opt_f32(const dt__yval *m, const char *key, dt__yrange r, float *out) {
    dt__yval v;
    return dt__ymap_get(m, key, &v) ? get_f32(&v, r, out) : DT_OK;
}

static dt_err opt_i64(const dt__yval *m, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    dt__yval v;
    return dt__ymap_get(m, key, &v) ? dt__yget_i64(&v, lo, hi, out) : DT_OK;
}

static dt_err opt_int(const dt__yval *m, const char *key, int lo, int hi, int *out) {
    dt__yval v;
    return dt__ymap_get(m, key, &v) ? dt__yget_int(&v, lo, hi, out) : DT_OK;
}

static dt_err opt_bool(const dt__yval *m, const char *key, int *out) {
    dt__yval v;
    return dt__ymap_get(m, key, &v) ? dt__yget_bool(&v, out) : DT_OK;
}

static dt_err opt_enum(const dt__yval *m, const char *key, const dt__yenum *t, int *out) {
    dt__yval v;
    return dt__ymap_get(m, key, &v) ? dt__yget_enum(&v, t, out) : DT_OK;
}

/* A mapping value (absent is fine when !required); out gets the cursor. */
static dt_err get_map(const dt__yval *parent, const char *key, int required, dt__yval *out) {
    if (!dt__ymap_get(parent, key, out))
        return required ? dt__yerr(out, "required field missing") : DT_OK;
    return dt__yexpect_map(out);
}

/* keys + extra (either may hold NULL at its end) into out[cap]; the caller sizes out. */
static void merge_keys(const char **out, size_t cap, const char *const *keys,
                       const char *const *extra) {
    size_t n = 0;
    for (; *keys && n + 1 < cap; keys++)
        out[n++] = *keys;
    for (; extra && *extra && n + 1 < cap; extra++)
        out[n++] = *extra;
    out[n] = NULL;
}

/* ---- paths ---- */

/* A data path: absolute paths as written, relative ones joined to base_dir (when given). */
static dt_err get_path(const dt__yval *v, const char *base_dir, char *dst) {
    const char *s = NULL;
    dt_err e = dt__yget_str(v, &s);
    if (e) return e;
    if (!*s) return dt__yerr(v, "expected a path, got an empty string");
    size_t n = strlen(s);
    if (s[0] == '/' || !base_dir || !*base_dir) {
        if (n >= DT_PATH_MAX)
            return dt__yerr(v, "path too long (%zu bytes, at most %d)", n, DT_PATH_MAX - 1);
        memcpy(dst, s, n + 1);
        return DT_OK;
    }
    size_t b = strlen(base_dir);
    int slash = base_dir[b - 1] != '/';
    if (b + (size_t)slash + n >= DT_PATH_MAX)
        return dt__yerr(v, "path too long once resolved against '%s' (at most %d bytes)", base_dir,
                        DT_PATH_MAX - 1);
    memcpy(dst, base_dir, b);
    if (slash) dst[b] = '/';
    memcpy(dst + b + (size_t)slash, s, n + 1);
    return DT_OK;
}

/* ---- metadata ---- */

/* DNS-1035 label: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters. */
static int is_dns1035(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 63 || !(s[0] >= 'a' && s[0] <= 'z')) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return 0;
    }
    return s[n - 1] != '-';
}

static dt_err parse_metadata(dt_spec *sp, const dt__yval *root, const char *const *extra) {
    static const char *const own[] = {"name", NULL};
    const char *keys[16];
    dt__yval m, v;
    dt_err e;
    const char *name = NULL;
    merge_keys(keys, sizeof keys / sizeof keys[0], own, extra);
    if ((e = get_map(root, "metadata", 1, &m)) || (e = dt__ymap_check_keys(&m, keys, NULL)) ||
        (e = dt__ymap_require(&m, "name", &v)) || (e = dt__yget_str(&v, &name)))
        return e;
    if (!is_dns1035(name)) {
        char got[80];
        return dt__yerr(&v,
                        "%s is not a valid name: use at most 63 lowercase letters, digits and "
                        "'-', starting with a letter and not ending with '-'",
                        dt__yval_describe(&v, got, sizeof got));
    }
    memcpy(sp->name, name, strlen(name) + 1);
    return DT_OK;
}

/* ---- data ---- */

static const dt__yenum data_formats[] = {
    {"idx", DT_DATA_IDX}, {"csv", DT_DATA_CSV}, {"synthetic", DT_DATA_SYNTHETIC}, {NULL, 0}};

static dt_err parse_source(const dt__yval *m, const char *base_dir, dt_data_source *src) {
    static const char *const idx_keys[] = {"format", "images", "labels", NULL};
    static const char *const csv_keys[] = {"format", "path", "label_column", "header", NULL};
    static const char *const syn_keys[] = {"format", "samples", "shape", "classes", NULL};
    static const char *const *const keys[] = {
        [DT_DATA_IDX] = idx_keys, [DT_DATA_CSV] = csv_keys, [DT_DATA_SYNTHETIC] = syn_keys};
    dt__yval v;
    dt_err e;
    int fmt = 0;
    memset(src, 0, sizeof *src);
    src->label_column = -1;
    src->line = m->decl_line; /* the line of its key (train:, eval:) */
    if ((e = dt__yexpect_map(m)) || (e = dt__ymap_require(m, "format", &v)) ||
        (e = dt__yget_enum(&v, data_formats, &fmt)) ||
        (e = dt__ymap_check_keys(m, keys[fmt], data_formats[fmt].name)))
        return e;
    src->format = (dt_data_format)fmt;
    switch (src->format) {
    case DT_DATA_IDX:
        if ((e = dt__ymap_require(m, "images", &v)) || (e = get_path(&v, base_dir, src->images)) ||
            (e = dt__ymap_require(m, "labels", &v)) || (e = get_path(&v, base_dir, src->labels)))
            return e;
        break;
    case DT_DATA_CSV:
        if ((e = dt__ymap_require(m, "path", &v)) || (e = get_path(&v, base_dir, src->path)) ||
            (e = opt_int(m, "label_column", -1, 1 << 20, &src->label_column)) ||
            (e = opt_bool(m, "header", &src->header)))
            return e;
        break;
    case DT_DATA_SYNTHETIC: {
        int64_t dims[DT_MAX_DIMS];
        int n = 0;
        if ((e = dt__ymap_require(m, "samples", &v)) ||
            (e = dt__yget_i64(&v, 1, INT64_C(1) << 40, &src->samples)) ||
            (e = dt__ymap_require(m, "shape", &v)) ||
            (e = dt__yget_i64_list(&v, 1, DT_MAX_DIMS, 1, MAX_DIM, dims, &n)) ||
            (e = dt__ymap_require(m, "classes", &v)) ||
            (e = dt__yget_int(&v, 2, 1 << 20, &src->num_classes)))
            return e;
        src->shape = dt_shape_make(n, dims);
        break;
    }
    }
    return DT_OK;
}

static dt_err parse_normalize(dt_spec *sp, const dt__yval *v) {
    static const char *const keys[] = {"scale", "shift", "mean", "std", NULL};
    dt__yval mean, std, shift;
    dt_err e;
    if (dt__yval_is_scalar(v)) {
        const char *s = NULL;
        if ((e = dt__yget_str(v, &s))) return e;
        if (!strcmp(s, "standard")) {
            sp->norm = DT_NORM_STANDARD;
            return DT_OK;
        }
    }
    if (!dt__yval_is_map(v)) {
        char got[80];
        return dt__yerr(v,
                        "expected 'standard' or a mapping {scale, shift} or {mean, std, scale}, "
                        "got %s",
                        dt__yval_describe(v, got, sizeof got));
    }
    if ((e = dt__ymap_check_keys(v, keys, NULL))) return e;
    if (dt__ymap_size(v) == 0)
        return dt__yerr(v, "expected {scale, shift} or {mean, std, scale}, got an empty mapping");
    if ((e = opt_f32(v, "scale", ANY, &sp->scale))) return e;
    if (sp->scale == 0.0f) {
        dt__yval s;
        dt__ymap_get(v, "scale", &s);
        return dt__yerr(&s, "expected a non-zero number, got 0");
    }
    int has_mean = dt__ymap_get(v, "mean", &mean), has_std = dt__ymap_get(v, "std", &std);
    if (has_mean || has_std) {
        if (dt__ymap_get(v, "shift", &shift))
            return dt__yerr(&shift, "not used with mean and std ((x * scale - mean) / std)");
        if (!has_mean) return dt__yerr(&mean, "required field missing (std is given)");
        if (!has_std) return dt__yerr(&std, "required field missing (mean is given)");
        if ((e = get_f32(&mean, ANY, &sp->mean)) || (e = get_f32(&std, POSITIVE, &sp->std)))
            return e;
        sp->norm = DT_NORM_MEAN_STD;
        return DT_OK;
    }
    if ((e = opt_f32(v, "shift", ANY, &sp->shift))) return e;
    sp->norm = DT_NORM_SCALE;
    return DT_OK;
}

/* data.classes: the classes' names, label 0 first (what a served model answers with). */
static dt_err parse_classes(dt_spec *sp, const dt__yval *v) {
    dt_err e = dt__yexpect_seq(v);
    if (e) return e;
    int n = dt__yseq_size(v);
    if (n < 1 || n > 1 << 16) return dt__yerr(v, "expected 1 to 65536 class names, got %d", n);
    if (!(sp->class_names = calloc((size_t)n, sizeof *sp->class_names)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    sp->num_class_names = n;
    sp->classes_line = v->decl_line;
    for (int i = 0; i < n; i++) {
        dt__yval item;
        const char *name = NULL;
        dt__yseq_item(v, i, &item);
        if ((e = dt__yget_str(&item, &name))) return e;
        if (!name[0] || strlen(name) > 256)
            return dt__yerr(&item, "expected a class name of 1 to 256 bytes, got %zu bytes",
                            strlen(name));
        if (!(sp->class_names[i] = strdup(name))) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    return DT_OK;
}

static dt_err parse_data(dt_spec *sp, const dt__yval *spec, const char *base_dir) {
    static const char *const keys[] = {"train",   "eval",    "eval_fraction", "normalize",
                                       "shuffle", "classes", NULL};
    dt__yval m, v, frac;
    dt_err e;
    if ((e = get_map(spec, "data", 1, &m)) || (e = dt__ymap_check_keys(&m, keys, NULL)) ||
        (e = dt__ymap_require(&m, "train", &v)) || (e = parse_source(&v, base_dir, &sp->train)))
        return e;
    int has_frac = dt__ymap_get(&m, "eval_fraction", &frac);
    if (dt__ymap_get(&m, "eval", &v)) {
        if ((e = parse_source(&v, base_dir, &sp->eval))) return e;
        if (has_frac)
            return dt__yerr(&frac,
                            "not allowed together with spec.data.eval (at line %d): "
                            "the eval set is given, so nothing is held out of train",
                            v.decl_line);
        sp->has_eval = 1;
        sp->eval_fraction = 0;
    } else if (has_frac) {
        if ((e = dt__yget_f64(&frac, OPEN_UNIT, &sp->eval_fraction))) return e;
    }
    if (dt__ymap_get(&m, "normalize", &v) && (e = parse_normalize(sp, &v))) return e;
    if (dt__ymap_get(&m, "classes", &v) && (e = parse_classes(sp, &v))) return e;
    return opt_bool(&m, "shuffle", &sp->shuffle);
}

/* ---- model ---- */

static const dt__yenum activations[] = {{"relu", DT_ACT_RELU},
                                        {"tanh", DT_ACT_TANH},
                                        {"sigmoid", DT_ACT_SIGMOID},
                                        {"softmax", DT_ACT_SOFTMAX},
                                        {"linear", DT_ACT_NONE},
                                        {"none", DT_ACT_NONE},
                                        {NULL, 0}};

static const dt__yenum initializers[] = {{"glorot_uniform", DT_INIT_GLOROT_UNIFORM},
                                         {"glorot_normal", DT_INIT_GLOROT_NORMAL},
                                         {"he_uniform", DT_INIT_HE_UNIFORM},
                                         {"he_normal", DT_INIT_HE_NORMAL},
                                         {"zeros", DT_INIT_ZEROS},
                                         {NULL, 0}};

static const dt__yenum paddings[] = {
    {"valid", DT_PADDING_VALID}, {"same", DT_PADDING_SAME}, {NULL, 0}};

/* An int or a list of two ints, each in [1, MAX_DIM]; absent leaves out as it is. */
static dt_err opt_pair(const dt__yval *m, const char *key, int64_t out[2]) {
    dt__yval v;
    int n;
    if (!dt__ymap_get(m, key, &v)) return DT_OK;
    if (dt__yval_is_seq(&v)) return dt__yget_i64_list(&v, 2, 2, 1, MAX_DIM, out, &n);
    if (!dt__yval_is_scalar(&v)) {
        char got[80];
        return dt__yerr(&v, "expected a positive integer or a list of 2 positive integers, got %s",
                        dt__yval_describe(&v, got, sizeof got));
    }
    dt_err e = dt__yget_i64(&v, 1, MAX_DIM, &out[0]);
    out[1] = out[0];
    return e;
}

static dt_err parse_bias_and_init(const dt__yval *m, dt_layer_conf *l) {
    int use_bias = 1, act = DT_ACT_NONE, ki = DT_INIT_DEFAULT, bi = DT_INIT_DEFAULT;
    dt_err e;
    if ((e = opt_enum(m, "activation", activations, &act)) ||
        (e = opt_bool(m, "use_bias", &use_bias)) ||
        (e = opt_enum(m, "kernel_initializer", initializers, &ki)) ||
        (e = opt_enum(m, "bias_initializer", initializers, &bi)))
        return e;
    l->activation = (dt_act)act;
    l->no_bias = !use_bias;
    l->kernel_init = (dt_init)ki;
    l->bias_init = (dt_init)bi;
    return DT_OK;
}

static dt_err parse_dense(const dt__yval *m, dt_layer_conf *l) {
    dt__yval v;
    dt_err e;
    if ((e = dt__ymap_require(m, "units", &v)) || (e = dt__yget_i64(&v, 1, MAX_DIM, &l->units)))
        return e;
    return parse_bias_and_init(m, l);
}

static dt_err parse_conv2d(const dt__yval *m, dt_layer_conf *l) {
    dt__yval v;
    dt_err e;
    int pad = DT_PADDING_VALID;
    l->stride[0] = l->stride[1] = 1;
    if ((e = dt__ymap_require(m, "filters", &v)) ||
        (e = dt__yget_i64(&v, 1, MAX_DIM, &l->filters)) ||
        (e = dt__ymap_require(m, "kernel_size", &v)) ||
        (e = opt_pair(m, "kernel_size", l->kernel)) || (e = opt_pair(m, "strides", l->stride)) ||
        (e = opt_enum(m, "padding", paddings, &pad)))
        return e;
    l->padding = (dt_padding)pad;
    return parse_bias_and_init(m, l);
}

static dt_err parse_maxpool2d(const dt__yval *m, dt_layer_conf *l) {
    dt_err e;
    int pad = DT_PADDING_VALID;
    l->kernel[0] = l->kernel[1] = 2;
    if ((e = opt_pair(m, "pool_size", l->kernel))) return e;
    l->stride[0] = l->kernel[0];
    l->stride[1] = l->kernel[1];
    if ((e = opt_pair(m, "strides", l->stride)) || (e = opt_enum(m, "padding", paddings, &pad)))
        return e;
    l->padding = (dt_padding)pad;
    return DT_OK;
}

static dt_err parse_flatten(const dt__yval *m, dt_layer_conf *l) {
    (void)m;
    (void)l;
    return DT_OK;
}

static dt_err parse_dropout(const dt__yval *m, dt_layer_conf *l) {
    static const dt__yrange rate = {0, 1, 0, 1};
    dt__yval v;
    dt_err e;
    if ((e = dt__ymap_require(m, "rate", &v))) return e;
    return get_f32(&v, rate, &l->rate);
}

static dt_err parse_activation(const dt__yval *m, dt_layer_conf *l) {
    dt__yval v;
    dt_err e;
    int act = 0;
    if ((e = dt__ymap_require(m, "activation", &v)) || (e = dt__yget_enum(&v, activations, &act)))
        return e;
    l->activation = (dt_act)act;
    return DT_OK;
}

typedef struct layer_schema {
    const char *type;
    const char *const *keys;
    dt_err (*parse)(const dt__yval *m, dt_layer_conf *l);
} layer_schema;

static const char *const dense_keys[] = {
    "type", "name", "units", "activation", "use_bias", "kernel_initializer", "bias_initializer",
    NULL};
static const char *const conv2d_keys[] = {
    "type",    "name",       "filters",  "kernel_size",        "strides",
    "padding", "activation", "use_bias", "kernel_initializer", "bias_initializer",
    NULL};
static const char *const maxpool2d_keys[] = {"type",    "name",    "pool_size",
                                             "strides", "padding", NULL};
static const char *const flatten_keys[] = {"type", "name", NULL};
static const char *const dropout_keys[] = {"type", "name", "rate", NULL};
static const char *const activation_keys[] = {"type", "name", "activation", NULL};

static const layer_schema layer_schemas[] = {
    [DT_LAYER_DENSE] = {.type = "dense", .keys = dense_keys, .parse = parse_dense},
    [DT_LAYER_CONV2D] = {.type = "conv2d", .keys = conv2d_keys, .parse = parse_conv2d},
    [DT_LAYER_MAXPOOL2D] = {.type = "maxpool2d", .keys = maxpool2d_keys, .parse = parse_maxpool2d},
    [DT_LAYER_FLATTEN] = {.type = "flatten", .keys = flatten_keys, .parse = parse_flatten},
    [DT_LAYER_DROPOUT] = {.type = "dropout", .keys = dropout_keys, .parse = parse_dropout},
    [DT_LAYER_ACTIVATION] = {.type = "activation",
                             .keys = activation_keys,
                             .parse = parse_activation},
};

static const dt__yenum layer_types[] = {{"dense", DT_LAYER_DENSE},
                                        {"conv2d", DT_LAYER_CONV2D},
                                        {"maxpool2d", DT_LAYER_MAXPOOL2D},
                                        {"flatten", DT_LAYER_FLATTEN},
                                        {"dropout", DT_LAYER_DROPOUT},
                                        {"activation", DT_LAYER_ACTIVATION},
                                        {NULL, 0}};

/* [A-Za-z0-9_]{1,31} */
static int is_layer_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 31) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return 0;
    }
    return 1;
}

/* Layer i of the list; layers[0..i) are already parsed (for the unique-name check). */
static dt_err parse_layer(const dt__yval *m, dt_layer_conf *layers, int i) {
    dt_layer_conf *l = &layers[i];
    dt__yval v;
    dt_err e;
    int kind = 0;
    memset(l, 0, sizeof *l);
    l->line = m->line;
    if ((e = dt__yexpect_map(m)) || (e = dt__ymap_require(m, "type", &v)) ||
        (e = dt__yget_enum(&v, layer_types, &kind)))
        return e;
    const layer_schema *ls = &layer_schemas[kind];
    l->kind = (dt_layer_kind)kind;
    if ((e = dt__ymap_check_keys(m, ls->keys, ls->type))) return e;
    if (dt__ymap_get(m, "name", &v)) {
        const char *name = NULL;
        char got[80];
        if ((e = dt__yget_str(&v, &name))) return e;
        if (!is_layer_name(name))
            return dt__yerr(&v, "%s is not a valid layer name (1 to 31 letters, digits or '_')",
                            dt__yval_describe(&v, got, sizeof got));
        for (int j = 0; j < i; j++)
            if (!strcmp(layers[j].name, name))
                return dt__yerr(&v,
                                "duplicate layer name '%s' (also used by layers[%d] at "
                                "line %d)",
                                name, j, layers[j].line);
        memcpy(l->name, name, strlen(name) + 1);
    }
    return ls->parse(m, l);
}

static dt_err parse_model(dt_spec *sp, const dt__yval *spec) {
    static const char *const keys[] = {"input", "layers", NULL};
    dt__yval m, v;
    dt_err e;
    if ((e = get_map(spec, "model", 1, &m)) || (e = dt__ymap_check_keys(&m, keys, NULL))) return e;
    if (dt__ymap_get(&m, "input", &v)) {
        int64_t dims[DT_MAX_DIMS];
        int n;
        if ((e = dt__yget_i64_list(&v, 1, DT_MAX_DIMS, 1, MAX_DIM, dims, &n))) return e;
        sp->input = dt_shape_make(n, dims);
        sp->input_line = v.decl_line;
    }
    if ((e = dt__ymap_require(&m, "layers", &v))) return e;
    if (!dt__yval_is_seq(&v) || dt__yseq_size(&v) == 0) {
        char got[80];
        return dt__yerr(&v, "expected a non-empty list of layers, got %s",
                        dt__yval_is_seq(&v) ? "an empty list"
                                            : dt__yval_describe(&v, got, sizeof got));
    }
    int n = dt__yseq_size(&v);
    if (n > MAX_LAYERS) return dt__yerr(&v, "expected at most %d layers, got %d", MAX_LAYERS, n);
    sp->layers = calloc((size_t)n, sizeof *sp->layers);
    if (!sp->layers) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", sp->path);
    sp->nlayers = n;
    for (int i = 0; i < n; i++) {
        dt__yval item;
        dt__yseq_item(&v, i, &item);
        if ((e = parse_layer(&item, sp->layers, i))) return e;
    }
    return DT_OK;
}

/* ---- loss, optimizer ---- */

static const dt__yenum losses[] = {
    {"softmax_cross_entropy", DT_LOSS_SOFTMAX_CROSS_ENTROPY}, {"mse", DT_LOSS_MSE}, {NULL, 0}};

static const dt__yenum optimizers[] = {{"sgd", DT_OPTIM_SGD},
                                       {"momentum", DT_OPTIM_MOMENTUM},
                                       {"adam", DT_OPTIM_ADAM},
                                       {"adagrad", DT_OPTIM_ADAGRAD},
                                       {NULL, 0}};

static const dt__yenum schedules[] = {{"constant", DT_SCHED_CONSTANT},
                                      {"step", DT_SCHED_STEP},
                                      {"cosine", DT_SCHED_COSINE},
                                      {NULL, 0}};

static const char *const optim_keys[][8] = {
    [DT_OPTIM_SGD] = {"type", "learning_rate", "weight_decay", "schedule"},
    [DT_OPTIM_MOMENTUM] = {"type", "learning_rate", "momentum", "nesterov", "weight_decay",
                           "schedule"},
    [DT_OPTIM_ADAM] = {"type", "learning_rate", "beta1", "beta2", "epsilon", "weight_decay",
                       "schedule"},
    [DT_OPTIM_ADAGRAD] = {"type", "learning_rate", "initial_accumulator", "epsilon", "weight_decay",
                          "schedule"},
};

/* Keys that belong to some optimizer types only, and which. */
static const struct {
    const char *key, *types;
} optim_specific[] = {
    {"momentum", "momentum"}, {"nesterov", "momentum"},        {"beta1", "adam"},
    {"beta2", "adam"},        {"epsilon", "adam and adagrad"}, {"initial_accumulator", "adagrad"},
};

static dt_err parse_schedule(const dt__yval *m, dt_sched_conf *s, float learning_rate) {
    static const char *const keys[][4] = {
        [DT_SCHED_CONSTANT] = {"type"},
        [DT_SCHED_STEP] = {"type", "step_size", "gamma"},
        [DT_SCHED_COSINE] = {"type", "total_steps", "min_lr"},
    };
    static const char *const what[] = {[DT_SCHED_CONSTANT] = "constant schedule",
                                       [DT_SCHED_STEP] = "step schedule",
                                       [DT_SCHED_COSINE] = "cosine schedule"};
    dt__yval v;
    dt_err e;
    int kind = 0;
    if ((e = dt__yexpect_map(m)) || (e = dt__ymap_require(m, "type", &v)) ||
        (e = dt__yget_enum(&v, schedules, &kind)) ||
        (e = dt__ymap_check_keys(m, keys[kind], what[kind])))
        return e;
    s->kind = (dt_sched_kind)kind;
    if (kind == DT_SCHED_STEP) {
        if ((e = dt__ymap_require(m, "step_size", &v)) ||
            (e = dt__yget_i64(&v, 1, INT64_MAX, &s->step_size)) ||
            (e = opt_f32(m, "gamma", POSITIVE, &s->gamma)))
            return e;
    } else if (kind == DT_SCHED_COSINE) {
        if ((e = opt_i64(m, "total_steps", 0, INT64_MAX, &s->total_steps)) ||
            (e = opt_f32(m, "min_lr", NON_NEGATIVE, &s->min_lr)))
            return e;
        if (s->min_lr > learning_rate) {
            dt__ymap_get(m, "min_lr", &v);
            return dt__yerr(&v, "must not exceed the learning rate (%g)", learning_rate);
        }
    }
    return DT_OK;
}

static dt_err parse_optimizer(dt_spec *sp, const dt__yval *spec) {
    static const dt__yrange below_one = {0, 1, 1, 1};
    dt_optim_conf *c = &sp->optimizer;
    dt__yval m, v;
    dt_err e;
    int kind = 0;
    if ((e = get_map(spec, "optimizer", 1, &m)) || (e = dt__ymap_require(&m, "type", &v)) ||
        (e = dt__yget_enum(&v, optimizers, &kind)))
        return e;
    /* A key of another optimizer type gets its own message; the rest the generic one. */
    for (int i = 0; i < dt__ymap_size(&m); i++) {
        const char *key;
        int in_kind = 0;
        dt__ymap_entry(&m, i, &key, NULL, &v);
        if (!key) break;
        for (int k = 0; optim_keys[kind][k] && !in_kind; k++)
            in_kind = !strcmp(key, optim_keys[kind][k]);
        for (size_t k = 0; !in_kind && k < sizeof optim_specific / sizeof optim_specific[0]; k++)
            if (!strcmp(key, optim_specific[k].key))
                return dt__yerr_line(&v, v.decl_line, "not used by optimizer type %s (only by %s)",
                                     optimizers[kind].name, optim_specific[k].types);
    }
    if ((e = dt__ymap_check_keys(&m, optim_keys[kind], optimizers[kind].name))) return e;

    memset(c, 0, sizeof *c);
    c->kind = (dt_optim_kind)kind;
    dt_optim_conf_defaults(c);
    if ((e = opt_f32(&m, "learning_rate", POSITIVE, &c->learning_rate)) ||
        (e = opt_f32(&m, "weight_decay", NON_NEGATIVE, &c->weight_decay)) ||
        (e = opt_f32(&m, "momentum", below_one, &c->momentum)) ||
        (e = opt_bool(&m, "nesterov", &c->nesterov)) ||
        (e = opt_f32(&m, "beta1", below_one, &c->beta1)) ||
        (e = opt_f32(&m, "beta2", below_one, &c->beta2)) ||
        (e = opt_f32(&m, "epsilon", POSITIVE, &c->epsilon)) ||
        (e = opt_f32(&m, "initial_accumulator", POSITIVE, &c->initial_accumulator)))
        return e;
    if (dt__ymap_get(&m, "schedule", &v) &&
        (e = parse_schedule(&v, &c->schedule, c->learning_rate)))
        return e;
    return DT_OK;
}

/* ---- training ---- */

static dt_err parse_training(dt_spec *sp, const dt__yval *spec) {
    static const char *const keys[] = {"batch_size", "epochs", "threads", "checkpoint",
                                       "logdir",     "tensorboard", NULL};
    static const char *const ckpt_keys[] = {"every_steps", "keep", NULL};
    dt__yval m, c, ld;
    dt_err e;
    if (!dt__ymap_get(spec, "training", &m)) return DT_OK;
    if ((e = dt__yexpect_map(&m)) || (e = dt__ymap_check_keys(&m, keys, NULL)) ||
        (e = opt_i64(&m, "batch_size", 1, MAX_DIM, &sp->batch_size)) ||
        (e = opt_i64(&m, "epochs", 1, INT64_C(1) << 40, &sp->epochs)) ||
        (e = opt_int(&m, "threads", 0, 1024, &sp->threads)) ||
        (e = get_map(&m, "checkpoint", 0, &c)))
        return e;
    if ((e = opt_bool(&m, "tensorboard", &sp->tensorboard))) return e;
    if (dt__ymap_get(&m, "logdir", &ld)) { /* TensorBoard's runs go under it */
        const char *dir = NULL;
        if ((e = dt__yget_str(&ld, &dir))) return e;
        if (!dir[0] || strlen(dir) >= sizeof sp->logdir)
            return dt__yerr(&ld, "expected a directory path of 1 to %zu bytes",
                            sizeof sp->logdir - 1);
        snprintf(sp->logdir, sizeof sp->logdir, "%s", dir);
    }
    if (!dt__yval_present(&c)) return DT_OK;
    if ((e = dt__ymap_check_keys(&c, ckpt_keys, NULL)) ||
        (e = opt_i64(&c, "every_steps", 0, INT64_MAX, &sp->checkpoint_every_steps)) ||
        (e = opt_int(&c, "keep", 1, 1 << 20, &sp->checkpoint_keep)))
        return e;
    return DT_OK;
}

/* ---- the document ---- */

static dt_err expect_string(const dt__yval *root, const char *key, const char *want) {
    dt__yval v;
    const char *s = NULL;
    dt_err e;
    if ((e = dt__ymap_require(root, key, &v)) || (e = dt__yget_str(&v, &s))) return e;
    if (strcmp(s, want)) {
        char got[80];
        return dt__yerr(&v, "expected '%s', got %s", want, dt__yval_describe(&v, got, sizeof got));
    }
    return DT_OK;
}

/* dtrain/v1, or dtrain.io/v1: the same kind as a Kubernetes custom resource (a CRD's
 * group needs a dot). */
static dt_err expect_api_version(const dt__yval *root) {
    dt__yval v;
    const char *s = NULL;
    dt_err e = dt__ymap_require(root, "apiVersion", &v);
    if (!e) e = dt__yget_str(&v, &s);
    if (!e && !strcmp(s, "dtrain.io/v1")) return DT_OK;
    return e ? e : expect_string(root, "apiVersion", API_VERSION);
}

static const char *const job_spec_keys[] = {"replicas",      "strategy",      "runPolicy",
                                            "successPolicy", "elasticPolicy", "pytorchEnv",
                                            "parameterServer", "allreduce", NULL};
/* labels and annotations: kept for Kubernetes and read by the job server (its selectors);
 * the job itself does not use them. */
static const char *const job_metadata_keys[] = {"namespace", "labels", "annotations", NULL};
const dt__spec_extra dt__spec_job_extra = {.spec_keys = job_spec_keys,
                                           .metadata_keys = job_metadata_keys};

dt_err dt__spec_parse_doc(dt_spec *sp, const dt__yval *root, const char *base_dir,
                          const dt__spec_extra *extra) {
    static const char *const top_keys[] = {"apiVersion", "kind", "metadata", "spec", NULL};
    static const char *const own_spec_keys[] = {"seed",      "data",     "model", "loss",
                                                "optimizer", "training", NULL};
    const char *spec_keys[32];
    dt__yval spec, v;
    dt_err e;
    int loss = DT_LOSS_SOFTMAX_CROSS_ENTROPY;
    merge_keys(spec_keys, sizeof spec_keys / sizeof spec_keys[0], own_spec_keys,
               extra ? extra->spec_keys : NULL);
    if (!dt__yval_is_map(root)) {
        char got[80];
        return dt__yerr(root,
                        "expected a mapping with apiVersion, kind, metadata and spec, "
                        "got %s",
                        dt__yval_describe(root, got, sizeof got));
    }
    if ((e = dt__ymap_check_keys(root, top_keys, NULL)) ||
        (e = expect_api_version(root)) ||
        (e = expect_string(root, "kind", KIND)) ||
        (e = parse_metadata(sp, root, extra ? extra->metadata_keys : NULL)) ||
        (e = get_map(root, "spec", 1, &spec)) || (e = dt__ymap_check_keys(&spec, spec_keys, NULL)))
        return e;
    if (dt__ymap_get(&spec, "seed", &v) && (e = dt__yget_u64(&v, &sp->seed))) return e;
    if ((e = parse_data(sp, &spec, base_dir)) || (e = parse_model(sp, &spec)) ||
        (e = opt_enum(&spec, "loss", losses, &loss)) || (e = parse_optimizer(sp, &spec)) ||
        (e = parse_training(sp, &spec)))
        return e;
    sp->loss = (dt_loss_kind)loss;
    return DT_OK;
}

static void spec_defaults(dt_spec *sp) {
    sp->eval_fraction = 0.2;
    sp->norm = DT_NORM_NONE;
    sp->scale = 1.0f;
    sp->std = 1.0f;
    sp->shuffle = 1;
    sp->loss = DT_LOSS_SOFTMAX_CROSS_ENTROPY;
    sp->batch_size = 32;
    sp->epochs = 1;
    sp->checkpoint_keep = 3;
    sp->tensorboard = 1;
}

dt_err dt__spec_new(dt_spec **out, const char *path) {
    dt_spec *sp = calloc(1, sizeof *sp);
    *out = NULL;
    if (!sp) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    memcpy(sp->path, path, strlen(path) + 1); /* callers checked the length */
    spec_defaults(sp);
    *out = sp;
    return DT_OK;
}

const char *dt__spec_base_dir(const char *path, char *dir) {
    const char *slash = strrchr(path, '/');
    if (!slash) return NULL;
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= DT_PATH_MAX) n = DT_PATH_MAX - 1;
    memcpy(dir, path, n);
    dir[n] = '\0';
    return dir;
}

/* Load the first document of stream s into a new spec. base_dir may be NULL. */
static dt_err spec_from_stream(dt_spec **out, dt__ystream *s, const char *path,
                               const char *base_dir) {
    dt_spec *sp = NULL;
    dt__ydoc *doc = NULL;
    dt__yval root;
    dt_err e;
    if ((e = dt__ystream_next(s, &doc))) goto fail;
    if (!doc) {
        e = dt_err_set(DT_ERR_SPEC,
                       "%s:1: the spec is empty (expected a mapping with "
                       "apiVersion, kind, metadata and spec)",
                       path);
        goto fail;
    }
    if ((e = dt__spec_new(&sp, path))) goto fail;
    dt__ydoc_root(doc, "", &root);
    if ((e = dt__spec_parse_doc(sp, &root, base_dir, &dt__spec_job_extra))) goto fail;
    dt__ydoc_free(doc);
    *out = sp;
    return DT_OK;
fail:
    dt_spec_free(sp);
    dt__ydoc_free(doc);
    return e;
}

dt_err dt__spec_check_path(const char *path) {
    if (strlen(path) >= DT_PATH_MAX)
        return dt_err_set(DT_ERR_ARG, "%.64s...: path too long (at most %d bytes)", path,
                          DT_PATH_MAX - 1);
    return DT_OK;
}

dt_err dt_spec_load(dt_spec **out, const char *path) {
    dt__ystream *s = NULL;
    char dir[DT_PATH_MAX];
    dt_err e;
    *out = NULL;
    if ((e = dt__spec_check_path(path)) || (e = dt__ystream_open_file(&s, path))) return e;
    e = spec_from_stream(out, s, path, dt__spec_base_dir(path, dir));
    dt__ystream_free(s);
    return e;
}

dt_err dt_spec_parse(dt_spec **out, const char *yaml, size_t len, const char *path) {
    dt__ystream *s = NULL;
    dt_err e;
    *out = NULL;
    if (!path) path = "<string>";
    if ((e = dt__spec_check_path(path)) || (e = dt__ystream_open_mem(&s, yaml, len, path))) return e;
    e = spec_from_stream(out, s, path, NULL);
    dt__ystream_free(s);
    return e;
}

void dt_spec_free(dt_spec *spec) {
    if (!spec) return;
    for (int i = 0; i < spec->num_class_names; i++)
        free(spec->class_names[i]);
    free(spec->class_names);
    free(spec->layers);
    free(spec);
}

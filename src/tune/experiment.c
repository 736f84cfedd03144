/*
 * experiment.c - load `dtrain tune`'s experiment: a Katib Experiment (kubeflow.org/v1beta1)
 * as Katib's own examples write it, or dtrain's plain Sweep (docs/TUNE.md "The experiment
 * spec"), into a dt__experiment (its trial template: template.c).
 *
 * Design: the schema is read with yaml_doc (FILE:LINE: FIELD: what), strict as the job
 * parsers are where dtrain acts (every key of the experiment's spec, objective, algorithm,
 * parameters, trial template and collector is checked; an unknown one is refused with the
 * allowed ones) and tolerant where only Kubernetes reads (metadata but its name and
 * namespace, and the trial's job, which the job parser checks itself).
 *
 * The trial template is kept as text whose lines are its file's (template.c), so a rendered
 * trial that the job parser refuses names the experiment's (or the template file's)
 * FILE:LINE.
 *
 * Everything a trial would trip on is checked at load: every placeholder names a
 * trialParameter (a parameter), every trialParameter's reference a parameter, and the
 * template rendered with each parameter's first value parses as a job.
 */
#include "tune/tune-impl.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/path-impl.h"
#include "dtrain/job.h"
#include "spec/spec-impl.h"
#include "spec/yaml_doc-impl.h"
#include "tune/template-impl.h"

#define KATIB_API "kubeflow.org/v1beta1"
#define SWEEP_API "dtrain/v1"
/* Longest experiment name: trials add "-NNN" (more digits past 999) to a 63-byte label. */
#define NAME_MAX_LEN 57
/* Largest grid a spec may describe (checked here so the search never enumerates more). */
#define GRID_MAX 1000000.0

/* ---- small helpers ---- */

static dt_err errat(const char *file, int line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static dt_err errat(const char *file, int line, const char *field, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_err_set(DT_ERR_SPEC, "%s:%d: %s%s%s", file, line, field, *field ? ": " : "", msg);
}

static dt_err read_whole(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    *out = NULL;
    if (!f) return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) size = DT__YFILE_MAX;
    if (size > DT__YFILE_MAX) size = DT__YFILE_MAX;
    char *buf = malloc((size_t)size + 2);
    if (!buf) {
        fclose(f);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, (size_t)size + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return dt_err_set(DT_ERR_IO, "%s: cannot read", path);
    }
    if (n > (size_t)size || n > DT__YFILE_MAX) { /* it grew, or is too large */
        free(buf);
        return dt_err_set(DT_ERR_IO, "%s: larger than %d bytes", path, DT__YFILE_MAX);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return DT_OK;
}

/* A DNS-1035 label of at most max bytes. */
static int is_label(const char *s, size_t max) {
    size_t n = strlen(s);
    if (n == 0 || n > max || !(s[0] >= 'a' && s[0] <= 'z') || s[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

/* A number written plain or quoted, as Katib's feasible spaces and settings are ("0.01"). */
static dt_err get_num(const dt__yval *v, double *out) {
    const char *s = NULL;
    char got[80];
    if (!dt__yval_is_scalar(v) || dt__yval_is_null(v) || dt__yget_str(v, &s))
        return dt__yerr(v, "expected a number, got %s", dt__yval_describe(v, got, sizeof got));
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    while (*end == ' ')
        end++;
    if (!*s || *end || errno == ERANGE || !isfinite(d) || isspace((unsigned char)*s))
        return dt__yerr(v, "expected a number, got %s", dt__yval_describe(v, got, sizeof got));
    *out = d;
    return DT_OK;
}

/* A setting's value (text) as a number: 0 and *out, or -1. */
static int num_text(const char *s, double *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (!*s || *end || errno == ERANGE || !isfinite(d) || isspace((unsigned char)*s)) return -1;
    *out = d;
    return 0;
}

/* A scalar (string, or a number or boolean read as its text) of at most cap-1 bytes. */
static dt_err get_text(const dt__yval *v, char *dst, size_t cap) {
    char got[80];
    if (!dt__yval_is_scalar(v) || dt__yval_is_null(v))
        return dt__yerr(v, "expected a string, got %s", dt__yval_describe(v, got, sizeof got));
    return dt__yget_strbuf(v, dst, cap);
}

int dt__experiment_param(const dt__experiment *e, const char *name) {
    for (int i = 0; i < e->nparams; i++)
        if (!strcmp(e->params[i].name, name)) return i;
    return -1;
}

void dt__param_format(const dt__tune_param *p, double x, char *buf, size_t cap) {
    if (p->type == DT__PARAM_DISCRETE || p->type == DT__PARAM_CATEGORICAL) {
        int i = (int)llround(x);
        if (i < 0) i = 0;
        if (i >= p->nlist) i = p->nlist - 1;
        snprintf(buf, cap, "%s", p->nlist > 0 ? p->list[i] : "");
        return;
    }
    if (p->type == DT__PARAM_INT) {
        snprintf(buf, cap, "%lld", (long long)llround(x));
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

void dt__experiment_free(dt__experiment *e) {
    if (!e) return;
    for (int i = 0; i < e->nparams; i++) {
        for (int j = 0; j < e->params[i].nlist; j++)
            free(e->params[i].list[j]);
        free(e->params[i].list);
    }
    free(e->params);
    free(e->trial_params);
    free(e->template_text);
    free(e);
}

/* ---- metadata, objective, algorithm ---- */

static dt_err parse_metadata(dt__experiment *e, const dt__yval *root) {
    dt__yval m, v;
    dt_err e2;
    char got[80];
    if ((e2 = dt__ymap_require(root, "metadata", &m)) || (e2 = dt__yexpect_map(&m)) ||
        (e2 = dt__ymap_require(&m, "name", &v)) || (e2 = get_text(&v, e->name, sizeof e->name)))
        return e2;
    if (!is_label(e->name, NAME_MAX_LEN))
        return dt__yerr(&v,
                        "%s is not a valid experiment name: at most %d lowercase letters, "
                        "digits and '-', starting with a letter, not ending with '-' (its "
                        "trials are NAME-000, NAME-001, ...)",
                        dt__yval_describe(&v, got, sizeof got), NAME_MAX_LEN);
    if (dt__ymap_get(&m, "namespace", &v) &&
        (e2 = get_text(&v, e->namespace_name, sizeof e->namespace_name)))
        return e2;
    return DT_OK;
}

static dt_err parse_objective(dt__experiment *e, const dt__yval *spec, int required) {
    static const char *const keys[] = {
        "type", "goal", "objectiveMetricName", "additionalMetricNames", "metricStrategies", NULL};
    static const dt__yenum types[] = {
        {"maximize", DT__OBJ_MAXIMIZE}, {"minimize", DT__OBJ_MINIMIZE}, {NULL, 0}};
    static const dt__yenum strategies[] = {{"max", 0}, {"min", 1}, {"latest", 2}, {NULL, 0}};
    dt__yval o, v;
    dt_err err;
    int t = 0;
    if (!dt__ymap_get(spec, "objective", &o)) {
        if (required) return dt__yerr(&o, "required field missing");
        return DT_OK;
    }
    if ((err = dt__yexpect_map(&o)) || (err = dt__ymap_check_keys(&o, keys, "an objective")) ||
        (err = dt__ymap_require(&o, "type", &v)) || (err = dt__yget_enum(&v, types, &t)))
        return err;
    e->obj = (dt__obj_type)t;
    snprintf(e->metric_strategy, sizeof e->metric_strategy, "%s", t ? "min" : "max");
    if (dt__ymap_get(&o, "goal", &v)) {
        if ((err = get_num(&v, &e->goal))) return err;
        e->has_goal = 1;
    }
    if (required || dt__ymap_get(&o, "objectiveMetricName", &v)) {
        if ((err = dt__ymap_require(&o, "objectiveMetricName", &v)) ||
            (err = get_text(&v, e->metric, sizeof e->metric)))
            return err;
    }
    if (dt__ymap_get(&o, "additionalMetricNames", &v) && !dt__yval_is_null(&v)) {
        if ((err = dt__yexpect_seq(&v))) return err;
        if (dt__yseq_size(&v) > DT__TUNE_MAX_EXTRA)
            return dt__yerr(&v, "at most %d additional metrics", DT__TUNE_MAX_EXTRA);
        for (int i = 0; i < dt__yseq_size(&v); i++) {
            dt__yval it;
            dt__yseq_item(&v, i, &it);
            if ((err = get_text(&it, e->extra[i], sizeof e->extra[i]))) return err;
            e->nextra++;
        }
    }
    if (dt__ymap_get(&o, "metricStrategies", &v) && !dt__yval_is_null(&v)) {
        static const char *const skeys[] = {"name", "value", NULL};
        if ((err = dt__yexpect_seq(&v))) return err;
        for (int i = 0; i < dt__yseq_size(&v); i++) {
            dt__yval it, nv, vv;
            char name[128];
            int s = 0;
            dt__yseq_item(&v, i, &it);
            if ((err = dt__yexpect_map(&it)) ||
                (err = dt__ymap_check_keys(&it, skeys, "a metric strategy")) ||
                (err = dt__ymap_require(&it, "name", &nv)) ||
                (err = get_text(&nv, name, sizeof name)) ||
                (err = dt__ymap_require(&it, "value", &vv)) ||
                (err = dt__yget_enum(&vv, strategies, &s)))
                return err;
            if (!strcmp(name, e->metric))
                snprintf(e->metric_strategy, sizeof e->metric_strategy, "%s", strategies[s].name);
        }
    }
    return DT_OK;
}

/* algorithmSettings / early stopping's settings: a list of {name, value}. */
static dt_err parse_settings(const dt__yval *list, char (*names)[64], char (*values)[128],
                             int *lines, int *n) {
    static const char *const keys[] = {"name", "value", NULL};
    dt_err err;
    if (dt__yval_is_null(list)) return DT_OK;
    if ((err = dt__yexpect_seq(list))) return err;
    if (dt__yseq_size(list) > DT__TUNE_MAX_SETTINGS)
        return dt__yerr(list, "at most %d settings", DT__TUNE_MAX_SETTINGS);
    for (int i = 0; i < dt__yseq_size(list); i++) {
        dt__yval it, v;
        dt__yseq_item(list, i, &it);
        if ((err = dt__yexpect_map(&it)) || (err = dt__ymap_check_keys(&it, keys, "a setting")) ||
            (err = dt__ymap_require(&it, "name", &v)) || (err = get_text(&v, names[i], 64)))
            return err;
        for (int j = 0; j < i; j++)
            if (!strcmp(names[j], names[i]))
                return dt__yerr(&v, "setting '%s' given twice (also at line %d)", names[i],
                                lines ? lines[j] : 0);
        if ((err = dt__ymap_require(&it, "value", &v)) || (err = get_text(&v, values[i], 128)))
            return err;
        if (lines) lines[i] = it.line;
        *n = i + 1;
    }
    return DT_OK;
}

/* One algorithm setting's rule. */
typedef struct setting_rule {
    const char *name;
    enum { S_INT, S_NUM, S_WORD, S_PARAM } kind;
    double lo, hi; /* S_INT, S_NUM: range (lo_open for S_NUM) */
    int lo_open;
    const char *words; /* S_WORD: "a|b|c" */
} setting_rule;

typedef struct algo {
    const char *name;
    const setting_rule *rules;
    int needs_max_trials;
} algo;

static const setting_rule random_rules[] = {{"random_state", S_INT, 0, 9007199254740992.0, 0, NULL},
                                            {NULL, 0, 0, 0, 0, NULL}};
static const setting_rule grid_rules[] = {{"random_state", S_INT, 0, 9007199254740992.0, 0, NULL},
                                          {"points", S_INT, 2, 1000000, 0, NULL},
                                          {NULL, 0, 0, 0, 0, NULL}};
static const setting_rule tpe_rules[] = {{"random_state", S_INT, 0, 9007199254740992.0, 0, NULL},
                                         {"n_startup_trials", S_INT, 1, 100000, 0, NULL},
                                         {"n_EI_candidates", S_INT, 1, 100000, 0, NULL},
                                         {"gamma", S_NUM, 0, 1, 1, NULL},
                                         {"prior_weight", S_NUM, 0, 1e9, 1, NULL},
                                         {NULL, 0, 0, 0, 0, NULL}};
static const setting_rule bo_rules[] = {{"random_state", S_INT, 0, 9007199254740992.0, 0, NULL},
                                        {"n_initial_points", S_INT, 1, 100000, 0, NULL},
                                        {"n_candidates", S_INT, 1, 1000000, 0, NULL},
                                        {"base_estimator", S_WORD, 0, 0, 0, "GP"},
                                        {"acq_func", S_WORD, 0, 0, 0, "ei|EI|gp_hedge"},
                                        {"acq_optimizer", S_WORD, 0, 0, 0, "auto|sampling|lbfgs"},
                                        {NULL, 0, 0, 0, 0, NULL}};
static const setting_rule hyperband_rules[] = {{"resource_name", S_PARAM, 0, 0, 0, NULL},
                                               {"eta", S_NUM, 1, 1000, 1, NULL},
                                               {"r_l", S_NUM, 1, 1e6, 0, NULL},
                                               {NULL, 0, 0, 0, 0, NULL}};
static const setting_rule asha_rules[] = {{"resource_name", S_PARAM, 0, 0, 0, NULL},
                                          {"min_resource", S_INT, 1, 1000000, 0, NULL},
                                          {"max_resource", S_INT, 1, 1000000, 0, NULL},
                                          {"reduction_factor", S_INT, 2, 1000, 0, NULL},
                                          {"random_state", S_INT, 0, 9007199254740992.0, 0, NULL},
                                          {NULL, 0, 0, 0, 0, NULL}};

static const algo algos[] = {
    {"random", random_rules, 1},
    {"grid", grid_rules, 0},
    {"tpe", tpe_rules, 1},
    {"bayesianoptimization", bo_rules, 1},
    {"hyperband", hyperband_rules, 0},
    {"asha", asha_rules, 1},
};
#define NALGOS (sizeof algos / sizeof algos[0])

static const char *setting(const dt__experiment *e, const char *name, int *line) {
    for (int i = 0; i < e->nsettings; i++)
        if (!strcmp(e->setting_name[i], name)) {
            if (line) *line = e->setting_line[i];
            return e->setting_value[i];
        }
    return NULL;
}

/* Each setting against its rule, at its line. */
static dt_err check_settings(const dt__experiment *e, const algo *a, const char *field) {
    for (int i = 0; i < e->nsettings; i++) {
        const setting_rule *r = a->rules;
        const char *val = e->setting_value[i];
        int line = e->setting_line[i];
        while (r->name && strcmp(r->name, e->setting_name[i]))
            r++;
        if (!r->name) {
            char list[256];
            size_t o = 0;
            list[0] = '\0';
            for (const setting_rule *q = a->rules; q->name; q++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", q->name);
            return errat(e->path, line, field,
                         "unknown setting '%s' for algorithm %s (allowed: %s)", e->setting_name[i],
                         a->name, list);
        }
        double d = 0;
        switch (r->kind) {
        case S_INT:
            if (num_text(val, &d) || d != floor(d) || d < r->lo || d > r->hi)
                return errat(e->path, line, field,
                             "%s: expected an integer in [%.0f, %.0f], got '%s'", r->name, r->lo,
                             r->hi, val);
            break;
        case S_NUM:
            if (r->hi <= 1 && (num_text(val, &d) || d <= r->lo || d >= r->hi))
                return errat(e->path, line, field, "%s: expected a number in (%g, %g), got '%s'",
                             r->name, r->lo, r->hi, val);
            if (num_text(val, &d) || d < r->lo || (r->lo_open && d == r->lo) || d > r->hi)
                return errat(e->path, line, field,
                             "%s: expected a number %s %g, at most %g, got '%s'", r->name,
                             r->lo_open ? ">" : ">=", r->lo, r->hi, val);
            break;
        case S_WORD: {
            const char *w = r->words;
            int ok = 0;
            while (*w && !ok) {
                size_t n = strcspn(w, "|");
                ok = strlen(val) == n && !strncmp(val, w, n);
                w += n + (w[n] == '|');
            }
            if (!ok)
                return errat(e->path, line, field, "%s: expected one of %s, got '%s'", r->name,
                             r->words, val);
            break;
        }
        case S_PARAM: {
            int p = dt__experiment_param(e, val);
            if (p < 0)
                return errat(e->path, line, field, "%s: '%s' names no parameter", r->name, val);
            dt__param_type t = e->params[p].type;
            if (t != DT__PARAM_INT && (strcmp(a->name, "hyperband") || t != DT__PARAM_DOUBLE))
                return errat(
                    e->path, line, field, "%s: parameter '%s' must be an int%s", r->name, val,
                    strcmp(a->name, "hyperband") ? " (a count of epochs)" : " or a double");
            break;
        }
        }
    }
    return DT_OK;
}

/* The whole algorithm's own rules, once parameters and settings are read. at: the
 * algorithm's node (its line for messages). */
static dt_err check_algorithm(dt__experiment *e, const algo *a, const dt__yval *at,
                              const dt__yval *spec) {
    const char *field = "spec.algorithm.algorithmSettings";
    dt_err err;
    int line = at->line;
    if ((err = check_settings(e, a, field))) return err;
    if (a->needs_max_trials && e->max_trials == 0)
        return errat(e->path, spec->decl_line, "spec.maxTrialCount",
                     "required for algorithm %s (it has no end of its own)", a->name);
    const char *rn = setting(e, "resource_name", &line);
    e->resource_param = rn ? dt__experiment_param(e, rn) : -1;
    if (!strcmp(a->name, "grid")) {
        double size = 1, points = 0;
        const char *pts = setting(e, "points", NULL);
        if (pts) num_text(pts, &points);
        for (int i = 0; i < e->nparams; i++) {
            const dt__tune_param *p = &e->params[i];
            double n = p->nlist;
            if (p->type == DT__PARAM_DOUBLE && p->step <= 0 && points == 0)
                return errat(e->path, p->line, "spec.parameters",
                             "%s: algorithm grid needs feasibleSpace.step for a double parameter "
                             "(as Katib's grid), or the grid setting points",
                             p->name);
            if (p->type == DT__PARAM_DOUBLE && p->step <= 0)
                n = p->max > p->min ? points : 1;
            else if (p->type == DT__PARAM_INT || p->type == DT__PARAM_DOUBLE)
                n = floor((p->max - p->min) / (p->step > 0 ? p->step : 1) + 1e-9) + 1;
            size *= n;
        }
        if (size > GRID_MAX)
            return errat(e->path, line, "spec.algorithm",
                         "the grid has %.0f points, more than %.0f", size, GRID_MAX);
    } else if (!strcmp(a->name, "hyperband")) {
        int l1 = line, l2 = line;
        const char *rl = setting(e, "r_l", &l1), *eta_s = setting(e, "eta", &l2);
        if (!rn || !rl)
            return errat(e->path, at->line, "spec.algorithm.algorithmSettings",
                         "algorithm hyperband needs the settings r_l and resource_name");
        double r_l = 0, eta = 3;
        num_text(rl, &r_l);
        if (eta_s) num_text(eta_s, &eta);
        int s_max = 0;
        while (pow(eta, s_max + 1) <= r_l * (1 + 1e-9))
            s_max++;
        double need = ceil(pow(eta, s_max) - 1e-9);
        if (e->parallel < need)
            return errat(e->path, e->parallel_line, "spec.parallelTrialCount",
                         "algorithm hyperband with eta %g and r_l %g needs at least %.0f parallel "
                         "trials (as Katib's), got %d",
                         eta, r_l, need, e->parallel);
    } else if (!strcmp(a->name, "asha")) {
        int lmin = line, lmax = line;
        const char *mn = setting(e, "min_resource", &lmin), *mx = setting(e, "max_resource", &lmax);
        double rmin = 1, rmax = 0;
        if (rn && e->resource_param >= 0) {
            const dt__tune_param *p = &e->params[e->resource_param];
            rmin = p->min >= 1 ? p->min : 1;
            rmax = p->max;
        }
        if (mn) num_text(mn, &rmin);
        if (mx) num_text(mx, &rmax);
        if (rmax <= 0)
            return errat(e->path, at->line, "spec.algorithm.algorithmSettings",
                         "algorithm asha needs max_resource (or resource_name naming an int "
                         "parameter whose max it takes)");
        if (rmin > rmax)
            return errat(e->path, mn ? lmin : lmax, "spec.algorithm.algorithmSettings",
                         "min_resource %.0f is more than max_resource %.0f", rmin, rmax);
    }
    return DT_OK;
}

static dt_err parse_algorithm(dt__experiment *e, const dt__yval *spec) {
    static const char *const keys[] = {"algorithmName", "algorithmSettings", NULL};
    dt__yval a, v;
    dt_err err;
    if ((err = dt__ymap_require(spec, "algorithm", &a)) || (err = dt__yexpect_map(&a)) ||
        (err = dt__ymap_check_keys(&a, keys, "an algorithm")) ||
        (err = dt__ymap_require(&a, "algorithmName", &v)) ||
        (err = get_text(&v, e->algorithm, sizeof e->algorithm)))
        return err;
    const algo *al = NULL;
    for (size_t i = 0; i < NALGOS; i++)
        if (!strcmp(algos[i].name, e->algorithm)) al = &algos[i];
    if (!al)
        return dt__yerr(&v,
                        "unknown algorithm '%s' (dtrain has random, grid, bayesianoptimization, "
                        "tpe, hyperband, asha)",
                        e->algorithm);
    if (dt__ymap_get(&a, "algorithmSettings", &v) &&
        (err =
             parse_settings(&v, e->setting_name, e->setting_value, e->setting_line, &e->nsettings)))
        return err;
    return check_algorithm(e, al, &a, spec);
}

static dt_err parse_early(dt__experiment *e, const dt__yval *spec) {
    static const char *const keys[] = {"algorithmName", "algorithmSettings", NULL};
    dt__yval a, v;
    dt_err err;
    int lines[DT__TUNE_MAX_SETTINGS] = {0};
    e->min_trials_required = 3;
    e->start_step = 4;
    if (!dt__ymap_get(spec, "earlyStopping", &a) || dt__yval_is_null(&a)) return DT_OK;
    if ((err = dt__yexpect_map(&a)) || (err = dt__ymap_check_keys(&a, keys, "early stopping")) ||
        (err = dt__ymap_require(&a, "algorithmName", &v)) ||
        (err = get_text(&v, e->early, sizeof e->early)))
        return err;
    if (strcmp(e->early, "medianstop"))
        return dt__yerr(&v, "unknown early stopping algorithm '%s' (dtrain has medianstop)",
                        e->early);
    if (dt__ymap_get(&a, "algorithmSettings", &v) &&
        (err = parse_settings(&v, e->early_name, e->early_value, lines, &e->nearly_settings)))
        return err;
    for (int i = 0; i < e->nearly_settings; i++) {
        double d = 0;
        int *dst = !strcmp(e->early_name[i], "min_trials_required") ? &e->min_trials_required
                   : !strcmp(e->early_name[i], "start_step")        ? &e->start_step
                                                                    : NULL;
        if (!dst)
            return errat(e->path, lines[i], "spec.earlyStopping.algorithmSettings",
                         "unknown setting '%s' for medianstop (allowed: min_trials_required, "
                         "start_step)",
                         e->early_name[i]);
        if (num_text(e->early_value[i], &d) || d != floor(d) || d < 1 || d > 1000000)
            return errat(e->path, lines[i], "spec.earlyStopping.algorithmSettings",
                         "%s: expected a positive integer, got '%s'", e->early_name[i],
                         e->early_value[i]);
        *dst = (int)d;
    }
    return DT_OK;
}

/* ---- parameters ---- */

/* A list value must stay on one line once placed in the template. */
static dt_err list_value(const dt__yval *it, char **out) {
    char buf[1024];
    dt_err err = get_text(it, buf, sizeof buf);
    if (err) return err;
    for (const char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20)
            return dt__yerr(it, "a value must not contain control characters (newlines)");
    if (!(*out = strdup(buf))) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    return DT_OK;
}

static dt_err read_list(dt__tune_param *p, const dt__yval *list, const char *what) {
    dt_err err;
    char got[80];
    if (!dt__yval_is_seq(list) || dt__yseq_size(list) == 0)
        return dt__yerr(list, "%s needs a non-empty list of values, got %s", what,
                        dt__yval_is_seq(list) ? "an empty list"
                                              : dt__yval_describe(list, got, sizeof got));
    int n = dt__yseq_size(list);
    if (!(p->list = calloc((size_t)n, sizeof *p->list)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        dt__yval it;
        dt__yseq_item(list, i, &it);
        if ((err = list_value(&it, &p->list[i]))) return err;
        p->nlist = i + 1;
        for (int j = 0; j < i; j++)
            if (!strcmp(p->list[j], p->list[i]))
                return dt__yerr(&it, "value '%s' is listed twice", p->list[i]);
        if (p->type == DT__PARAM_DISCRETE) {
            double d;
            if (num_text(p->list[i], &d))
                return dt__yerr(&it, "a discrete parameter's values are numbers, got '%s'",
                                p->list[i]);
        }
    }
    return DT_OK;
}

/* A parameter's name is used in placeholders and messages: letters, digits, '_', '-', '.'. */
static int is_param_name(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.') return 0;
    return 1;
}

static dt_err parse_param(dt__experiment *e, dt__tune_param *p, const dt__yval *it) {
    static const char *const keys[] = {"name", "parameterType", "feasibleSpace", NULL};
    static const char *const fkeys[] = {"min", "max", "step", "list", "distribution", NULL};
    static const dt__yenum types[] = {{"int", DT__PARAM_INT},
                                      {"double", DT__PARAM_DOUBLE},
                                      {"discrete", DT__PARAM_DISCRETE},
                                      {"categorical", DT__PARAM_CATEGORICAL},
                                      {NULL, 0}};
    static const dt__yenum dists[] = {{"uniform", 0}, {"logUniform", 1}, {NULL, 0}};
    dt__yval v, fs, mn, mx, st;
    dt_err err;
    int t = 0;
    p->line = it->line;
    if ((err = dt__yexpect_map(it)) || (err = dt__ymap_check_keys(it, keys, "a parameter")) ||
        (err = dt__ymap_require(it, "name", &v)) || (err = get_text(&v, p->name, sizeof p->name)))
        return err;
    if (!is_param_name(p->name))
        return dt__yerr(&v, "'%s' is not a valid parameter name (letters, digits, '_', '-', '.')",
                        p->name);
    for (int j = 0; j < e->nparams; j++)
        if (!strcmp(e->params[j].name, p->name))
            return dt__yerr(&v, "parameter '%s' given twice (also at line %d)", p->name,
                            e->params[j].line);
    if ((err = dt__ymap_require(it, "parameterType", &v)) || (err = dt__yget_enum(&v, types, &t)))
        return err;
    p->type = (dt__param_type)t;
    if (!dt__ymap_get(it, "feasibleSpace", &fs) || dt__yval_is_null(&fs))
        return dt__yerr(&fs, "parameter '%s' has no feasible space", p->name);
    if ((err = dt__yexpect_map(&fs)) || (err = dt__ymap_check_keys(&fs, fkeys, "a feasible space")))
        return err;
    if (dt__ymap_get(&fs, "distribution", &v)) {
        int d = 0;
        if ((err = dt__yget_enum(&v, dists, &d))) return err;
        p->log = d;
    }
    if (p->type == DT__PARAM_DISCRETE || p->type == DT__PARAM_CATEGORICAL) {
        static const char *const no[] = {"min", "max", "step", NULL};
        for (int k = 0; no[k]; k++)
            if (dt__ymap_get(&fs, no[k], &v))
                return dt__yerr_line(&v, v.decl_line, "a %s parameter takes a list, not %s",
                                     types[t].name, no[k]);
        if (p->log && p->type == DT__PARAM_CATEGORICAL)
            return dt__yerr(&fs, "a categorical parameter has no distribution");
        if (!dt__ymap_get(&fs, "list", &v))
            return dt__yerr(&v, "parameter '%s' (%s) has no feasible space: give a list", p->name,
                            types[t].name);
        return read_list(p, &v, types[t].name);
    }
    if (dt__ymap_get(&fs, "list", &v))
        return dt__yerr_line(&v, v.decl_line, "a %s parameter takes min and max, not a list",
                             types[t].name);
    int hmin = dt__ymap_get(&fs, "min", &mn), hmax = dt__ymap_get(&fs, "max", &mx);
    if (!hmin || !hmax)
        return dt__yerr(hmin ? &mx : &mn, "parameter '%s' has no feasible space: give min and max",
                        p->name);
    if ((err = get_num(&mn, &p->min)) || (err = get_num(&mx, &p->max))) return err;
    if (dt__ymap_get(&fs, "step", &st)) {
        if ((err = get_num(&st, &p->step))) return err;
        if (p->step <= 0) return dt__yerr(&st, "step must be positive, got %g", p->step);
    }
    if (p->type == DT__PARAM_INT) {
        if (p->min != floor(p->min) || fabs(p->min) > 1e15)
            return dt__yerr(&mn, "expected an integer");
        if (p->max != floor(p->max) || fabs(p->max) > 1e15)
            return dt__yerr(&mx, "expected an integer");
        if (p->step != floor(p->step)) return dt__yerr(&st, "expected an integer step");
    }
    if (p->min > p->max) return dt__yerr(&mn, "min %g is more than max %g", p->min, p->max);
    if (p->log && p->min <= 0)
        return dt__yerr(&mn, "a logUniform parameter needs min > 0, got %g", p->min);
    return DT_OK;
}

static dt_err parse_parameters(dt__experiment *e, const dt__yval *spec) {
    dt__yval list;
    dt_err err;
    char got[80];
    if ((err = dt__ymap_require(spec, "parameters", &list))) return err;
    if (!dt__yval_is_seq(&list) || dt__yseq_size(&list) == 0)
        return dt__yerr(&list, "expected a non-empty list of parameters, got %s",
                        dt__yval_is_seq(&list) ? "an empty list"
                                               : dt__yval_describe(&list, got, sizeof got));
    int n = dt__yseq_size(&list);
    if (n > DT__TUNE_MAX_PARAMS)
        return dt__yerr(&list, "at most %d parameters", DT__TUNE_MAX_PARAMS);
    if (!(e->params = calloc((size_t)n, sizeof *e->params)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        dt__yval it;
        dt__yseq_item(&list, i, &it);
        err = parse_param(e, &e->params[i], &it);
        e->nparams = i + 1; /* owned lists are freed with it */
        if (err) return err;
    }
    return DT_OK;
}

/* A Sweep's parameters: a mapping NAME -> list of values (categorical). */
static dt_err parse_sweep_parameters(dt__experiment *e, const dt__yval *spec) {
    dt__yval m;
    dt_err err;
    if ((err = dt__ymap_require(spec, "parameters", &m)) || (err = dt__yexpect_map(&m))) return err;
    int n = dt__ymap_size(&m);
    if (n == 0) return dt__yerr(&m, "give at least one parameter (NAME: [values...])");
    if (n > DT__TUNE_MAX_PARAMS) return dt__yerr(&m, "at most %d parameters", DT__TUNE_MAX_PARAMS);
    if (!(e->params = calloc((size_t)n, sizeof *e->params)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        const char *key = NULL;
        int key_line = 0;
        dt__yval v;
        dt__ymap_entry(&m, i, &key, &key_line, &v);
        dt__tune_param *p = &e->params[i];
        e->nparams = i + 1;
        p->type = DT__PARAM_CATEGORICAL;
        p->line = key_line;
        if (!key || !*key || strlen(key) >= sizeof p->name)
            return dt__yerr_line(&v, key_line,
                                 "a parameter name must be a string of 1 to %zu bytes",
                                 sizeof p->name - 1);
        memcpy(p->name, key, strlen(key) + 1);
        int ok = isalpha((unsigned char)key[0]) || key[0] == '_';
        for (const char *c = key; *c && ok; c++)
            ok = isalnum((unsigned char)*c) || *c == '_';
        if (!ok)
            return dt__yerr_line(&v, key_line,
                                 "'%s' is not a valid placeholder name (a letter or '_', then "
                                 "letters, digits and '_')",
                                 key);
        if (!strcmp(key, "ID"))
            return dt__yerr_line(&v, key_line, "ID is the trial's name (%%ID%%): not a parameter");
        for (int j = 0; j < i; j++)
            if (!strcmp(e->params[j].name, key))
                return dt__yerr_line(&v, key_line, "parameter '%s' given twice (also at line %d)",
                                     key, e->params[j].line);
        if ((err = read_list(p, &v, "a sweep parameter"))) return err;
    }
    return DT_OK;
}

/* ---- metrics collector ---- */

static dt_err parse_collector(dt__experiment *e, const dt__yval *spec) {
    static const char *const keys[] = {"source", "collector", NULL};
    static const char *const skeys[] = {"fileSystemPath", "filter", NULL};
    static const char *const fkeys[] = {"path", "kind", "format", NULL};
    static const char *const filter_keys[] = {"metricsFormat", NULL};
    static const char *const ckeys[] = {"kind", NULL};
    static const dt__yenum kinds[] = {{"StdOut", 0}, {"TensorFlowEvent", 1},  {"File", 2},
                                      {"None", 3},   {"PrometheusMetric", 4}, {"Custom", 5},
                                      {NULL, 0}};
    static const dt__yenum pkinds[] = {{"File", 0}, {"Directory", 1}, {NULL, 0}};
    static const dt__yenum formats[] = {{"TEXT", 0}, {"JSON", 1}, {NULL, 0}};
    dt__yval m, v, s, x;
    dt_err err;
    int k = 0;
    snprintf(e->collector, sizeof e->collector, "StdOut");
    snprintf(e->collector_format, sizeof e->collector_format, "TEXT");
    if (!dt__ymap_get(spec, "metricsCollectorSpec", &m) || dt__yval_is_null(&m)) return DT_OK;
    if ((err = dt__yexpect_map(&m)) ||
        (err = dt__ymap_check_keys(&m, keys, "a metrics collector spec")))
        return err;
    if (dt__ymap_get(&m, "collector", &v)) {
        if ((err = dt__yexpect_map(&v)) || (err = dt__ymap_check_keys(&v, ckeys, "a collector")) ||
            (err = dt__ymap_require(&v, "kind", &x)) || (err = dt__yget_enum(&x, kinds, &k)))
            return err;
        if (k > 2)
            return dt__yerr(&x,
                            "collector %s is not supported by dtrain (StdOut, TensorFlowEvent, "
                            "File)",
                            kinds[k].name);
        snprintf(e->collector, sizeof e->collector, "%s", kinds[k].name);
    }
    if (!dt__ymap_get(&m, "source", &s) || dt__yval_is_null(&s)) return DT_OK;
    if ((err = dt__yexpect_map(&s)) || (err = dt__ymap_check_keys(&s, skeys, "a metrics source")))
        return err;
    if (dt__ymap_get(&s, "fileSystemPath", &v)) {
        int pk = 0, f = 0;
        if ((err = dt__yexpect_map(&v)) ||
            (err = dt__ymap_check_keys(&v, fkeys, "a file system path")) ||
            (err = dt__ymap_require(&v, "path", &x)) ||
            (err = get_text(&x, e->collector_path, sizeof e->collector_path)) ||
            (dt__ymap_get(&v, "kind", &x) && (err = dt__yget_enum(&x, pkinds, &pk))) ||
            (dt__ymap_get(&v, "format", &x) && (err = dt__yget_enum(&x, formats, &f))))
            return err;
        snprintf(e->collector_format, sizeof e->collector_format, "%s", formats[f].name);
    }
    if (dt__ymap_get(&s, "filter", &v)) {
        if ((err = dt__yexpect_map(&v)) || (err = dt__ymap_check_keys(&v, filter_keys, "a filter")))
            return err;
        if (dt__ymap_get(&v, "metricsFormat", &x) && !dt__yval_is_null(&x)) {
            if ((err = dt__yexpect_seq(&x))) return err;
            if (dt__yseq_size(&x) > DT__TUNE_MAX_FILTERS)
                return dt__yerr(&x, "at most %d formats", DT__TUNE_MAX_FILTERS);
            for (int i = 0; i < dt__yseq_size(&x); i++) {
                dt__yval it;
                dt__yseq_item(&x, i, &it);
                if ((err = get_text(&it, e->filters[i], sizeof e->filters[i]))) return err;
                e->nfilters = i + 1;
            }
        }
    }
    return DT_OK;
}

/* ---- the template ---- */

/* The kinds a trial's job may be. */
static int is_job_kind(const char *k) {
    return !strcmp(k, "TFJob") || !strcmp(k, "PyTorchJob") || !strcmp(k, "TrainJob");
}

/* The template's kind and apiVersion from its root. */
static dt_err template_kind(dt__experiment *e, const dt__yval *root) {
    dt__yval v;
    dt_err err;
    if ((err = dt__yexpect_map(root)) || (err = dt__ymap_require(root, "kind", &v)) ||
        (err = get_text(&v, e->template_kind, sizeof e->template_kind)))
        return err;
    if (!is_job_kind(e->template_kind))
        return dt__yerr(&v, "dtrain runs trials of kind TFJob, PyTorchJob or TrainJob, got '%s'",
                        e->template_kind);
    if ((err = dt__ymap_require(root, "apiVersion", &v)) ||
        (err = get_text(&v, e->template_api, sizeof e->template_api)))
        return err;
    return DT_OK;
}

static dt_err parse_trial_params(dt__experiment *e, const dt__yval *list) {
    static const char *const keys[] = {"name", "description", "reference", NULL};
    static const char *const refs[] = {"${trialSpec.Name}", "${trialSpec.Namespace}",
                                       "${trialSpec.Kind}", "${trialSpec.APIVersion}", NULL};
    dt_err err;
    if (dt__yval_is_null(list)) return DT_OK;
    if ((err = dt__yexpect_seq(list))) return err;
    int n = dt__yseq_size(list);
    if (!(e->trial_params = calloc((size_t)(n ? n : 1), sizeof *e->trial_params)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        dt__yval it, v;
        dt__trial_param *tp = &e->trial_params[i];
        dt__yseq_item(list, i, &it);
        tp->line = it.line;
        if ((err = dt__yexpect_map(&it)) ||
            (err = dt__ymap_check_keys(&it, keys, "a trial parameter")) ||
            (err = dt__ymap_require(&it, "name", &v)) ||
            (err = get_text(&v, tp->name, sizeof tp->name)))
            return err;
        for (int j = 0; j < i; j++)
            if (!strcmp(e->trial_params[j].name, tp->name))
                return dt__yerr(&v, "trialParameter '%s' given twice (also at line %d)", tp->name,
                                e->trial_params[j].line);
        if ((err = dt__ymap_require(&it, "reference", &v)) ||
            (err = get_text(&v, tp->reference, sizeof tp->reference)))
            return err;
        tp->param = dt__experiment_param(e, tp->reference);
        if (tp->param < 0) {
            int ok = 0;
            for (int k = 0; refs[k] && !ok; k++)
                ok = !strcmp(refs[k], tp->reference);
            if (!ok)
                return dt__yerr(&v,
                                "reference '%s' names no parameter (nor ${trialSpec.Name}, "
                                "${trialSpec.Namespace}, ${trialSpec.Kind}, "
                                "${trialSpec.APIVersion})",
                                tp->reference);
        }
        e->ntp = i + 1;
    }
    return DT_OK;
}

/* Katib's trialTemplate: the trialSpec node sliced out of the file's text. */
static dt_err parse_trial_template(dt__experiment *e, const dt__yval *spec, const char *text,
                                   size_t len) {
    static const char *const keys[] = {
        "retain",           "trialSpec",        "configMap",
        "trialParameters",  "primaryPodLabels", "primaryContainerName",
        "successCondition", "failureCondition", NULL};
    dt__yval t, v, ts;
    dt_err err;
    if ((err = dt__ymap_require(spec, "trialTemplate", &t)) || (err = dt__yexpect_map(&t)) ||
        (err = dt__ymap_check_keys(&t, keys, "a trial template")))
        return err;
    if (dt__ymap_get(&t, "retain", &v) && (err = dt__yget_bool(&v, &e->retain))) return err;
    if (dt__ymap_get(&t, "primaryContainerName", &v) &&
        (err = get_text(&v, e->primary_container, sizeof e->primary_container)))
        return err;
    if (dt__ymap_get(&t, "successCondition", &v) && (err = get_text(&v, (char[512]){0}, 512)))
        return err;
    if (dt__ymap_get(&t, "failureCondition", &v) && (err = get_text(&v, (char[512]){0}, 512)))
        return err;
    if (dt__ymap_get(&t, "primaryPodLabels", &v) && (err = dt__yexpect_map(&v))) return err;
    if (dt__ymap_get(&t, "trialParameters", &v) && (err = parse_trial_params(e, &v))) return err;
    if (!dt__ymap_get(&t, "trialSpec", &ts)) {
        if (dt__ymap_get(&t, "configMap", &v))
            return dt__yerr_line(&v, v.decl_line,
                                 "a trial template from a ConfigMap is not supported: give "
                                 "trialSpec inline");
        return dt__yerr(&ts, "required field missing");
    }
    if ((err = template_kind(e, &ts))) return err;
    size_t a = dt__tpl_offset(text, len, ts.node->start_mark.line, ts.node->start_mark.column);
    size_t b = dt__tpl_offset(text, len, ts.node->end_mark.line, ts.node->end_mark.column);
    if (!(e->template_text = dt__tpl_slice(text, len, a, b)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    memcpy(e->template_path, e->path, sizeof e->path); /* the same size */
    return dt__tpl_name(&e->template_text, &ts, "${trialSpec.Name}", 1);
}

/* The job document of a Sweep's template text (its root in *root of *doc). */
static dt_err sweep_job_doc(const dt__experiment *e, dt__ystream *s, dt__ydoc **doc, dt__yval *root,
                            int *last) {
    dt__ydoc *d = NULL;
    dt_err err;
    *doc = NULL;
    *last = 0;
    for (;;) {
        dt__yval r, k;
        if ((err = dt__ystream_next(s, &d))) goto fail;
        if (!d) break;
        dt__ydoc_root(d, "", &r);
        const char *kind = NULL;
        if (dt__yval_is_map(&r) && dt__ymap_get(&r, "kind", &k) && dt__yval_is_scalar(&k) &&
            !dt__yget_str(&k, &kind) && is_job_kind(kind)) {
            if (*doc) {
                err =
                    dt__yerr(&k, "a second job in the template (the first at line %d)", root->line);
                goto fail;
            }
            *doc = d;
            *root = r;
            *last = 1;
            continue;
        }
        if (*doc) *last = 0;
        dt__ydoc_free(d);
    }
    if (!*doc)
        return dt_err_set(DT_ERR_SPEC,
                          "%s:1: no job in the template: expected a document of kind TFJob, "
                          "PyTorchJob or TrainJob",
                          e->template_path);
    return DT_OK;
fail:
    if (d != *doc) dt__ydoc_free(d);
    dt__ydoc_free(*doc);
    *doc = NULL;
    return err;
}

/* A Sweep's template: spec.template (a file relative to the sweep) or spec.trialSpec. */
static dt_err parse_sweep_template(dt__experiment *e, const dt__yval *spec, const char *text,
                                   size_t len) {
    dt__yval file, inl;
    dt_err err;
    int hf = dt__ymap_get(spec, "template", &file), hi = dt__ymap_get(spec, "trialSpec", &inl);
    if (hf && hi)
        return dt__yerr_line(&inl, inl.decl_line, "give template (a file) or trialSpec, not both");
    if (!hf && !hi)
        return dt__yerr(spec, "spec.template: required field missing (a job file with "
                              "placeholders, or spec.trialSpec inline)");
    if (hi) {
        size_t a =
            dt__tpl_offset(text, len, inl.node->start_mark.line, inl.node->start_mark.column);
        size_t b = dt__tpl_offset(text, len, inl.node->end_mark.line, inl.node->end_mark.column);
        if (!dt__yval_is_map(&inl)) return dt__yexpect_map(&inl);
        if ((err = template_kind(e, &inl))) return err;
        if (!(e->template_text = dt__tpl_slice(text, len, a, b)))
            return dt_err_set(DT_ERR_NOMEM, "out of memory");
        memcpy(e->template_path, e->path, sizeof e->path); /* the same size */
        return dt__tpl_name(&e->template_text, &inl, "%ID%", 1);
    }
    char rel[DT__PATH_MAX], dir[DT_PATH_MAX];
    size_t tl = 0;
    if ((err = get_text(&file, rel, sizeof rel))) return err;
    const char *base = rel[0] == '/' ? NULL : dt__spec_base_dir(e->path, dir);
    if (dt__path(e->template_path, sizeof e->template_path, "%s%s%s", base ? base : "",
                 base ? "/" : "", rel))
        return dt__yerr(&file, "%s", dt_errmsg());
    if ((err = read_whole(e->template_path, &e->template_text, &tl)))
        return dt__yerr(&file, "%s", dt_errmsg());
    char *neutral = dt__tpl_neutralize(e, e->template_text);
    dt__ystream *s = NULL;
    dt__ydoc *doc = NULL;
    dt__yval root;
    int last = 0;
    if (!neutral) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    err = dt__ystream_open_mem(&s, neutral, strlen(neutral), e->template_path);
    free(neutral);
    if (!err) err = sweep_job_doc(e, s, &doc, &root, &last);
    if (!err) err = template_kind(e, &root);
    if (!err) {
        dt__yval m, n;
        int has_name = dt__ymap_get(&root, "metadata", &m) && dt__yval_is_map(&m) &&
                       dt__ymap_get(&m, "name", &n);
        if (!has_name && !last)
            err = dt__yerr(&root, "give metadata.name in the template's job (e.g. name: "
                                  "job-%%ID%%): it is not the file's last document");
        else
            err = dt__tpl_name(&e->template_text, &root, "%ID%", 0);
    }
    dt__ydoc_free(doc);
    dt__ystream_free(s);
    return err;
}

/* ---- the documents ---- */

static dt_err parse_counts(dt__experiment *e, const dt__yval *spec, int sweep) {
    dt__yval v;
    dt_err err;
    e->parallel = sweep ? 1 : 3;
    e->max_failed = -1;
    e->parallel_line = spec->line;
    if (dt__ymap_get(spec, sweep ? "parallel" : "parallelTrialCount", &v)) {
        if ((err = dt__yget_int(&v, 1, 10000, &e->parallel))) return err;
        e->parallel_line = v.line;
    }
    if (!sweep && dt__ymap_get(spec, "maxTrialCount", &v) &&
        (err = dt__yget_int(&v, 1, 1000000, &e->max_trials)))
        return err;
    if (dt__ymap_get(spec, "maxFailedTrialCount", &v) &&
        (err = dt__yget_int(&v, 0, 1000000, &e->max_failed)))
        return err;
    return DT_OK;
}

static dt_err parse_katib(dt__experiment *e, const dt__yval *root, const char *text, size_t len) {
    static const char *const keys[] = {
        "parameters",           "objective",          "algorithm",     "earlyStopping",
        "trialTemplate",        "parallelTrialCount", "maxTrialCount", "maxFailedTrialCount",
        "metricsCollectorSpec", "resumePolicy",       "nasConfig",     NULL};
    static const dt__yenum resume[] = {
        {"Never", 0}, {"LongRunning", 1}, {"FromVolume", 2}, {NULL, 0}};
    dt__yval spec, v;
    dt_err err;
    int r = 0;
    if ((err = dt__ymap_require(root, "spec", &spec)) || (err = dt__yexpect_map(&spec))) return err;
    if (dt__ymap_get(&spec, "nasConfig", &v))
        return dt__yerr_line(&v, v.decl_line,
                             "neural architecture search is not supported by dtrain");
    if ((err = dt__ymap_check_keys(&spec, keys, "an Experiment")) ||
        (err = parse_counts(e, &spec, 0)) || (err = parse_objective(e, &spec, 1)) ||
        (err = parse_parameters(e, &spec)) || (err = parse_algorithm(e, &spec)) ||
        (err = parse_early(e, &spec)) || (err = parse_collector(e, &spec)) ||
        (dt__ymap_get(&spec, "resumePolicy", &v) && (err = dt__yget_enum(&v, resume, &r))))
        return err;
    if ((err = parse_trial_template(e, &spec, text, len))) return err;
    return dt__tpl_check(e, "spec.trialTemplate.trialSpec");
}

static dt_err parse_sweep(dt__experiment *e, const dt__yval *root, const char *text, size_t len) {
    static const char *const keys[] = {"template",      "trialSpec",
                                       "parameters",    "objective",
                                       "parallel",      "maxFailedTrialCount",
                                       "earlyStopping", "metricsCollectorSpec",
                                       "retain",        NULL};
    dt__yval spec, v;
    dt_err err;
    e->sweep = 1;
    snprintf(e->algorithm, sizeof e->algorithm, "grid");
    snprintf(e->metric, sizeof e->metric, "accuracy");
    snprintf(e->metric_strategy, sizeof e->metric_strategy, "max");
    e->resource_param = -1;
    if ((err = dt__ymap_require(root, "spec", &spec)) || (err = dt__yexpect_map(&spec)) ||
        (err = dt__ymap_check_keys(&spec, keys, "a Sweep")) || (err = parse_counts(e, &spec, 1)) ||
        (err = parse_objective(e, &spec, 0)) || (err = parse_sweep_parameters(e, &spec)) ||
        (err = parse_early(e, &spec)) || (err = parse_collector(e, &spec)) ||
        (dt__ymap_get(&spec, "retain", &v) && (err = dt__yget_bool(&v, &e->retain))))
        return err;
    if ((err = parse_sweep_template(e, &spec, text, len))) return err;
    return dt__tpl_check(e, "template");
}

/* Render with every parameter's first value and parse it as a job. */
static dt_err check_render(const dt__experiment *e) {
    char **values = calloc((size_t)e->nparams, sizeof *values), *yaml = NULL, name[80];
    dt_err err = DT_OK;
    if (!values) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < e->nparams && !err; i++) {
        const dt__tune_param *p = &e->params[i];
        char buf[1100];
        dt__param_format(p, p->nlist ? 0 : p->min, buf, sizeof buf);
        if (!(values[i] = strdup(buf))) err = dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    snprintf(name, sizeof name, "%s-000", e->name);
    if (!err) err = dt__experiment_render(e, name, values, &yaml);
    if (!err) {
        dt_job_spec *job = NULL;
        err = dt_job_spec_parse(&job, yaml, strlen(yaml), e->template_path);
        dt_job_spec_free(job);
        if (err) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", dt_errmsg());
            dt_err_set(err, "%s (the trial template rendered with each parameter's first value)",
                       msg);
        }
    }
    free(yaml);
    for (int i = 0; i < e->nparams; i++)
        free(values[i]);
    free(values);
    return err;
}

static dt_err parse_doc(dt__experiment *e, const dt__yval *root, const char *text, size_t len) {
    static const char *const top[] = {"apiVersion", "kind", "metadata", "spec", "status", NULL};
    dt__yval kv, av;
    const char *kind = NULL, *api = NULL;
    char got[80];
    dt_err err;
    if ((err = dt__ymap_check_keys(root, top, NULL)) ||
        (err = dt__ymap_require(root, "kind", &kv)) || (err = dt__yget_str(&kv, &kind)) ||
        (err = dt__ymap_require(root, "apiVersion", &av)) || (err = dt__yget_str(&av, &api)))
        return err;
    int sweep = !strcmp(kind, "Sweep");
    const char *want = sweep ? SWEEP_API : KATIB_API;
    if (strcmp(api, want))
        return dt__yerr(&av, "kind %s needs apiVersion %s, got %s", kind, want,
                        dt__yval_describe(&av, got, sizeof got));
    snprintf(e->namespace_name, sizeof e->namespace_name, "default");
    if ((err = parse_metadata(e, root))) return err;
    if ((err = sweep ? parse_sweep(e, root, text, len) : parse_katib(e, root, text, len)))
        return err;
    return check_render(e);
}

dt_err dt__experiment_load(dt__experiment **out, const char *path) {
    dt__experiment *e = NULL;
    dt__ystream *s = NULL;
    dt__ydoc *doc = NULL;
    char *text = NULL;
    size_t len = 0;
    int found = 0, first_line = 0;
    dt_err err;
    *out = NULL;
    if ((err = dt__spec_check_path(path))) return err;
    if (strlen(path) >= sizeof e->path)
        return dt_err_set(DT_ERR_ARG, "path too long (%zu bytes, at most %zu): %.80s...",
                          strlen(path), sizeof e->path - 1, path);
    if ((err = read_whole(path, &text, &len))) return err;
    if (!(e = calloc(1, sizeof *e))) {
        free(text);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(e->path, path, strlen(path) + 1); /* fits: checked above */
    e->resource_param = -1;
    if ((err = dt__ystream_open_mem(&s, text, len, path))) goto done;
    for (;;) {
        dt__yval root, kv;
        if ((err = dt__ystream_next(s, &doc))) goto done;
        if (!doc) break;
        dt__ydoc_root(doc, "", &root);
        const char *kind = NULL;
        if (dt__yval_is_map(&root) && dt__ymap_get(&root, "kind", &kv) && dt__yval_is_scalar(&kv) &&
            !dt__yget_str(&kv, &kind) && (!strcmp(kind, "Experiment") || !strcmp(kind, "Sweep"))) {
            if (found) {
                err = dt__yerr(&kv, "a second experiment in one file (the first at line %d)",
                               first_line);
                goto done;
            }
            found = 1;
            first_line = root.line;
            if ((err = parse_doc(e, &root, text, len))) goto done;
        }
        dt__ydoc_free(doc);
        doc = NULL;
    }
    if (!found)
        err = dt_err_set(DT_ERR_SPEC,
                         "%s:1: no experiment in this file: expected a document of kind "
                         "Experiment (apiVersion %s) or Sweep (apiVersion %s)",
                         path, KATIB_API, SWEEP_API);
done:
    dt__ydoc_free(doc);
    dt__ystream_free(s);
    free(text);
    if (err) {
        dt__experiment_free(e);
        return err;
    }
    *out = e;
    return DT_OK;
}

/*
 * search.c - the search of a tune experiment: its trials and their records, and the
 * algorithms small enough to live here (random, grid, medianstop); tpe and
 * bayesianoptimization are in search_model.c, hyperband and asha in search_bandit.c.
 *
 * Design: the search is its list of trials (parameters, the resource each was sent to
 * reach, state, observations) plus the experiment and a seed. Each suggestion draws from a
 * random stream seeded by (seed, trial number), so it depends on the history it sees and
 * not on how many calls came before; restoring the trials and replaying their observations
 * (dt__search_restore, dt__search_observe) therefore gives back a search whose future
 * suggestions are those the original would have made.
 *
 * Scores: every comparison is on sign * value (sign -1 when minimizing), higher is better;
 * a trial without a result ranks below every trial with one, ties go to the lower number.
 */
#include "tune/search-impl.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dt__trial_state_name(dt__trial_state st) {
    static const char *const names[] = {[DT__TRIAL_RUNNING] = "Running",
                                        [DT__TRIAL_PAUSED] = "Paused",
                                        [DT__TRIAL_SUCCEEDED] = "Succeeded",
                                        [DT__TRIAL_FAILED] = "Failed",
                                        [DT__TRIAL_EARLY_STOPPED] = "EarlyStopped"};
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "unknown";
}

/* ---- parameters ---- */

double dt__unif(dt_rng *r) {
    return (double)(dt_rng_u64(r) >> 11) * 0x1.0p-53;
}

static int is_list(const dt__tune_param *p) {
    return p->type == DT__PARAM_DISCRETE || p->type == DT__PARAM_CATEGORICAL;
}

/* Points on a stepped numeric parameter: min + k * step, k in [0, n). */
static double steps_of(const dt__tune_param *p) {
    return floor((p->max - p->min) / p->step + 1e-9) + 1;
}

double dt__snap(const dt__tune_param *p, double x) {
    if (is_list(p)) {
        double k = round(x);
        return k < 0 ? 0 : k > p->nlist - 1 ? p->nlist - 1 : k;
    }
    if (x < p->min) x = p->min;
    if (x > p->max) x = p->max;
    if (p->step > 0) {
        double k = round((x - p->min) / p->step), n = steps_of(p);
        if (k > n - 1) k = n - 1;
        if (k < 0) k = 0;
        x = p->min + k * p->step;
        /* min + k * step in decimal: 0.001 + 2 * 0.001 is 0.003, not 0.0030000000000000001 */
        char buf[32];
        snprintf(buf, sizeof buf, "%.12g", x);
        x = strtod(buf, NULL);
    }
    if (p->type == DT__PARAM_INT) x = round(x);
    return x;
}

double dt__to_unit(const dt__tune_param *p, double x) {
    if (is_list(p)) return p->nlist > 1 ? x / (p->nlist - 1) : 0.5;
    if (p->max <= p->min) return 0.5;
    if (p->log) return (log(x) - log(p->min)) / (log(p->max) - log(p->min));
    return (x - p->min) / (p->max - p->min);
}

double dt__from_unit(const dt__tune_param *p, double u) {
    if (u < 0) u = 0;
    if (u > 1) u = 1;
    if (is_list(p)) return dt__snap(p, u * (p->nlist - 1));
    if (p->max <= p->min) return p->min;
    if (p->type == DT__PARAM_INT && !p->log) /* each integer an equal share of [0, 1] */
        return dt__snap(p, p->min + floor(u * (p->max - p->min + 1) - 1e-12));
    double x = p->log ? exp(log(p->min) + u * (log(p->max) - log(p->min)))
                      : p->min + u * (p->max - p->min);
    return dt__snap(p, x);
}

double dt__sample_param(const dt__tune_param *p, dt_rng *r) {
    if (is_list(p)) return (double)dt_rng_below(r, (uint64_t)p->nlist);
    if (p->step > 0 && !p->log)
        return dt__snap(p, p->min + p->step * (double)dt_rng_below(r, (uint64_t)steps_of(p)));
    if (p->type == DT__PARAM_INT && !p->log)
        return p->min + (double)dt_rng_below(r, (uint64_t)(p->max - p->min + 1));
    return dt__from_unit(p, dt__unif(r));
}

/* ---- trials ---- */

static void trial_free(dt__trial *t, int nparams) {
    for (int i = 0; t->text && i < nparams; i++)
        free(t->text[i]);
    free(t->text);
    free(t->x);
    free(t->obs);
}

dt_err dt__search_add(dt__search *s, const double *x, int resource, double resource_value) {
    const dt__experiment *e = s->e;
    if (s->ntrials == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        dt__trial *n = realloc(s->t, (size_t)cap * sizeof *n);
        if (!n) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        s->t = n;
        s->cap = cap;
    }
    dt__trial *t = &s->t[s->ntrials];
    memset(t, 0, sizeof *t);
    t->x = calloc((size_t)e->nparams + 1, sizeof *t->x);
    t->text = calloc((size_t)e->nparams + 1, sizeof *t->text);
    if (!t->x || !t->text) {
        trial_free(t, 0);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < e->nparams; i++) {
        char buf[1100];
        t->x[i] = x[i];
        if (i == e->resource_param && resource_value >= 0) t->x[i] = resource_value;
        dt__param_format(&e->params[i], t->x[i], buf, sizeof buf);
        if (!(t->text[i] = strdup(buf))) {
            trial_free(t, e->nparams);
            return dt_err_set(DT_ERR_NOMEM, "out of memory");
        }
    }
    t->resource = resource;
    t->state = DT__TRIAL_RUNNING;
    s->ntrials++;
    return DT_OK;
}

int dt__trial_score(const dt__search *s, const dt__trial *t, double *score) {
    if (t->has_final) {
        *score = s->sign * t->final;
        return 1;
    }
    if (t->nobs > 0 && (t->state == DT__TRIAL_SUCCEEDED || t->state == DT__TRIAL_EARLY_STOPPED)) {
        *score = s->sign * t->obs[t->nobs - 1].value;
        return 1;
    }
    return 0;
}

/* ---- settings ---- */

static const char *setting(const dt__experiment *e, const char *name) {
    for (int i = 0; i < e->nsettings; i++)
        if (!strcmp(e->setting_name[i], name)) return e->setting_value[i];
    return NULL;
}

static double setting_num(const dt__experiment *e, const char *name, double dflt) {
    const char *v = setting(e, name);
    return v ? strtod(v, NULL) : dflt;
}

/* Grid: the points of parameter p (a double without step: the setting points, evenly
 * spaced, in log space for logUniform), and its j-th point. */
static int grid_count(const dt__search *s, const dt__tune_param *p) {
    if (is_list(p)) return p->nlist;
    if (p->type == DT__PARAM_DOUBLE && p->step <= 0) return p->max > p->min ? s->grid_points : 1;
    return (int)(floor((p->max - p->min) / (p->step > 0 ? p->step : 1) + 1e-9) + 1);
}

static double grid_value(const dt__search *s, const dt__tune_param *p, int j) {
    if (is_list(p)) return j;
    if (p->type == DT__PARAM_DOUBLE && p->step <= 0) {
        int n = grid_count(s, p);
        double x = n > 1 ? dt__from_unit(p, (double)j / (n - 1)) : p->min;
        char buf[32]; /* 12 digits: 0.1 apart from 0.1, not 0.10000000000000001 */
        snprintf(buf, sizeof buf, "%.12g", x);
        return strtod(buf, NULL);
    }
    return dt__snap(p, p->min + j * (p->step > 0 ? p->step : 1));
}

static double grid_size(const dt__search *s) {
    double n = 1;
    for (int i = 0; i < s->e->nparams; i++)
        n *= grid_count(s, &s->e->params[i]);
    return n;
}

/* Random configurations on a finite space: when every parameter but the resource one has
 * finitely many points (lists, ints, stepped doubles) and there are at most
 * DT__PERM_MAX combinations, trial k takes combination perm[k mod n] of a permutation
 * seeded by the seed alone: each configuration once before any repeats. */
#define DT__PERM_MAX 1000000

static double finite_size(const dt__search *s) {
    double n = 1;
    for (int i = 0; i < s->e->nparams; i++) {
        const dt__tune_param *p = &s->e->params[i];
        if (i == s->e->resource_param) continue;
        if (p->type == DT__PARAM_DOUBLE && p->step <= 0 && p->max > p->min) return 0;
        n *= is_list(p) ? p->nlist
             : p->type == DT__PARAM_DOUBLE && p->step <= 0
                 ? 1
                 : floor((p->max - p->min) / (p->step > 0 ? p->step : 1) + 1e-9) + 1;
    }
    return n;
}

static dt_err make_perm(dt__search *s) {
    double n = finite_size(s);
    if (n < 1 || n > DT__PERM_MAX) return DT_OK;
    if (!(s->perm = malloc((size_t)n * sizeof *s->perm)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    s->nperm = (int64_t)n;
    for (int64_t i = 0; i < s->nperm; i++)
        s->perm[i] = i;
    dt_rng r;
    dt_rng_seed2(&r, s->seed, UINT64_MAX);
    dt_rng_shuffle(&r, s->perm, s->nperm);
    return DT_OK;
}

void dt__random_config(const dt__search *s, int k, dt_rng *r, double *x) {
    const dt__experiment *e = s->e;
    if (!s->nperm) {
        for (int i = 0; i < e->nparams; i++)
            x[i] = dt__sample_param(&e->params[i], r);
        return;
    }
    int64_t c = s->perm[k % s->nperm];
    for (int i = e->nparams - 1; i >= 0; i--) {
        const dt__tune_param *p = &e->params[i];
        if (i == e->resource_param) {
            x[i] = is_list(p) ? 0 : p->min;
            continue;
        }
        int64_t n =
            is_list(p) ? p->nlist
            : p->type == DT__PARAM_DOUBLE && p->step <= 0
                ? 1
                : (int64_t)(floor((p->max - p->min) / (p->step > 0 ? p->step : 1) + 1e-9) + 1);
        int64_t j = c % n;
        c /= n;
        x[i] =
            is_list(p) ? (double)j : dt__snap(p, p->min + (double)j * (p->step > 0 ? p->step : 1));
    }
}

dt_err dt__search_new(dt__search **out, const dt__experiment *e, uint64_t seed) {
    static const char *const names[] = {
        [ALGO_RANDOM] = "random",           [ALGO_GRID] = "grid",           [ALGO_TPE] = "tpe",
        [ALGO_BO] = "bayesianoptimization", [ALGO_HYPERBAND] = "hyperband", [ALGO_ASHA] = "asha"};
    dt__search *s = calloc(1, sizeof *s);
    dt_err err = DT_OK;
    *out = NULL;
    if (!s) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    s->e = e;
    s->algo = (dt__algo)-1;
    for (int a = 0; a < (int)(sizeof names / sizeof names[0]); a++)
        if (!strcmp(e->algorithm, names[a])) s->algo = (dt__algo)a;
    if ((int)s->algo < 0) {
        free(s);
        return dt_err_set(DT_ERR_ARG, "%s: unknown algorithm '%s'", e->path, e->algorithm);
    }
    const char *rs = setting(e, "random_state");
    s->seed = rs ? (uint64_t)strtod(rs, NULL) : seed;
    s->sign = e->obj == DT__OBJ_MINIMIZE ? -1 : 1;
    s->limit = e->max_trials;
    s->n_startup = (int)setting_num(e, "n_startup_trials", 10);
    s->n_ei = (int)setting_num(e, "n_EI_candidates", 24);
    s->gamma = setting_num(e, "gamma", 0.25);
    s->prior_weight = setting_num(e, "prior_weight", 1.0);
    s->n_initial = (int)setting_num(e, "n_initial_points", 10);
    s->n_candidates = (int)setting_num(e, "n_candidates", 1000);
    if (s->algo == ALGO_GRID) {
        s->grid_points = (int)setting_num(e, "points", 0);
        double n = grid_size(s);
        if (s->limit == 0 || n < s->limit) s->limit = (int)n;
    } else {
        err = make_perm(s);
        if (!err && s->algo == ALGO_HYPERBAND) err = dt__hyperband_init(s);
        if (!err && s->algo == ALGO_ASHA) err = dt__asha_init(s);
    }
    if (err) {
        dt__search_free(s);
        return err;
    }
    *out = s;
    return DT_OK;
}

void dt__search_free(dt__search *s) {
    if (!s) return;
    for (int i = 0; i < s->ntrials; i++)
        trial_free(&s->t[i], s->e->nparams);
    free(s->t);
    free(s->hb);
    free(s->perm);
    free(s);
}

void dt__values_free(char **values, int n) {
    for (int i = 0; values && i < n; i++)
        free(values[i]);
    free(values);
}

/* ---- suggestions ---- */

static void grid_point(const dt__search *s, int k, double *x) {
    const dt__experiment *e = s->e;
    for (int i = e->nparams - 1; i >= 0; i--) { /* the last parameter varies fastest */
        const dt__tune_param *p = &e->params[i];
        int n = grid_count(s, p), j = k % n;
        k /= n;
        x[i] = grid_value(s, p, j);
    }
}

static dt_err copy_values(const dt__search *s, int trial, char ***values) {
    int n = s->e->nparams;
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        if (!(v[i] = strdup(s->t[trial].text[i]))) {
            dt__values_free(v, n);
            return dt_err_set(DT_ERR_NOMEM, "out of memory");
        }
    *values = v;
    return DT_OK;
}

dt_err dt__search_next(dt__search *s, char ***values, int *resource, int *done, int *trial_out) {
    const dt__experiment *e = s->e;
    int k = s->ntrials, trial = k;
    dt_err err = DT_OK;
    *values = NULL;
    *resource = 0;
    *done = 0;
    *trial_out = -1;
    if (s->algo == ALGO_HYPERBAND) {
        err = dt__hyperband_next(s, done);
    } else if (s->algo == ALGO_ASHA) {
        err = dt__asha_next(s, &trial, done);
    } else if (s->limit > 0 && k >= s->limit) {
        *done = 1;
        return DT_ERR_NOTFOUND;
    } else {
        double *x = calloc((size_t)e->nparams + 1, sizeof *x);
        dt_rng r;
        if (!x) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        dt_rng_seed2(&r, s->seed, (uint64_t)k);
        switch (s->algo) {
        case ALGO_GRID:
            grid_point(s, k, x);
            break;
        case ALGO_TPE:
            dt__tpe_suggest(s, &r, x);
            break;
        case ALGO_BO:
            err = dt__bo_suggest(s, &r, x);
            break;
        default:
            dt__random_config(s, k, &r, x);
        }
        if (!err) err = dt__search_add(s, x, 0, -1);
        free(x);
    }
    if (err) return err;
    if ((err = copy_values(s, trial, values))) return err;
    *resource = s->t[trial].resource;
    *trial_out = trial;
    return DT_OK;
}

/* ---- the history ---- */

dt_err dt__search_restore(dt__search *s, int trial, char *const *values, int resource,
                          dt__trial_state state) {
    const dt__experiment *e = s->e;
    if (trial != s->ntrials)
        return dt_err_set(DT_ERR_ARG, "restoring trial %d: expected trial %d next", trial,
                          s->ntrials);
    if ((unsigned)state > DT__TRIAL_EARLY_STOPPED)
        return dt_err_set(DT_ERR_ARG, "restoring trial %d: unknown state %d", trial, (int)state);
    double *x = calloc((size_t)e->nparams + 1, sizeof *x);
    if (!x) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < e->nparams; i++) {
        const dt__tune_param *p = &e->params[i];
        const char *v = values[i];
        int ok = 0;
        if (is_list(p)) {
            for (int j = 0; j < p->nlist && !ok; j++)
                if (!strcmp(p->list[j], v)) x[i] = j, ok = 1;
        } else {
            char *end;
            x[i] = strtod(v, &end);
            ok = *v && !*end && isfinite(x[i]) &&
                 (i == e->resource_param ||
                  (x[i] >= p->min - 1e-9 * fabs(p->min) && x[i] <= p->max + 1e-9 * fabs(p->max)));
        }
        if (!ok) {
            free(x);
            return dt_err_set(DT_ERR_ARG, "restoring trial %d: %s: '%s' is not in its space", trial,
                              p->name, v);
        }
    }
    dt_err err = dt__search_add(s, x, resource, -1);
    free(x);
    if (err) return err;
    s->t[trial].state = state;
    /* keep the texts as recorded (they are what the trial ran with) */
    for (int i = 0; i < e->nparams; i++) {
        char *c = strdup(values[i]);
        if (!c) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        free(s->t[trial].text[i]);
        s->t[trial].text[i] = c;
    }
    return DT_OK;
}

void dt__search_observe(dt__search *s, int trial, int resource, double value, int final) {
    if (trial < 0 || trial >= s->ntrials || !isfinite(value)) return;
    dt__trial *t = &s->t[trial];
    if (t->nobs == t->cap) {
        int cap = t->cap ? t->cap * 2 : 8;
        dt__obs *n = realloc(t->obs, (size_t)cap * sizeof *n);
        if (!n) return; /* the observation is lost; the search goes on without it */
        t->obs = n;
        t->cap = cap;
    }
    t->obs[t->nobs++] = (dt__obs){.resource = resource, .value = value};
    if (final) {
        t->has_final = 1;
        t->final = value;
    }
}

void dt__search_end(dt__search *s, int trial, dt__trial_state state) {
    if (trial < 0 || trial >= s->ntrials) return;
    s->t[trial].state = state;
}

int dt__search_promote(dt__search *s, int trial, int resource) {
    if (s->algo != ALGO_ASHA) return INT32_MAX;
    if (trial < 0 || trial >= s->ntrials) return 0;
    return dt__asha_promote(s, trial, resource);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Katib's median stopping rule: once min_trials_required trials have succeeded, a trial at
 * step >= start_step stops when its best value so far is worse than the median of the
 * succeeded trials' running averages up to the same step. */
int dt__search_early_stop(dt__search *s, int trial, int resource, double value) {
    const dt__experiment *e = s->e;
    if (strcmp(e->early, "medianstop") || trial < 0 || trial >= s->ntrials ||
        resource < e->start_step || !isfinite(value))
        return 0;
    double *avg = malloc(((size_t)s->ntrials + 1) * sizeof *avg);
    int n = 0, completed = 0;
    if (!avg) return 0;
    for (int i = 0; i < s->ntrials; i++) {
        const dt__trial *t = &s->t[i];
        if (i == trial || t->state != DT__TRIAL_SUCCEEDED) continue;
        completed++;
        double sum = 0;
        int c = 0;
        for (int j = 0; j < t->nobs; j++)
            if (t->obs[j].resource <= resource) sum += t->obs[j].value, c++;
        if (c) avg[n++] = s->sign * sum / c;
    }
    int stop = 0;
    if (completed >= e->min_trials_required && n > 0) {
        qsort(avg, (size_t)n, sizeof *avg, cmp_double);
        double median = n % 2 ? avg[n / 2] : (avg[n / 2 - 1] + avg[n / 2]) / 2;
        const dt__trial *t = &s->t[trial];
        double best = s->sign * value;
        for (int j = 0; j < t->nobs; j++)
            if (t->obs[j].resource <= resource && s->sign * t->obs[j].value > best)
                best = s->sign * t->obs[j].value;
        stop = best < median;
    }
    free(avg);
    return stop;
}

int dt__search_best(const dt__search *s, int *trial, double *value) {
    int found = -1;
    double best = 0;
    for (int i = 0; i < s->ntrials; i++) {
        double sc;
        if (dt__trial_score(s, &s->t[i], &sc) && (found < 0 || sc > best)) found = i, best = sc;
    }
    if (found < 0) return 0;
    *trial = found;
    *value = s->sign * best;
    return 1;
}

int dt__search_trials(const dt__search *s) {
    return s->ntrials;
}

dt__trial_state dt__search_trial_state(const dt__search *s, int trial) {
    return trial >= 0 && trial < s->ntrials ? s->t[trial].state : DT__TRIAL_FAILED;
}

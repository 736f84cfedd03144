/*
 * search-impl.h - the search's state, shared by its files: search.c (the trials, random,
 * grid, medianstop, restore), search_model.c (tpe, bayesianoptimization), search_bandit.c
 * (hyperband, asha).
 *
 * A trial's parameters are kept twice: x[i], the number (int, double) or list index
 * (discrete, categorical) the algorithms work with, and text[i], what the template gets.
 * Every algorithm is a function of the trials' records (parameters, target resource,
 * state, observations) and of a random stream seeded by (seed, trial number): nothing else
 * is carried between calls, which is what makes dt__search_restore exact.
 */
#ifndef DTRAIN_TUNE_SEARCH_IMPL_H
#define DTRAIN_TUNE_SEARCH_IMPL_H

#include "dtrain/rng.h"
#include "tune/tune-impl.h"

typedef enum {
    ALGO_RANDOM = 0,
    ALGO_GRID,
    ALGO_TPE,
    ALGO_BO,
    ALGO_HYPERBAND,
    ALGO_ASHA,
} dt__algo;

#define DT__ASHA_MAX_RUNGS 32

typedef struct dt__obs {
    int resource;
    double value;
} dt__obs;

typedef struct dt__trial {
    double *x;    /* nparams */
    char **text;  /* nparams, owned */
    int resource; /* the resource it was last sent to reach (0: none) */
    dt__trial_state state;
    dt__obs *obs;
    int nobs, cap;
    int has_final;
    double final;
} dt__trial;

/* One rung of hyperband's schedule, flattened over its brackets. */
typedef struct dt__hb_rung {
    int first;    /* the first trial number of the rung */
    int count;    /* its trials */
    int resource; /* what each gets */
    int head;     /* 1: the bracket's first rung (random configurations) */
} dt__hb_rung;

struct dt__search {
    const dt__experiment *e;
    dt__algo algo;
    uint64_t seed;
    double sign; /* +1 maximize, -1 minimize: a score is sign * value, higher is better */
    int limit;   /* trials the search makes at most (0: no limit of its own) */

    dt__trial *t;
    int ntrials, cap;

    /* random configurations on a finite space (random, tpe and bo's first points,
     * hyperband's brackets, asha): a permutation of its combinations; nperm 0: none */
    int64_t *perm;
    int64_t nperm;
    /* grid: points of a double parameter without step */
    int grid_points;
    /* tpe */
    int n_startup, n_ei;
    double gamma, prior_weight;
    /* bayesianoptimization */
    int n_initial, n_candidates;
    /* hyperband */
    double eta;
    dt__hb_rung *hb;
    int nhb;
    /* asha */
    int rungs[DT__ASHA_MAX_RUNGS];
    int nrungs;
    int reduction;
    int max_resource;
};

/* ---- search.c ---- */

/* The trial's score (sign * its result): 1 and *score when it has one. Its result: the final
 * observation, else (ended, not failed) the last one. */
int dt__trial_score(const dt__search *s, const dt__trial *t, double *score);
/* A uniform double in [0, 1). */
double dt__unif(dt_rng *r);
/* A random point of parameter p (number or list index). */
double dt__sample_param(const dt__tune_param *p, dt_rng *r);
/* Trial k's random configuration (every parameter; the resource one at its min): on a
 * finite space of at most 10^6 combinations each combination once before any repeats (a
 * permutation seeded by the seed), else each parameter drawn from r. */
void dt__random_config(const dt__search *s, int k, dt_rng *r, double *x);
/* p's value x moved onto its space: ints rounded, steps kept, clamped to [min, max]. */
double dt__snap(const dt__tune_param *p, double x);
/* A numeric parameter in [0, 1] (log space for logUniform) and back (snapped). */
double dt__to_unit(const dt__tune_param *p, double x);
double dt__from_unit(const dt__tune_param *p, double u);
/* Append a new trial with parameters x (copied) at resource; its texts made here. The
 * resource parameter's value, when resource_value >= 0, is set to it. */
dt_err dt__search_add(dt__search *s, const double *x, int resource, double resource_value);

/* ---- search_model.c ---- */
void dt__tpe_suggest(const dt__search *s, dt_rng *r, double *x);
dt_err dt__bo_suggest(const dt__search *s, dt_rng *r, double *x);

/* ---- search_bandit.c ---- */
dt_err dt__hyperband_init(dt__search *s);
/* *trial_out made (DT_OK), or DT_ERR_NOTFOUND with *done. */
dt_err dt__hyperband_next(dt__search *s, int *done);
dt_err dt__asha_init(dt__search *s);
/* DT_OK with *trial (new or promoted), or DT_ERR_NOTFOUND with *done. */
dt_err dt__asha_next(dt__search *s, int *trial, int *done);
int dt__asha_promote(dt__search *s, int trial, int resource);

#endif

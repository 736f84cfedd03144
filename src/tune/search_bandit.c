/*
 * search_bandit.c - the searches that spend a resource (epochs) in rungs: hyperband, as
 * Katib's suggestion service runs it, and ASHA (asynchronous successive halving, Li et al.
 * 2018), which Katib does not have.
 *
 * Hyperband (settings eta, default 3; r_l, the most resource; resource_name, the parameter
 * that gets it): s_max = the largest s with eta^s <= r_l; brackets s = s_max .. 0, each of
 * n = ceil((s_max + 1) * eta^s / (s + 1)) random configurations at resource r_l * eta^-s,
 * then rungs i = 1 .. s of the top ceil(n_(i-1) / eta) configurations of the rung before
 * (n_(i-1) = ceil(n * eta^-(i-1))) run anew at resource r_l * eta^(i-s), as Katib's
 * _make_child_bracket does. A rung starts when every trial of the one before has ended. The
 * whole schedule is a list of rungs fixed in advance, so a trial's number says its rung.
 *
 * ASHA (settings min_resource, max_resource, reduction_factor eta (default 3),
 * resource_name): rungs min_resource * eta^k below max_resource, then max_resource. A trial
 * runs with its resource parameter at max_resource and reports at each rung; there it is
 * promoted (goes on to the next rung) when it is in the top floor(n / eta) of the n results
 * of that rung so far, else paused. Each dt__search_next first looks for a paused trial that
 * later results have put in its rung's top (the highest rung first), and only then starts a
 * new configuration. A trial's results at the rungs are not stored: they follow from its
 * record (the resource it was sent to, its state) and its observations, so a restored
 * search holds the same rungs.
 */
#include "tune/search-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ranking ---- */

typedef struct ranked {
    int trial;
    double score;
    int has;
} ranked;

static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->has != y->has) return y->has - x->has;
    if (x->has && x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->trial - y->trial;
}

/* ---- hyperband ---- */

dt_err dt__hyperband_init(dt__search *s) {
    const dt__experiment *e = s->e;
    double eta = 3, r_l = 0;
    for (int i = 0; i < e->nsettings; i++) {
        if (!strcmp(e->setting_name[i], "eta")) eta = strtod(e->setting_value[i], NULL);
        if (!strcmp(e->setting_name[i], "r_l")) r_l = strtod(e->setting_value[i], NULL);
    }
    if (!(eta > 1) || !(r_l >= 1) || e->resource_param < 0)
        return dt_err_set(DT_ERR_ARG, "%s: hyperband needs eta > 1, r_l >= 1 and resource_name",
                          e->path);
    s->eta = eta;
    int s_max = 0;
    while (pow(eta, s_max + 1) <= r_l * (1 + 1e-9))
        s_max++;
    int total = (s_max + 1) * (s_max + 2) / 2, first = 0;
    if (!(s->hb = calloc((size_t)total, sizeof *s->hb)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int b = s_max; b >= 0; b--) {
        int n = (int)ceil((s_max + 1) * pow(eta, b) / (b + 1) - 1e-9);
        double r = r_l * pow(eta, -b);
        for (int i = 0; i <= b; i++) {
            dt__hb_rung *g = &s->hb[s->nhb++];
            g->head = i == 0;
            g->count = i == 0 ? n : (int)ceil(ceil(n * pow(eta, -(i - 1)) - 1e-9) / eta - 1e-9);
            if (g->count < 1) g->count = 1;
            g->resource = (int)(r * pow(eta, i) + 1e-9);
            if (g->resource < 1) g->resource = 1;
            g->first = first;
            first += g->count;
        }
    }
    if (s->limit == 0 || first < s->limit) s->limit = first;
    return DT_OK;
}

static int ended(const dt__trial *t) {
    return t->state != DT__TRIAL_RUNNING && t->state != DT__TRIAL_PAUSED;
}

dt_err dt__hyperband_next(dt__search *s, int *done) {
    const dt__experiment *e = s->e;
    int k = s->ntrials, g = 0;
    if (k >= s->limit) {
        *done = 1;
        return DT_ERR_NOTFOUND;
    }
    while (g + 1 < s->nhb && s->hb[g + 1].first <= k)
        g++;
    const dt__hb_rung *rung = &s->hb[g];
    double *x = calloc((size_t)e->nparams + 1, sizeof *x);
    dt_err err;
    if (!x) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    if (rung->head) {
        dt_rng r;
        dt_rng_seed2(&r, s->seed, (uint64_t)k);
        dt__random_config(s, k, &r, x);
    } else {
        const dt__hb_rung *prev = &s->hb[g - 1];
        ranked *rk = calloc((size_t)prev->count, sizeof *rk);
        if (!rk) {
            free(x);
            return dt_err_set(DT_ERR_NOMEM, "out of memory");
        }
        for (int j = 0; j < prev->count; j++) {
            const dt__trial *t = &s->t[prev->first + j];
            if (!ended(t)) { /* the rung before is still running */
                free(rk);
                free(x);
                return DT_ERR_NOTFOUND;
            }
            rk[j].trial = prev->first + j;
            rk[j].has = dt__trial_score(s, t, &rk[j].score);
        }
        qsort(rk, (size_t)prev->count, sizeof *rk, cmp_ranked);
        int pick = k - rung->first;
        if (pick >= prev->count) pick = prev->count - 1;
        memcpy(x, s->t[rk[pick].trial].x, (size_t)e->nparams * sizeof *x);
        free(rk);
    }
    err = dt__search_add(s, x, rung->resource, rung->resource);
    free(x);
    return err;
}

/* ---- asha ---- */

dt_err dt__asha_init(dt__search *s) {
    const dt__experiment *e = s->e;
    double rmin = 1, rmax = 0, eta = 3;
    if (e->resource_param >= 0) {
        const dt__tune_param *p = &e->params[e->resource_param];
        rmin = p->min >= 1 ? p->min : 1;
        rmax = p->max;
    }
    for (int i = 0; i < e->nsettings; i++) {
        const char *n = e->setting_name[i], *v = e->setting_value[i];
        if (!strcmp(n, "min_resource")) rmin = strtod(v, NULL);
        if (!strcmp(n, "max_resource")) rmax = strtod(v, NULL);
        if (!strcmp(n, "reduction_factor")) eta = strtod(v, NULL);
    }
    if (!(rmax >= 1) || !(rmin >= 1) || rmin > rmax || !(eta >= 2))
        return dt_err_set(DT_ERR_ARG,
                          "%s: asha needs 1 <= min_resource <= max_resource and "
                          "reduction_factor >= 2",
                          e->path);
    s->reduction = (int)eta;
    s->max_resource = (int)rmax;
    for (double r = rmin; r < rmax - 1e-9 && s->nrungs < DT__ASHA_MAX_RUNGS - 1; r *= eta)
        s->rungs[s->nrungs++] = (int)(r + 1e-9);
    s->rungs[s->nrungs++] = (int)rmax;
    return DT_OK;
}

/* Has trial t a result at rung k? It was sent past it, or it stopped there (paused, or it
 * finished its last rung). */
static int at_rung(const dt__search *s, const dt__trial *t, int k) {
    int r = s->rungs[k];
    if (t->resource > r) return 1;
    return t->resource == r && (t->state == DT__TRIAL_PAUSED || t->state == DT__TRIAL_SUCCEEDED ||
                                t->state == DT__TRIAL_EARLY_STOPPED);
}

/* Its value at rung k: the last observation at a resource <= the rung's. */
static int rung_value(const dt__search *s, const dt__trial *t, int k, double *score) {
    int found = 0, best_r = -1;
    for (int j = 0; j < t->nobs; j++)
        if (t->obs[j].resource <= s->rungs[k] && t->obs[j].resource >= best_r) {
            best_r = t->obs[j].resource;
            *score = s->sign * t->obs[j].value;
            found = 1;
        }
    return found;
}

/* The results at rung k, best first; self (>= 0) counted as having one. Returns n. */
static int rung_ranking(const dt__search *s, int k, int self, ranked *rk) {
    int n = 0;
    for (int i = 0; i < s->ntrials; i++) {
        const dt__trial *t = &s->t[i];
        if (i != self && !at_rung(s, t, k)) continue;
        rk[n].trial = i;
        rk[n].has = rung_value(s, t, k, &rk[n].score);
        n++;
    }
    qsort(rk, (size_t)n, sizeof *rk, cmp_ranked);
    return n;
}

static int rung_of(const dt__search *s, int resource) {
    for (int k = 0; k < s->nrungs; k++)
        if (s->rungs[k] == resource) return k;
    return -1;
}

dt_err dt__asha_next(dt__search *s, int *trial, int *done) {
    const dt__experiment *e = s->e;
    ranked *rk = malloc(((size_t)s->ntrials + 1) * sizeof *rk);
    if (!rk) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int k = s->nrungs - 2; k >= 0; k--) {
        int n = rung_ranking(s, k, -1, rk), top = n / s->reduction;
        for (int j = 0; j < top; j++) {
            dt__trial *t = &s->t[rk[j].trial];
            if (t->state == DT__TRIAL_PAUSED && t->resource == s->rungs[k]) {
                t->state = DT__TRIAL_RUNNING;
                t->resource = s->rungs[k + 1];
                *trial = rk[j].trial;
                free(rk);
                return DT_OK;
            }
        }
    }
    free(rk);
    if (s->limit == 0 || s->ntrials < s->limit) {
        double *x = calloc((size_t)e->nparams + 1, sizeof *x);
        dt_rng r;
        if (!x) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        dt_rng_seed2(&r, s->seed, (uint64_t)s->ntrials);
        dt__random_config(s, s->ntrials, &r, x);
        *trial = s->ntrials;
        dt_err err =
            dt__search_add(s, x, s->rungs[0], e->resource_param >= 0 ? s->max_resource : -1);
        free(x);
        return err;
    }
    int running = 0;
    for (int i = 0; i < s->ntrials; i++)
        running |= s->t[i].state == DT__TRIAL_RUNNING;
    *done = !running;
    return DT_ERR_NOTFOUND;
}

int dt__asha_promote(dt__search *s, int trial, int resource) {
    dt__trial *t = &s->t[trial];
    if (resource >= s->max_resource) return s->max_resource;
    int k = rung_of(s, resource);
    if (k < 0) { /* not a rung: on to the next one above it */
        for (k = 0; k < s->nrungs && s->rungs[k] <= resource; k++)
            ;
        t->resource = s->rungs[k < s->nrungs ? k : s->nrungs - 1];
        return t->resource;
    }
    t->resource = resource;
    ranked *rk = malloc(((size_t)s->ntrials + 1) * sizeof *rk);
    if (!rk) return s->rungs[k + 1]; /* no memory to rank: let it go on */
    int n = rung_ranking(s, k, trial, rk), top = n / s->reduction, promote = 0;
    for (int j = 0; j < top; j++)
        if (rk[j].trial == trial) promote = 1;
    free(rk);
    if (promote) {
        t->resource = s->rungs[k + 1];
        t->state = DT__TRIAL_RUNNING;
        return t->resource;
    }
    t->state = DT__TRIAL_PAUSED;
    return 0;
}

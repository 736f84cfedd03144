/*
 * search_model.c - the searches that model the objective from the trials so far: TPE
 * (tpe) and Bayesian optimization with a Gaussian process (bayesianoptimization).
 *
 * Both start with random points (tpe: n_startup_trials, default 10; bayesianoptimization:
 * n_initial_points, default 10, as scikit-optimize) and model only trials with a result.
 * Numeric parameters are modelled in [0, 1] (log space for logUniform), so a log-scale
 * parameter is searched by its order of magnitude; suggestions are snapped onto the
 * parameter's space (integers, steps) before they are scored.
 *
 * TPE (Bergstra et al. 2011, as hyperopt): the results split at the gamma quantile (default
 * 0.25) into good and bad; per parameter, a Parzen estimator (Gaussian kernels on the
 * points, plus a prior kernel over the whole range weighted prior_weight, each bandwidth the
 * larger gap to its neighbours, truncated to the range) over each group, l(x) and g(x); of
 * n_EI_candidates (default 24) draws from l, the one with the largest l(x)/g(x) is taken.
 * Lists: category frequencies with the prior spread evenly.
 *
 * Bayesian optimization: a GP with an RBF kernel over the features (numeric in [0, 1],
 * discrete as its position, categorical one-hot) on standardized results; its length scale
 * is the one of a fixed ladder with the highest marginal likelihood (Cholesky); trials still
 * running count with the worst result seen (a constant liar), so parallel suggestions
 * spread. Expected improvement is maximized over n_candidates (default 1000) random points,
 * a quarter of them near the best results so far.
 */
#include "tune/search-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static int is_list(const dt__tune_param *p) {
    return p->type == DT__PARAM_DISCRETE || p->type == DT__PARAM_CATEGORICAL;
}

/* Trials with a result: their numbers into idx, scores into sc; returns how many. */
static int results(const dt__search *s, int *idx, double *sc) {
    int n = 0;
    for (int i = 0; i < s->ntrials; i++)
        if (dt__trial_score(s, &s->t[i], &sc[n])) idx[n++] = i;
    return n;
}

/* The random configuration of the trial being made (number s->ntrials). */
static void random_point(const dt__search *s, dt_rng *r, double *x) {
    dt__random_config(s, s->ntrials, r, x);
}

/* ---- TPE ---- */

static double norm_cdf(double z) {
    return 0.5 * erfc(-z / sqrt(2.0));
}

typedef struct parzen {
    double *mu, *sigma, *w, *mass;
    int n;
} parzen;

/* A Parzen estimator on [0, 1] over pts[0..n) plus the prior kernel (0.5, 1). */
static int parzen_build(parzen *pz, const double *pts, int n, double prior_weight) {
    int m = n + 1;
    pz->n = m;
    pz->mu = malloc((size_t)m * 4 * sizeof(double));
    if (!pz->mu) return -1;
    pz->sigma = pz->mu + m;
    pz->w = pz->sigma + m;
    pz->mass = pz->w + m;
    /* sorted centres, the prior's among them */
    for (int i = 0; i < n; i++)
        pz->mu[i] = pts[i];
    pz->mu[n] = 0.5;
    for (int i = 1; i < m; i++) { /* insertion sort: n is small */
        double v = pz->mu[i];
        int j = i - 1;
        while (j >= 0 && pz->mu[j] > v) {
            pz->mu[j + 1] = pz->mu[j];
            j--;
        }
        pz->mu[j + 1] = v;
    }
    double lo = 1.0 / (m < 100 ? m : 100);
    int prior_done = 0;
    double wsum = 0;
    for (int i = 0; i < m; i++) {
        double left = i > 0 ? pz->mu[i] - pz->mu[i - 1] : pz->mu[i];
        double right = i < m - 1 ? pz->mu[i + 1] - pz->mu[i] : 1 - pz->mu[i];
        double sg = left > right ? left : right;
        if (sg < lo) sg = lo;
        if (sg > 1) sg = 1;
        pz->w[i] = 1;
        if (!prior_done && pz->mu[i] == 0.5) { /* the prior: the whole range */
            prior_done = 1;
            sg = 1;
            pz->w[i] = prior_weight;
        }
        pz->sigma[i] = sg;
        pz->mass[i] = norm_cdf((1 - pz->mu[i]) / sg) - norm_cdf((0 - pz->mu[i]) / sg);
        if (pz->mass[i] < 1e-12) pz->mass[i] = 1e-12;
        wsum += pz->w[i];
    }
    for (int i = 0; i < m; i++)
        pz->w[i] /= wsum;
    return 0;
}

static double parzen_pdf(const parzen *pz, double x) {
    double p = 0;
    for (int i = 0; i < pz->n; i++) {
        double z = (x - pz->mu[i]) / pz->sigma[i];
        p += pz->w[i] * exp(-0.5 * z * z) / (pz->sigma[i] * sqrt(2 * M_PI) * pz->mass[i]);
    }
    return p;
}

static double parzen_sample(const parzen *pz, dt_rng *r) {
    double u = dt__unif(r), c = 0;
    int k = pz->n - 1;
    for (int i = 0; i < pz->n; i++) {
        c += pz->w[i];
        if (u < c) {
            k = i;
            break;
        }
    }
    for (int tries = 0; tries < 32; tries++) {
        double x = pz->mu[k] + pz->sigma[k] * dt_rng_normal(r);
        if (x >= 0 && x <= 1) return x;
    }
    return dt__unif(r);
}

typedef struct ranked_score {
    int trial;
    double score;
} ranked_score;

static int cmp_score(const void *a, const void *b) {
    const ranked_score *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->trial - y->trial;
}

void dt__tpe_suggest(const dt__search *s, dt_rng *r, double *x) {
    const dt__experiment *e = s->e;
    int *idx = malloc(((size_t)s->ntrials + 1) * sizeof *idx);
    double *sc = malloc(((size_t)s->ntrials + 1) * sizeof *sc);
    ranked_score *rk = malloc(((size_t)s->ntrials + 1) * sizeof *rk);
    double *good = malloc(((size_t)s->ntrials + 1) * sizeof *good);
    double *bad = malloc(((size_t)s->ntrials + 1) * sizeof *bad);
    int n = idx && sc && rk && good && bad ? results(s, idx, sc) : 0;
    if (n < s->n_startup || n < 2) {
        random_point(s, r, x);
        goto out;
    }
    for (int i = 0; i < n; i++)
        rk[i] = (ranked_score){.trial = idx[i], .score = sc[i]};
    qsort(rk, (size_t)n, sizeof *rk, cmp_score);
    int ngood = (int)ceil(s->gamma * n);
    if (ngood < 1) ngood = 1;
    if (ngood > n - 1) ngood = n - 1;
    for (int i = 0; i < e->nparams; i++) {
        const dt__tune_param *p = &e->params[i];
        if (is_list(p)) {
            int K = p->nlist;
            double *lw = calloc((size_t)K * 2, sizeof *lw), *gw = lw ? lw + K : NULL;
            if (!lw) {
                x[i] = dt__sample_param(p, r);
                continue;
            }
            for (int k = 0; k < K; k++)
                lw[k] = gw[k] = s->prior_weight / K;
            for (int j = 0; j < n; j++) {
                int k = (int)s->t[rk[j].trial].x[i];
                if (k >= 0 && k < K) (j < ngood ? lw : gw)[k] += 1;
            }
            double lsum = 0, gsum = 0;
            for (int k = 0; k < K; k++)
                lsum += lw[k], gsum += gw[k];
            double best = -INFINITY;
            int pick = 0;
            for (int c = 0; c < s->n_ei; c++) {
                double u = dt__unif(r) * lsum, acc = 0;
                int k = K - 1;
                for (int q = 0; q < K; q++) {
                    acc += lw[q];
                    if (u < acc) {
                        k = q;
                        break;
                    }
                }
                double ratio = log(lw[k] / lsum) - log(gw[k] / gsum);
                if (ratio > best) best = ratio, pick = k;
            }
            x[i] = pick;
            free(lw);
            continue;
        }
        int ng = 0, nb = 0;
        for (int j = 0; j < n; j++) {
            double u = dt__to_unit(p, s->t[rk[j].trial].x[i]);
            if (j < ngood)
                good[ng++] = u;
            else
                bad[nb++] = u;
        }
        parzen l, g;
        if (parzen_build(&l, good, ng, s->prior_weight)) {
            x[i] = dt__sample_param(p, r);
            continue;
        }
        if (parzen_build(&g, bad, nb, s->prior_weight)) {
            free(l.mu);
            x[i] = dt__sample_param(p, r);
            continue;
        }
        double best = -INFINITY, pick = dt__sample_param(p, r);
        for (int c = 0; c < s->n_ei; c++) {
            double v = dt__from_unit(p, parzen_sample(&l, r)), u = dt__to_unit(p, v);
            double ratio = log(parzen_pdf(&l, u) + 1e-300) - log(parzen_pdf(&g, u) + 1e-300);
            if (ratio > best) best = ratio, pick = v;
        }
        x[i] = pick;
        free(l.mu);
        free(g.mu);
    }
out:
    free(idx);
    free(sc);
    free(rk);
    free(good);
    free(bad);
}

/* ---- Bayesian optimization ---- */

/* Feature dimensions of the experiment's parameters. */
static int feature_dims(const dt__experiment *e) {
    int d = 0;
    for (int i = 0; i < e->nparams; i++)
        d += e->params[i].type == DT__PARAM_CATEGORICAL ? e->params[i].nlist : 1;
    return d;
}

static void features(const dt__experiment *e, const double *x, double *f) {
    int d = 0;
    for (int i = 0; i < e->nparams; i++) {
        const dt__tune_param *p = &e->params[i];
        if (p->type == DT__PARAM_CATEGORICAL) {
            for (int k = 0; k < p->nlist; k++)
                f[d++] = (int)x[i] == k;
        } else {
            f[d++] = dt__to_unit(p, x[i]);
        }
    }
}

static double sqdist(const double *a, const double *b, int d) {
    double s = 0;
    for (int i = 0; i < d; i++)
        s += (a[i] - b[i]) * (a[i] - b[i]);
    return s;
}

/* In-place Cholesky of the n x n matrix a (lower triangle); -1 when not positive definite. */
static int cholesky(double *a, int n) {
    for (int j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (int k = 0; k < j; k++)
            d -= a[j * n + k] * a[j * n + k];
        if (!(d > 0)) return -1;
        d = sqrt(d);
        a[j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double v = a[i * n + j];
            for (int k = 0; k < j; k++)
                v -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = v / d;
        }
    }
    return 0;
}

/* Solve L y = b (forward) in place. */
static void forward(const double *L, int n, double *b) {
    for (int i = 0; i < n; i++) {
        double v = b[i];
        for (int k = 0; k < i; k++)
            v -= L[i * n + k] * b[k];
        b[i] = v / L[i * n + i];
    }
}

/* Solve L^T x = b (backward) in place. */
static void backward(const double *L, int n, double *b) {
    for (int i = n - 1; i >= 0; i--) {
        double v = b[i];
        for (int k = i + 1; k < n; k++)
            v -= L[k * n + i] * b[k];
        b[i] = v / L[i * n + i];
    }
}

#define NOISE 1e-4
/* The most results, and points in all, the GP is fitted to. */
#define BO_MAX_RESULTS 200
#define BO_MAX_POINTS 256

/* Fit: K + noise I = L L^T, alpha = K^-1 y. Returns the log marginal likelihood, or -inf. */
static double gp_fit(const double *F, const double *y, int n, int d, double ls, double *L,
                     double *alpha) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double k = exp(-0.5 * sqdist(F + i * d, F + j * d, d) / (ls * ls));
            L[i * n + j] = L[j * n + i] = k + (i == j ? NOISE : 0);
        }
    if (cholesky(L, n)) return -INFINITY;
    memcpy(alpha, y, (size_t)n * sizeof *alpha);
    forward(L, n, alpha);
    double fit = 0, logdet = 0;
    for (int i = 0; i < n; i++)
        fit += alpha[i] * alpha[i], logdet += log(L[i * n + i]);
    backward(L, n, alpha);
    return -0.5 * fit - logdet - 0.5 * n * log(2 * M_PI);
}

dt_err dt__bo_suggest(const dt__search *s, dt_rng *r, double *x) {
    const dt__experiment *e = s->e;
    int N = s->ntrials, d = feature_dims(e), P = e->nparams;
    int *idx = malloc(((size_t)N + 1) * sizeof *idx);
    double *sc = malloc(((size_t)N + 1) * sizeof *sc);
    if (!idx || !sc) {
        free(idx);
        free(sc);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    int nres = results(s, idx, sc);
    if (nres < s->n_initial || nres < 2) {
        free(idx);
        free(sc);
        random_point(s, r, x);
        return DT_OK;
    }
    /* the modelled points: results (the best BO_MAX_RESULTS of them: the fit is cubic in
     * their number), then running trials at the worst result (liars) */
    if (nres > BO_MAX_RESULTS) {
        ranked_score *rk = malloc((size_t)nres * sizeof *rk);
        if (!rk) {
            free(idx);
            free(sc);
            return dt_err_set(DT_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < nres; i++)
            rk[i] = (ranked_score){.trial = idx[i], .score = sc[i]};
        qsort(rk, (size_t)nres, sizeof *rk, cmp_score);
        nres = BO_MAX_RESULTS;
        for (int i = 0; i < nres; i++)
            idx[i] = rk[i].trial, sc[i] = rk[i].score;
        free(rk);
    }
    int n = nres;
    double worst = sc[0];
    for (int i = 1; i < nres; i++)
        if (sc[i] < worst) worst = sc[i];
    for (int i = 0; i < N && n < BO_MAX_POINTS; i++)
        if (s->t[i].state == DT__TRIAL_RUNNING && !s->t[i].has_final)
            idx[n] = i, sc[n] = worst, n++;
    double *F = malloc((size_t)n * d * sizeof *F), *y = malloc((size_t)n * sizeof *y);
    double *L = malloc((size_t)n * n * sizeof *L), *Lb = malloc((size_t)n * n * sizeof *Lb);
    double *alpha = malloc((size_t)n * sizeof *alpha), *ab = malloc((size_t)n * sizeof *ab);
    double *kv = malloc((size_t)n * sizeof *kv), *fc = malloc(((size_t)d + 1) * sizeof *fc);
    double *cand = malloc(((size_t)P + 1) * sizeof *cand);
    dt_err err = DT_OK;
    if (!F || !y || !L || !Lb || !alpha || !ab || !kv || !fc || !cand) {
        err = dt_err_set(DT_ERR_NOMEM, "out of memory");
        goto out;
    }
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += sc[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        var += (sc[i] - mean) * (sc[i] - mean);
    double sd = var > 0 ? sqrt(var / n) : 1;
    double ybest = -INFINITY;
    for (int i = 0; i < n; i++) {
        y[i] = (sc[i] - mean) / sd;
        if (i < nres && y[i] > ybest) ybest = y[i];
        features(e, s->t[idx[i]].x, F + (size_t)i * d);
    }
    /* the length scale of the ladder with the best marginal likelihood */
    static const double ladder[] = {0.05, 0.1, 0.15, 0.25, 0.4, 0.6, 1.0, 1.5};
    double best_ll = -INFINITY, ls = 0.25 * sqrt(d);
    for (size_t q = 0; q < sizeof ladder / sizeof ladder[0]; q++) {
        double l = ladder[q] * sqrt(d);
        double ll = gp_fit(F, y, n, d, l, Lb, ab);
        if (ll > best_ll) {
            best_ll = ll;
            ls = l;
            memcpy(L, Lb, (size_t)n * n * sizeof *L);
            memcpy(alpha, ab, (size_t)n * sizeof *alpha);
        }
    }
    if (best_ll == -INFINITY) { /* nothing fits: a random point */
        random_point(s, r, x);
        goto out;
    }
    /* the top results, for local candidates */
    int top[3] = {-1, -1, -1};
    for (int i = 0; i < nres; i++)
        for (int q = 0; q < 3; q++)
            if (top[q] < 0 || y[i] > y[top[q]]) {
                for (int z = 2; z > q; z--)
                    top[z] = top[z - 1];
                top[q] = i;
                break;
            }
    double best_ei = -1;
    const double xi = 0.01;
    for (int c = 0; c < s->n_candidates; c++) {
        int local = c % 4 == 3 && top[0] >= 0;
        int q = (c / 4) % 3;
        if (top[q] < 0) q = 0;
        const double *base = local ? s->t[idx[top[q]]].x : NULL;
        for (int i = 0; i < P; i++) {
            const dt__tune_param *p = &e->params[i];
            if (!local || (is_list(p) && dt__unif(r) < 0.3)) {
                cand[i] = dt__sample_param(p, r);
            } else if (is_list(p)) {
                cand[i] = base[i];
            } else {
                double u = dt__to_unit(p, base[i]) + 0.1 * dt_rng_normal(r);
                cand[i] = dt__from_unit(p, u);
            }
        }
        features(e, cand, fc);
        double mu = 0;
        for (int i = 0; i < n; i++) {
            kv[i] = exp(-0.5 * sqdist(fc, F + (size_t)i * d, d) / (ls * ls));
            mu += kv[i] * alpha[i];
        }
        forward(L, n, kv);
        double v = 1 + NOISE;
        for (int i = 0; i < n; i++)
            v -= kv[i] * kv[i];
        double sdv = v > 1e-12 ? sqrt(v) : 1e-6;
        double imp = mu - ybest - xi, z = imp / sdv;
        double ei = imp * norm_cdf(z) + sdv * exp(-0.5 * z * z) / sqrt(2 * M_PI);
        if (ei > best_ei) {
            best_ei = ei;
            memcpy(x, cand, (size_t)P * sizeof *x);
        }
    }
out:
    free(idx);
    free(sc);
    free(F);
    free(y);
    free(L);
    free(Lb);
    free(alpha);
    free(ab);
    free(kv);
    free(fc);
    free(cand);
    return err;
}

/* search_test.c - the tune searches: grid enumerates exactly the product, random stays in
 * bounds and samples log-uniform parameters by order of magnitude, TPE and Bayesian
 * optimization beat random on a quadratic (medians over seeds), hyperband follows Katib's
 * schedule, ASHA and medianstop decide as their rules say on scripted histories, and a
 * search rebuilt from its records suggests what the original would have. */
#include <stdint.h>

#include "testing/dt_test.h"
#include "tune/search-impl.h"

/* An experiment around the given parameters and algorithm lines. */
static dt__experiment *make(const char *name, const char *algorithm, const char *extra_spec,
                            const char *params, const char *placeholders) {
    static char text[8192];
    snprintf(text, sizeof text,
             "apiVersion: kubeflow.org/v1beta1\n"
             "kind: Experiment\n"
             "metadata: {name: t}\n"
             "spec:\n"
             "  objective: {type: maximize, objectiveMetricName: acc}\n"
             "  algorithm:\n%s"
             "%s"
             "  parameters:\n%s"
             "  trialTemplate:\n"
             "    trialSpec:\n"
             "      apiVersion: kubeflow.org/v1\n"
             "      kind: TFJob\n"
             "      spec:\n"
             "        tfReplicaSpecs:\n"
             "          Worker:\n"
             "            template:\n"
             "              spec:\n"
             "                containers:\n"
             "                  - name: tensorflow\n"
             "                    command: [python3, \"%s\"]\n",
             algorithm, extra_spec, params, placeholders);
    const char *p = dt_test_write_file(name, text, strlen(text));
    dt__experiment *e = NULL;
    dt_err err = dt__experiment_load(&e, p);
    if (err) fprintf(stderr, "%s\n", dt_errmsg());
    return e;
}

#define XY_PARAMS                                                                                  \
    "    - {name: x, parameterType: double, feasibleSpace: {min: \"0\", max: \"1\"}}\n"            \
    "    - {name: y, parameterType: double, feasibleSpace: {min: \"0\", max: \"1\"}}\n"

/* The toy objective: a quadratic with its top (0) at (0.3, 0.7). */
static double quad(char **v) {
    double x = strtod(v[0], NULL), y = strtod(v[1], NULL);
    return -((x - 0.3) * (x - 0.3) + (y - 0.7) * (y - 0.7));
}

static void test_grid_product(void) {
    dt__experiment *e =
        make("grid.yaml", "    algorithmName: grid\n", "",
             "    - {name: lr, parameterType: double, feasibleSpace: {min: \"0.1\", max: \"0.3\", "
             "step: \"0.1\"}}\n"
             "    - {name: n, parameterType: int, feasibleSpace: {min: \"2\", max: \"8\", step: "
             "\"2\"}}\n"
             "    - {name: o, parameterType: categorical, feasibleSpace: {list: [sgd, adam]}}\n",
             "");
    DT_CHECK(e);
    dt__search *s = NULL;
    DT_CHECK_OK(dt__search_new(&s, e, 1));
    int seen[3][4][2] = {{{0}}}, count = 0;
    for (;;) {
        char **v = NULL;
        int res = -1, done = 0, trial = -1;
        dt_err err = dt__search_next(s, &v, &res, &done, &trial);
        if (err == DT_ERR_NOTFOUND) {
            DT_CHECK(done == 1);
            break;
        }
        DT_CHECK_OK(err);
        DT_CHECK(trial == count && res == 0);
        int i = !strcmp(v[0], "0.1") ? 0 : !strcmp(v[0], "0.2") ? 1 : !strcmp(v[0], "0.3") ? 2 : -1;
        int j = (atoi(v[1]) - 2) / 2, k = !strcmp(v[2], "adam");
        DT_CHECK(i >= 0 && j >= 0 && j < 4 && (k || !strcmp(v[2], "sgd")));
        DT_CHECK(atoi(v[1]) % 2 == 0);
        seen[i][j][k]++;
        dt__values_free(v, e->nparams);
        count++;
        DT_CHECK(count <= 24);
    }
    DT_CHECK(count == 24);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 2; k++)
                DT_CHECK(seen[i][j][k] == 1);
    dt__search_free(s);
    dt__experiment_free(e);
    /* maxTrialCount cuts the grid short */
    e = make("grid2.yaml", "    algorithmName: grid\n", "  maxTrialCount: 5\n",
             "    - {name: n, parameterType: int, feasibleSpace: {min: \"1\", max: \"100\"}}\n",
             "");
    DT_CHECK(e);
    DT_CHECK_OK(dt__search_new(&s, e, 1));
    for (int i = 0; i < 6; i++) {
        char **v = NULL;
        int res, done, trial;
        dt_err err = dt__search_next(s, &v, &res, &done, &trial);
        DT_CHECK(i < 5 ? err == DT_OK : err == DT_ERR_NOTFOUND && done);
        if (i < 5) {
            char want[8];
            snprintf(want, sizeof want, "%d", i + 1);
            DT_CHECK(!strcmp(v[0], want));
        }
        dt__values_free(v, e->nparams);
    }
    dt__search_free(s);
    dt__experiment_free(e);
}

/* dtrain's grid setting points: doubles without step get that many points, log-spaced for
 * logUniform. */
static void test_grid_points(void) {
    dt__experiment *e = make(
        "gridp.yaml",
        "    algorithmName: grid\n    algorithmSettings:\n      - {name: points, value: \"4\"}\n",
        "",
        "    - {name: lr, parameterType: double, feasibleSpace: {min: \"0.0001\", max: \"0.1\", "
        "distribution: logUniform}}\n"
        "    - {name: m, parameterType: double, feasibleSpace: {min: \"0\", max: \"0.9\"}}\n",
        "");
    DT_CHECK(e);
    dt__search *s = NULL;
    DT_CHECK_OK(dt__search_new(&s, e, 1));
    static const char *const lrs[] = {"0.0001", "0.001", "0.01", "0.1"};
    static const char *const ms[] = {"0", "0.3", "0.6", "0.9"};
    for (int k = 0; k < 17; k++) {
        char **v = NULL;
        int res, done = 0, trial;
        dt_err err = dt__search_next(s, &v, &res, &done, &trial);
        if (k == 16) {
            DT_CHECK(err == DT_ERR_NOTFOUND && done);
            break;
        }
        DT_CHECK_OK(err);
        if (strcmp(v[0], lrs[k / 4]) || strcmp(v[1], ms[k % 4]))
            DT_FAIL("point %d: %s, %s (want %s, %s)", k, v[0], v[1], lrs[k / 4], ms[k % 4]);
        dt__values_free(v, e->nparams);
    }
    dt__search_free(s);
    dt__experiment_free(e);
}

static void test_random_bounds(void) {
    dt__experiment *e = make(
        "random.yaml", "    algorithmName: random\n", "  maxTrialCount: 3000\n",
        "    - {name: lr, parameterType: double, feasibleSpace: {min: \"0.0001\", max: \"0.1\", "
        "distribution: logUniform}}\n"
        "    - {name: n, parameterType: int, feasibleSpace: {min: \"2\", max: \"5\"}}\n"
        "    - {name: u, parameterType: int, feasibleSpace: {min: \"1\", max: \"1000\", "
        "distribution: logUniform}}\n"
        "    - {name: d, parameterType: double, feasibleSpace: {min: \"-1\", max: \"1\", "
        "step: \"0.5\"}}\n"
        "    - {name: k, parameterType: discrete, feasibleSpace: {list: [\"16\", \"32\"]}}\n",
        "");
    DT_CHECK(e);
    dt__search *s = NULL;
    DT_CHECK_OK(dt__search_new(&s, e, 42));
    int below = 0, nseen[4] = {0}, u_small = 0, dseen[5] = {0}, k32 = 0;
    const int N = 3000;
    for (int t = 0; t < N; t++) {
        char **v = NULL;
        int res, done, trial;
        DT_CHECK_OK(dt__search_next(s, &v, &res, &done, &trial));
        double lr = strtod(v[0], NULL), d = strtod(v[3], NULL);
        int n = atoi(v[1]), u = atoi(v[2]);
        DT_CHECK(lr >= 0.0001 && lr <= 0.1);
        DT_CHECK(n >= 2 && n <= 5 && u >= 1 && u <= 1000);
        DT_CHECK(d >= -1 && d <= 1 && d * 2 == floor(d * 2));
        DT_CHECK(!strcmp(v[4], "16") || !strcmp(v[4], "32"));
        below += lr < 0.0031622776601683794; /* 10^-2.5: the log-space midpoint */
        nseen[n - 2]++;
        u_small += u <= 31;
        dseen[(int)(d * 2 + 2)]++;
        k32 += !strcmp(v[4], "32");
        dt__values_free(v, e->nparams);
    }
    /* log-uniform: half below the geometric midpoint (uniform would put 3% there) */
    DT_CHECK(below > N * 0.45 && below < N * 0.55);
    DT_CHECK(u_small > N * 0.4 && u_small < N * 0.6);
    for (int i = 0; i < 4; i++)
        DT_CHECK(nseen[i] > N / 4 * 0.8);
    for (int i = 0; i < 5; i++)
        DT_CHECK(dseen[i] > N / 5 * 0.8);
    DT_CHECK(k32 > N * 0.4 && k32 < N * 0.6);
    dt__search_free(s);
    dt__experiment_free(e);
}

/* On a finite space (here 3 x 4 x 2, plus ASHA's resource parameter, which is not part of
 * it) random and ASHA draw every configuration once before any repeats (the trials still
 * run: ASHA has nothing to promote). */
static void test_finite_space(void) {
#define FINITE_PARAMS                                                                              \
    "    - {name: lr, parameterType: discrete, feasibleSpace: {list: [\"0.1\", \"0.01\", "         \
    "\"0.001\"]}}\n"                                                                               \
    "    - {name: h, parameterType: int, feasibleSpace: {min: \"16\", max: \"64\", step: "         \
    "\"16\"}}\n"                                                                                   \
    "    - {name: o, parameterType: categorical, feasibleSpace: {list: [sgd, adam]}}\n"
    static const char *const algos[] = {
        "    algorithmName: random\n",
        "    algorithmName: asha\n    algorithmSettings:\n      - {name: resource_name, value: "
        "epochs}\n"};
    for (int a = 0; a < 2; a++) {
        dt__experiment *e =
            make("finite.yaml", algos[a], "  maxTrialCount: 30\n",
                 a ? FINITE_PARAMS "    - {name: epochs, parameterType: int, feasibleSpace: {min: "
                                   "\"1\", max: \"9\"}}\n"
                   : FINITE_PARAMS "    - {name: epochs, parameterType: discrete, feasibleSpace: "
                                   "{list: [\"9\"]}}\n",
                 "");
        DT_CHECK(e);
        dt__search *s = NULL;
        DT_CHECK_OK(dt__search_new(&s, e, 4));
        char seen[24][64];
        for (int k = 0; k < 30; k++) {
            char **v = NULL;
            int res, done, trial;
            DT_CHECK_OK(dt__search_next(s, &v, &res, &done, &trial));
            DT_CHECK(trial == k);
            DT_CHECK(!strcmp(v[3], "9")); /* asha: the resource at max_resource */
            char key[64];
            snprintf(key, sizeof key, "%s/%s/%s", v[0], v[1], v[2]);
            for (int j = 0; j < (k < 24 ? k : 24); j++)
                if (k < 24) DT_CHECK(strcmp(seen[j], key));
            if (k < 24)
                memcpy(seen[k], key, sizeof key);
            else
                DT_CHECK(!strcmp(seen[k - 24], key)); /* then the same order again */
            dt__values_free(v, e->nparams);
        }
        dt__search_free(s);
        dt__experiment_free(e);
    }
#undef FINITE_PARAMS
}

/* Best value a search finds on quad in `budget` sequential trials. */
static double best_of(const dt__experiment *e, uint64_t seed, int budget) {
    dt__search *s = NULL;
    double best = -INFINITY;
    if (dt__search_new(&s, e, seed)) return best;
    for (int t = 0; t < budget; t++) {
        char **v = NULL;
        int res, done, trial;
        if (dt__search_next(s, &v, &res, &done, &trial)) break;
        double f = quad(v);
        if (f > best) best = f;
        dt__search_observe(s, trial, 0, f, 1);
        dt__search_end(s, trial, DT__TRIAL_SUCCEEDED);
        dt__values_free(v, e->nparams);
    }
    dt__search_free(s);
    return best;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_best(const dt__experiment *e, int budget) {
    double b[7];
    for (int i = 0; i < 7; i++)
        b[i] = best_of(e, 1000 + (uint64_t)i * 7919, budget);
    qsort(b, 7, sizeof b[0], cmp_d);
    return b[3];
}

static void test_models_beat_random(void) {
    const int budget = 40;
    dt__experiment *r =
        make("r.yaml", "    algorithmName: random\n", "  maxTrialCount: 40\n", XY_PARAMS, "");
    dt__experiment *t =
        make("tpe.yaml", "    algorithmName: tpe\n", "  maxTrialCount: 40\n", XY_PARAMS, "");
    dt__experiment *b = make("bo.yaml", "    algorithmName: bayesianoptimization\n",
                             "  maxTrialCount: 40\n", XY_PARAMS, "");
    DT_CHECK(r && t && b);
    double mr = median_best(r, budget), mt = median_best(t, budget), mb = median_best(b, budget);
    fprintf(stderr, "median best of %d trials: random %.6f, tpe %.6f, bo %.6f\n", budget, mr, mt,
            mb);
    DT_CHECK(mt > mr);
    DT_CHECK(mb > mr);
    DT_CHECK(mb > -1e-3); /* a GP on a quadratic finds the top closely */
    dt__experiment_free(r);
    dt__experiment_free(t);
    dt__experiment_free(b);
}

/* TPE and BO on a log-scale parameter: the suggestions stay in bounds and in the right
 * decade once the model has results (optimum at 1e-3 over [1e-5, 1]). */
static void test_models_log(void) {
    static const char *const algos[] = {"    algorithmName: tpe\n",
                                        "    algorithmName: bayesianoptimization\n"};
    for (int a = 0; a < 2; a++) {
        dt__experiment *e =
            make("log.yaml", algos[a], "  maxTrialCount: 40\n",
                 "    - {name: lr, parameterType: double, feasibleSpace: {min: \"0.00001\", max: "
                 "\"1\", distribution: logUniform}}\n"
                 "    - {name: n, parameterType: int, feasibleSpace: {min: \"1\", max: \"4\"}}\n",
                 "");
        DT_CHECK(e);
        dt__search *s = NULL;
        DT_CHECK_OK(dt__search_new(&s, e, 5));
        int near = 0;
        for (int i = 0; i < 40; i++) {
            char **v = NULL;
            int res, done, trial;
            DT_CHECK_OK(dt__search_next(s, &v, &res, &done, &trial));
            double lr = strtod(v[0], NULL);
            int n = atoi(v[1]);
            DT_CHECK(lr >= 0.00001 && lr <= 1 && n >= 1 && n <= 4);
            double d = log10(lr) + 3;
            if (i >= 20 && fabs(d) < 1) near++;
            dt__search_observe(s, trial, 0, -d * d - (n - 2) * (n - 2), 1);
            dt__search_end(s, trial, DT__TRIAL_SUCCEEDED);
            dt__values_free(v, e->nparams);
        }
        /* random would put 2/5 of its points within a decade of 1e-3 */
        DT_CHECK(near >= 14);
        dt__search_free(s);
        dt__experiment_free(e);
    }
}

/* Bayesian optimization past the most points its GP takes (200 results): it models the best
 * ones and goes on suggesting points better than the median result. */
static void test_bo_many(void) {
    dt__experiment *e =
        make("bomany.yaml",
             "    algorithmName: bayesianoptimization\n    algorithmSettings:\n      - {name: "
             "n_initial_points, value: \"205\"}\n      - {name: n_candidates, value: \"50\"}\n",
             "  maxTrialCount: 215\n", XY_PARAMS, "");
    DT_CHECK(e);
    dt__search *s = NULL;
    DT_CHECK_OK(dt__search_new(&s, e, 8));
    int good = 0;
    for (int k = 0; k < 215; k++) {
        char **v = NULL;
        int res, done, trial;
        DT_CHECK_OK(dt__search_next(s, &v, &res, &done, &trial));
        double f = quad(v);
        if (k >= 205 && f > -0.02) good++;
        dt__search_observe(s, trial, 0, f, 1);
        dt__search_end(s, trial, DT__TRIAL_SUCCEEDED);
        dt__values_free(v, e->nparams);
    }
    DT_CHECK(good >= 8); /* random: about 6% of points are above -0.02 */
    dt__search_free(s);
    dt__experiment_free(e);
}

static dt_err next(dt__search *s, char ***v, int *res, int *done, int *trial) {
    return dt__search_next(s, v, res, done, trial);
}

/* Katib's schedule for eta 3, r_l 9: brackets of 9@1 3@3 1@9, 5@3 2@9, 3@9. */
static void test_hyperband(void) {
    dt__experiment *e = make(
        "hb.yaml",
        "    algorithmName: hyperband\n    algorithmSettings:\n      - {name: resource_name, "
        "value: epochs}\n      - {name: eta, value: \"3\"}\n      - {name: r_l, value: \"9\"}\n",
        "  parallelTrialCount: 9\n",
        "    - {name: lr, parameterType: double, feasibleSpace: {min: \"0\", max: \"1\"}}\n"
        "    - {name: epochs, parameterType: int, feasibleSpace: {min: \"1\", max: \"1\"}}\n",
        "");
    DT_CHECK(e);
    dt__search *s = NULL;
    DT_CHECK_OK(dt__search_new(&s, e, 3));
    static const int counts[] = {9, 3, 1, 5, 2, 3}, resources[] = {1, 3, 9, 3, 9, 9};
    static const int head[] = {1, 0, 0, 1, 0, 1};
    int trial_no = 0;
    for (int g = 0; g < 6; g++) {
        double lrs[9];
        for (int j = 0; j < counts[g]; j++) {
            char **v = NULL;
            int res, done, trial;
            DT_CHECK_OK(next(s, &v, &res, &done, &trial));
            DT_CHECK(trial == trial_no++ && res == resources[g]);
            DT_CHECK(atoi(v[1]) == resources[g]);
            lrs[j] = strtod(v[0], NULL);
            dt__values_free(v, e->nparams);
        }
        if (!head[g]) { /* the top of the rung before, best first: lr is the score here */
            for (int j = 1; j < counts[g]; j++)
                DT_CHECK(lrs[j] <= lrs[j - 1]);
        }
        /* the next rung waits for this one */
        char **v = NULL;
        int res, done = 1, trial;
        if (g + 1 < 6 && !head[g + 1]) {
            DT_CHECK(next(s, &v, &res, &done, &trial) == DT_ERR_NOTFOUND && !done);
        }
        int first = trial_no - counts[g];
        for (int j = 0; j < counts[g]; j++) {
            dt__search_observe(s, first + j, resources[g], lrs[j], 1);
            dt__search_end(s, first + j, DT__TRIAL_SUCCEEDED);
        }
    }
    /* the rung after 9@1 holds the 3 best of the 9 */
    double r0[9], r1[3];
    for (int j = 0; j < 9; j++)
        r0[j] = s->t[j].final;
    for (int j = 0; j < 3; j++)
        r1[j] = strtod(s->t[9 + j].text[0], NULL);
    qsort(r0, 9, sizeof r0[0], cmp_d);
    DT_CHECK(r1[0] == r0[8] && r1[1] == r0[7] && r1[2] == r0[6]);
    char **v = NULL;
    int res, done = 0, trial;
    DT_CHECK(next(s, &v, &res, &done, &trial) == DT_ERR_NOTFOUND && done);
    DT_CHECK(trial_no == 23);
    dt__search_free(s);
    dt__experiment_free(e);
}

#define ASHA_ALGO                                                                                  \
    "    algorithmName: asha\n    algorithmSettings:\n      - {name: min_resource, value: "        \
    "\"1\"}\n      - {name: max_resource, value: \"9\"}\n      - {name: reduction_factor, "        \
    "value: \"3\"}\n"

/* A trial reaches resource r with value v and asks to go on. */
static int reach(dt__search *s, int trial, int r, double v) {
    dt__search_observe(s, trial, r, v, 0);
    return dt__search_promote(s, trial, r);
}

static int new_trial(dt__search *s, int want, int want_res) {
    char **v = NULL;
    int res = -1, done = -1, trial = -1;
    dt_err err = next(s, &v, &res, &done, &trial);
    dt__values_free(v, s->e->nparams);
    if (err || trial != want || res != want_res) {
        fprintf(stderr, "next: %s, trial %d (want %d), resource %d (want %d)\n", dt_strerror(err),
                trial, want, res, want_res);
        return 0;
    }
    return 1;
}

static void test_asha(void) {
    dt__experiment *e = make("asha.yaml", ASHA_ALGO, "  maxTrialCount: 9\n", XY_PARAMS, "");
    DT_CHECK(e);
    dt__search *s = NULL;
    DT_CHECK_OK(dt__search_new(&s, e, 9));
    DT_CHECK(s->nrungs == 3 && s->rungs[0] == 1 && s->rungs[1] == 3 && s->rungs[2] == 9);
    /* rung 1: promoted only in the top floor(n / 3) of the results so far */
    DT_CHECK(new_trial(s, 0, 1) && reach(s, 0, 1, 0.5) == 0); /* n 1: paused */
    DT_CHECK(new_trial(s, 1, 1) && reach(s, 1, 1, 0.6) == 0); /* n 2 */
    DT_CHECK(new_trial(s, 2, 1) && reach(s, 2, 1, 0.9) == 3); /* n 3: the best goes on */
    DT_CHECK(new_trial(s, 3, 1) && reach(s, 3, 1, 0.7) == 0); /* n 4: top 1 is trial 2 */
    DT_CHECK(new_trial(s, 4, 1) && reach(s, 4, 1, 0.3) == 0);
    DT_CHECK(new_trial(s, 5, 1) && reach(s, 5, 1, 0.8) == 3); /* n 6: top 2 = 2, 5 */
    DT_CHECK(dt__search_trial_state(s, 0) == DT__TRIAL_PAUSED);
    /* rung 3 */
    DT_CHECK(reach(s, 2, 3, 0.95) == 0);
    DT_CHECK(reach(s, 5, 3, 0.97) == 0);
    DT_CHECK(new_trial(s, 6, 1) && reach(s, 6, 1, 0.99) == 3); /* n 7: top 2 = 6, 2 */
    DT_CHECK(new_trial(s, 7, 1) && reach(s, 7, 1, 0.85) == 0); /* n 8: top 2 = 6, 2 */
    DT_CHECK(new_trial(s, 8, 1) && reach(s, 8, 1, 0.1) == 0);  /* n 9: top 3 = 6, 2, 7 */
    /* no new trials (maxTrialCount 9): trial 7, paused, is now in its rung's top: resumed */
    DT_CHECK(new_trial(s, 7, 3));
    DT_CHECK(dt__search_trial_state(s, 7) == DT__TRIAL_RUNNING);
    DT_CHECK(reach(s, 6, 3, 0.999) == 9); /* rung 3: n 3 (2, 5, 6), top 1 = 6 */
    char **v = NULL;
    int res, done = 1, trial;
    DT_CHECK(next(s, &v, &res, &done, &trial) == DT_ERR_NOTFOUND && !done); /* 6, 7 run */
    DT_CHECK(reach(s, 7, 3, 0.5) == 0);                                     /* n 4: top 1 = 6 */
    DT_CHECK(reach(s, 6, 9, 0.9999) == 9); /* the last rung: it finishes */
    dt__search_observe(s, 6, 9, 0.9999, 1);
    dt__search_end(s, 6, DT__TRIAL_SUCCEEDED);
    DT_CHECK(next(s, &v, &res, &done, &trial) == DT_ERR_NOTFOUND && done);
    int best = -1;
    double bv = 0;
    DT_CHECK(dt__search_best(s, &best, &bv) && best == 6 && bv == 0.9999);
    dt__search_free(s);
    dt__experiment_free(e);
}

/* With resource_name, a trial runs with its resource parameter at max_resource. */
static void test_asha_resource_param(void) {
    dt__experiment *e = make(
        "asha2.yaml",
        "    algorithmName: asha\n    algorithmSettings:\n      - {name: resource_name, value: "
        "epochs}\n      - {name: reduction_factor, value: \"2\"}\n",
        "  maxTrialCount: 4\n",
        "    - {name: lr, parameterType: double, feasibleSpace: {min: \"0\", max: \"1\"}}\n"
        "    - {name: epochs, parameterType: int, feasibleSpace: {min: \"2\", max: \"8\"}}\n",
        "");
    DT_CHECK(e);
    dt__search *s = NULL;
    DT_CHECK_OK(dt__search_new(&s, e, 9));
    DT_CHECK(s->nrungs == 3 && s->rungs[0] == 2 && s->rungs[1] == 4 && s->rungs[2] == 8);
    char **v = NULL;
    int res, done, trial;
    DT_CHECK_OK(next(s, &v, &res, &done, &trial));
    DT_CHECK(res == 2 && !strcmp(v[1], "8"));
    dt__values_free(v, e->nparams);
    dt__search_free(s);
    dt__experiment_free(e);
}

static void test_medianstop(void) {
    dt__experiment *e = make(
        "median.yaml", "    algorithmName: random\n",
        "  maxTrialCount: 10\n  earlyStopping:\n    algorithmName: medianstop\n    "
        "algorithmSettings:\n      - {name: min_trials_required, value: \"2\"}\n      - {name: "
        "start_step, value: \"2\"}\n",
        XY_PARAMS, "");
    DT_CHECK(e);
    dt__search *s = NULL;
    DT_CHECK_OK(dt__search_new(&s, e, 1));
    for (int i = 0; i < 3; i++) {
        char **v = NULL;
        int res, done, trial;
        DT_CHECK_OK(next(s, &v, &res, &done, &trial));
        dt__values_free(v, e->nparams);
    }
    static const double t0[] = {0.5, 0.6, 0.7}, t1[] = {0.3, 0.4, 0.5};
    for (int k = 0; k < 3; k++) {
        dt__search_observe(s, 0, k + 1, t0[k], k == 2);
        dt__search_observe(s, 1, k + 1, t1[k], k == 2);
    }
    dt__search_end(s, 0, DT__TRIAL_SUCCEEDED);
    /* one trial completed, two required */
    DT_CHECK(dt__search_early_stop(s, 2, 2, 0.0) == 0);
    dt__search_end(s, 1, DT__TRIAL_SUCCEEDED);
    /* before start_step: never */
    DT_CHECK(dt__search_early_stop(s, 2, 1, 0.0) == 0);
    /* step 2: running averages 0.55 and 0.35, median 0.45 */
    dt__search_observe(s, 2, 1, 0.2, 0);
    DT_CHECK(dt__search_early_stop(s, 2, 2, 0.4) == 1);
    DT_CHECK(dt__search_early_stop(s, 2, 2, 0.46) == 0);
    /* its best so far counts: 0.5 at step 1 is above the median */
    dt__search_observe(s, 2, 1, 0.5, 0);
    DT_CHECK(dt__search_early_stop(s, 2, 2, 0.1) == 0);
    /* step 3: averages 0.6, 0.4, median 0.5 */
    DT_CHECK(dt__search_early_stop(s, 2, 3, 0.45) == 0); /* best 0.5 is not below 0.5 */
    dt__search_free(s);
    dt__experiment_free(e);
    /* minimizing: the same history read the other way */
    e = make("median2.yaml", "    algorithmName: random\n",
             "  maxTrialCount: 10\n  earlyStopping:\n    algorithmName: medianstop\n    "
             "algorithmSettings:\n      - {name: min_trials_required, value: \"2\"}\n      - "
             "{name: start_step, value: \"2\"}\n",
             XY_PARAMS, "");
    DT_CHECK(e);
    e->obj = DT__OBJ_MINIMIZE;
    DT_CHECK_OK(dt__search_new(&s, e, 1));
    for (int i = 0; i < 3; i++) {
        char **v = NULL;
        int res, done, trial;
        DT_CHECK_OK(next(s, &v, &res, &done, &trial));
        dt__values_free(v, e->nparams);
    }
    for (int k = 0; k < 3; k++) {
        dt__search_observe(s, 0, k + 1, t0[k], k == 2);
        dt__search_observe(s, 1, k + 1, t1[k], k == 2);
    }
    dt__search_end(s, 0, DT__TRIAL_SUCCEEDED);
    dt__search_end(s, 1, DT__TRIAL_SUCCEEDED);
    DT_CHECK(dt__search_early_stop(s, 2, 2, 0.5) == 1);
    DT_CHECK(dt__search_early_stop(s, 2, 2, 0.4) == 0);
    dt__search_free(s);
    dt__experiment_free(e);
}

/* ---- restart ---- */

/* One step of a driver with two trials in flight: start a trial, then finish the oldest
 * running one (ASHA: run it rung by rung until it pauses or ends). Returns the trial
 * started (-1 none) and appends it to log. */
static void drive(dt__search *s, int steps, char *log, size_t cap) {
    for (int st = 0; st < steps; st++) {
        char **v = NULL;
        int res, done, trial;
        dt_err err = dt__search_next(s, &v, &res, &done, &trial);
        if (!err) {
            size_t o = strlen(log);
            snprintf(log + o, cap - o, "%d:%s,%s@%d;", trial, v[0], v[1], res);
            dt__values_free(v, s->e->nparams);
        }
        /* finish the oldest running trial */
        for (int i = 0; i < s->ntrials; i++) {
            dt__trial *t = &s->t[i];
            if (t->state != DT__TRIAL_RUNNING) continue;
            if (i == s->ntrials - 1 && s->ntrials > 1 && !err) continue; /* keep one in flight */
            double f = quad(t->text);
            if (s->algo == ALGO_ASHA) {
                int r = t->resource;
                for (int guard = 0; guard < 8 && r > 0; guard++) {
                    double fr = f - 0.1 / r;
                    dt__search_observe(s, i, r, fr, 0);
                    int nr = dt__search_promote(s, i, r);
                    if (nr == r) {
                        dt__search_observe(s, i, r, fr, 1);
                        dt__search_end(s, i, DT__TRIAL_SUCCEEDED);
                        break;
                    }
                    r = nr;
                }
            } else {
                dt__search_observe(s, i, t->resource, f, 1);
                dt__search_end(s, i, DT__TRIAL_SUCCEEDED);
            }
            break;
        }
    }
}

/* A copy of s made the way a restarted runner makes it: a new search, every trial restored
 * from its record, every observation replayed. */
static dt__search *rebuild(const dt__search *s, uint64_t seed) {
    dt__search *b = NULL;
    if (dt__search_new(&b, s->e, seed)) return NULL;
    for (int i = 0; i < s->ntrials; i++)
        if (dt__search_restore(b, i, s->t[i].text, s->t[i].resource, s->t[i].state)) {
            fprintf(stderr, "restore: %s\n", dt_errmsg());
            dt__search_free(b);
            return NULL;
        }
    for (int i = 0; i < s->ntrials; i++)
        for (int j = 0; j < s->t[i].nobs; j++)
            dt__search_observe(b, i, s->t[i].obs[j].resource, s->t[i].obs[j].value,
                               s->t[i].has_final && j == s->t[i].nobs - 1);
    return b;
}

static void test_restart(void) {
    static const char *const algos[] = {
        "    algorithmName: random\n",
        "    algorithmName: tpe\n    algorithmSettings:\n      - {name: n_startup_trials, value: "
        "\"4\"}\n",
        "    algorithmName: bayesianoptimization\n    algorithmSettings:\n      - {name: "
        "n_initial_points, value: \"4\"}\n      - {name: n_candidates, value: \"200\"}\n",
        ASHA_ALGO,
    };
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        dt__experiment *e = make("restart.yaml", algos[a], "  maxTrialCount: 20\n", XY_PARAMS, "");
        DT_CHECK(e);
        dt__search *s = NULL;
        static char la[16384], lb[16384];
        DT_CHECK_OK(dt__search_new(&s, e, 77));
        la[0] = lb[0] = '\0';
        drive(s, 9, la, sizeof la);
        dt__search *b = rebuild(s, 77);
        DT_CHECK(b);
        la[0] = '\0';
        drive(s, 12, la, sizeof la);
        drive(b, 12, lb, sizeof lb);
        if (strcmp(la, lb)) fprintf(stderr, "%s: original %s\nrebuilt  %s\n", e->algorithm, la, lb);
        DT_CHECK(!strcmp(la, lb) && strlen(la) > 20);
        dt__search_free(b);
        dt__search_free(s);
        dt__experiment_free(e);
    }
    /* hyperband and grid: rebuilt mid-rung */
    dt__experiment *e = make(
        "hbr.yaml",
        "    algorithmName: hyperband\n    algorithmSettings:\n      - {name: resource_name, "
        "value: epochs}\n      - {name: eta, value: \"2\"}\n      - {name: r_l, value: \"4\"}\n",
        "  parallelTrialCount: 4\n",
        XY_PARAMS "    - {name: epochs, parameterType: int, feasibleSpace: {min: \"1\", max: "
                  "\"1\"}}\n",
        "");
    DT_CHECK(e);
    dt__search *s = NULL;
    static char la[16384], lb[16384];
    DT_CHECK_OK(dt__search_new(&s, e, 5));
    la[0] = lb[0] = '\0';
    drive(s, 5, la, sizeof la);
    dt__search *b = rebuild(s, 5);
    DT_CHECK(b);
    la[0] = '\0';
    drive(s, 14, la, sizeof la);
    drive(b, 14, lb, sizeof lb);
    DT_CHECK(!strcmp(la, lb) && strlen(la) > 20);
    /* a value outside its space is refused */
    char *bad[] = {"1.5", "0.5", "1"};
    dt__search *c = NULL;
    DT_CHECK_OK(dt__search_new(&c, e, 5));
    DT_CHECK_ERR(dt__search_restore(c, 0, bad, 1, DT__TRIAL_SUCCEEDED), DT_ERR_ARG,
                 "x: '1.5' is not in its space");
    DT_CHECK_ERR(dt__search_restore(c, 1, bad + 1, 1, DT__TRIAL_SUCCEEDED), DT_ERR_ARG,
                 "expected trial 0 next");
    dt__search_free(c);
    dt__search_free(b);
    dt__search_free(s);
    dt__experiment_free(e);
}

/* The Katib fixtures each make a search that suggests values their template takes. */
static void test_fixtures(void) {
    static const char *const files[] = {"random-tfjob.yaml",   "grid-pytorchjob.yaml",
                                        "bayesian-tfjob.yaml", "hyperband-pytorchjob.yaml",
                                        "asha-trainjob.yaml",  "sweep.yaml"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[512];
        snprintf(path, sizeof path, DT_SOURCE_DIR "/tests/tune/%s", files[f]);
        dt__experiment *e = NULL;
        DT_CHECK_OK(dt__experiment_load(&e, path));
        dt__search *s = NULL;
        DT_CHECK_OK(dt__search_new(&s, e, 1));
        int n = 0;
        for (;;) {
            char **v = NULL, *yaml = NULL, name[80];
            int res, done, trial;
            if (dt__search_next(s, &v, &res, &done, &trial)) break;
            snprintf(name, sizeof name, "%s-%03d", e->name, trial);
            DT_CHECK_OK(dt__experiment_render(e, name, v, &yaml));
            free(yaml);
            dt__values_free(v, e->nparams);
            dt__search_observe(s, trial, res, (double)(trial % 5), 1);
            dt__search_end(s, trial, DT__TRIAL_SUCCEEDED);
            n++;
        }
        int want = e->max_trials ? e->max_trials : 12; /* sweep: 3 x 4 */
        DT_CHECK(n == want);
        dt__search_free(s);
        dt__experiment_free(e);
    }
}

DT_TEST_MAIN(DT_T(test_grid_product), DT_T(test_grid_points), DT_T(test_random_bounds),
             DT_T(test_finite_space), DT_T(test_models_beat_random), DT_T(test_models_log),
             DT_T(test_bo_many), DT_T(test_hyperband), DT_T(test_asha),
             DT_T(test_asha_resource_param), DT_T(test_medianstop), DT_T(test_restart),
             DT_T(test_fixtures))

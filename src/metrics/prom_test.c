/* prom_test.c - the exposition format: headers, escaping, values, histograms. */
#include <math.h>

#include "dtrain/metrics.h"
#include "testing/dt_test.h"

static void test_text(void) {
    dt_prom b;
    dt_prom_init(&b);
    dt_prom_family(&b, "dtrain_x_total", "counter", "A \\ help\nline.");
    const char *l[] = {"job", "a\"b\\c\nd", "k", "v", NULL};
    dt_prom_sample(&b, "dtrain_x_total", l, 3);
    dt_prom_sample(&b, "dtrain_y", NULL, 0.1);
    dt_prom_sample(&b, "dtrain_z", NULL, NAN);
    dt_prom_sample(&b, "dtrain_z", NULL, -INFINITY);
    dt_prom_sample(&b, "dtrain_z", NULL, 1e300);
    size_t n = 0;
    char *t = dt_prom_take(&b, &n);
    DT_CHECK(t && n == strlen(t));
    const char *want = "# HELP dtrain_x_total A \\\\ help\\nline.\n"
                       "# TYPE dtrain_x_total counter\n"
                       "dtrain_x_total{job=\"a\\\"b\\\\c\\nd\",k=\"v\"} 3\n"
                       "dtrain_y 0.1\n"
                       "dtrain_z NaN\n"
                       "dtrain_z -Inf\n"
                       "dtrain_z 1e+300\n";
    if (strcmp(t, want)) DT_FAIL("got:\n%s", t);
    free(t);
    dt_prom_free(&b);
}

static void test_hist(void) {
    dt_prom_hist h;
    const double le[] = {0.1, 1};
    dt_prom_hist_init(&h, le, 2);
    dt_prom_hist_observe(&h, 0.05);
    dt_prom_hist_observe(&h, 0.1); /* le is inclusive */
    dt_prom_hist_observe(&h, 0.5);
    dt_prom_hist_observe(&h, 7);
    dt_prom b;
    dt_prom_init(&b);
    const char *l[] = {"route", "/x", NULL};
    dt_prom_hist_write(&b, "dtrain_d_seconds", l, &h);
    size_t n;
    char *t = dt_prom_take(&b, &n);
    const char *want = "dtrain_d_seconds_bucket{route=\"/x\",le=\"0.1\"} 2\n"
                       "dtrain_d_seconds_bucket{route=\"/x\",le=\"1\"} 3\n"
                       "dtrain_d_seconds_bucket{route=\"/x\",le=\"+Inf\"} 4\n"
                       "dtrain_d_seconds_sum{route=\"/x\"} 7.65\n"
                       "dtrain_d_seconds_count{route=\"/x\"} 4\n";
    if (strcmp(t, want)) DT_FAIL("got:\n%s", t);
    free(t);
    dt_prom_hist_free(&h);
}

DT_TEST_MAIN(DT_T(test_text), DT_T(test_hist))

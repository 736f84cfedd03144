/* core_test.c - arena, shapes, thread pool, rng, errors, paths. */
#include <stdatomic.h>

#include "core/path-impl.h"

#include "dtrain/rng.h"
#include "dtrain/tensor.h"
#include "dtrain/threadpool.h"
#include "testing/dt_test.h"

static void test_arena_alloc_align_reset(void) {
    dt_arena *a = NULL;
    DT_CHECK_OK(dt_arena_init(&a, 1000));
    dt_tensor t;
    DT_CHECK_OK(dt_arena_tensor(a, &t, 2, (int64_t[]){3, 5}));
    DT_CHECK(((uintptr_t)t.data % DT_ALIGN) == 0);
    DT_CHECK(dt_tensor_numel(&t) == 15);
    DT_CHECK(dt_shape_row(&t.shape) == 5);
    size_t mark = dt_arena_mark(a);
    DT_CHECK(dt_arena_alloc(a, 10) != NULL);
    dt_arena_rewind(a, mark);
    DT_CHECK(dt_arena_used(a) == mark);
    DT_CHECK_ERR(dt_arena_tensor(a, &t, 1, (int64_t[]){100000}), DT_ERR_NOMEM, "arena");
    dt_arena_reset(a);
    DT_CHECK(dt_arena_used(a) == 0);
    dt_arena_free(a);
    dt_arena_free(NULL);
}

static void test_shape_str(void) {
    char buf[64];
    dt_shape s = dt_shape_make(4, (int64_t[]){64, 28, 28, 1});
    DT_CHECK(!strcmp(dt_shape_str(&s, buf, sizeof buf), "[64, 28, 28, 1]"));
}

struct sum_job {
    const int *v;
    int64_t n;
    long long partial[16];
    atomic_int calls;
};

static void sum_kernel(void *arg, int ith, int nth) {
    struct sum_job *j = arg;
    int64_t lo, hi;
    dt_split(j->n, ith, nth, &lo, &hi);
    long long s = 0;
    for (int64_t i = lo; i < hi; i++)
        s += j->v[i];
    j->partial[ith] = s;
    atomic_fetch_add(&j->calls, 1);
}

static void test_pool_runs_every_share_once(void) {
    enum { N = 100003 };
    static int v[N];
    long long want = 0;
    for (int i = 0; i < N; i++)
        want += v[i] = i % 7;
    for (int nth = 1; nth <= 4; nth++) {
        dt_pool *p = NULL;
        DT_CHECK_OK(dt_pool_init(&p, nth));
        for (int round = 0; round < 200; round++) {
            struct sum_job j = {.v = v, .n = N};
            dt_pool_run(p, sum_kernel, &j);
            long long got = 0;
            for (int t = 0; t < nth; t++)
                got += j.partial[t];
            DT_CHECK(got == want);
            DT_CHECK(atomic_load(&j.calls) == nth);
        }
        /* let the workers fall asleep, then wake them again */
        usleep(20000);
        struct sum_job j = {.v = v, .n = N};
        dt_pool_run(p, sum_kernel, &j);
        DT_CHECK(atomic_load(&j.calls) == nth);
        dt_pool_free(p);
    }
    DT_CHECK_ERR(dt_pool_init(&(dt_pool *){NULL}, 0), DT_ERR_ARG, "0 threads");
}

static void test_split_covers_range(void) {
    for (int nth = 1; nth < 7; nth++) {
        int64_t expect = 0;
        for (int i = 0; i < nth; i++) {
            int64_t lo, hi;
            dt_split(10, i, nth, &lo, &hi);
            DT_CHECK(lo == expect);
            expect = hi;
        }
        DT_CHECK(expect == 10);
    }
}

static void test_rng_reproducible_and_uniform(void) {
    dt_rng a, b;
    dt_rng_seed(&a, 42);
    dt_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        DT_CHECK(dt_rng_u64(&a) == dt_rng_u64(&b));
    dt_rng_seed2(&a, 42, 1);
    dt_rng_seed2(&b, 42, 2);
    DT_CHECK(dt_rng_u64(&a) != dt_rng_u64(&b));
    double sum = 0, sq = 0;
    for (int i = 0; i < 100000; i++) {
        float u = dt_rng_uniform(&a);
        DT_CHECK(u >= 0.0f && u < 1.0f);
        float z = dt_rng_normal(&a);
        sum += z;
        sq += (double)z * z;
    }
    DT_CHECK_NEAR(sum / 100000, 0.0, 0.02);
    DT_CHECK_NEAR(sq / 100000, 1.0, 0.02);
    int64_t idx[50];
    for (int i = 0; i < 50; i++)
        idx[i] = i;
    dt_rng_shuffle(&a, idx, 50);
    int seen[50] = {0};
    for (int i = 0; i < 50; i++)
        seen[idx[i]]++;
    for (int i = 0; i < 50; i++)
        DT_CHECK(seen[i] == 1);
}

static void test_err_messages(void) {
    DT_CHECK(dt_err_set(DT_ERR_FORMAT, "file %s", "x") == DT_ERR_FORMAT);
    DT_CHECK(!strcmp(dt_errmsg(), "file x"));
    dt_err_wrap(DT_ERR_FORMAT, "loading");
    DT_CHECK(!strcmp(dt_errmsg(), "loading: file x"));
    DT_CHECK(!strcmp(dt_strerror(DT_OK), "success"));
    DT_CHECK(!strcmp(dt_strerror((dt_err)999), "unknown error"));
}

static void test_path_refuses_what_does_not_fit(void) {
    char buf[16];
    DT_CHECK_OK(dt__path(buf, sizeof buf, "%s/%s", "job", "spec.yaml"));
    DT_CHECK(!strcmp(buf, "job/spec.yaml"));
    DT_CHECK_OK(dt__path(buf, sizeof buf, "%s", "exactly-fifteen"));
    DT_CHECK_ERR(dt__path(buf, sizeof buf, "%s/%s", "longer-dir", "spec.yaml"), DT_ERR_ARG,
                 "path too long (20 bytes, at most 15): longer-dir/spec...");
    DT_CHECK(buf[0] == '\0'); /* never a cut path */
    DT_CHECK_OK(dt__path_room("/job", DT__PATH_MAX - 6, "job dir"));
    DT_CHECK_ERR(dt__path_room("/job/x", DT__PATH_MAX - 6, "job dir"), DT_ERR_ARG,
                 "job dir: path too long (6 bytes as an absolute path, at most 5 to leave room "
                 "for the files made in it): /job/x");
    DT_CHECK_ERR(dt__path_room("job/x", DT__PATH_MAX - 6, "job dir"), DT_ERR_ARG,
                 "path too long"); /* the working directory counts */
    DT_CHECK(!strcmp(dt_strerror(DT_ERR_TIMEOUT), "timed out"));
    DT_CHECK(!strcmp(dt_strerror(DT_ERR_NETWORK), "network error"));
}

DT_TEST_MAIN(DT_T(test_arena_alloc_align_reset), DT_T(test_shape_str),
             DT_T(test_pool_runs_every_share_once), DT_T(test_split_covers_range),
             DT_T(test_rng_reproducible_and_uniform), DT_T(test_err_messages),
             DT_T(test_path_refuses_what_does_not_fit))

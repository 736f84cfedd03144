/*
 * dt_test.h - the tiny test harness every *_test.c uses.
 *
 *     static void test_something(void) { DT_CHECK(1 + 1 == 2); }
 *     DT_TEST_MAIN(DT_T(test_something), DT_T(test_other))
 *
 * A test binary runs all its tests, or only those named on its command line, prints one
 * line per test and exits non-zero when any check failed. A failed check ends its test.
 * DT_SOURCE_DIR (set by CMake) points at the project root, for test data.
 */
#ifndef DTRAIN_TEST_H
#define DTRAIN_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/err.h"

struct dt__test {
    const char *name;
    void (*fn)(void);
};

static int dt__test_failed;

#define DT_FAIL(...)                                                                           \
    do {                                                                                       \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                        \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fprintf(stderr, "\n");                                                                 \
        dt__test_failed = 1;                                                                   \
        return;                                                                                \
    } while (0)

#define DT_CHECK(c)                                                                            \
    do {                                                                                       \
        if (!(c)) DT_FAIL("check failed: %s", #c);                                             \
    } while (0)

/* The call must succeed; on failure prints the error code and message. */
#define DT_CHECK_OK(call)                                                                      \
    do {                                                                                       \
        dt_err dt__e = (call);                                                                 \
        if (dt__e != DT_OK)                                                                    \
            DT_FAIL("%s -> %s: %s", #call, dt_strerror(dt__e), dt_errmsg());                   \
    } while (0)

/* The call must fail with code `want` and a message containing `substr`. */
#define DT_CHECK_ERR(call, want, substr)                                                       \
    do {                                                                                       \
        dt_err_clear();                                                                        \
        dt_err dt__e = (call);                                                                 \
        if (dt__e != (want))                                                                   \
            DT_FAIL("%s -> %s (want %s): %s", #call, dt_strerror(dt__e), dt_strerror(want),    \
                    dt_errmsg());                                                              \
        if (!strstr(dt_errmsg(), (substr)))                                                    \
            DT_FAIL("%s: message \"%s\" lacks \"%s\"", #call, dt_errmsg(), (substr));          \
    } while (0)

#define DT_CHECK_NEAR(a, b, tol)                                                               \
    do {                                                                                       \
        double dt__a = (a), dt__b = (b);                                                       \
        if (!(fabs(dt__a - dt__b) <= (tol)))                                                   \
            DT_FAIL("%s = %.9g, %s = %.9g, differ by more than %g", #a, dt__a, #b, dt__b,      \
                    (double)(tol));                                                            \
    } while (0)

#define DT_T(fn) {#fn, fn}

/* A fresh temporary directory for this test binary (removed by nobody: it lives in /tmp). */
static inline const char *dt_test_tmpdir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/dtrain-test-XXXXXX");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return dir;
}

/* Write `len` bytes to dir/name and return the full path in a static buffer ring. */
static inline const char *dt_test_write_file(const char *name, const void *data, size_t len) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", dt_test_tmpdir(), name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, len, f) != len) {
        perror(p);
        exit(2);
    }
    fclose(f);
    return p;
}

#define DT_TEST_MAIN(...)                                                                      \
    int main(int argc, char **argv) {                                                          \
        static const struct dt__test tests[] = {__VA_ARGS__};                                  \
        int failures = 0, ran = 0;                                                             \
        for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {                          \
            int wanted = argc < 2;                                                             \
            for (int a = 1; a < argc; a++)                                                     \
                if (!strcmp(argv[a], tests[i].name)) wanted = 1;                               \
            if (!wanted) continue;                                                             \
            dt__test_failed = 0;                                                               \
            dt_err_clear();                                                                    \
            tests[i].fn();                                                                     \
            ran++;                                                                             \
            printf("%s %s\n", dt__test_failed ? "FAIL" : "ok  ", tests[i].name);               \
            fflush(stdout);                                                                    \
            failures += dt__test_failed;                                                       \
        }                                                                                      \
        printf("%d passed, %d failed\n", ran - failures, failures);                            \
        return failures ? 1 : (ran ? 0 : 1);                                                   \
    }

#endif

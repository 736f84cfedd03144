/*
 * gemm_ceiling.c - the GEMM-only ceiling of one training step.
 *
 * Times, on dtrain's thread pool, exactly the sgemm calls that one training step of a model
 * makes (forward, weight gradients, input gradients except the first layer's), and prints
 * the samples/s a step would reach if it did nothing but those GEMMs. train_bench.sh divides
 * dtrain's measured rate by it: the fraction of the ceiling reached.
 *
 *   gemm_ceiling mlp|cnn [threads] [batch]
 *
 * The CNN's convolutions are counted as im2col GEMMs: (B*OH*OW) x (KH*KW*C) x F.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gemm-impl.h"
#include "dtrain/threadpool.h"

struct mm {
    int ta, tb;
    int64_t m, n, k;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One layer y[M,N] = x[M,K] w[K,N]: forward, dW = x^T dy, and dx = dy w^T unless first. */
static int layer(struct mm *out, int64_t m, int64_t k, int64_t n, int first) {
    int c = 0;
    out[c++] = (struct mm){0, 0, m, n, k};
    out[c++] = (struct mm){1, 0, k, n, m};
    if (!first) out[c++] = (struct mm){0, 1, m, k, n};
    return c;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "mlp";
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int64_t b = argc > 3 ? atoll(argv[3]) : 64;
    struct mm ops[32];
    int n = 0;
    if (!strcmp(model, "mlp")) {
        n += layer(ops + n, b, 784, 256, 1);
        n += layer(ops + n, b, 256, 128, 0);
        n += layer(ops + n, b, 128, 10, 0);
    } else if (!strcmp(model, "cnn")) {
        n += layer(ops + n, b * 28 * 28, 5 * 5 * 1, 32, 1);
        n += layer(ops + n, b * 14 * 14, 5 * 5 * 32, 64, 0);
        n += layer(ops + n, b, 7 * 7 * 64, 128, 0);
        n += layer(ops + n, b, 128, 10, 0);
    } else {
        fprintf(stderr, "usage: gemm_ceiling mlp|cnn [threads] [batch]\n");
        return 2;
    }
    dt_pool *pool = NULL;
    if (dt_pool_init(&pool, threads)) return 1;
    size_t maxa = 0, maxb = 0, maxc = 0;
    for (int i = 0; i < n; i++) {
        size_t a = (size_t)(ops[i].m * ops[i].k), bb = (size_t)(ops[i].k * ops[i].n),
               c = (size_t)(ops[i].m * ops[i].n);
        maxa = a > maxa ? a : maxa;
        maxb = bb > maxb ? bb : maxb;
        maxc = c > maxc ? c : maxc;
    }
    float *A = calloc(maxa, 4), *B = calloc(maxb, 4), *C = calloc(maxc, 4);
    for (size_t i = 0; i < maxa; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < maxb; i++) B[i] = (float)(i % 5) * 0.1f;
    double best = 1e30, flops = 0;
    for (int i = 0; i < n; i++) flops += 2.0 * (double)ops[i].m * (double)ops[i].n * (double)ops[i].k;
    for (int rep = 0; rep < 50; rep++) {
        double t0 = now();
        for (int i = 0; i < n; i++) {
            struct mm *o = &ops[i];
            int64_t lda = o->ta ? o->m : o->k, ldb = o->tb ? o->k : o->n;
            dt__gemm(pool, o->ta, o->tb, o->m, o->n, o->k, 1.0f, A, lda, B, ldb, 0.0f, C, o->n);
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    printf("{\"model\": \"%s\", \"threads\": %d, \"batch\": %lld, \"blas\": \"%s\", "
           "\"gemm_seconds_per_step\": %.6g, \"gflops\": %.1f, \"ceiling_samples_per_sec\": %.0f}\n",
           model, threads, (long long)b, dt__blas_name(), best, flops / best * 1e-9,
           (double)b / best);
    free(A);
    free(B);
    free(C);
    dt_pool_free(pool);
    return 0;
}

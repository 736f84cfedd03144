/*
 * sgemm_time.c - single-threaded cblas_sgemm over the GEMM shapes of one training step of
 * the Fashion-MNIST MLP and CNN (batch 64). Built twice by blas_compare.sh, once against
 * OpenBLAS and once against BLIS, to choose the BLAS by measurement.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct mm { int ta, tb, m, n, k; };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double run(const struct mm *ops, int n, float *A, float *B, float *C) {
    double best = 1e30;
    for (int rep = 0; rep < 30; rep++) {
        double t0 = now();
        for (int i = 0; i < n; i++) {
            const struct mm *o = &ops[i];
            cblas_sgemm(CblasRowMajor, o->ta ? CblasTrans : CblasNoTrans,
                        o->tb ? CblasTrans : CblasNoTrans, o->m, o->n, o->k, 1.0f, A,
                        o->ta ? o->m : o->k, B, o->tb ? o->k : o->n, 0.0f, C, o->n);
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    const char *lib = argc > 1 ? argv[1] : "?";
    /* forward, dW = x^T dy, dx = dy w^T (not for the first layer) */
    static const struct mm mlp[] = {
        {0, 0, 64, 256, 784}, {1, 0, 784, 256, 64},
        {0, 0, 64, 128, 256}, {1, 0, 256, 128, 64}, {0, 1, 64, 256, 128},
        {0, 0, 64, 10, 128},  {1, 0, 128, 10, 64},  {0, 1, 64, 128, 10}};
    static const struct mm cnn[] = {
        {0, 0, 50176, 32, 25},  {1, 0, 25, 32, 50176},
        {0, 0, 12544, 64, 800}, {1, 0, 800, 64, 12544}, {0, 1, 12544, 800, 64},
        {0, 0, 64, 128, 3136},  {1, 0, 3136, 128, 64},  {0, 1, 64, 3136, 128},
        {0, 0, 64, 10, 128},    {1, 0, 128, 10, 64},    {0, 1, 64, 128, 10}};
    size_t big = (size_t)12544 * 800;
    float *A = malloc(big * 4), *B = malloc(big * 4), *C = malloc(big * 4);
    for (size_t i = 0; i < big; i++) A[i] = B[i] = (float)(i % 13) * 0.01f;
    double f_mlp = 0, f_cnn = 0;
    for (size_t i = 0; i < sizeof mlp / sizeof *mlp; i++) f_mlp += 2.0 * mlp[i].m * mlp[i].n * mlp[i].k;
    for (size_t i = 0; i < sizeof cnn / sizeof *cnn; i++) f_cnn += 2.0 * cnn[i].m * cnn[i].n * cnn[i].k;
    double tm = run(mlp, sizeof mlp / sizeof *mlp, A, B, C);
    double tc = run(cnn, sizeof cnn / sizeof *cnn, A, B, C);
    printf("%-9s MLP step GEMMs %7.3f ms (%5.1f GFLOP/s)   CNN step GEMMs %7.2f ms (%5.1f GFLOP/s)\n",
           lib, tm * 1e3, f_mlp / tm * 1e-9, tc * 1e3, f_cnn / tc * 1e-9);
    free(A); free(B); free(C);
    return 0;
}

/*
 * gemm.c - GEMM through the BLAS, partitioned over dtrain's thread pool.
 *
 * Design: OpenBLAS runs single-threaded; each pool thread multiplies its own block of C.
 * Rows are split when every thread gets at least MIN_ROWS of them (A's rows stream once per
 * thread), otherwise columns (for the tall-K weight-gradient products such as dW = X^T dY,
 * whose M is the layer's input width and N its output width). Blocks are aligned to 16
 * columns so that vector kernels see whole registers.
 */
#include "core/gemm-impl.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>

#include "core/assert-impl.h"

#define MIN_ROWS 32
#define COL_ALIGN 16

/* OpenBLAS extensions (declared in its cblas.h; repeated here for other BLAS headers). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
char *openblas_get_config(void);

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static char blas_name[128];

static void blas_init_once(void) {
    openblas_set_num_threads(1);
    snprintf(blas_name, sizeof blas_name, "OpenBLAS (%s core)", openblas_get_corename());
}

void dt__blas_init(void) {
    pthread_once(&blas_once, blas_init_once);
}

const char *dt__blas_name(void) {
    dt__blas_init();
    return blas_name;
}

void dt__gemm_st(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                 int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                (int)ldb, beta, c, (int)ldc);
}

struct gemm_job {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc;
    int split_rows;
};

static void gemm_kernel(void *arg, int ith, int nth) {
    const struct gemm_job *j = arg;
    if (j->split_rows) {
        int64_t lo, hi;
        dt_split(j->m, ith, nth, &lo, &hi);
        /* row r of op(A): A + r*lda when not transposed, A + r when transposed */
        const float *a = j->trans_a ? j->a + lo : j->a + lo * j->lda;
        dt__gemm_st(j->trans_a, j->trans_b, hi - lo, j->n, j->k, j->alpha, a, j->lda, j->b, j->ldb,
                    j->beta, j->c + lo * j->ldc, j->ldc);
    } else {
        int64_t blocks = (j->n + COL_ALIGN - 1) / COL_ALIGN, lo, hi;
        dt_split(blocks, ith, nth, &lo, &hi);
        lo *= COL_ALIGN;
        hi = hi * COL_ALIGN < j->n ? hi * COL_ALIGN : j->n;
        if (lo >= hi) return;
        /* column c of op(B): B + c when not transposed, B + c*ldb when transposed */
        const float *b = j->trans_b ? j->b + lo * j->ldb : j->b + lo;
        dt__gemm_st(j->trans_a, j->trans_b, j->m, hi - lo, j->k, j->alpha, j->a, j->lda, b, j->ldb,
                    j->beta, j->c + lo, j->ldc);
    }
}

void dt__gemm(dt_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc) {
    dt__blas_init();
    int nth = dt_pool_size(pool);
    if (nth == 1 || m * n * k < 32 * 32 * 32) {
        dt__gemm_st(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    struct gemm_job j = {trans_a, trans_b, m, n,   k,   alpha, beta,
                         a,       b,       c, lda, ldb, ldc,   m >= (int64_t)nth * MIN_ROWS};
    dt_pool_run(pool, gemm_kernel, &j);
}

/*
 * gemm-impl.h - C = alpha * op(A) * op(B) + beta * C, row-major, split over a dt_pool.
 *
 * Every thread of the pool calls single-threaded BLAS sgemm on its own block of C (rows
 * when M is large enough, else columns), so dtrain's own threads are the only compute
 * threads: BLAS threading is switched off (dt__blas_init) and never competes with the pool.
 */
#ifndef DTRAIN_GEMM_IMPL_H
#define DTRAIN_GEMM_IMPL_H

#include <stdint.h>

#include "dtrain/threadpool.h"

/* Force the BLAS to one thread; call once before any dt__gemm (idempotent). */
void dt__blas_init(void);
/* "OpenBLAS 0.3.21 (Haswell)", for logs and benchmarks. */
const char *dt__blas_name(void);

/* trans_a / trans_b: 0 = as stored, 1 = transposed. A is M x K after op, B is K x N. */
void dt__gemm(dt_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc);

/* The same on the calling thread only (for kernels already split by (ith, nth)). */
void dt__gemm_st(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                 int64_t ldc);

#endif

/*
 * rng.h - the seeded random number generator (xoshiro256**, seeded by splitmix64).
 *
 * Its whole state is four 64-bit words, so checkpoints save and restore it exactly.
 * dt_rng_seed2 derives an independent stream from (seed, stream), which is how per-epoch
 * shuffles are made reproducible without carrying state: stream = epoch.
 */
#ifndef DTRAIN_RNG_H
#define DTRAIN_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_rng {
    uint64_t s[4];
} dt_rng;

void dt_rng_seed(dt_rng *r, uint64_t seed);
void dt_rng_seed2(dt_rng *r, uint64_t seed, uint64_t stream);
uint64_t dt_rng_u64(dt_rng *r);
/* Uniform in [0, 1). */
float dt_rng_uniform(dt_rng *r);
/* Standard normal (Box-Muller; uses two uniforms per call). */
float dt_rng_normal(dt_rng *r);
/* Uniform integer in [0, n), unbiased; n > 0. */
uint64_t dt_rng_below(dt_rng *r, uint64_t n);
/* Fisher-Yates shuffle of idx[0..n). */
void dt_rng_shuffle(dt_rng *r, int64_t *idx, int64_t n);

#ifdef __cplusplus
}
#endif
#endif

/*
 * init.c - parameter initializers, as Keras defines them (VarianceScaling):
 *
 *   glorot_uniform  U(-l, l), l = sqrt(6 / (fan_in + fan_out))
 *   glorot_normal   truncated normal, std sqrt(2 / (fan_in + fan_out))
 *   he_uniform      U(-l, l), l = sqrt(6 / fan_in)
 *   he_normal       truncated normal, std sqrt(2 / fan_in)
 *   zeros
 *
 * Design: the truncated normals draw N(0, s) with s = std / 0.8796 and redraw anything
 * beyond 2s, which (as in Keras) leaves the truncated distribution with the wanted std.
 * DT_INIT_DEFAULT means glorot_uniform here; the model maps a bias's default to zeros before
 * calling. Values are drawn in order from the caller's rng, so a seed fixes them exactly.
 */
#include <math.h>
#include <string.h>

#include "core/assert-impl.h"
#include "nn/layer-impl.h"

/* std of a standard normal truncated to [-2, 2] */
#define TRUNC_STD 0.87962566103423978

static void fill_uniform(float *v, int64_t n, double limit, dt_rng *rng) {
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((2.0 * (double)dt_rng_uniform(rng) - 1.0) * limit);
}

static void fill_truncated_normal(float *v, int64_t n, double std, dt_rng *rng) {
    double s = std / TRUNC_STD;
    for (int64_t i = 0; i < n; i++) {
        double z;
        do
            z = dt_rng_normal(rng);
        while (z < -2.0 || z > 2.0);
        v[i] = (float)(z * s);
    }
}

void dt__init_tensor(dt_tensor *t, dt_init init, int64_t fan_in, int64_t fan_out, dt_rng *rng) {
    int64_t n = dt_tensor_numel(t);
    double fi = (double)(fan_in > 0 ? fan_in : 1), fo = (double)(fan_out > 0 ? fan_out : 1);
    switch (init) {
    case DT_INIT_DEFAULT:
    case DT_INIT_GLOROT_UNIFORM:
        fill_uniform(t->data, n, sqrt(6.0 / (fi + fo)), rng);
        break;
    case DT_INIT_GLOROT_NORMAL:
        fill_truncated_normal(t->data, n, sqrt(2.0 / (fi + fo)), rng);
        break;
    case DT_INIT_HE_UNIFORM:
        fill_uniform(t->data, n, sqrt(6.0 / fi), rng);
        break;
    case DT_INIT_HE_NORMAL:
        fill_truncated_normal(t->data, n, sqrt(2.0 / fi), rng);
        break;
    case DT_INIT_ZEROS:
        memset(t->data, 0, (size_t)n * sizeof(float));
        break;
    default:
        DT_ASSERT(!"unknown initializer");
    }
}

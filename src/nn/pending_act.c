/*
 * pending_act.c - TEMPORARY placeholder activations for the conv branch.
 *
 * The real dt__act_forward/dt__act_backward live in activation.c on another branch. This
 * file exists only so that the conv2d/maxpool2d layers link and their tests run before that
 * branch merges; it implements DT_ACT_NONE and DT_ACT_RELU and must be dropped at merge.
 */
#include "core/assert-impl.h"
#include "nn/layer-impl.h"

void dt__act_forward(dt_pool *pool, dt_act act, float *y, int64_t rows, int64_t cols) {
    (void)pool;
    int64_t n = rows * cols;
    switch (act) {
    case DT_ACT_NONE:
        return;
    case DT_ACT_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        return;
    default:
        DT_ASSERT(!"placeholder activations: only none and relu");
    }
}

void dt__act_backward(dt_pool *pool, dt_act act, const float *y, float *dy, int64_t rows,
                      int64_t cols) {
    (void)pool;
    int64_t n = rows * cols;
    switch (act) {
    case DT_ACT_NONE:
        return;
    case DT_ACT_RELU:
        for (int64_t i = 0; i < n; i++) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
        return;
    default:
        DT_ASSERT(!"placeholder activations: only none and relu");
    }
}

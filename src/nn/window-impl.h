/*
 * window-impl.h - output size and padding of a sliding window (conv2d, maxpool2d).
 *
 * The TensorFlow rules, per spatial dimension of input size n, window k and stride s:
 *   valid: out = floor((n - k) / s) + 1 (needs n >= k), no padding;
 *   same:  out = ceil(n / s), pad_total = max((out - 1) * s + k - n, 0),
 *          pad_before = pad_total / 2 (the odd one goes after: bottom/right).
 */
#ifndef DTRAIN_WINDOW_IMPL_H
#define DTRAIN_WINDOW_IMPL_H

#include <stdint.h>

#include "dtrain/nn.h"

/* Returns 0 when the window does not fit (valid padding and n < k); n, k, s > 0. */
static inline int dt__window_dim(int64_t n, int64_t k, int64_t s, dt_padding padding, int64_t *out,
                                 int64_t *pad_before) {
    if (padding == DT_PADDING_SAME) {
        int64_t o = (n + s - 1) / s;
        int64_t total = (o - 1) * s + k - n;
        *out = o;
        *pad_before = total > 0 ? total / 2 : 0;
        return 1;
    }
    if (n < k) return 0;
    *out = (n - k) / s + 1;
    *pad_before = 0;
    return 1;
}

#endif

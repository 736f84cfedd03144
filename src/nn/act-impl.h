/*
 * act-impl.h - single-threaded activation kernels, for layers that fuse an activation into
 * their own pool kernels (dense applies it to the block of rows or columns its GEMM just
 * wrote, while that block is still in cache). The pool-split versions are dt__act_forward
 * and dt__act_backward in layer-impl.h.
 */
#ifndef DTRAIN_ACT_IMPL_H
#define DTRAIN_ACT_IMPL_H

#include "nn/layer-impl.h"

/* y = f(x) over `rows` rows of `cols` floats, rows `ld` floats apart; x may equal y. */
void dt__act_forward_st(dt_act act, const float *x, float *y, int64_t rows, int64_t cols,
                        int64_t ld);
/* dx = dy * f'(.) from the activation's output y; dy may equal dx. */
void dt__act_backward_st(dt_act act, const float *y, const float *dy, float *dx, int64_t rows,
                         int64_t cols, int64_t ld);
/* 1 when f applies to each element alone (everything but softmax), so that any block of
 * columns can be processed on its own. */
static inline int dt__act_elementwise(dt_act act) {
    return act != DT_ACT_SOFTMAX;
}
/* 1 for an activation value the layers know. */
static inline int dt__act_valid(dt_act act) {
    return (unsigned)act <= (unsigned)DT_ACT_SOFTMAX;
}
/* "relu", for messages and summaries. */
const char *dt__act_name(dt_act act);

/* Below this many floats an elementwise pass runs on the calling thread: waking the pool
 * costs more than the work. */
#define DT_ACT_PAR_MIN 16384

#endif

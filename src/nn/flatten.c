/*
 * flatten.c - the flatten layer: {batch, h, w, c} -> {batch, h*w*c}.
 *
 * Design: NHWC rows are already contiguous, so flattening only changes the shape; forward
 * and backward copy the buffer (a memcpy, cheaper than teaching the model to alias buffers).
 * Backward is skipped when nothing before it needs a gradient (dx.data == NULL).
 */
#include <string.h>

#include "nn/layer-impl.h"

static dt_err flatten_setup(dt__layer *l) {
    int64_t n = dt_shape_numel(&l->in);
    l->out = dt_shape_make(1, &n);
    l->nparams = 0;
    return DT_OK;
}

static void flatten_forward(dt__layer *l, dt__layer_step *s) {
    (void)l;
    if (s->y.data != s->x.data)
        memcpy(s->y.data, s->x.data, (size_t)dt_tensor_numel(&s->x) * sizeof(float));
}

static void flatten_backward(dt__layer *l, dt__layer_step *s) {
    (void)l;
    if (s->dx.data && s->dx.data != s->dy.data)
        memcpy(s->dx.data, s->dy.data, (size_t)dt_tensor_numel(&s->dy) * sizeof(float));
}

const dt__layer_ops dt__flatten_ops = {
    .kind = "flatten",
    .setup = flatten_setup,
    .forward = flatten_forward,
    .backward = flatten_backward,
};

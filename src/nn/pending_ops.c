/*
 * pending_ops.c - TEMPORARY placeholders for the conv2d and maxpool2d layers, so that the
 * library links while conv2d.c and maxpool2d.c are written on another branch. Their setup
 * refuses to build; drop this file when those land.
 */
#include "nn/layer-impl.h"

static dt_err pending_setup(dt__layer *l) {
    return dt_err_set(DT_ERR_SHAPE, "%s: not implemented yet", l->ops->kind);
}

static void pending_step(dt__layer *l, dt__layer_step *s) {
    (void)l;
    (void)s;
}

const dt__layer_ops dt__conv2d_ops = {
    .kind = "conv2d",
    .setup = pending_setup,
    .forward = pending_step,
    .backward = pending_step,
};

const dt__layer_ops dt__maxpool2d_ops = {
    .kind = "maxpool2d",
    .setup = pending_setup,
    .forward = pending_step,
    .backward = pending_step,
};

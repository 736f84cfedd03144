/*
 * pending_defaults.c - TEMPORARY placeholder for dt_optim_conf_defaults.
 *
 * The real optimizer module (src/optim/) is written on another branch; this file only lets
 * the spec loader link and be tested on its own branch. Drop it when merging.
 */
#include "dtrain/optim.h"

void dt_optim_conf_defaults(dt_optim_conf *conf) {
    if (conf->learning_rate == 0.0f)
        conf->learning_rate =
            (conf->kind == DT_OPTIM_SGD || conf->kind == DT_OPTIM_MOMENTUM) ? 0.01f : 0.001f;
    if (conf->momentum == 0.0f) conf->momentum = 0.9f;
    if (conf->beta1 == 0.0f) conf->beta1 = 0.9f;
    if (conf->beta2 == 0.0f) conf->beta2 = 0.999f;
    if (conf->epsilon == 0.0f) conf->epsilon = 1e-7f;
    if (conf->initial_accumulator == 0.0f) conf->initial_accumulator = 0.1f;
    if (conf->schedule.gamma == 0.0f) conf->schedule.gamma = 0.1f;
}

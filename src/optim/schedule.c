/*
 * schedule.c - learning-rate schedules.
 *
 * Design: a pure function of (conf, step), evaluated in double and rounded once to float,
 * so the rate at a step never depends on the history of the run: a run resumed from a
 * checkpoint sees exactly the rates an uninterrupted run would. Step 0 is the first
 * update. The step counter passed in is the optimizer's count of updates already applied.
 *   constant  lr
 *   step      lr * gamma^floor(step / step_size)
 *   cosine    min_lr + (lr - min_lr) * (1 + cos(pi * min(step, total) / total)) / 2
 * Configurations that dt_optim_init would refuse (step_size <= 0, total_steps <= 0) give
 * the constant rate here rather than dividing by zero.
 */
#include "dtrain/optim.h"

#include <math.h>

float dt_optim_lr_at(const dt_optim_conf *conf, int64_t step) {
    const dt_sched_conf *s = &conf->schedule;
    double lr = conf->learning_rate;
    if (step < 0) step = 0;
    switch (s->kind) {
    case DT_SCHED_STEP:
        if (s->step_size <= 0) return conf->learning_rate;
        return (float)(lr * pow((double)s->gamma, (double)(step / s->step_size)));
    case DT_SCHED_COSINE: {
        if (s->total_steps <= 0) return conf->learning_rate;
        int64_t k = step < s->total_steps ? step : s->total_steps;
        double min_lr = s->min_lr;
        double frac = (double)k / (double)s->total_steps;
        return (float)(min_lr + (lr - min_lr) * (1.0 + cos(M_PI * frac)) / 2.0);
    }
    case DT_SCHED_CONSTANT:
    default:
        return conf->learning_rate;
    }
}

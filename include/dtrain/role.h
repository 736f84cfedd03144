/*
 * role.h - dtrain's built-in replica behaviour for a TrainJob with the parameter-server
 * strategy: the process learns who it is from TF_CONFIG's task (as TensorFlow's
 * ParameterServerStrategy does) and plays that role (docs/STRATEGIES.md):
 *
 *   ps-i       serves its partition of the variables over the data plane (include/dtrain/ps.h),
 *              applies the optimizer, checkpoints its partition; runs until stopped
 *   worker-i   trains on data shards fetched from the job's master: pull, compute, push
 *   chief      a worker that also initializes the variables, checkpoints the whole model,
 *              exports it and writes the training figures (worker-0 when there is no chief)
 *   evaluator  evaluates every new checkpoint on the eval set; runs until stopped
 *
 * Everything else comes from the environment the master sets: DTRAIN_MASTER,
 * DTRAIN_JOB_TOKEN, DTRAIN_REPLICA.
 */
#ifndef DTRAIN_ROLE_H
#define DTRAIN_ROLE_H

#include <stdio.h>

#include "dtrain/err.h"
#include "dtrain/job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_role_opts {
    const char *job_dir; /* the job's directory (checkpoints/, export/, replicas/<name>/) */
    FILE *log;           /* progress lines (stderr when NULL) */
    int permanent;       /* out: the failure is one no restart can mend (the spec, the data
                            or the environment is wrong), not one a restart may (a peer
                            lost, I/O, a crash) */
    int stopped_by;      /* out: the role was asked to stop (SIGTERM, SIGINT: a stop of the
                            job, or a preemption) and did, after saving what it owns; the
                            signal, 0 otherwise. `dtrain role` then exits 128 + it, as a
                            process killed by it would, so that a replica preempted alone is
                            started again and continues from what it saved */
} dt_role_opts;

/* Play the role TF_CONFIG names in job (a TrainJob). Returns when a trainer has finished
 * its data, or when any role has stopped for SIGTERM or SIGINT (opts->stopped_by); on
 * failure sets opts->permanent as above. */
dt_err dt_role_run(const dt_job_spec *job, dt_role_opts *opts);

#ifdef __cplusplus
}
#endif

#endif

/*
 * policy.c - the training operator's rules, as pure functions of the job's state.
 *
 * Restart policies (what one replica's exit means):
 *   Never      0: succeeded; anything else: a permanent failure.
 *   OnFailure  0: succeeded; anything else: restart.
 *   Always     restart, whatever the code (as the kubelet does for restartPolicy Always).
 *   ExitCode   0: succeeded; 1-127: a permanent failure (the program says it is broken);
 *              128 and above: restart (killed by a signal, e.g. SIGKILL = 137, preempted).
 *
 * Success (training-operator semantics): with a chief or master, the job succeeds when
 * that replica succeeded; without one, when worker-0 succeeded, or, under successPolicy
 * AllWorkers, when every worker succeeded. PS and evaluators never decide success.
 *
 * elasticPolicy (dtrain's extension, minReplicas N): a worker that failed for good is lost,
 * not fatal, while at least N workers have not failed for good; any other replica type
 * failing for good still fails the job. Success with a chief or master is unchanged; without
 * one, the job succeeds when every worker not lost has succeeded and at least N have
 * (worker-0 alone cannot decide: it may be the one lost; AllWorkers means the same here).
 * These read only the replicas' states, so a master resumed from its journal reaches the
 * same decisions. Workers being scaled away (removing) are not looked at.
 */
#include "master/master-impl.h"

dt__exit_action dt__policy_on_exit(dt_restart_policy policy, int code) {
    switch (policy) {
    case DT_RESTART_POLICY_ALWAYS:
        return DT__EXIT_RESTART;
    case DT_RESTART_POLICY_ON_FAILURE:
        return code == 0 ? DT__EXIT_SUCCEEDED : DT__EXIT_RESTART;
    case DT_RESTART_POLICY_EXIT_CODE:
        if (code == 0) return DT__EXIT_SUCCEEDED;
        return code >= 128 ? DT__EXIT_RESTART : DT__EXIT_FAILED;
    case DT_RESTART_POLICY_NEVER:
    default:
        return code == 0 ? DT__EXIT_SUCCEEDED : DT__EXIT_FAILED;
    }
}

static int type_all_succeeded(const dt__job_state *st, dt_replica_type t, int *count) {
    int n = 0, ok = 1;
    for (int i = 0; i < st->nreplicas; i++) {
        if (st->replicas[i].type != t || st->replicas[i].removing) continue;
        n++;
        if (st->replicas[i].state != DT__REPLICA_SUCCEEDED) ok = 0;
    }
    *count = n;
    return ok;
}

int dt__policy_workers_left(const dt__job_state *st, int *total) {
    int n = 0, left = 0;
    for (int i = 0; i < st->nreplicas; i++) {
        if (st->replicas[i].type != DT_REPLICA_TYPE_WORKER || st->replicas[i].removing) continue;
        n++;
        left += st->replicas[i].state != DT__REPLICA_FAILED;
    }
    if (total) *total = n;
    return left;
}

int dt__policy_worker_loss_ok(const dt_job_spec *job, const dt__job_state *st) {
    if (job->elastic_min_replicas <= 0) return 0;
    for (int i = 0; i < st->nreplicas; i++)
        if (st->replicas[i].state == DT__REPLICA_FAILED &&
            st->replicas[i].type != DT_REPLICA_TYPE_WORKER)
            return 0;
    return dt__policy_workers_left(st, NULL) >= job->elastic_min_replicas;
}

/* Without a chief or master, under elasticPolicy: every worker not lost succeeded, and at
 * least minReplicas of them. */
static int elastic_workers_succeeded(const dt_job_spec *job, const dt__job_state *st) {
    int succeeded = 0;
    for (int i = 0; i < st->nreplicas; i++) {
        const dt__replica *r = &st->replicas[i];
        if (r->type != DT_REPLICA_TYPE_WORKER || r->state == DT__REPLICA_FAILED || r->removing)
            continue;
        if (r->state != DT__REPLICA_SUCCEEDED) return 0;
        succeeded++;
    }
    return succeeded >= job->elastic_min_replicas;
}

int dt__policy_job_succeeded(const dt_job_spec *job, const dt__job_state *st) {
    int n;
    for (int t = DT_REPLICA_TYPE_CHIEF; t <= DT_REPLICA_TYPE_MASTER; t++) {
        if (!job->replicas[t].present || job->replicas[t].replicas == 0) continue;
        return type_all_succeeded(st, (dt_replica_type)t, &n);
    }
    if (job->elastic_min_replicas > 0) return elastic_workers_succeeded(job, st);
    if (job->success_policy == DT_SUCCESS_POLICY_ALL_WORKERS) {
        int ok = type_all_succeeded(st, DT_REPLICA_TYPE_WORKER, &n);
        return ok && n > 0;
    }
    for (int i = 0; i < st->nreplicas; i++) {
        const dt__replica *r = &st->replicas[i];
        if (r->type == DT_REPLICA_TYPE_WORKER && r->index == 0 && !r->removing)
            return r->state == DT__REPLICA_SUCCEEDED;
    }
    return 0;
}

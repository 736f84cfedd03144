/*
 * trainjob.c - dtrain's own job kind: apiVersion dtrain/v1, kind TrainJob.
 *
 * Design: a TrainJob is the engine's training spec (docs/SPEC.md) plus, under spec:,
 *
 *   replicas:      {chief|master|worker|ps|evaluator: COUNT | {replicas, restartPolicy, env}}
 *                  (default: one worker)
 *   strategy:      parameter_server | allreduce (default parameter_server with ps, else
 *                  allreduce)
 *   runPolicy:     as a TFJob's
 *   successPolicy: "" | AllWorkers
 *   elasticPolicy: {minReplicas: N}: as a TFJob's (dtrain's extension)
 *   pytorchEnv:    true: also set MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
 *   parameterServer: {sync, syncTimeoutSeconds, maxFrameMB, checkpointSeconds,
 *                  minibatchesPerShard, sharedMemory, wireDtype}: the parameter-server strategy's settings (only with
 *                  strategy parameter_server); job->ps gets its defaults even when absent
 *   allreduce:     {globalBatch, bucketMB, chunkKB, timeoutSeconds, rendezvousTimeoutSeconds,
 *                  checkpointSeconds, minibatchesPerShard, sharedMemory, wireDtype}: the
 *                  all-reduce strategy's settings (only with strategy allreduce);
 *                  job->allreduce gets its defaults even when absent
 *
 * and metadata.namespace. The training part is read by spec.c's dt__spec_parse_doc, which
 * is told to allow these keys (spec-impl.h); this file reads them from the same document.
 * Replicas have no command: the master runs dtrain's built-in roles, so argv stays NULL.
 */
#include <stdlib.h>
#include <string.h>

#include "dtrain/ps.h"
#include "dtrain/ring.h"
#include "job/job-impl.h"
#include "spec/spec-impl.h"

/* Restart policies by default: ExitCode for dtrain's built-in roles (`dtrain role` exits 2
 * for a failure no restart mends, 128 for one a restart may), OnFailure for the one replica
 * of a job of one, which runs `dtrain train` (its exit codes say nothing of that). */
static dt_err parse_replicas(dt_job_spec *job, const dt__yval *spec) {
    static const char *const keys[] = {"replicas", "restartPolicy", "env", NULL};
    dt__yval m, v;
    dt_err e;
    int explicit_policy[DT_REPLICA_TYPE__COUNT] = {0};
    if (!dt__ymap_get(spec, "replicas", &m)) {
        dt_replica_spec *rs = &job->replicas[DT_REPLICA_TYPE_WORKER];
        rs->present = 1;
        rs->replicas = 1;
        rs->restart = DT_RESTART_POLICY_ON_FAILURE;
        rs->line = spec->decl_line;
        return DT_OK;
    }
    if ((e = dt__yexpect_map(&m))) return e;
    for (int i = 0; i < dt__ymap_size(&m); i++) {
        dt__yval val;
        const char *key = NULL;
        int key_line = 0;
        dt__ymap_entry(&m, i, &key, &key_line, &val);
        char buf[48];
        if (!key) return dt__yerr_line(&val, key_line, "a replica type must be a plain string");
        int t = dt_replica_type_parse(key);
        if (t < 0)
            return dt__yerr_line(&val, key_line,
                                 "unknown replica type '%s' (allowed: chief, master, worker, ps, "
                                 "evaluator)",
                                 dt__job_show_key(key, buf, sizeof buf));
        dt_replica_spec *rs = &job->replicas[t];
        if ((e = dt__job_declare_type(job, (dt_replica_type)t, &val, key_line, key))) return e;
        rs->restart = DT_RESTART_POLICY_EXIT_CODE;
        if (dt__yval_is_map(&val)) {
            if ((e = dt__ymap_check_keys(&val, keys, "a replica spec")) ||
                (dt__ymap_get(&val, "replicas", &v) &&
                 (e = dt__job_parse_count(&v, (dt_replica_type)t, &rs->replicas))) ||
                (e = dt__job_parse_restart(&val, &rs->restart)) ||
                (dt__ymap_get(&val, "env", &v) && (e = dt__job_parse_env(&v, rs, job))))
                return e;
            explicit_policy[t] = dt__ymap_get(&val, "restartPolicy", &v);
        } else if (dt__yval_is_scalar(&val)) {
            if ((e = dt__job_parse_count(&val, (dt_replica_type)t, &rs->replicas))) return e;
        } else {
            char got[80];
            return dt__yerr(&val,
                            "expected a replica count or a mapping {replicas, "
                            "restartPolicy, env}, got %s",
                            dt__yval_describe(&val, got, sizeof got));
        }
    }
    if ((e = dt__job_check_total(job, &m))) return e;
    if (dt_job_spec_total_replicas(job) == 1)
        for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++)
            if (job->replicas[t].present && job->replicas[t].replicas == 1 && !explicit_policy[t])
                job->replicas[t].restart = DT_RESTART_POLICY_ON_FAILURE;
    return DT_OK;
}

static dt_err parse_strategy(dt_job_spec *job, const dt__yval *spec) {
    static const dt__yenum strategies[] = {{"parameter_server", DT_STRATEGY_PARAMETER_SERVER},
                                           {"allreduce", DT_STRATEGY_ALLREDUCE},
                                           {NULL, 0}};
    const dt_replica_spec *ps = &job->replicas[DT_REPLICA_TYPE_PS];
    int nps = ps->present ? ps->replicas : 0, s = 0;
    dt__yval v;
    dt_err e;
    if (nps > DT_JOB_MAX_PS)
        return dt_err_set(DT_ERR_SPEC, "%s:%d: spec.replicas.ps: %d parameter servers (at most %d)",
                          job->path, ps->line, nps, DT_JOB_MAX_PS);
    if (!dt__ymap_get(spec, "strategy", &v)) {
        job->strategy = nps > 0 ? DT_STRATEGY_PARAMETER_SERVER : DT_STRATEGY_ALLREDUCE;
        return DT_OK;
    }
    if ((e = dt__yget_enum(&v, strategies, &s))) return e;
    if (s == DT_STRATEGY_PARAMETER_SERVER && nps == 0)
        return dt__yerr(&v, "parameter_server needs at least one ps replica (spec.replicas.ps)");
    if (s == DT_STRATEGY_ALLREDUCE && nps > 0)
        return dt__yerr(&v,
                        "allreduce runs no parameter servers: remove spec.replicas.ps (line %d) "
                        "or use parameter_server",
                        ps->line);
    job->strategy = (dt_strategy)s;
    return DT_OK;
}

/* A parameter_server job needs someone who trains: a chief or at least one worker. */
static dt_err check_trainers(const dt_job_spec *job, const dt__yval *spec) {
    const dt_replica_spec *c = &job->replicas[DT_REPLICA_TYPE_CHIEF];
    const dt_replica_spec *w = &job->replicas[DT_REPLICA_TYPE_WORKER];
    if ((c->present && c->replicas > 0) || (w->present && w->replicas > 0)) return DT_OK;
    dt__yval r;
    if (!dt__ymap_get(spec, "replicas", &r)) r = *spec;
    return dt__yerr_line(&r, r.decl_line,
                         "the parameter_server strategy needs a chief or at least one worker to "
                         "train (parameter servers and evaluators do not)");
}

static dt_err parse_parameter_server(dt_job_spec *job, const dt__yval *spec) {
    static const char *const keys[] = {"sync",
                                       "syncTimeoutSeconds",
                                       "maxFrameMB",
                                       "checkpointSeconds",
                                       "minibatchesPerShard",
                                       "sharedMemory",
                                       "wireDtype",
                                       NULL};
    static const dt__yenum dtypes[] = {
        {"float32", DT_PS_WIRE_F32}, {"bfloat16", DT_PS_WIRE_BF16}, {NULL, 0}};
    dt_ps_job_conf *ps = &job->ps;
    dt__yval m, v;
    dt_err e;
    double secs = 0;
    int64_t mb = 0;
    ps->sync = 0;
    ps->sync_timeout_ms = 5000;
    ps->max_frame = (int64_t)64 << 20;
    ps->checkpoint_secs = 0;
    ps->minibatches_per_shard = 16;
    ps->shared_memory = 1;
    ps->wire_dtype = DT_PS_WIRE_F32;
    if (job->strategy == DT_STRATEGY_PARAMETER_SERVER && (e = check_trainers(job, spec))) return e;
    if (!dt__ymap_get(spec, "parameterServer", &m)) return DT_OK;
    if (job->strategy != DT_STRATEGY_PARAMETER_SERVER)
        return dt__yerr_line(&m, m.decl_line,
                             "only for strategy parameter_server (this job's strategy is %s)",
                             dt_strategy_name(job->strategy));
    if ((e = dt__yexpect_map(&m)) || (e = dt__ymap_check_keys(&m, keys, NULL))) return e;
    if (dt__ymap_get(&m, "sync", &v) && (e = dt__yget_bool(&v, &ps->sync))) return e;
    if (dt__ymap_get(&m, "syncTimeoutSeconds", &v)) {
        if ((e = dt__yget_f64(&v, (dt__yrange){.lo = 0, .hi = 86400, .lo_open = 1}, &secs)))
            return e;
        ps->sync_timeout_ms = (int64_t)(secs * 1000.0 + 0.5);
        if (ps->sync_timeout_ms < 1) ps->sync_timeout_ms = 1;
    }
    if (dt__ymap_get(&m, "maxFrameMB", &v)) {
        /* at most 1 TiB: the byte count stays far from overflowing */
        if ((e = dt__yget_i64(&v, 1, (int64_t)1 << 20, &mb))) return e;
        ps->max_frame = mb << 20;
    }
    if (dt__ymap_get(&m, "checkpointSeconds", &v)) {
        if ((e = dt__yget_f64(&v, (dt__yrange){.lo = 0, .hi = 31536000}, &secs))) return e;
        ps->checkpoint_secs = (int64_t)(secs + 0.5);
        if (secs > 0 && ps->checkpoint_secs < 1) ps->checkpoint_secs = 1;
    }
    if (dt__ymap_get(&m, "minibatchesPerShard", &v) &&
        (e = dt__yget_int(&v, 1, INT32_MAX, &ps->minibatches_per_shard)))
        return e;
    if (dt__ymap_get(&m, "sharedMemory", &v) && (e = dt__yget_bool(&v, &ps->shared_memory)))
        return e;
    if (dt__ymap_get(&m, "wireDtype", &v)) {
        int dt = 0;
        if ((e = dt__yget_enum(&v, dtypes, &dt))) return e;
        ps->wire_dtype = dt;
    }
    return DT_OK;
}

/* A number of seconds in (0, 86400] as milliseconds (at least 1). */
static dt_err get_timeout_ms(const dt__yval *v, int64_t *ms) {
    double secs = 0;
    dt_err e = dt__yget_f64(v, (dt__yrange){.lo = 0, .hi = 86400, .lo_open = 1}, &secs);
    if (e) return e;
    *ms = (int64_t)(secs * 1000.0 + 0.5);
    if (*ms < 1) *ms = 1;
    return DT_OK;
}

static dt_err parse_allreduce(dt_job_spec *job, const dt__yval *spec) {
    static const char *const keys[] = {"globalBatch",        "bucketMB",
                                       "chunkKB",            "timeoutSeconds",
                                       "rendezvousTimeoutSeconds", "checkpointSeconds",
                                       "minibatchesPerShard", "sharedMemory",
                                       "wireDtype",          NULL};
    static const dt__yenum batches[] = {{"scale", DT_GLOBAL_BATCH_SCALE},
                                        {"fixed", DT_GLOBAL_BATCH_FIXED},
                                        {NULL, 0}};
    static const dt__yenum dtypes[] = {
        {"float32", DT_RING_WIRE_F32}, {"bfloat16", DT_RING_WIRE_BF16}, {NULL, 0}};
    dt_allreduce_job_conf *ar = &job->allreduce;
    dt__yval m, v;
    dt_err e;
    double num = 0;
    int64_t kb = 0;
    int gb = 0;
    ar->global_batch = DT_GLOBAL_BATCH_SCALE;
    ar->bucket_bytes = (int64_t)4 << 20;
    ar->chunk_bytes = (int64_t)256 << 10;
    ar->timeout_ms = 10000;
    ar->rendezvous_timeout_ms = 10000;
    ar->checkpoint_secs = 0;
    ar->minibatches_per_shard = 4;
    ar->shared_memory = 1;
    ar->wire_dtype = DT_RING_WIRE_F32;
    if (!dt__ymap_get(spec, "allreduce", &m)) return DT_OK;
    if (job->strategy != DT_STRATEGY_ALLREDUCE)
        return dt__yerr_line(&m, m.decl_line,
                             "only for strategy allreduce (this job's strategy is %s)",
                             dt_strategy_name(job->strategy));
    if ((e = dt__yexpect_map(&m)) || (e = dt__ymap_check_keys(&m, keys, NULL))) return e;
    if (dt__ymap_get(&m, "globalBatch", &v)) {
        if ((e = dt__yget_enum(&v, batches, &gb))) return e;
        ar->global_batch = (dt_global_batch)gb;
    }
    if (dt__ymap_get(&m, "bucketMB", &v)) {
        if ((e = dt__yget_f64(&v, (dt__yrange){.lo = 0, .hi = 4096, .lo_open = 1}, &num)))
            return e;
        ar->bucket_bytes = (int64_t)(num * (double)(1 << 20) + 0.5);
        if (ar->bucket_bytes < 1) ar->bucket_bytes = 1;
    }
    if (dt__ymap_get(&m, "chunkKB", &v)) {
        if ((e = dt__yget_i64(&v, 1, (int64_t)1 << 20, &kb))) return e;
        ar->chunk_bytes = kb << 10;
    }
    if ((dt__ymap_get(&m, "timeoutSeconds", &v) && (e = get_timeout_ms(&v, &ar->timeout_ms))) ||
        (dt__ymap_get(&m, "rendezvousTimeoutSeconds", &v) &&
         (e = get_timeout_ms(&v, &ar->rendezvous_timeout_ms))))
        return e;
    if (dt__ymap_get(&m, "checkpointSeconds", &v)) {
        if ((e = dt__yget_f64(&v, (dt__yrange){.lo = 0, .hi = 31536000}, &num))) return e;
        ar->checkpoint_secs = (int64_t)(num + 0.5);
        if (num > 0 && ar->checkpoint_secs < 1) ar->checkpoint_secs = 1;
    }
    if (dt__ymap_get(&m, "minibatchesPerShard", &v) &&
        (e = dt__yget_int(&v, 1, INT32_MAX, &ar->minibatches_per_shard)))
        return e;
    if (dt__ymap_get(&m, "sharedMemory", &v) && (e = dt__yget_bool(&v, &ar->shared_memory)))
        return e;
    if (dt__ymap_get(&m, "wireDtype", &v)) {
        int dt = 0;
        if ((e = dt__yget_enum(&v, dtypes, &dt))) return e;
        ar->wire_dtype = dt;
    }
    return DT_OK;
}

dt_err dt__job_parse_trainjob(dt_job_spec *job, const dt__yval *root, const char *base_dir) {
    dt__yval spec, v;
    dt_err e;
    if ((e = dt__spec_new(&job->train, job->path)) ||
        (e = dt__spec_parse_doc(job->train, root, base_dir, &dt__spec_job_extra)) ||
        (e = dt__job_parse_metadata(job, root)))
        return e;
    dt__ymap_get(root, "spec", &spec); /* present and a mapping: checked by the spec parser */
    if ((e = parse_replicas(job, &spec)) || (e = parse_strategy(job, &spec)) ||
        (e = dt__job_parse_policies(job, &spec, 1, 0)) ||
        (e = dt__job_parse_success_policy(job, &spec)) || (e = dt__job_parse_elastic(job, &spec)) ||
        (dt__ymap_get(&spec, "pytorchEnv", &v) && (e = dt__yget_bool(&v, &job->pytorch_env))) ||
        (e = parse_parameter_server(job, &spec)) || (e = parse_allreduce(job, &spec)))
        return e;
    return DT_OK;
}

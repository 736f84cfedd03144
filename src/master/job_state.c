/*
 * job_state.c - the job's replicas and conditions, and their JSON form.
 *
 * Conditions follow the training operator's JobCondition: type, status ("True"/"False"),
 * reason, message, lastUpdateTime, lastTransitionTime. Running and Restarting exclude each
 * other; a finished job (Succeeded or Failed) has Running set to False. Replica counts per
 * type are the operator's replicaStatuses (active, succeeded, failed) plus the restarts.
 *
 * The table grows and shrinks when workers are scaled (dt__job_state_add, _remove): it stays
 * in start order, so nothing may keep a pointer into it across a change.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/path-impl.h"
#include "master/master-impl.h"

static const char *const state_names[] = {
    [DT__REPLICA_PENDING] = "Pending",     [DT__REPLICA_RUNNING] = "Running",
    [DT__REPLICA_RESTARTING] = "Restarting", [DT__REPLICA_SUCCEEDED] = "Succeeded",
    [DT__REPLICA_FAILED] = "Failed",       [DT__REPLICA_STOPPED] = "Stopped",
};

static const char *const cond_names[] = {
    [DT__COND_CREATED] = "Created",     [DT__COND_RUNNING] = "Running",
    [DT__COND_RESTARTING] = "Restarting", [DT__COND_SUCCEEDED] = "Succeeded",
    [DT__COND_FAILED] = "Failed",
};

/* Kubeflow's ReplicaType spelling, the keys of replicaStatuses. */
static const char *const type_keys[] = {
    [DT_REPLICA_TYPE_CHIEF] = "Chief",   [DT_REPLICA_TYPE_MASTER] = "Master",
    [DT_REPLICA_TYPE_PS] = "PS",         [DT_REPLICA_TYPE_WORKER] = "Worker",
    [DT_REPLICA_TYPE_EVALUATOR] = "Evaluator",
};

const char *dt__replica_state_name(dt__replica_state s) { return state_names[s]; }
const char *dt__cond_type_name(dt__cond_type t) { return cond_names[t]; }

double dt__wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *dt__rfc3339(double t, char *buf, size_t len) {
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    int ms = (int)((t - (double)s) * 1000.0);
    if (ms < 0) ms = 0;
    if (ms > 999) ms = 999;
    char tmp[96];
    snprintf(tmp, sizeof tmp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
    snprintf(buf, len, "%s", tmp);
    return buf;
}

static void init_replica(dt__replica *r, dt_replica_type type, int index) {
    memset(r, 0, sizeof *r);
    r->type = type;
    r->index = index;
    /* "evaluator-1023" at the longest: fits */
    snprintf(r->name, sizeof r->name, "%.10s-%d", dt_replica_type_name(type), index & 0xfffff);
    r->exit_code = -1;
}

dt_err dt__job_state_init(dt__job_state *st, const dt_job_spec *job) {
    memset(st, 0, sizeof *st);
    int n = dt_job_spec_total_replicas(job);
    if (n > DT__MAX_REPLICAS)
        return dt_err_set(DT_ERR_SPEC, "%s: %d replicas in all; at most %d run locally", job->path,
                          n, DT__MAX_REPLICAS);
    st->replicas = calloc((size_t)(n ? n : 1), sizeof *st->replicas);
    if (!st->replicas) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    st->cap = n ? n : 1;
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) {
        const dt_replica_spec *rs = &job->replicas[t];
        if (!rs->present) continue;
        for (int i = 0; i < rs->replicas; i++) {
            dt__replica *r = &st->replicas[st->nreplicas++];
            init_replica(r, (dt_replica_type)t, i);
        }
    }
    return DT_OK;
}

dt_err dt__job_state_add(dt__job_state *st, dt_replica_type type, int index, dt__replica **out) {
    if (st->nreplicas >= DT__MAX_REPLICAS)
        return dt_err_set(DT_ERR_ARG, "at most %d replicas run locally", DT__MAX_REPLICAS);
    if (st->nreplicas == st->cap) {
        int cap = st->cap * 2 > DT__MAX_REPLICAS ? DT__MAX_REPLICAS : st->cap * 2;
        dt__replica *p = realloc(st->replicas, (size_t)cap * sizeof *p);
        if (!p) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        st->replicas = p;
        st->cap = cap;
    }
    /* after every replica of an earlier type, or of this type with a lower index */
    int at = 0;
    while (at < st->nreplicas &&
           (st->replicas[at].type < type ||
            (st->replicas[at].type == type && st->replicas[at].index < index)))
        at++;
    memmove(&st->replicas[at + 1], &st->replicas[at],
            (size_t)(st->nreplicas - at) * sizeof *st->replicas);
    st->nreplicas++;
    init_replica(&st->replicas[at], type, index);
    if (out) *out = &st->replicas[at];
    return DT_OK;
}

void dt__job_state_remove(dt__job_state *st, int i) {
    if (i < 0 || i >= st->nreplicas) return;
    json_decref(st->replicas[i].report);
    json_decref(st->replicas[i].progress);
    json_decref(st->replicas[i].facts);
    memmove(&st->replicas[i], &st->replicas[i + 1],
            (size_t)(st->nreplicas - i - 1) * sizeof *st->replicas);
    st->nreplicas--;
}

int dt__job_state_sweep(dt__job_state *st) {
    int n = 0;
    for (int i = 0; i < st->nreplicas;) {
        if (st->replicas[i].gone) {
            dt__job_state_remove(st, i);
            n++;
        } else {
            i++;
        }
    }
    return n;
}

void dt__job_state_free(dt__job_state *st) {
    if (!st) return;
    for (int i = 0; i < st->nreplicas; i++) {
        json_decref(st->replicas[i].report);
        json_decref(st->replicas[i].progress);
        json_decref(st->replicas[i].facts);
    }
    free(st->replicas);
    memset(st, 0, sizeof *st);
}

dt__replica *dt__job_state_find(dt__job_state *st, const char *name) {
    for (int i = 0; i < st->nreplicas; i++)
        if (!strcmp(st->replicas[i].name, name)) return &st->replicas[i];
    return NULL;
}

static void set_cond(dt__condition *c, int status, const char *reason, const char *message,
                     double now) {
    if (!c->set || c->status != status) c->transition_time = now;
    c->set = 1;
    c->status = status;
    c->update_time = now;
    if (reason) snprintf(c->reason, sizeof c->reason, "%s", reason);
    if (message) snprintf(c->message, sizeof c->message, "%s", message);
}

void dt__job_state_condition(dt__job_state *st, dt__cond_type t, const char *reason,
                             const char *message, double now) {
    set_cond(&st->cond[t], 1, reason, message, now);
    if (t == DT__COND_RUNNING && st->cond[DT__COND_RESTARTING].set)
        set_cond(&st->cond[DT__COND_RESTARTING], 0, NULL, NULL, now);
    if (t == DT__COND_RESTARTING && st->cond[DT__COND_RUNNING].set)
        set_cond(&st->cond[DT__COND_RUNNING], 0, NULL, NULL, now);
    if (t == DT__COND_SUCCEEDED || t == DT__COND_FAILED) {
        for (int o = DT__COND_RUNNING; o <= DT__COND_RESTARTING; o++)
            if (st->cond[o].set) set_cond(&st->cond[o], 0, NULL, NULL, now);
    }
}

void dt__job_state_reopen(dt__job_state *st, const char *reason, const char *message,
                          double now) {
    st->finished = 0;
    st->outcome = DT_JOB_OUTCOME_SUCCEEDED;
    st->completion_time = 0;
    st->start_time = now;
    if (st->cond[DT__COND_FAILED].set)
        set_cond(&st->cond[DT__COND_FAILED], 0, reason, message, now);
    for (int i = 0; i < st->nreplicas; i++)
        if (st->replicas[i].state == DT__REPLICA_STOPPED && !st->replicas[i].removing)
            st->replicas[i].state = DT__REPLICA_PENDING;
}

const char *dt__job_state_phase(const dt__job_state *st) {
    static const dt__cond_type order[] = {DT__COND_SUCCEEDED, DT__COND_FAILED,
                                          DT__COND_RESTARTING, DT__COND_RUNNING, DT__COND_CREATED};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (st->cond[order[i]].set && st->cond[order[i]].status) return cond_names[order[i]];
    return "Pending";
}

static json_t *time_or_null(double t) {
    char buf[40];
    return t > 0 ? json_string(dt__rfc3339(t, buf, sizeof buf)) : json_null();
}

/* "exit 137 (SIGKILL)" */
static void exit_text(int code, char *out, size_t len) {
    if (code > 128 && code < 128 + 65) snprintf(out, len, "exit %d (SIG%s)", code, sigabbrev_np(code - 128) ? sigabbrev_np(code - 128) : "?");
    else snprintf(out, len, "exit %d", code);
}

void dt__replica_why(const dt__replica *r, char *msg, size_t len) {
    if (r->message[0]) {
        snprintf(msg, len, "%s", r->message);
        return;
    }
    char ex[48] = "";
    if (r->exit_code >= 0) exit_text(r->exit_code, ex, sizeof ex);
    switch (r->state) {
    case DT__REPLICA_PENDING: snprintf(msg, len, "not launched yet"); break;
    case DT__REPLICA_RUNNING: snprintf(msg, len, "attempt %d", r->attempt); break;
    case DT__REPLICA_RESTARTING: snprintf(msg, len, "%s; launched again shortly", ex); break;
    case DT__REPLICA_SUCCEEDED: snprintf(msg, len, "%s", ex[0] ? ex : "exit 0"); break;
    case DT__REPLICA_FAILED: snprintf(msg, len, "%s", ex); break;
    case DT__REPLICA_STOPPED: snprintf(msg, len, "stopped by the master%s%s", ex[0] ? ": " : "", ex); break;
    }
}

void dt__replica_exit_text(int code, char *out, size_t len) {
    exit_text(code, out, len);
}

json_t *dt__replica_json(const dt__replica *r, const char *job_dir) {
    char log[DT__PATH_MAX]; /* fits: the master checks its job dir leaves DT__JOB_DIR_ROOM */
    dt__path(log, sizeof log, "%s/logs/%s.log", job_dir, r->name);
    json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:i}", "name", r->name, "type",
                          dt_replica_type_name(r->type), "index", r->index, "state",
                          r->removing ? "Removing" : dt__replica_state_name(r->state), "port",
                          r->port, "attempt",
                          r->attempt, "restarts", r->restarts);
    if (!j) return NULL;
    json_object_set_new(j, "pid", r->pid > 0 && (r->state == DT__REPLICA_RUNNING)
                                      ? json_integer(r->pid)
                                      : json_null());
    json_object_set_new(j, "exitCode", r->exit_code >= 0 ? json_integer(r->exit_code) : json_null());
    json_object_set_new(j, "startTime", time_or_null(r->start_time));
    json_object_set_new(j, "finishTime", time_or_null(r->end_time));
    if (log[0]) json_object_set_new(j, "log", json_string(log));
    if (r->report) json_object_set(j, "report", r->report);
    if (r->progress) json_object_set(j, "progress", r->progress);
    char why[400];
    dt__replica_why(r, why, sizeof why);
    json_object_set_new(j, "reason", json_string(r->removing ? "Removing" : dt__replica_state_name(r->state)));
    json_object_set_new(j, "message", json_string(why));
    return j;
}

json_t *dt__job_state_json(const dt__job_state *st, const dt_job_spec *job, const char *url) {
    static const char *const kinds[] = {[DT_JOB_KIND_TFJOB] = "TFJob",
                                        [DT_JOB_KIND_PYTORCHJOB] = "PyTorchJob",
                                        [DT_JOB_KIND_TRAINJOB] = "TrainJob"};
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s}", "apiVersion", job->api_version, "kind",
                          kinds[job->kind], "name", job->name, "namespace", job->namespace,
                          "phase", dt__job_state_phase(st));
    if (!j) return NULL;
    json_object_set_new(j, "master", url ? json_string(url) : json_null());
    json_t *conds = json_array();
    for (int t = 0; t < DT__COND__COUNT; t++) {
        const dt__condition *c = &st->cond[t];
        if (!c->set) continue;
        char ut[40], tt[40];
        json_array_append_new(
            conds, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", cond_names[t], "status",
                             c->status ? "True" : "False", "reason", c->reason, "message",
                             c->message, "lastUpdateTime", dt__rfc3339(c->update_time, ut, sizeof ut),
                             "lastTransitionTime",
                             dt__rfc3339(c->transition_time, tt, sizeof tt)));
    }
    json_object_set_new(j, "conditions", conds);
    json_t *rs = json_object();
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) {
        if (!job->replicas[t].present) continue;
        int active = 0, succeeded = 0, failed = 0, restarts = 0;
        for (int i = 0; i < st->nreplicas; i++) {
            const dt__replica *r = &st->replicas[i];
            if ((int)r->type != t || r->removing) continue;
            active += r->state == DT__REPLICA_RUNNING;
            succeeded += r->state == DT__REPLICA_SUCCEEDED;
            failed += r->state == DT__REPLICA_FAILED;
            restarts += r->restarts;
        }
        json_object_set_new(rs, type_keys[t],
                            json_pack("{s:i, s:i, s:i, s:i}", "active", active, "succeeded",
                                      succeeded, "failed", failed, "restarts", restarts));
    }
    json_object_set_new(j, "replicaStatuses", rs);
    /* the current worker count: the spec's, or the last `dtrain scale` */
    const dt_replica_spec *w = &job->replicas[DT_REPLICA_TYPE_WORKER];
    json_object_set_new(j, "workers", json_integer(w->present ? w->replicas : 0));
    json_object_set_new(j, "startTime", time_or_null(st->start_time));
    json_object_set_new(j, "completionTime", time_or_null(st->completion_time));
    json_object_set_new(j, "restarts", json_integer(st->total_restarts));
    if (job->ttl_seconds_after_finished >= 0)
        json_object_set_new(j, "ttlSecondsAfterFinished",
                            json_integer(job->ttl_seconds_after_finished));
    return j;
}

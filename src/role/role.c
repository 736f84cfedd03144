/*
 * role.c - who this replica is (TF_CONFIG), and what the roles share.
 *
 * Design: TF_CONFIG is the source of identity, as for TensorFlow's own strategies; a job's
 * only replica gets none (as from the training operator) and is DTRAIN_REPLICA alone at
 * DTRAIN_ADDRESS, which the master sets in its place. The job spec gives the model, the
 * data and the strategy's settings. Every role builds the same model from the spec, which is
 * how the PS and the workers agree on the variables' names and shapes without exchanging
 * them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/optim.h"
#include "dtrain/shard.h"
#include "dtrain/threadpool.h"
#include "net/sock-impl.h"
#include "role/role-impl.h"
#include "train/train-impl.h"

static void role_free(dt__role *r) {
    for (int i = 0; i < r->nps; i++)
        free(r->ps_addrs[i]);
}

/* The port of "host:port", or 0 when addr is not one. */
static int port_of(const char *addr) {
    char host[256];
    int port = 0;
    return dt__hostport_split(addr, host, sizeof host, &port) ? 0 : port;
}

/* This replica's own "host:port" (TF_CONFIG's entry for it, or DTRAIN_ADDRESS). */
static void set_self(dt__role *r, const char *a) {
    char host[256];
    int port = 0;
    int ok = dt__hostport_split(a, host, sizeof host, &port) == DT__HOSTPORT_OK;
    r->self_port = ok ? port : 0;
    snprintf(r->self_addr, sizeof r->self_addr, "%.299s", a);
    /* Listen where it is said to be when that is an address (127.0.0.1 on one machine); a
     * host name (a Kubernetes service) means every interface. */
    unsigned char bin[16];
    if (ok && (inet_pton(AF_INET, host, bin) == 1 || inet_pton(AF_INET6, host, bin) == 1))
        snprintf(r->self_host, sizeof r->self_host, "%s", host);
}

/* Fill r's identity and cluster from the TF_CONFIG text. */
static dt_err parse_tf_config(dt__role *r, const char *text) {
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    dt_err e = DT_OK;
    if (!json_is_object(root)) {
        e = dt_err_set(DT_ERR_ARG, "TF_CONFIG: not a JSON object (%s)", jerr.text);
        goto end;
    }
    json_t *task = json_object_get(root, "task"), *cluster = json_object_get(root, "cluster");
    const char *type = json_string_value(json_object_get(task, "type"));
    json_t *index = json_object_get(task, "index");
    if (!type || !json_is_integer(index) || !json_is_object(cluster)) {
        e = dt_err_set(DT_ERR_ARG, "TF_CONFIG: needs task.type, task.index and cluster");
        goto end;
    }
    int t = dt_replica_type_parse(type);
    if (t < 0) {
        e = dt_err_set(DT_ERR_ARG, "TF_CONFIG: task.type: unknown type '%.40s'", type);
        goto end;
    }
    r->type = (dt_replica_type)t;
    r->index = (int)json_integer_value(index);
    if (r->index < 0 || r->index > 100000) {
        e = dt_err_set(DT_ERR_ARG, "TF_CONFIG: task.index: %d out of range", r->index);
        goto end;
    }
    json_t *ps = json_object_get(cluster, "ps");
    size_t n = json_array_size(ps);
    if (n > DT__ROLE_MAX_PS) {
        e = dt_err_set(DT_ERR_ARG, "TF_CONFIG: cluster.ps: %zu parameter servers (at most %d)", n,
                       DT__ROLE_MAX_PS);
        goto end;
    }
    for (size_t i = 0; i < n; i++) {
        const char *a = json_string_value(json_array_get(ps, i));
        if (!a || !port_of(a)) {
            e = dt_err_set(DT_ERR_ARG, "TF_CONFIG: cluster.ps[%zu]: expected \"host:port\"", i);
            goto end;
        }
        if (!(r->ps_addrs[r->nps] = strdup(a))) {
            e = dt_err_set(DT_ERR_NOMEM, "out of memory");
            goto end;
        }
        r->nps++;
    }
    int has_chief = 0;
    const char *chiefs[] = {"chief", "master"};
    for (int i = 0; i < 2; i++)
        if (json_array_size(json_object_get(cluster, chiefs[i])) > 0) has_chief = 1;
    r->is_chief = r->type == DT_REPLICA_TYPE_CHIEF || r->type == DT_REPLICA_TYPE_MASTER ||
                  (!has_chief && r->type == DT_REPLICA_TYPE_WORKER && r->index == 0);
    json_t *mine = json_array_get(json_object_get(cluster, type), (size_t)r->index);
    if (json_is_string(mine)) set_self(r, json_string_value(mine));
end:
    json_decref(root);
    return e;
}

/* A replica that is the job's only one gets no TF_CONFIG (as from the training operator):
 * it is DTRAIN_REPLICA ("worker-0"), alone in its cluster, at DTRAIN_ADDRESS. */
static dt_err identity_alone(dt__role *r, const char *name, const char *addr) {
    const char *dash = strrchr(name, '-');
    char type[32] = "", *end = "";
    long index = -1;
    if (dash && dash[1]) {
        snprintf(type, sizeof type, "%.*s", (int)(dash - name), name);
        errno = 0;
        index = strtol(dash + 1, &end, 10);
        if (errno) index = -1;
    }
    int t = dt_replica_type_parse(type);
    if (t < 0 || *end || index < 0 || index > 100000)
        return dt_err_set(DT_ERR_ARG, "DTRAIN_REPLICA: expected <type>-<index> (worker-0), got "
                                      "'%.60s'", name);
    if (!port_of(addr))
        return dt_err_set(DT_ERR_ARG, "DTRAIN_ADDRESS: expected \"host:port\", got '%.60s'",
                          addr);
    r->type = (dt_replica_type)t;
    r->index = (int)index;
    r->is_chief = t == DT_REPLICA_TYPE_CHIEF || t == DT_REPLICA_TYPE_MASTER ||
                  t == DT_REPLICA_TYPE_WORKER;
    set_self(r, addr);
    return DT_OK;
}

static int spec_trainers(const dt_job_spec *job) {
    int n = 0;
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++)
        if (job->replicas[t].present &&
            (t == DT_REPLICA_TYPE_CHIEF || t == DT_REPLICA_TYPE_MASTER ||
             t == DT_REPLICA_TYPE_WORKER))
            n += job->replicas[t].replicas;
    return n > 0 ? n : 1;
}

/* Is one of the spec's data files missing, unreadable or not a regular file? */
static int data_files_bad(const dt_spec *s) {
    const dt_data_source *srcs[2] = {&s->train, s->has_eval ? &s->eval : NULL};
    for (int i = 0; i < 2; i++) {
        const dt_data_source *d = srcs[i];
        if (!d) continue;
        const char *paths[2] = {d->format == DT_DATA_IDX ? d->images : d->path,
                                d->format == DT_DATA_IDX ? d->labels : NULL};
        for (int k = 0; k < 2; k++) {
            if (d->format == DT_DATA_SYNTHETIC || !paths[k]) continue;
            if (dt__check_regular(paths[k])) return 1;
        }
    }
    return 0;
}

dt_err dt__role_model(dt__role *r, int64_t batch, dt_pool *pool, dt_dataset **train_out,
                      dt_dataset **eval_out, dt_model **model) {
    dt_dataset *train = NULL, *eval = NULL;
    dt_shape input;
    dt_err e = dt__train_load_data(r->spec, r->spec->seed, &train, &eval);
    if (!e) e = dt__train_input_shape(r->spec, train, &input);
    if (!e) e = dt__train_build_model(r->spec, &input, batch, pool, model);
    if (!e) e = dt__train_check_labels(r->spec, train, eval, *model);
    if (e || !train_out) dt_dataset_free(train);
    if (e || !eval_out) dt_dataset_free(eval);
    if (e) {
        dt_model_free(*model);
        *model = NULL;
        /* No restart mends a bad spec, shape or data file, nor a data file that is missing or
         * not a regular one; out of memory or a passing I/O error it may. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dt_errmsg());
        r->permanent = e == DT_ERR_SPEC || e == DT_ERR_SHAPE || e == DT_ERR_FORMAT ||
                       e == DT_ERR_ARG || data_files_bad(r->spec);
        return dt_err_set(e, "%s", msg); /* the check above replaced the message */
    }
    if (train_out) *train_out = train;
    if (eval_out) *eval_out = eval;
    return DT_OK;
}

dt_param **dt__role_params(dt_model *m, int *n) {
    *n = dt_model_num_params(m);
    dt_param **p = malloc((size_t)(*n ? *n : 1) * sizeof *p);
    if (p)
        for (int i = 0; i < *n; i++)
            p[i] = dt_model_param(m, i);
    return p;
}

dt_optim_conf dt__role_optim(const dt__role *r, int64_t train_samples) {
    const dt_spec *s = r->spec;
    dt_optim_conf oc = s->optimizer;
    if (oc.schedule.kind == DT_SCHED_COSINE && oc.schedule.total_steps == 0) {
        /* Asynchronous: one optimizer step per batch, as in one process. Synchronous: one
         * step per round of one batch from each trainer. */
        int64_t steps = s->epochs * ((train_samples + s->batch_size - 1) / s->batch_size);
        /* All-reduce: one step per batch of every trainer, as the spec's trainers count. */
        int per_round = (r->job->strategy == DT_STRATEGY_ALLREDUCE || r->job->ps.sync)
                            ? r->spec_trainers : 1;
        if (per_round > 1) steps = (steps + per_round - 1) / per_round;
        oc.schedule.total_steps = steps > 0 ? steps : 1;
    }
    return oc;
}

dt_err dt__role_write_result(const dt__role *r, json_t *obj) {
    if (!obj) return dt_err_set(DT_ERR_NOMEM, "result.json: out of memory");
    dt_err e = dt__mkdirs(r->own_dir);
    if (e) {
        json_decref(obj);
        return e;
    }
    char *text = json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(obj);
    if (!text) return dt_err_set(DT_ERR_NOMEM, "result.json: out of memory");
    char path[DT__PATH_MAX];
    size_t n = strlen(text);
    text[n] = '\n';
    if (!(e = dt__path(path, sizeof path, "%s/result.json", r->own_dir)))
        e = dt__write_file_atomic(path, text, n + 1);
    free(text);
    return e;
}

void dt__role_write_failure(const dt__role *r, dt_err e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dt_errmsg());
    dt__role_write_result(r, json_pack("{s:s, s:s, s:s}", "status", "Failed", "role",
                                       r->is_chief ? "chief" : "worker", "message", msg));
    dt_err_set(e, "%s", msg);
}

/* ---- checkpoints that fail ---- */

#define CKPT_BACKOFF_MAX_S 60.0
#define FINAL_CKPT_TRIES_S 600.0

int dt__ckpt_retry_due(const dt__ckpt_retry *c) {
    return c->retry_at > 0 ? dt__mono_s() >= c->retry_at : -1;
}

void dt__ckpt_retry_after(dt__ckpt_retry *c, const dt__role *r, int64_t step, dt_err e) {
    if (!e) {
        if (c->retry_at > 0)
            fprintf(r->log, "%s: checkpoint at step %lld written\n", r->name, (long long)step);
        c->retry_at = c->backoff = 0;
        return;
    }
    c->backoff = c->backoff > 0 ? c->backoff * 2 : 1;
    if (c->backoff > CKPT_BACKOFF_MAX_S) c->backoff = CKPT_BACKOFF_MAX_S;
    c->retry_at = dt__mono_s() + c->backoff;
    fprintf(r->log, "%s: checkpoint at step %lld failed: %s; training goes on, next try in "
                    "%.0f s\n",
            r->name, (long long)step, dt_errmsg(), c->backoff);
    fflush(r->log);
    dt_err_clear();
}

dt_err dt__role_final_checkpoint(const dt__role *r, dt_err (*save)(void *ctx), void *ctx) {
    double t0 = dt__mono_s(), backoff = 1;
    dt_err e;
    while ((e = save(ctx))) {
        if (dt__mono_s() - t0 > FINAL_CKPT_TRIES_S)
            return dt_err_wrap(e, "the final checkpoint, tried for %.0f s", FINAL_CKPT_TRIES_S);
        fprintf(r->log, "%s: the final checkpoint failed: %s; next try in %.0f s\n", r->name,
                dt_errmsg(), backoff);
        fflush(r->log);
        dt_err_clear();
        dt__sleep_ms(backoff * 1000);
        backoff = backoff * 2 < CKPT_BACKOFF_MAX_S ? backoff * 2 : CKPT_BACKOFF_MAX_S;
    }
    return DT_OK;
}

void dt__role_stop_checkpoint(const dt__role *r, const int64_t *step,
                              dt_err (*save)(void *ctx), void *ctx) {
    if (save(ctx)) {
        fprintf(r->log, "%s: checkpoint at step %lld failed: %s\n", r->name, (long long)*step,
                dt_errmsg());
        dt_err_clear();
    } else {
        fprintf(r->log, "%s: checkpoint at step %lld written\n", r->name, (long long)*step);
    }
}

dt_err dt_role_run(const dt_job_spec *job, dt_role_opts *opts) {
    opts->permanent = 0;
    if (job->kind != DT_JOB_KIND_TRAINJOB || !job->train) {
        opts->permanent = 1;
        return dt_err_set(DT_ERR_SPEC, "%s: dtrain's built-in roles run a TrainJob", job->path);
    }
    const char *tf = getenv("TF_CONFIG"), *me = getenv("DTRAIN_REPLICA"),
               *addr = getenv("DTRAIN_ADDRESS");
    int alone = (!tf || !*tf) && me && *me && addr && *addr;
    if ((!tf || !*tf) && !alone) {
        opts->permanent = 1;
        return dt_err_set(DT_ERR_ARG, "TF_CONFIG is not set (nor DTRAIN_REPLICA and "
                                      "DTRAIN_ADDRESS, for a job's only replica): a role runs as "
                                      "a replica of a job (dtrain run)");
    }
    dt__role r = {.job = job, .spec = job->train, .job_dir = opts->job_dir,
                  .log = opts->log ? opts->log : stderr, .token = getenv("DTRAIN_JOB_TOKEN"),
                  .spec_trainers = spec_trainers(job)};
    dt_err e = alone ? identity_alone(&r, me, addr) : parse_tf_config(&r, tf);
    if (e) {
        r.permanent = 1; /* its environment is wrong: a restart gets the same */
        goto end;
    }
    int ps = job->strategy == DT_STRATEGY_PARAMETER_SERVER;
    if (ps && r.nps == 0) {
        r.permanent = 1;
        e = dt_err_set(DT_ERR_ARG, "TF_CONFIG: cluster.ps: the parameter_server strategy needs "
                                   "at least one ps");
        goto end;
    }
    if (me && *me)
        snprintf(r.name, sizeof r.name, "%.47s", me);
    else
        snprintf(r.name, sizeof r.name, "%s-%d", dt_replica_type_name(r.type), r.index);
    /* Every path a role makes in the job dir fits once it leaves DT__JOB_DIR_ROOM (the
     * TensorBoard files, dt__tb_open, cannot say otherwise). */
    if ((e = dt__path_room(opts->job_dir, DT__JOB_DIR_ROOM, "job dir")) ||
        (e = dt__path(r.ckpt_dir, sizeof r.ckpt_dir, "%s/checkpoints", opts->job_dir)) ||
        (e = dt__path(r.own_dir, sizeof r.own_dir, "%s/replicas/%s", opts->job_dir, r.name))) {
        r.permanent = 1;
        goto end;
    }
    switch (r.type) {
    case DT_REPLICA_TYPE_PS:
        if (ps) {
            e = dt__role_ps(&r);
        } else {
            r.permanent = 1;
            e = dt_err_set(DT_ERR_ARG, "TF_CONFIG: task.type: ps in a job whose strategy is %s",
                           dt_strategy_name(job->strategy));
        }
        break;
    case DT_REPLICA_TYPE_EVALUATOR: e = dt__role_evaluator(&r); break;
    default: e = ps ? dt__role_trainer(&r) : dt__role_allreduce(&r); break;
    }
end:
    /* A spec or shape error is as permanent wherever it arises (a format error is not: on
     * the wire it may be a peer that restarts). */
    if (e && (r.permanent || e == DT_ERR_SPEC || e == DT_ERR_SHAPE)) opts->permanent = 1;
    opts->stopped_by = e ? 0 : r.stopped_by;
    role_free(&r);
    return e;
}

#define PROGRESS_EVERY_S 2.0

void dt__role_progress_step(struct dt_shard_client *sc, dt__role_progress *p, int64_t step, int64_t epoch, double loss, int64_t samples) {
    double now = dt__mono_s();
    if (p->last == 0) {
        p->last = now;
        p->samples_at_last = samples;
    }
    if (isfinite(loss)) {
        p->loss_sum += loss;
        p->loss_n++;
    }
    if (!sc || now - p->last < PROGRESS_EVERY_S) return;
    char text[256];
    snprintf(text, sizeof text,
             "{\"step\": %lld, \"epoch\": %lld, \"loss\": %.6g, \"samples_per_sec\": %.6g, "
             "\"samples\": %lld}",
             (long long)step, (long long)epoch, p->loss_n ? p->loss_sum / (double)p->loss_n : 0.0,
             (double)(samples - p->samples_at_last) / (now - p->last), (long long)samples);
    if (dt_shard_client_post_progress(sc, text)) dt_err_clear(); /* the next one overtakes it */
    p->last = now;
    p->samples_at_last = samples;
    p->loss_sum = 0;
    p->loss_n = 0;
}

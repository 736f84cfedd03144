/*
 * master.c - the job master's life: start or resume, the event loop, the end.
 *
 * Design: one thread, one epoll set, with one registration (a source) per kind of event:
 * the signals that ask the job to stop (a signalfd), the HTTP server (libmicrohttpd in
 * external mode, so handlers run here too) and the backend that runs the replicas
 * (backend/backend.h: its own descriptor says when replicas have ended). Timers (restart
 * delays, the job's deadline, the stop grace period, the table redraw) are folded into
 * epoll_wait's timeout.
 *
 * Every decision is journaled (journal.c) before or right after it is acted on, and the
 * state is mirrored into status.json at most every STATUS_INTERVAL, so `dtrain status`
 * works without the master. A master killed at any point is picked up again by
 * `dtrain run --resume DIR`: it replays the journal, has the backend adopt the replicas
 * that still run (the facts journaled with each launch find them again), settles those that
 * ended meanwhile, and goes on.
 *
 * Restart delays grow as the kubelet's do, but shorter: 0.1 s doubled per restart of the
 * same replica, at most 10 s.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/kube-impl.h"
#include "core/clock-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/train.h"
#include "master/master-impl.h"
#include "master/registry-impl.h"
#include "master/replay-impl.h"
#include "net/http-impl.h"

extern char **environ;

#define STATUS_INTERVAL 0.2 /* seconds between status.json rewrites */
#define TABLE_INTERVAL 0.5
/* A launch the backend could not make for a reason worth retrying (DT_ERR_TIMEOUT,
 * DT_ERR_NETWORK: an API server restarting or answering 503) is tried again after 0.5 s,
 * doubling to 30 s, for up to 5 minutes; only then does the job fail (LaunchFailed). */
#define LAUNCH_RETRY_FIRST_S 0.5
#define LAUNCH_RETRY_MAX_S 30.0
#define LAUNCH_RETRY_BUDGET_S 300.0

typedef struct loop loop;

/* One registration in the event loop per kind of event source: ready() runs when fd is
 * readable. */
typedef struct source {
    int fd;
    void (*ready)(loop *L);
} source;

struct loop {
    dt__master m; /* first: api.c's dt__master is this loop (dt__master_scale) */
    char failed_replica[32]; /* the replica whose end failed the job ("" : none) */
    /* The job as run: a shallow copy of the caller's spec (sharing its strings), whose
     * worker count follows `dtrain scale`; m.job points here. Never freed as a spec. */
    dt_job_spec jobv;
    int epfd, sigfd, lock_fd;
    sigset_t old_mask;
    char self_exe[DT__PATH_MAX];
    char cwd[DT__PATH_MAX];      /* where replicas run unless their spec says otherwise */
    char spec_src[DT__PATH_MAX]; /* the spec as given (absolute), for built-in roles */
    /* Timers are on the monotonic clock (mono()), so that a step of the system clock moves
     * no restart, kill, lease or heartbeat deadline; wall time (dt__wall_now) goes only into
     * the journal, the status and the results. */
    double status_written, table_drawn;
    double start_mono; /* the job's start (st.start_time, a wall time) on mono() */
    double wall_offset; /* wall - mono as the ledger shows it */
    double expire_at; /* next check of shard holders' heartbeats */
    int table_lines;
    /* The replicas of this allreduce TrainJob run `dtrain role` and form rings through the
     * rendezvous (it was started with more than one replica; one alone runs `dtrain train`). */
    int ring_roles;
    /* The ports of the job's processes on this host, the master's own included: held for
     * the job's life so that nothing else, in this job or another, is given one (ports.c). */
    dt__ports *ports;
    int stopping_all; /* the job's replicas are being stopped, tier by tier (stop_tiers) */
    int continuing;   /* resumed a stopped job: it goes on (dt__job_state_reopen) */
    int new_ports;    /* ... on ports chosen anew */
    dt__backend *backend; /* runs the replicas (backend/backend.h) */
    dt__kube *kube;       /* the kubernetes backend's connection; NULL: local */
    json_t *owner;        /* its objects' ownerReference; NULL: none */
    double resource_written; /* the custom resource's status: last written (mono) */
    int resource_dirty;      /* ... and changed since */
    source signals, http, replicas; /* the event loop's sources */
    int http_ready;
    int leaving; /* opts.leave_on_signal: a signal came; the loop ends, the job goes on */
};
/* dt__master_scale (and api.c through it) takes a dt__master for the loop that holds it */
_Static_assert(offsetof(struct loop, m) == 0, "loop.m must come first");

static double mono(void) { return dt__mono_s(); }

static const char *kind_name(const dt_job_spec *job) {
    static const char *const k[] = {[DT_JOB_KIND_TFJOB] = "TFJob",
                                    [DT_JOB_KIND_PYTORCHJOB] = "PyTorchJob",
                                    [DT_JOB_KIND_TRAINJOB] = "TrainJob"};
    return k[job->kind];
}

static const char *type_key(dt_replica_type t) {
    static const char *const k[] = {[DT_REPLICA_TYPE_CHIEF] = "Chief",
                                    [DT_REPLICA_TYPE_MASTER] = "Master",
                                    [DT_REPLICA_TYPE_PS] = "PS",
                                    [DT_REPLICA_TYPE_WORKER] = "Worker",
                                    [DT_REPLICA_TYPE_EVALUATOR] = "Evaluator"};
    return k[t];
}

void dt__master_say(dt__master *m, const char *fmt, ...) {
    FILE *out = m->opts.out;
    if (!out || m->opts.live_table) return;
    char ts[40];
    dt__rfc3339(dt__wall_now(), ts, sizeof ts);
    fprintf(out, "[%.8s] ", ts + 11);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
}
#define say(L, ...) dt__master_say(&(L)->m, __VA_ARGS__)

dt_err dt__master_journal(dt__master *m, json_t *ev) {
    if (!ev) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    if (!m->journal) {
        json_decref(ev);
        return DT_OK;
    }
    json_object_set_new(ev, "time", json_real(dt__wall_now()));
    dt_err e = dt__journal_append(m->journal, ev);
    if (e) dt__master_journal_broken(m, dt_errmsg());
    return e;
}

void dt__master_journal_broken(dt__master *m, const char *what) {
    if (m->journal_broken) return;
    m->journal_broken = 1;
    dt__master_touch(m);
    dt__master_say(m, "error: %s: changes are refused (HTTP 503) until it can be written", what);
}

static void journal(loop *L, json_t *ev) { dt__master_journal(&L->m, ev); }

/* Make the journal durable at a point that must survive a machine crash; said if it cannot
 * be (the events stay in the page cache: a crash of the machine, not of the master, could
 * lose them). */
static void sync_journal(loop *L, const char *what) {
    if (dt__journal_sync(L->m.journal))
        say(L, "error: %s is not durable: %s", what, dt_errmsg());
}

/* The ledger's events go to the same journal, in order with the master's own. */
static void ledger_event(void *ctx, json_t *ev) { journal(ctx, ev); }

/* JOB_DIR/<what fmt says>: DT_OK, or "path too long" and buf "" (core/path-impl.h). Every
 * name the master makes in its dir fits: open_job checks the dir leaves DT__JOB_DIR_ROOM. */
static dt_err path_in(const loop *L, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static dt_err path_in(const loop *L, char *buf, size_t len, const char *fmt, ...) {
    char name[DT__JOB_DIR_ROOM];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof name) {
        buf[0] = '\0';
        return dt_err_set(DT_ERR_ARG, "%s/%s...: path too long", L->m.dir, name);
    }
    return dt__path(buf, len, "%s/%s", L->m.dir, name);
}

/* ---- status.json, result.json, the table ---- */

static void write_json_file(loop *L, const char *name, json_t *j) {
    char path[DT__PATH_MAX];
    if (path_in(L, path, sizeof path, "%s", name)) {
        say(L, "warning: %s", dt_errmsg());
        return;
    }
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    if (!text) return;
    size_t n = strlen(text);
    text[n] = '\n';
    if (dt__write_file_atomic(path, text, n + 1)) say(L, "warning: %s", dt_errmsg());
    free(text);
}

static json_t *status_json(loop *L) {
    return dt__master_status_json(&L->m, L->m.st.finished ? NULL : L->m.url);
}

/* The job's custom resource (opts.kube->status_resource), its status subresource written
 * as the training operator writes a TFJob's: conditions, replicaStatuses (active,
 * succeeded, failed per type), startTime, completionTime, lastReconcileTime. At most once a
 * second while the job runs, and at its end. */
static void write_resource_status(loop *L, const json_t *st) {
    const dt_master_kube *ko = L->m.opts.kube;
    if (!L->kube || !ko || !ko->status_resource) return;
    double now = mono();
    if (!L->m.st.finished && now - L->resource_written < 1.0) {
        L->resource_dirty = 1;
        return;
    }
    L->resource_written = now;
    L->resource_dirty = 0;
    json_t *conds = json_array(), *rs = json_object();
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(st, "conditions"), i, c) json_array_append(conds, c);
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(st, "replicaStatuses"), key, v)
        json_object_set_new(rs, key, json_pack("{s:O, s:O, s:O}", "active",
                                               json_object_get(v, "active"), "succeeded",
                                               json_object_get(v, "succeeded"), "failed",
                                               json_object_get(v, "failed")));
    char ts[40], lr[40];
    json_t *status = json_pack("{s:o, s:o, s:s}", "conditions", conds, "replicaStatuses", rs,
                               "lastReconcileTime", dt__rfc3339(dt__wall_now(), lr, sizeof lr));
    if (L->m.st.start_time > 0)
        json_object_set_new(status, "startTime",
                            json_string(dt__rfc3339(L->m.st.start_time, ts, sizeof ts)));
    if (L->m.st.finished && L->m.st.completion_time > 0)
        json_object_set_new(status, "completionTime",
                            json_string(dt__rfc3339(L->m.st.completion_time, ts, sizeof ts)));
    json_t *patch = json_pack("{s:o}", "status", status);
    char path[700];
    snprintf(path, sizeof path, "%s/status", ko->status_resource);
    long code;
    json_t *resp = NULL;
    if (dt__kube_call(L->kube, "PATCH", path, patch, "application/merge-patch+json", &code, &resp))
        say(L, "warning: the job's resource status: %s", dt_errmsg());
    else if (code != 200) {
        char why[256];
        say(L, "warning: the job's resource status: %s", dt__kube_why(resp, code, why, sizeof why));
    }
    json_decref(resp);
    json_decref(patch);
}

static void write_status(loop *L) {
    json_t *j = status_json(L);
    write_json_file(L, "status.json", j);
    write_resource_status(L, j);
    json_decref(j);
    L->m.dirty = 0;
    L->status_written = mono();
}

static void draw_table(loop *L) {
    FILE *out = L->m.opts.out;
    if (!out || !L->m.opts.live_table) return;
    double now = dt__wall_now();
    if (L->table_lines) fprintf(out, "\033[%dA", L->table_lines);
    int lines = 0;
    fprintf(out, "\033[2Kjob %s  %s  %.0fs  %s\n", L->m.job->name, dt__job_state_phase(&L->m.st),
            L->m.st.start_time > 0 ? now - L->m.st.start_time : 0.0, L->m.url);
    lines++;
    json_t *data = dt__ledger_progress(L->m.ledger);
    json_t *p = dt__master_progress(&L->m, data);
    json_decref(data);
    if (p) {
        char rate[64] = "", eta[48] = "";
        const json_t *v = json_object_get(p, "samplesPerSec");
        if (v) snprintf(rate, sizeof rate, "  %.0f samples/s", json_number_value(v));
        if ((v = json_object_get(p, "etaSeconds")))
            snprintf(eta, sizeof eta, "  ETA %.0fs", json_number_value(v));
        fprintf(out, "\033[2Kprogress %.1f%%  epoch %lld/%lld%s%s\n",
                100 * json_number_value(json_object_get(p, "fraction")),
                (long long)json_integer_value(json_object_get(p, "epoch")),
                (long long)json_integer_value(json_object_get(p, "epochs")), rate, eta);
        lines++;
        json_decref(p);
    }
    fprintf(out, "\033[2K%-16s %-11s %8s %8s %5s %8s %8s %8s %9s\n", "REPLICA", "STATE", "PID",
            "RESTARTS", "EXIT", "AGE", "STEP", "LOSS", "SAMPLES/S");
    lines++;
    for (int i = 0; i < L->m.st.nreplicas; i++) {
        const dt__replica *r = &L->m.st.replicas[i];
        char pid[16] = "-", code[16] = "-";
        if (r->pid > 0 && r->state == DT__REPLICA_RUNNING) snprintf(pid, sizeof pid, "%d", r->pid);
        if (r->exit_code >= 0) snprintf(code, sizeof code, "%d", r->exit_code);
        double age = r->start_time > 0 ? (r->end_time > r->start_time ? r->end_time : now) -
                                             r->start_time
                                       : 0;
        char step[24] = "", loss[24] = "", rate[24] = "";
        if (r->progress && r->state == DT__REPLICA_RUNNING) {
            snprintf(step, sizeof step, "%.0f", json_number_value(json_object_get(r->progress, "step")));
            snprintf(loss, sizeof loss, "%.4f", json_number_value(json_object_get(r->progress, "loss")));
            snprintf(rate, sizeof rate, "%.0f",
                     json_number_value(json_object_get(r->progress, "samples_per_sec")));
        }
        fprintf(out, "\033[2K%-16s %-11s %8s %8d %5s %7.0fs %8s %8s %9s\n", r->name,
                dt__replica_state_name(r->state), pid, r->restarts, code, age, step, loss, rate);
        lines++;
        if (r->state == DT__REPLICA_RESTARTING || r->state == DT__REPLICA_FAILED) {
            char why[400];
            dt__replica_why(r, why, sizeof why);
            fprintf(out, "\033[2K    %s: %.150s\n", dt__replica_state_name(r->state), why);
            lines++;
        }
    }
    fflush(out);
    L->table_lines = lines;
    L->table_drawn = mono();
}

/* ---- launching ---- */

static int replica_port(const loop *L, dt_replica_type t, int index) {
    for (int i = 0; i < L->m.st.nreplicas; i++)
        if (L->m.st.replicas[i].type == t && L->m.st.replicas[i].index == index)
            return L->m.st.replicas[i].port;
    return 0;
}

/* After a launch that failed with e: when e is worth retrying and the retries' time is not
 * spent, the replica waits (Restarting) to be launched again, and 1 is returned. */
static int retry_launch(loop *L, dt__replica *r, dt_err e, double now) {
    if (e != DT_ERR_TIMEOUT && e != DT_ERR_NETWORK) return 0;
    if (r->launch_failing_since <= 0) r->launch_failing_since = now;
    if (now - r->launch_failing_since >= LAUNCH_RETRY_BUDGET_S) {
        dt_err_wrap(e, "%s: not launched after trying for %.0f s", r->name,
                    now - r->launch_failing_since);
        return 0;
    }
    double delay = LAUNCH_RETRY_FIRST_S;
    for (int i = 0; i < r->launch_retries && delay < LAUNCH_RETRY_MAX_S; i++) delay *= 2;
    if (delay > LAUNCH_RETRY_MAX_S) delay = LAUNCH_RETRY_MAX_S;
    r->launch_retries++;
    r->state = DT__REPLICA_RESTARTING;
    r->restart_at = now + delay;
    snprintf(r->message, sizeof r->message, "launch failed (%s), trying again in %.1f s: %.220s",
             dt_strerror(e), delay, dt_errmsg());
    say(L, "%s: %s", r->name, r->message);
    dt__master_touch(&L->m);
    return 1;
}

static dt_err launch(loop *L, dt__replica *r) {
    const dt_job_spec *job = L->m.job;
    const dt_replica_spec *rs = &job->replicas[r->type];
    /* ports[type][i] as dt_job_env wants them */
    int *ports_of[DT_REPLICA_TYPE__COUNT] = {0};
    dt_err e = DT_OK;
    dt_env_var *env = NULL;
    int nenv = 0;
    char **argv = NULL;
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) {
        int n = job->replicas[t].present ? job->replicas[t].replicas : 0;
        ports_of[t] = calloc((size_t)(n ? n : 1), sizeof(int));
        if (!ports_of[t]) {
            e = dt_err_set(DT_ERR_NOMEM, "out of memory");
            goto end;
        }
        for (int i = 0; i < n; i++) ports_of[t][i] = replica_port(L, (dt_replica_type)t, i);
    }
    const int *const ports[DT_REPLICA_TYPE__COUNT] = {ports_of[0], ports_of[1], ports_of[2],
                                                       ports_of[3], ports_of[4]};
    const dt_master_kube *ko = L->m.opts.kube;
    dt_job_env_opts eo = {.kubernetes = L->backend->ops->kubernetes_addresses,
                          .namespace = L->kube ? dt__kube_namespace(L->kube) : NULL,
                          .bind_host = L->m.opts.bind_addr,
                          .hosts = L->m.opts.netns_hosts,
                          .nhosts = L->m.opts.nnetns,
                          .ports = ports,
                          .master_url = ko && ko->advertise_url ? ko->advertise_url : L->m.url,
                          .job_token = L->m.token};
    if ((e = dt_job_env(job, r->type, r->index, &eo, &env, &nenv))) goto end;

    char replica_dir[DT__PATH_MAX], spec_abs[DT__PATH_MAX];
    if (rs->argv || job->kind != DT_JOB_KIND_TRAINJOB) {
        argv = rs->argv; /* NULL: the image's entrypoint (kubernetes) */
    } else if (job->strategy == DT_STRATEGY_PARAMETER_SERVER || L->ring_roles) {
        /* dtrain's built-in roles (`dtrain role`): each finds out who it is from TF_CONFIG
         * and DTRAIN_REPLICA; the job dir root holds every replica's own dir. The trainers
         * of an allreduce job form their rings through the master (rendezvous.c). */
        if ((e = dt__path(spec_abs, sizeof spec_abs, "%s", L->spec_src))) goto end;
        static char role_arg[] = "role", dir_opt[] = "--job-dir";
        argv = calloc(6, sizeof *argv);
        if (!argv) {
            e = dt_err_set(DT_ERR_NOMEM, "out of memory");
            goto end;
        }
        argv[0] = L->self_exe;
        argv[1] = role_arg;
        argv[2] = spec_abs;
        argv[3] = dir_opt;
        argv[4] = L->m.dir;
    } else {
        /* dtrain's built-in role: the single replica of a TrainJob trains the model. */
        if ((e = path_in(L, replica_dir, sizeof replica_dir, "replicas/%s", r->name)) ||
            (e = dt__path(spec_abs, sizeof spec_abs, "%s", L->spec_src)))
            goto end;
        static char train_arg[] = "train", dir_opt[] = "--job-dir", quiet[] = "--no-progress";
        argv = calloc(7, sizeof *argv);
        if (!argv) {
            e = dt_err_set(DT_ERR_NOMEM, "out of memory");
            goto end;
        }
        argv[0] = L->self_exe;
        argv[1] = train_arg;
        argv[2] = spec_abs;
        argv[3] = dir_opt;
        argv[4] = replica_dir;
        argv[5] = quiet;
    }

    dt__backend_launch l = {.name = r->name,
                            .type = r->type,
                            .index = r->index,
                            .attempt = r->attempt + 1,
                            .argv = argv,
                            .env = env,
                            .nenv = nenv,
                            .cwd = rs->working_dir ? rs->working_dir : L->cwd};
    if (L->m.opts.nnetns > 0)
        l.netns = L->m.opts.netns_names[dt_job_position(job, r->type, r->index) %
                                         L->m.opts.nnetns];
    json_t *facts = NULL;
    void *ticket = NULL;
    if ((e = L->backend->ops->launch(L->backend, &l, &facts, &ticket))) goto end;
    /* Journaled before it runs: a master that dies before this line started nothing (the
     * backend waits for the go), so its successor launches the replica once. */
    json_t *ev = json_pack("{s:s, s:s, s:i}", "ev", "launch", "replica", r->name, "attempt",
                           r->attempt + 1);
    if (ev && facts) json_object_update(ev, facts);
    if (dt__master_journal(&L->m, ev)) {
        L->backend->ops->go(L->backend, ticket, 0);
        json_decref(facts);
        e = dt_err_set(DT_ERR_IO, "%s: not launched: the journal cannot be written (%s)",
                       r->name, dt__journal_why(L->m.journal));
        goto end;
    }
    if ((e = L->backend->ops->go(L->backend, ticket, 1))) {
        json_decref(facts);
        goto end;
    }
    json_decref(r->facts);
    r->facts = facts;
    r->attempt++;
    r->restarts = r->attempt - 1;
    r->pid = (pid_t)json_integer_value(json_object_get(facts, "pid"));
    r->state = DT__REPLICA_RUNNING;
    r->message[0] = '\0';
    r->launch_retries = 0;
    r->launch_failing_since = 0;
    r->start_time = dt__wall_now();
    r->end_time = 0;
    r->stopping = 0;
    r->kill_at = 0;
    dt__master_touch(&L->m);
    char pid[24] = "";
    if (r->pid > 0) snprintf(pid, sizeof pid, ", pid %d", (int)r->pid);
    if (r->attempt > 1) say(L, "%s started again (attempt %d%s)", r->name, r->attempt, pid);
end:
    if (argv && argv != rs->argv) free(argv);
    dt_job_env_free(env, nenv);
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) free(ports_of[t]);
    return e;
}

/* ---- the end of a job ---- */

/* SIGTERM to a running replica; SIGKILL follows after the grace period (tick). A built-in
 * role uses the time to end its step and save what it owns; a ring member drains its ring
 * first, so its ring is not broken here but when it has left (exited). */
static void stop_one(loop *L, dt__replica *r) {
    if (r->state != DT__REPLICA_RUNNING || r->stopping) return;
    L->backend->ops->signal(L->backend, r->name, SIGTERM);
    r->stopping = 1;
    r->kill_at = mono() + L->m.opts.stop_grace_ms / 1000.0;
    dt__master_touch(&L->m);
}

/* Does r hold what other replicas' last steps need (a PS: the values; an evaluator: the
 * last checkpoint's evaluation)? Those are stopped after the trainers have ended. */
static int stopped_last(const dt__replica *r) {
    return r->type == DT_REPLICA_TYPE_PS || r->type == DT_REPLICA_TYPE_EVALUATOR;
}

/* The stop in progress (L->stopping_all), one tier at a time: the trainers first, so that
 * they finish their shards against live PS and the chief's checkpoint includes them; the
 * PS and the evaluator once no trainer runs (each trainer gets its grace period). With
 * `dtrain stop --now`, SIGKILL to all at once: nothing is saved. */
static void stop_tiers(loop *L) {
    int trainers = 0;
    for (int i = 0; i < L->m.st.nreplicas; i++) {
        dt__replica *r = &L->m.st.replicas[i];
        if (r->state != DT__REPLICA_RUNNING) continue;
        if (L->m.stop_now) {
            if (!r->stopping || r->kill_at > 0)
                L->backend->ops->signal(L->backend, r->name, SIGKILL);
            r->stopping = 1;
            r->kill_at = 0;
            continue;
        }
        if (!stopped_last(r)) {
            stop_one(L, r);
            trainers++;
        }
    }
    for (int i = 0; !trainers && !L->m.stop_now && i < L->m.st.nreplicas; i++)
        stop_one(L, &L->m.st.replicas[i]);
}

static void stop_replicas(loop *L) {
    for (int i = 0; i < L->m.st.nreplicas; i++) {
        dt__replica *r = &L->m.st.replicas[i];
        if (r->state == DT__REPLICA_RESTARTING || r->state == DT__REPLICA_PENDING)
            r->state = DT__REPLICA_STOPPED;
    }
    L->stopping_all = 1;
    stop_tiers(L);
    dt__master_touch(&L->m);
}

static void finish(loop *L, dt_job_outcome outcome, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finish(loop *L, dt_job_outcome outcome, const char *reason, const char *fmt, ...) {
    if (L->m.st.finished) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    double now = dt__wall_now();
    L->m.st.finished = 1;
    L->m.st.outcome = outcome;
    L->m.st.completion_time = now;
    dt__job_state_condition(&L->m.st,
                            outcome == DT_JOB_OUTCOME_SUCCEEDED ? DT__COND_SUCCEEDED
                                                                : DT__COND_FAILED,
                            reason, msg, now);
    static const char *const names[] = {"Succeeded", "Failed", "Stopped"};
    journal(L, json_pack("{s:s, s:s, s:s, s:s}", "ev", "finish", "outcome", names[outcome],
                         "reason", reason, "message", msg));
    say(L, "job %s: %s", names[outcome], msg);
    /* Clean-up: a stop request stops everything; otherwise the cleanPodPolicy decides. */
    if (outcome == DT_JOB_OUTCOME_STOPPED || L->m.job->clean_pod_policy != DT_CLEAN_POD_POLICY_NONE)
        stop_replicas(L);
    dt__master_touch(&L->m);
}

void dt__master_request_stop(dt__master *m, const char *why, int now) {
    if (now && !m->stop_now) {
        m->stop_now = 1; /* also when a stop is under way: its grace is cut short */
        dt__master_touch(m);
    }
    if (m->stop_requested) return;
    m->stop_requested = 1;
    snprintf(m->stop_reason, sizeof m->stop_reason, "%s", why);
}

dt_err dt__master_record_report(dt__master *m, dt__replica *r, json_t *report) {
    json_decref(r->report);
    r->report = report;
    dt__series_report(m, r, report);
    json_t *ev = json_pack("{s:s, s:s, s:O}", "ev", "report", "replica", r->name, "report", report);
    dt__master_touch(m);
    return dt__master_journal(m, ev);
}

/* ---- replica exits and the policies ---- */

/* r failed for good (state Failed, exit_code its code): the job fails; under elasticPolicy
 * a lost worker fails it only when fewer than minReplicas workers are left, and the job may
 * even be done (the other workers may all have succeeded). */
/* The last line a replica wrote to its log (its own account of why it ended), or "". */
static void last_words(loop *L, const dt__replica *r, char *out, size_t size) {
    L->backend->ops->last_line(L->backend, r->name, out, size);
    for (char *c = out; *c; c++) /* one line of ASCII in a condition message and JSON */
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = (unsigned char)*c < 0x20 ? ' ' : '?';
}

static void failed_for_good(loop *L, const dt__replica *r) {
    const dt_job_spec *job = L->m.job;
    if (!L->failed_replica[0]) snprintf(L->failed_replica, sizeof L->failed_replica, "%s", r->name);
    dt_restart_policy policy = job->replicas[r->type].restart;
    int code = r->exit_code;
    char words[320], why[340] = "";
    last_words(L, r, words, sizeof words);
    if (words[0]) snprintf(why, sizeof why, ": %s", words);
    int backoff = dt__policy_on_exit(policy, code) == DT__EXIT_RESTART;
    if (r->type == DT_REPLICA_TYPE_WORKER && job->elastic_min_replicas > 0) {
        char how[64];
        if (backoff)
            snprintf(how, sizeof how, "backoffLimit %lld reached", (long long)job->backoff_limit);
        else
            snprintf(how, sizeof how, "restartPolicy %s", dt_restart_policy_name(policy));
        int total, left = dt__policy_workers_left(&L->m.st, &total);
        if (dt__policy_worker_loss_ok(job, &L->m.st)) {
            say(L,
                "%s failed for good (exit %d, %s); %d of %d workers remain, "
                "elasticPolicy.minReplicas %d",
                r->name, code, how, left, total, job->elastic_min_replicas);
            if (dt__policy_job_succeeded(job, &L->m.st))
                finish(L, DT_JOB_OUTCOME_SUCCEEDED, "Succeeded", "%s %s successfully completed.",
                       kind_name(job), job->name);
            return;
        }
        finish(L, DT_JOB_OUTCOME_FAILED, backoff ? "BackoffLimitExceeded" : "Failed",
               "%s %s has failed because %d of %d workers remain, fewer than "
               "elasticPolicy.minReplicas %d (%s exited with code %d, %s)%s",
               kind_name(job), job->name, left, total, job->elastic_min_replicas, r->name, code,
               how, words[0] ? why : ".");
    } else if (backoff) {
        finish(L, DT_JOB_OUTCOME_FAILED, "BackoffLimitExceeded",
               "%s %s has failed because it has reached the specified backoff limit "
               "(%lld restarts; %s exited with code %d)%s",
               kind_name(job), job->name, (long long)job->backoff_limit, r->name, code, why);
    } else {
        finish(L, DT_JOB_OUTCOME_FAILED, "Failed",
               "%s %s has failed because 1 %s replica(s) failed (%s exited with code %d, "
               "restartPolicy %s)%s",
               kind_name(job), job->name, type_key(r->type), r->name, code,
               dt_restart_policy_name(policy), words[0] ? why : ".");
    }
}

/* A resumed master: the decisions its predecessor may have died before taking (an exit
 * journaled, its consequence not), from the replayed states alone. A worker lost earlier
 * under elasticPolicy fails nothing while enough are left. */
static void settle_resumed(loop *L) {
    for (int i = 0; i < L->m.st.nreplicas && !L->m.st.finished; i++)
        if (L->m.st.replicas[i].state == DT__REPLICA_FAILED)
            failed_for_good(L, &L->m.st.replicas[i]);
    if (!L->m.st.finished && dt__policy_job_succeeded(L->m.job, &L->m.st))
        finish(L, DT_JOB_OUTCOME_SUCCEEDED, "Succeeded", "%s %s successfully completed.",
               kind_name(L->m.job), L->m.job->name);
}

static void exited(loop *L, dt__replica *r, int code) {
    double now = dt__wall_now(), t = mono();
    r->exit_code = code;
    r->end_time = now;
    r->pid = 0;
    dt__master_touch(&L->m);
    char why[64];
    snprintf(why, sizeof why, "%s exited with code %d", r->name, code);
    int requeued = dt__ledger_release(L->m.ledger, r->name, why, t);
    if (requeued) say(L, "%s: %d shard(s) re-queued", why, requeued);
    snprintf(why, sizeof why, "exited with code %d", code);
    dt__rdzv_replica_gone(&L->m, r->name, why);
    if (r->removing) {
        /* Scaled away: its end decides nothing; it leaves the table at the next sweep. */
        r->gone = 1;
        L->backend->ops->forget(L->backend, r->name);
        journal(L, json_pack("{s:s, s:s, s:i, s:i, s:s}", "ev", "exit", "replica", r->name,
                             "attempt", r->attempt, "code", code, "state", "Removed"));
        say(L, "%s exited with code %d: removed (scaled down)", r->name, code);
        return;
    }
    const dt_job_spec *job = L->m.job;
    dt_restart_policy policy = job->replicas[r->type].restart;
    if (L->m.st.finished || r->stopping) {
        r->state = code == 0 && !r->stopping ? DT__REPLICA_SUCCEEDED : DT__REPLICA_STOPPED;
    } else {
        switch (dt__policy_on_exit(policy, code)) {
        case DT__EXIT_SUCCEEDED:
            r->state = DT__REPLICA_SUCCEEDED;
            break;
        case DT__EXIT_FAILED:
            r->state = DT__REPLICA_FAILED;
            break;
        case DT__EXIT_RESTART:
            if (job->backoff_limit >= 0 && L->m.st.total_restarts >= job->backoff_limit) {
                r->state = DT__REPLICA_FAILED;
            } else {
                r->state = DT__REPLICA_RESTARTING;
                double delay = 0.1 * pow(2.0, r->restarts < 7 ? r->restarts : 7);
                r->restart_at = t + (delay > 10 ? 10 : delay);
            }
            break;
        }
    }
    journal(L, json_pack("{s:s, s:s, s:i, s:i, s:s}", "ev", "exit", "replica", r->name, "attempt",
                         r->attempt, "code", code, "state", dt__replica_state_name(r->state)));
    char words[320] = "", ex[48];
    if (code != 0) last_words(L, r, words, sizeof words);
    dt__replica_exit_text(code, ex, sizeof ex);
    const char *sep = words[0] ? ": " : "";
    switch (r->state) { /* why, for a person (the status, dtrain status, the dashboard) */
    case DT__REPLICA_RESTARTING:
        if (job->backoff_limit >= 0)
            snprintf(r->message, sizeof r->message, "%s; restart %d of backoffLimit %lld, in %.1f s%s%.200s",
                     ex, L->m.st.total_restarts + 1, (long long)job->backoff_limit, r->restart_at - t,
                     sep, words);
        else
            snprintf(r->message, sizeof r->message, "%s; restart %d, in %.1f s%s%.200s", ex,
                     r->restarts + 1, r->restart_at - t, sep, words);
        break;
    case DT__REPLICA_FAILED:
        if (dt__policy_on_exit(policy, code) == DT__EXIT_RESTART)
            snprintf(r->message, sizeof r->message, "%s; backoffLimit %lld reached%s%.200s", ex,
                     (long long)job->backoff_limit, sep, words);
        else
            snprintf(r->message, sizeof r->message, "%s; restartPolicy %s%s%.200s", ex,
                     dt_restart_policy_name(policy), sep, words);
        break;
    case DT__REPLICA_STOPPED:
        snprintf(r->message, sizeof r->message, "%s after the master stopped it%s%.120s%s", ex,
                 L->m.stop_reason[0] ? " (" : "", L->m.stop_reason, L->m.stop_reason[0] ? ")" : "");
        break;
    default:
        snprintf(r->message, sizeof r->message, "%s", ex);
        break;
    }
    if (code != 0 && r->state == DT__REPLICA_RESTARTING) {
        say(L, "%s exited with code %d: %s%s%s%s", r->name, code, dt__replica_state_name(r->state),
            words[0] ? " (" : "", words, words[0] ? ")" : "");
    } else {
        say(L, "%s exited with code %d: %s", r->name, code, dt__replica_state_name(r->state));
    }
    if (L->m.st.finished) return;

    char msg[256];
    switch (r->state) {
    case DT__REPLICA_SUCCEEDED:
        if (dt__policy_job_succeeded(job, &L->m.st))
            finish(L, DT_JOB_OUTCOME_SUCCEEDED, "Succeeded", "%s %s successfully completed.",
                   kind_name(job), job->name);
        break;
    case DT__REPLICA_FAILED:
        failed_for_good(L, r);
        break;
    case DT__REPLICA_RESTARTING:
        snprintf(msg, sizeof msg,
                 "%s %s is restarting because 1 %s replica(s) failed (%s exited with code %d).",
                 kind_name(job), job->name, type_key(r->type), r->name, code);
        char reason[64];
        snprintf(reason, sizeof reason, "%sRestarting", kind_name(job));
        dt__job_state_condition(&L->m.st, DT__COND_RESTARTING, reason, msg, now);
        journal(L, json_pack("{s:s, s:s, s:s, s:s}", "ev", "condition", "type", "Restarting",
                             "reason", reason, "message", msg));
        break;
    default:
        break;
    }
}

/* The backend saw replica `name` end. */
static void replica_ended(void *ctx, const char *name, int code) {
    loop *L = ctx;
    dt__replica *r = dt__job_state_find(&L->m.st, name);
    if (r && r->state == DT__REPLICA_RUNNING) exited(L, r, code >= 0 ? code : 128 + SIGKILL);
}

static void replicas_ready(loop *L) { L->backend->ops->events(L->backend, replica_ended, L); }

static void set_running(loop *L) {
    char reason[64], msg[256];
    snprintf(reason, sizeof reason, "%sRunning", kind_name(L->m.job));
    snprintf(msg, sizeof msg, "%s %s is running.", kind_name(L->m.job), L->m.job->name);
    dt__job_state_condition(&L->m.st, DT__COND_RUNNING, reason, msg, dt__wall_now());
    journal(L, json_pack("{s:s, s:s, s:s, s:s}", "ev", "condition", "type", "Running", "reason",
                         reason, "message", msg));
    dt__master_touch(&L->m);
}

/* Timers: relaunches due, the deadline, the stop grace. */
static void tick(loop *L) {
    double now = mono();
    const dt_job_spec *job = L->m.job;
    /* The wall-clock offset of the times the ledger shows: moved only by a real step of the
     * system clock, not by the two clocks' jitter (a status must not change by itself). */
    double offset = dt__wall_now() - now;
    if (fabs(offset - L->wall_offset) > 0.5) {
        L->wall_offset = offset;
        dt__ledger_set_clock(L->m.ledger, offset);
    }
    for (int i = 0; i < L->m.st.nreplicas; i++) /* scaled away and ended: its port goes */
        if (L->m.st.replicas[i].gone) dt__ports_release(L->ports, L->m.st.replicas[i].port);
    if (dt__job_state_sweep(&L->m.st)) dt__master_touch(&L->m);
    if (L->m.stop_requested && !L->m.st.finished) {
        char reason[64];
        snprintf(reason, sizeof reason, "%sStopped", kind_name(job));
        finish(L, DT_JOB_OUTCOME_STOPPED, reason, "%s %s was stopped: %s.", kind_name(job),
               job->name, L->m.stop_reason);
    }
    if (L->m.journal_broken && dt__journal_ok(L->m.journal)) {
        L->m.journal_broken = 0;
        dt__master_touch(&L->m);
        say(L, "the journal is written again: changes are accepted");
    }
    if (!L->m.st.finished && dt__journal_lost(L->m.journal))
        finish(L, DT_JOB_OUTCOME_FAILED, "JournalLost",
               "%s %s has failed: its journal could not be written for too long (%s) and "
               "events were lost; it could not be resumed faithfully.",
               kind_name(job), job->name, dt__journal_why(L->m.journal));
    /* While the journal cannot be written, replicas cannot report (503): nothing expires. */
    if (!L->m.st.finished && now >= L->expire_at && !L->m.journal_broken) {
        int n = dt__ledger_expire(L->m.ledger, now, L->m.opts.heartbeat_timeout_ms / 1000.0);
        if (n) {
            say(L, "%d shard(s) re-queued: their replicas sent no heartbeat for %.1fs", n,
                L->m.opts.heartbeat_timeout_ms / 1000.0);
            dt__master_touch(&L->m);
        }
        if ((n = dt__ledger_expire_leases(L->m.ledger, now))) {
            say(L, "%d shard(s) re-queued: held past their lease deadline without a report", n);
            dt__master_touch(&L->m);
        }
        L->expire_at = now + 0.5;
        char why[256];
        if (dt__ledger_failed(L->m.ledger, why, sizeof why))
            finish(L, DT_JOB_OUTCOME_FAILED, "ShardFailed", "%s", why);
    }
    if (!L->m.st.finished && job->active_deadline_seconds >= 0 && L->m.st.start_time > 0 &&
        now - L->start_mono >= (double)job->active_deadline_seconds)
        finish(L, DT_JOB_OUTCOME_FAILED, "DeadlineExceeded",
               "%s %s has failed because it was active longer than specified deadline (%llds).",
               kind_name(job), job->name, (long long)job->active_deadline_seconds);
    if (!L->m.st.finished) {
        int relaunched = 0, restarting = 0;
        for (int i = 0; i < L->m.st.nreplicas; i++) {
            dt__replica *r = &L->m.st.replicas[i];
            if (r->state != DT__REPLICA_RESTARTING) continue;
            /* no launch that cannot be journaled: it waits for the journal */
            if (r->restart_at > now || L->m.journal_broken) {
                restarting = 1;
                continue;
            }
            dt_err le = launch(L, r);
            if (le) {
                if (L->m.journal_broken || retry_launch(L, r, le, now)) {
                    restarting = 1;
                    continue;
                }
                say(L, "%s", dt_errmsg());
                finish(L, DT_JOB_OUTCOME_FAILED, "LaunchFailed", "%s", dt_errmsg());
                break;
            }
            if (r->attempt > 1) L->m.st.total_restarts++; /* not a first launch retried */
            relaunched = 1;
        }
        if (relaunched && !restarting && !L->m.st.finished) set_running(L);
    }
    if (L->stopping_all) stop_tiers(L);
    for (int i = 0; i < L->m.st.nreplicas; i++) {
        dt__replica *r = &L->m.st.replicas[i];
        if (r->state == DT__REPLICA_RUNNING && r->stopping && r->kill_at > 0 && now >= r->kill_at) {
            L->backend->ops->signal(L->backend, r->name, SIGKILL);
            r->kill_at = 0;
        }
    }
}

static int replicas_running(const loop *L) {
    for (int i = 0; i < L->m.st.nreplicas; i++) {
        const dt__replica *r = &L->m.st.replicas[i];
        if (r->state == DT__REPLICA_RUNNING &&
            (r->stopping || L->m.job->clean_pod_policy != DT_CLEAN_POD_POLICY_NONE ||
             L->m.st.outcome == DT_JOB_OUTCOME_STOPPED))
            return 1;
    }
    return 0;
}

static double next_deadline(const loop *L) {
    double t = INFINITY;
    for (int i = 0; i < L->m.st.nreplicas; i++) {
        const dt__replica *r = &L->m.st.replicas[i];
        if (r->state == DT__REPLICA_RESTARTING && r->restart_at < t) t = r->restart_at;
        if (r->state == DT__REPLICA_RUNNING && r->stopping && r->kill_at > 0 && r->kill_at < t)
            t = r->kill_at;
    }
    const dt_job_spec *job = L->m.job;
    if (!L->m.st.finished && job->active_deadline_seconds >= 0 && L->m.st.start_time > 0) {
        double d = L->start_mono + (double)job->active_deadline_seconds;
        if (d < t) t = d;
    }
    if (!L->m.st.finished && L->expire_at < t) t = L->expire_at;
    if (L->m.dirty) {
        double s = L->status_written + STATUS_INTERVAL;
        if (s < t) t = s;
    }
    if (L->resource_dirty && L->resource_written + 1.0 < t) t = L->resource_written + 1.0;
    if (L->m.opts.live_table) {
        double s = L->table_drawn + TABLE_INTERVAL;
        if (s < t) t = s;
    }
    return t;
}

/* ---- set-up ---- */

/* k new ports into ports[], held (ports.c); on failure none is held. */
static dt_err take_ports(loop *L, int k, int *ports) {
    for (int i = 0; i < k; i++) {
        dt_err e = dt__ports_take(L->ports, &ports[i]);
        if (e) {
            while (i-- > 0) dt__ports_release(L->ports, ports[i]);
            return e;
        }
    }
    return DT_OK;
}

static void release_ports(loop *L, const int *ports, int k) {
    for (int i = 0; i < k; i++) dt__ports_release(L->ports, ports[i]);
}

/* A fresh start: the master's own port (unless given) and every replica's. */
static dt_err alloc_ports(loop *L, int *http_port) {
    int ports[DT__MAX_REPLICAS], busy;
    dt_err e;
    if (*http_port) { /* --port N: held too, so that no replica is given it */
        if ((e = dt__ports_hold(L->ports, *http_port, &busy))) return e;
        if (busy) say(L, "warning: port %d (--port) is held by another dtrain job", *http_port);
    } else if ((e = dt__ports_take(L->ports, http_port))) {
        return e;
    }
    if ((e = take_ports(L, L->m.st.nreplicas, ports))) return e;
    for (int i = 0; i < L->m.st.nreplicas; i++) L->m.st.replicas[i].port = ports[i];
    return DT_OK;
}

/* A resumed master holds again the ports its journal gives (its own and the replicas'). */
static dt_err hold_ports(loop *L, int http_port) {
    int busy;
    dt_err e = dt__ports_hold(L->ports, http_port, &busy);
    for (int i = 0; !e && i < L->m.st.nreplicas; i++) {
        const dt__replica *r = &L->m.st.replicas[i];
        if (!(e = dt__ports_hold(L->ports, r->port, &busy)) && busy)
            say(L, "warning: port %d of %s is held by another dtrain job on this host: the two "
                   "may clash", r->port, r->name);
    }
    return e;
}

/* ---- scaling the workers ---- */

static int worker_count(const loop *L) {
    const dt_replica_spec *w = &L->jobv.replicas[DT_REPLICA_TYPE_WORKER];
    return w->present ? w->replicas : 0;
}

static void set_worker_count(loop *L, int n) {
    dt_replica_spec *w = &L->jobv.replicas[DT_REPLICA_TYPE_WORKER];
    if (!w->present) { /* a TrainJob without workers so far: dtrain's role defaults */
        w->present = 1;
        w->restart = DT_RESTART_POLICY_EXIT_CODE;
    }
    w->replicas = n;
}

/* Can this job's workers be scaled to n? DT_ERR_ARG saying why not. */
static dt_err scale_check(const loop *L, int n) {
    const dt_job_spec *job = &L->jobv;
    if (job->kind == DT_JOB_KIND_PYTORCHJOB)
        return dt_err_set(DT_ERR_ARG,
                          "a PyTorchJob cannot be scaled: its replicas were told WORLD_SIZE and "
                          "RANK when they started, and a new world needs torchrun's elastic "
                          "rendezvous, which dtrain does not provide");
    if (job->kind == DT_JOB_KIND_TRAINJOB && job->strategy != DT_STRATEGY_PARAMETER_SERVER &&
        !L->ring_roles)
        return dt_err_set(DT_ERR_ARG,
                          "TrainJob '%s' was started with one replica, which trains alone "
                          "(dtrain train) and takes no part in all-reduce rings: it cannot be "
                          "scaled (start it with 2 or more workers to scale it)",
                          job->name);
    if (job->pytorch_env)
        return dt_err_set(DT_ERR_ARG,
                          "this job sets pytorchEnv: its replicas were told WORLD_SIZE and RANK "
                          "when they started, so it cannot be scaled");
    if (job->kind == DT_JOB_KIND_TFJOB && !job->replicas[DT_REPLICA_TYPE_WORKER].present)
        return dt_err_set(DT_ERR_ARG,
                          "job '%s' declares no Worker replicas: nothing to scale (a Worker spec, "
                          "even with replicas: 0, gives the command that new workers run)",
                          job->name);
    if (n < 0 || n > DT__MAX_REPLICAS)
        return dt_err_set(DT_ERR_ARG, "workers: expected an integer in 0..%d, got %d",
                          DT__MAX_REPLICAS, n);
    if (job->elastic_min_replicas > 0 && n < job->elastic_min_replicas)
        return dt_err_set(DT_ERR_ARG, "workers: %d is below elasticPolicy.minReplicas %d", n,
                          job->elastic_min_replicas);
    int chief = 0;
    for (int t = DT_REPLICA_TYPE_CHIEF; t <= DT_REPLICA_TYPE_MASTER; t++)
        chief |= job->replicas[t].present && job->replicas[t].replicas > 0;
    if (n == 0 && !chief)
        return dt_err_set(DT_ERR_ARG,
                          "workers: 0 would leave job '%s' without the replicas that decide its "
                          "success (it has no chief or master): keep at least 1",
                          job->name);
    if (L->m.st.nreplicas - worker_count(L) + n > DT__MAX_REPLICAS)
        return dt_err_set(DT_ERR_ARG, "workers: %d would make more than %d replicas in all", n,
                          DT__MAX_REPLICAS);
    return DT_OK;
}

/* Worker r is scaled away: a running one is stopped (SIGTERM, then SIGKILL) and leaves the
 * table when it has ended (exited); any other one leaves at once. (Replayed: replay.c.) */
static void remove_worker(loop *L, int i) {
    dt__replica *r = &L->m.st.replicas[i];
    if (r->state == DT__REPLICA_RUNNING) {
        r->removing = 1;
        stop_one(L, r);
        return;
    }
    dt__ledger_release(L->m.ledger, r->name, "scaled away", mono());
    if (L->ports) dt__ports_release(L->ports, r->port);
    dt__job_state_remove(&L->m.st, i);
}

dt_err dt__master_scale(dt__master *m, int n, json_t **added, json_t **removed) {
    *added = *removed = NULL;
    if (m->st.finished || m->stop_requested)
        return dt_err_set(DT_ERR_STATE, "job '%s' has finished (%s): it cannot be scaled",
                          m->job->name, dt__job_state_phase(&m->st));
    if (!m->has_loop) /* before the loop is touched: the routes' fuzz harness has none */
        return dt_err_set(DT_ERR_STATE, "job '%s' cannot be scaled: its master runs no event loop",
                          m->job->name);
    loop *L = (loop *)m; /* m is the loop's first member */
    dt_err e;
    if ((e = scale_check(L, n))) return e;
    int cur = worker_count(L);
    for (int k = cur; k < n; k++) {
        char name[32];
        snprintf(name, sizeof name, "worker-%d", k);
        if (dt__job_state_find(&m->st, name))
            return dt_err_set(DT_ERR_STATE,
                              "%s is still stopping after it was scaled away: scale up again "
                              "once it has ended",
                              name);
    }
    int ports[DT__MAX_REPLICAS];
    if (n > cur && (e = take_ports(L, n - cur, ports))) return e;
    json_t *add = json_array(), *rem = json_array(), *pj = json_object();
    if (!add || !rem || !pj) {
        json_decref(add);
        json_decref(rem);
        json_decref(pj);
        if (n > cur) release_ports(L, ports, n - cur);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    for (int k = cur; k < n; k++) {
        char name[32];
        snprintf(name, sizeof name, "worker-%d", k);
        json_array_append_new(add, json_string(name));
        json_object_set_new(pj, name, json_integer(ports[k - cur]));
    }
    for (int i = 0; i < m->st.nreplicas; i++) {
        const dt__replica *r = &m->st.replicas[i];
        if (r->type == DT_REPLICA_TYPE_WORKER && r->index >= n && !r->removing)
            json_array_append_new(rem, json_string(r->name));
    }
    /* Journaled first: a master that dies from here on is resumed with the new count. */
    journal(L, json_pack("{s:s, s:i, s:i, s:O, s:O, s:o}", "ev", "scale", "workers", n, "from",
                         cur, "added", add, "removed", rem, "ports", pj));
    sync_journal(L, "the scale");
    set_worker_count(L, n);
    for (int i = m->st.nreplicas - 1; i >= 0; i--) {
        const dt__replica *r = &m->st.replicas[i];
        if (r->type == DT_REPLICA_TYPE_WORKER && r->index >= n && !r->removing)
            remove_worker(L, i);
    }
    /* Every new worker is in the table (with its port) before the first is launched: each
     * one's TF_CONFIG lists them all. */
    for (int k = cur; k < n; k++) {
        dt__replica *r = NULL;
        if ((e = dt__job_state_add(&m->st, DT_REPLICA_TYPE_WORKER, k, &r))) break;
        r->port = ports[k - cur];
    }
    for (int k = cur; k < n && !e && !m->st.finished; k++) {
        char name[32];
        snprintf(name, sizeof name, "worker-%d", k);
        dt__replica *r = dt__job_state_find(&m->st, name);
        if (r && r->state == DT__REPLICA_PENDING && launch(L, r)) {
            say(L, "%s", dt_errmsg());
            finish(L, DT_JOB_OUTCOME_FAILED, "LaunchFailed", "%s", dt_errmsg());
        }
    }
    say(L, "scaled from %d to %d workers", cur, n);
    dt__master_touch(m);
    /* The workers left may all have succeeded already (AllWorkers, elasticPolicy). */
    if (!e && !m->st.finished && dt__policy_job_succeeded(m->job, &m->st))
        finish(L, DT_JOB_OUTCOME_SUCCEEDED, "Succeeded", "%s %s successfully completed.",
               kind_name(m->job), m->job->name);
    if (e) {
        json_decref(add);
        json_decref(rem);
        return e;
    }
    *added = add;
    *removed = rem;
    return DT_OK;
}

static dt_err take_lock(loop *L) {
    char path[DT__PATH_MAX];
    dt_err e = path_in(L, path, sizeof path, "master.lock");
    if (e) return e;
    L->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (L->lock_fd < 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    /* In a cluster the next master pod may start while the last one is still terminating
     * (a Job replaces a pod that is being deleted): it waits for the lock, a while. */
    int waits = L->m.opts.kube && L->m.opts.kube->in_cluster ? 240 : 0;
    while (flock(L->lock_fd, LOCK_EX | LOCK_NB) != 0 && waits-- > 0) {
        if (waits % 20 == 19) say(L, "waiting for the last master of this job to let go of %s", path);
        struct timespec half = {0, 500 * 1000 * 1000};
        nanosleep(&half, NULL);
    }
    if (flock(L->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char buf[32] = "";
        ssize_t n = pread(L->lock_fd, buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        buf[strcspn(buf, "\n")] = 0;
        /* No pid yet: the lock was taken an instant ago (two starts at once). */
        if (!buf[0])
            return dt_err_set(DT_ERR_STATE,
                              "%s: another master is already running this job (it has just "
                              "started)",
                              L->m.dir);
        return dt_err_set(DT_ERR_STATE, "%s: a master (pid %s) is already running this job",
                          L->m.dir, buf);
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(L->lock_fd, 0) != 0 || pwrite(L->lock_fd, pid, (size_t)n, 0) != n)
        return dt_err_set(DT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return DT_OK;
}

static dt_err write_master_json(loop *L) {
    char path[DT__PATH_MAX], tmp[DT__PATH_MAX];
    dt_err e;
    if ((e = path_in(L, path, sizeof path, "master.json")) ||
        (e = dt__path(tmp, sizeof tmp, "%s.tmp", path)))
        return e;
    json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:s}", "name", L->m.job->name, "url", L->m.url,
                          "pid", (int)getpid(), "token", L->m.token, "jobDir", L->m.dir);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!text) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    /* The token is the job's secret: the file is readable by its owner only. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    size_t n = strlen(text);
    int ok = fd >= 0 && write(fd, text, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    if (fd >= 0) close(fd);
    free(text);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return dt_err_set(DT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    return DT_OK;
}

static dt_err copy_spec(loop *L, const char *from) {
    char *data;
    size_t len;
    dt_err e = dt__read_file(from, &data, &len);
    if (e) return e;
    char path[DT__PATH_MAX];
    if (!(e = path_in(L, path, sizeof path, "spec.yaml"))) e = dt__write_file_atomic(path, data, len);
    free(data);
    return e;
}

/* Register src (its fd readable: src->ready runs) in the event loop. */
static dt_err watch_source(loop *L, source *src, const char *what) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = src};
    if (src->fd >= 0 && epoll_ctl(L->epfd, EPOLL_CTL_ADD, src->fd, &ev) != 0)
        return dt_err_set(DT_ERR_IO, "epoll (%s): %s", what, strerror(errno));
    return DT_OK;
}

static void http_ready(loop *L) { L->http_ready = 1; }

static dt_err start_http(loop *L, int port) {
    dt__http_server_opts ho = {.bind_addr = L->m.opts.bind_addr,
                               .port = port,
                               .token = L->m.token,
                               .routes = dt__master_routes,
                               .nroutes = dt__master_nroutes,
                               .ctx = &L->m};
    dt_err e = dt__http_server_start(&L->m.http, &ho);
    if (e) return e;
    snprintf(L->m.url, sizeof L->m.url, "http://%s:%d", L->m.opts.bind_addr,
             dt__http_server_port(L->m.http));
    /* the dashboard's address, token in its fragment: for the user's own terminal only
     * (never in a cluster, where this output is the pod's log) */
    if (L->m.opts.out && !L->m.opts.kube) {
        fprintf(L->m.opts.out, "dashboard %s/#token=%s\n", L->m.url, L->m.token);
        fflush(L->m.opts.out);
    }
    L->http = (source){.fd = dt__http_server_fd(L->m.http), .ready = http_ready};
    return watch_source(L, &L->http, "the API");
}

static void read_signals(loop *L) {
    struct signalfd_siginfo si;
    while (read(L->sigfd, &si, sizeof si) == sizeof si) {
        if (L->m.opts.leave_on_signal) {
            say(L, "the master got %s: leaving the job to its next master",
                sigabbrev_np((int)si.ssi_signo));
            L->leaving = 1;
            continue;
        }
        char why[64];
        snprintf(why, sizeof why, "the master got %s", sigabbrev_np((int)si.ssi_signo));
        /* a second one while the replicas are stopping: no more grace */
        dt__master_request_stop(&L->m, why, L->m.stop_requested);
    }
}

static dt_err setup_signals(loop *L) {
    /* SIGCHLD is blocked too: the local backend reads it from its own signalfd. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGPIPE);
    if (sigprocmask(SIG_BLOCK, &mask, &L->old_mask) != 0)
        return dt_err_set(DT_ERR_IO, "sigprocmask: %s", strerror(errno));
    /* SIGPIPE: blocked and never read, so that writes to closed sockets just fail. */
    sigdelset(&mask, SIGPIPE);
    sigdelset(&mask, SIGCHLD);
    L->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (L->sigfd < 0) return dt_err_set(DT_ERR_IO, "signalfd: %s", strerror(errno));
    L->signals = (source){.fd = L->sigfd, .ready = read_signals};
    return watch_source(L, &L->signals, "signals");
}

/* The last n lines of the replica's log in the job dir, as a JSON array (NULL: no log);
 * bytes that are not printable ASCII become '?' (a tab a space), so the array is valid JSON
 * whatever the replica wrote. */
static json_t *log_tail(loop *L, const char *name, int n) {
    char path[DT__PATH_MAX];
    if (path_in(L, path, sizeof path, "logs/%s.log", name)) return NULL; /* fits: see path_in */
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char buf[16384];
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    long from = size > (long)sizeof buf ? size - (long)sizeof buf : 0;
    size_t got = fseek(f, from, SEEK_SET) == 0 ? fread(buf, 1, sizeof buf, f) : 0;
    fclose(f);
    for (size_t i = 0; i < got; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\t') buf[i] = ' ';
        else if (c != '\n' && (c < 0x20 || c >= 0x7f)) buf[i] = '?';
    }
    char *p = buf, *end = buf + got;
    if (from > 0) { /* a partial first line */
        char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    json_t *lines = json_array();
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_array_append_new(lines, json_stringn(p, len));
        p = nl ? nl + 1 : end;
    }
    while (json_array_size(lines) > (size_t)n)
        json_array_remove(lines, 0);
    return lines;
}

/* What failed the job: the replica, its exit, the event, the end of its log. */
static json_t *failure_json(loop *L, const dt__condition *c) {
    const dt__replica *fr = dt__job_state_find(&L->m.st, L->failed_replica);
    json_t *f = json_pack("{s:s, s:s}", "replica", L->failed_replica, "event", c->message);
    if (!f) return NULL;
    if (fr) json_object_set_new(f, "exitCode", fr->exit_code >= 0 ? json_integer(fr->exit_code) : json_null());
    json_t *tail = log_tail(L, L->failed_replica, 20);
    if (tail) {
        char log[DT__PATH_MAX];
        if (!path_in(L, log, sizeof log, "logs/%s.log", L->failed_replica))
            json_object_set_new(f, "log", json_string(log));
    } else if (fr) { /* no log in the job dir (a pod's): the backend's last line */
        char words[320];
        last_words(L, fr, words, sizeof words);
        tail = json_pack("[s]", words);
    }
    if (tail) json_object_set_new(f, "logTail", tail);
    return f;
}

static void result_json(loop *L) {
    static const char *const names[] = {"Succeeded", "Failed", "Stopped"};
    const dt__condition *c =
        &L->m.st.cond[L->m.st.outcome == DT_JOB_OUTCOME_SUCCEEDED ? DT__COND_SUCCEEDED
                                                                   : DT__COND_FAILED];
    json_t *reps = json_object();
    for (int i = 0; i < L->m.st.nreplicas; i++) {
        const dt__replica *r = &L->m.st.replicas[i];
        json_t *rj = json_pack("{s:s, s:i}", "state", dt__replica_state_name(r->state),
                               "restarts", r->restarts);
        json_object_set_new(rj, "exitCode", r->exit_code >= 0 ? json_integer(r->exit_code)
                                                             : json_null());
        if (r->report) json_object_set(rj, "report", r->report);
        /* A built-in role's own result.json (a TrainJob's training figures). */
        char path[DT__PATH_MAX];
        json_t *own = path_in(L, path, sizeof path, "replicas/%s/result.json", r->name)
                          ? NULL : json_load_file(path, 0, NULL); /* fits: see path_in */
        if (own) json_object_set_new(rj, "result", own);
        json_object_set_new(reps, r->name, rj);
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s}", "status", names[L->m.st.outcome], "name",
                          L->m.job->name, "kind", kind_name(L->m.job), "reason", c->reason,
                          "message", c->message);
    /* What a user looks for first: the exported model's figures (the chief's own result) */
    const char *key;
    json_t *rj;
    json_object_foreach(reps, key, rj) {
        json_t *own = json_object_get(rj, "result");
        json_t *ex = json_object_get(own, "export");
        if (!json_is_string(ex)) continue;
        json_t *ev = json_object_get(own, "eval");
        if (json_is_object(ev)) json_object_set(j, "eval", ev);
        json_object_set(j, "export", ex);
        json_t *sps = json_object_get(own, "aggregate_samples_per_sec");
        if (json_is_number(sps)) json_object_set(j, "samples_per_sec", sps);
        break;
    }
    if (L->m.st.outcome == DT_JOB_OUTCOME_FAILED && L->failed_replica[0])
        json_object_set_new(j, "failure", failure_json(L, c));
    char a[40], b[40];
    json_object_set_new(j, "startTime", json_string(dt__rfc3339(L->m.st.start_time, a, sizeof a)));
    json_object_set_new(j, "completionTime",
                        json_string(dt__rfc3339(L->m.st.completion_time, b, sizeof b)));
    json_object_set_new(j, "wall_seconds",
                        json_real(L->m.st.completion_time - L->m.st.start_time));
    json_object_set_new(j, "restarts", json_integer(L->m.st.total_restarts));
    json_object_set_new(j, "workers", json_integer(worker_count(L)));
    json_t *st = dt__job_state_json(&L->m.st, L->m.job, NULL);
    json_object_set(j, "replicaStatuses", json_object_get(st, "replicaStatuses"));
    json_decref(st);
    json_object_set_new(j, "replicas", reps);
    json_object_set_new(j, "data", dt__ledger_progress(L->m.ledger));
    write_json_file(L, "result.json", j);
    json_decref(j);
}

static dt_err resolve_self(loop *L) {
    const char *exe = L->m.opts.self_exe ? L->m.opts.self_exe : "/proc/self/exe";
    if (!realpath(exe, L->self_exe))
        return dt_err_set(DT_ERR_IO, "%s: cannot resolve the dtrain binary: %s", exe,
                          strerror(errno));
    return DT_OK;
}

dt_err dt_master_load_job(const char *job_dir, dt_job_spec **job) {
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/journal.jsonl", job_dir);
    if (e) return e;
    /* The spec is parsed under its original path, so relative data paths resolve as they
     * did when the job started. */
    char *data = NULL;
    size_t len = 0;
    if ((e = dt__read_file(path, &data, &len)))
        return dt_err_set(DT_ERR_NOTFOUND, "%s: no journal here: not a job directory", job_dir);
    char *nl = memchr(data, '\n', len);
    json_t *first = nl ? json_loadb(data, (size_t)(nl - data), 0, NULL) : NULL;
    free(data);
    const char *spec = json_string_value(json_object_get(first, "spec"));
    char spec_name[DT__PATH_MAX];
    e = dt__path(spec_name, sizeof spec_name, "%s", spec ? spec : path);
    json_decref(first);
    if (e || (e = dt__path(path, sizeof path, "%s/spec.yaml", job_dir)) ||
        (e = dt__read_file(path, &data, &len)))
        return e;
    e = dt_job_spec_parse(job, data, len, spec_name);
    free(data);
    return e;
}

/* ---- the master's life: open, start or resume, launch, loop, end ---- */

/* Everything a master holds, before it knows whether it starts or resumes: the job dir
 * (locked), the job's state, the shard ledger, the rendezvous, the ports, the event loop. */
static dt_err open_job(loop *L, const dt_master_opts *opts_in) {
    const dt_job_spec *job = L->m.job;
    dt__master *m = &L->m;
    dt_err e;
    L->ring_roles = job->kind == DT_JOB_KIND_TRAINJOB && job->strategy == DT_STRATEGY_ALLREDUCE &&
                    dt_job_spec_total_replicas(job) > 1;
    if (opts_in->kube ? (e = dt_job_spec_check_kubernetes(job))
                      : job->kind != DT_JOB_KIND_TRAINJOB && (e = dt_job_spec_check_local(job)))
        return e;
    /* A TrainJob's data and model are checked before anything is created or launched: a
     * job that could never train fails here, naming the spec's file and line, and not in
     * a loop of restarts. */
    if (!opts_in->resume && job->kind == DT_JOB_KIND_TRAINJOB && job->train &&
        (e = dt_train_check(job->train)))
        return e;
    /* The dir leaves room for every path the master and its replicas make in it (path_in). */
    if ((e = dt__path_room(opts_in->job_dir, DT__JOB_DIR_ROOM, "job dir")) ||
        (!opts_in->resume && (e = dt_master_check_job_dir(opts_in->job_dir, job->name))) ||
        (e = dt__mkdirs(opts_in->job_dir)))
        return e;
    if (!realpath(opts_in->job_dir, m->dir))
        return dt_err_set(DT_ERR_IO, "%s: %s", opts_in->job_dir, strerror(errno));
    char sub[DT__PATH_MAX];
    if ((e = path_in(L, sub, sizeof sub, "logs")) || (e = dt__mkdirs(sub)) ||
        (e = path_in(L, sub, sizeof sub, "run")) || (e = dt__mkdirs(sub)))
        return e;
    if ((e = take_lock(L)) || (e = resolve_self(L)) || (e = dt__job_state_init(&m->st, m->job)) ||
        (e = dt__ledger_init(&m->ledger, ledger_event, L)) || (e = dt__rdzv_init(&m->rdzv)) ||
        (e = dt__ports_init(&L->ports, m->opts.bind_addr, NULL)))
        return e;
    if (!dt__ports_lock_dir(L->ports))
        say(L, "warning: /tmp/dtrain-ports cannot be used: ports are chosen without locks "
               "against other dtrain jobs on this host");
    if ((L->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        return dt_err_set(DT_ERR_IO, "epoll: %s", strerror(errno));
    return DT_OK;
}

/* A new job in an empty job dir: its token, its spec copied, its ports. */
static dt_err prepare_fresh(loop *L, const dt_master_opts *opts_in, const char *jpath,
                            int *http_port) {
    dt__master *m = &L->m;
    struct stat sb;
    if (stat(jpath, &sb) == 0 && sb.st_size > 0)
        return dt_err_set(DT_ERR_STATE,
                          "%s holds a job already: resume it with 'dtrain run --resume %s' or "
                          "choose another --job-dir",
                          m->dir, m->dir);
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        return dt_err_set(DT_ERR_IO, "getrandom: %s", strerror(errno));
    for (int i = 0; i < 16; i++) snprintf(m->token + 2 * i, 3, "%02x", rnd[i]);
    /* In a cluster the token is the job's Secret, which the replicas are given too. */
    const char *tok = opts_in->kube ? getenv("DTRAIN_JOB_TOKEN") : NULL;
    if (tok && *tok && strlen(tok) < sizeof m->token) snprintf(m->token, sizeof m->token, "%s", tok);
    if (!getcwd(L->cwd, sizeof L->cwd)) return dt_err_set(DT_ERR_IO, "getcwd: %s", strerror(errno));
    /* In a cluster the spec's path is where every pod mounts it (a ConfigMap: its real
     * path is a versioned link target of that pod's own). */
    dt_err e;
    if (opts_in->kube && opts_in->spec_path[0] == '/') {
        if ((e = dt__path(L->spec_src, sizeof L->spec_src, "%s", opts_in->spec_path))) return e;
    } else if (!realpath(opts_in->spec_path, L->spec_src)) {
        return dt_err_set(DT_ERR_IO, "%s: %s", opts_in->spec_path, strerror(errno));
    }
    e = copy_spec(L, opts_in->spec_path);
    return e ? e : alloc_ports(L, http_port);
}

/* A resumed master: the state its predecessor journaled, and the ports it held (or new
 * ones, for a stopped job that is continued). */
static dt_err prepare_resumed(loop *L, const char *jpath, int *http_port) {
    dt__master *m = &L->m;
    dt__replay rp;
    dt__replay_init(&rp, &m->st, m->ledger, m->rdzv);
    dt_err e = dt__replay_journal(&rp, jpath);
    if (e) return e;
    if (!rp.started)
        return dt_err_set(DT_ERR_STATE, "%s: the journal has no start: nothing to resume", m->dir);
    snprintf(m->token, sizeof m->token, "%s", rp.token);
    snprintf(L->cwd, sizeof L->cwd, "%s", rp.cwd);
    snprintf(L->spec_src, sizeof L->spec_src, "%s", rp.spec);
    /* Given, or journaled (a resume keeps the first run's). */
    if (m->opts.heartbeat_timeout_ms <= 0 && rp.heartbeat_timeout_ms > 0)
        m->opts.heartbeat_timeout_ms = rp.heartbeat_timeout_ms;
    if (m->opts.lease_timeout_ms <= 0 && rp.lease_timeout_ms > 0)
        m->opts.lease_timeout_ms = rp.lease_timeout_ms;
    if (rp.workers >= 0) set_worker_count(L, rp.workers);
    int running = 0;
    for (int i = 0; i < m->st.nreplicas; i++)
        running |= m->st.replicas[i].state == DT__REPLICA_RUNNING;
    L->continuing = m->st.finished && m->st.outcome == DT_JOB_OUTCOME_STOPPED;
    if (L->continuing && !running) {
        /* Nothing of the stopped job runs, and its ports were free for others since it
         * stopped: new ones (journaled with the continuation), as at a start. */
        L->new_ports = 1;
        return alloc_ports(L, http_port);
    }
    if (!*http_port) *http_port = rp.http_port;
    return hold_ports(L, *http_port);
}

/* The backend that runs the replicas: local processes, or pods (opts.kube). */
static dt_err start_backend(loop *L) {
    const dt_master_kube *ko = L->m.opts.kube;
    if (!ko) return dt__local_backend_new(&L->backend, L->m.dir);
    dt__kube_conn c = {.kubeconfig = ko->kubeconfig, .context = ko->context,
                       .in_cluster = ko->in_cluster};
    dt_err e = dt__kube_connect(&L->kube, &c);
    if (e) return e;
    /* Replicas run `dtrain role` from the image's PATH, not this master's binary. */
    snprintf(L->self_exe, sizeof L->self_exe, "dtrain");
    if (ko->owner_uid && ko->owner_name && ko->owner_kind && ko->owner_api_version)
        /* Owned, not controlled: the owner (the master's batch Job) controls only its own
         * pod, and a Job controller releases pods it controls that its selector does not
         * match. */
        L->owner = json_pack("{s:s, s:s, s:s, s:s, s:b, s:b}", "apiVersion", ko->owner_api_version,
                             "kind", ko->owner_kind, "name", ko->owner_name, "uid", ko->owner_uid,
                             "controller", 0, "blockOwnerDeletion", 0);
    dt__kube_backend_opts o = {.job = L->m.job,
                               .kube = L->kube,
                               .namespace = ko->namespace,
                               .spec_path = L->spec_src,
                               .spec_configmap = ko->spec_configmap,
                               .job_dir = L->m.dir,
                               .claim = ko->claim,
                               .image = ko->image,
                               .token_secret = ko->token_secret,
                               .owner = L->owner,
                               .grace_s = (L->m.opts.stop_grace_ms + 999) / 1000};
    return dt__kube_backend_new(&L->backend, &o);
}

/* The journal, the signals, the backend and the API. */
static dt_err start_services(loop *L, const char *jpath, int http_port) {
    dt__master *m = &L->m;
    dt_err e;
    if ((e = dt__journal_open(&m->journal, jpath)) || (e = setup_signals(L))) return e;
    if ((e = start_backend(L))) return e;
    L->replicas = (source){.fd = L->backend->ops->event_fd(L->backend), .ready = replicas_ready};
    if ((e = watch_source(L, &L->replicas, "the replicas"))) return e;
    /* A port chosen here (not --port, not a resumed master's own) that another program
     * bound since it was tested: another one. */
    int chosen = !m->opts.port && (!m->opts.resume || L->new_ports);
    for (int tries = 0; (e = start_http(L, http_port)) && chosen && tries < 5; tries++) {
        dt__ports_release(L->ports, http_port);
        if ((e = dt__ports_take(L->ports, &http_port))) return e;
        dt_err_clear();
    }
    if (e || (e = write_master_json(L))) return e;
    /* Another job of this name running elsewhere: this one does not start (nothing is
     * launched yet, and its journal holds no start). Other failures only cost the listing. */
    if ((e = dt__registry_add(m->job->name, m->dir)) == DT_ERR_STATE) return e;
    if (e) {
        say(L, "warning: %s", dt_errmsg());
        dt_err_clear();
    }
    return DT_OK;
}

static json_t *ports_json(const loop *L) {
    json_t *ports = json_object();
    for (int i = 0; i < L->m.st.nreplicas; i++)
        json_object_set_new(ports, L->m.st.replicas[i].name,
                            json_integer(L->m.st.replicas[i].port));
    return ports;
}

/* A new job: its start and its Created condition, journaled. */
static void begin_fresh(loop *L, double now) {
    dt__master *m = &L->m;
    const dt_job_spec *job = m->job;
    m->st.start_time = now;
    journal(L, json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:o}", "ev", "start", "token",
                         m->token, "cwd", L->cwd, "spec", L->spec_src, "url", m->url, "httpPort",
                         dt__http_server_port(m->http), "heartbeatTimeoutMs",
                         m->opts.heartbeat_timeout_ms, "leaseTimeoutMs",
                         m->opts.lease_timeout_ms, "ports", ports_json(L)));
    char reason[64], msg[256];
    snprintf(reason, sizeof reason, "%sCreated", kind_name(job));
    snprintf(msg, sizeof msg, "%s %s is created.", kind_name(job), job->name);
    dt__job_state_condition(&m->st, DT__COND_CREATED, reason, msg, now);
    journal(L, json_pack("{s:s, s:s, s:s, s:s}", "ev", "condition", "type", "Created", "reason",
                         reason, "message", msg));
    sync_journal(L, "the job's start");
    say(L, "job %s: %d replicas, job dir %s, API %s", job->name, m->st.nreplicas, m->dir, m->url);
}

/* A resumed job: continued if it was stopped; what still runs adopted, and what ended while
 * no master watched settled. */
static void begin_resumed(loop *L, double now, double tnow) {
    dt__master *m = &L->m;
    const dt_job_spec *job = m->job;
    /* A stopped job goes on from where it stopped: its replicas are launched again, and
     * its built-in roles continue from what they saved when they were stopped. */
    if (L->continuing) {
        char reason[64], msg[256];
        snprintf(reason, sizeof reason, "%sContinued", kind_name(job));
        snprintf(msg, sizeof msg, "%s %s was stopped and is continued.", kind_name(job),
                 job->name);
        dt__job_state_reopen(&m->st, reason, msg, now);
        L->start_mono = tnow;
        journal(L, json_pack("{s:s, s:s, s:s, s:s, s:i, s:o}", "ev", "continue", "reason",
                             reason, "message", msg, "url", m->url, "httpPort",
                             dt__http_server_port(m->http), "ports", ports_json(L)));
        sync_journal(L, "the job's continuation");
        say(L, "job %s was stopped: continuing it", job->name);
    }
    /* Adopt what still runs; what ended meanwhile is settled below. */
    int ended[DT__MAX_REPLICAS], nended = 0, codes[DT__MAX_REPLICAS];
    for (int i = 0; i < m->st.nreplicas; i++) {
        dt__replica *r = &m->st.replicas[i];
        if (r->state != DT__REPLICA_RUNNING) continue;
        int code = -1;
        if (L->backend->ops->adopt(L->backend, r->name, r->facts, &code)) {
            char pid[24] = "";
            if (r->pid > 0) snprintf(pid, sizeof pid, " (pid %d)", (int)r->pid);
            say(L, "%s still runs%s: adopted", r->name, pid);
            if (r->removing) stop_one(L, r); /* scaled away before the master died */
            /* Its heartbeats went nowhere while no master ran: the timeout starts now,
             * not at its last journaled fetch or report. */
            dt__ledger_heartbeat(m->ledger, r->name, tnow);
        } else {
            ended[nended] = i;
            codes[nended++] = code;
        }
    }
    say(L, "job %s resumed from %s, API %s", job->name, m->dir, m->url);
    for (int i = 0; i < m->st.nreplicas; i++) {
        dt__replica *r = &m->st.replicas[i];
        m->st.total_restarts += r->restarts;
        /* Shards held by a replica that ended while no master watched go back. */
        if (r->state != DT__REPLICA_RUNNING)
            dt__ledger_release(m->ledger, r->name, "ended before the master resumed", tnow);
    }
    /* Finished before it died: the clean-up it may not have completed. */
    if (m->st.finished &&
        (m->st.outcome == DT_JOB_OUTCOME_STOPPED || job->clean_pod_policy != DT_CLEAN_POD_POLICY_NONE))
        stop_replicas(L);
    for (int k = 0; k < nended; k++) {
        dt__replica *r = &m->st.replicas[ended[k]];
        if (r->state == DT__REPLICA_RUNNING)
            exited(L, r, codes[k] >= 0 ? codes[k] : 128 + SIGKILL);
    }
    settle_resumed(L);
}

/* Launch what has never run, in start order (PS before workers), and tell whoever waits
 * (opts.ready_fd) how it went. */
static void launch_pending(loop *L) {
    dt__master *m = &L->m;
    int launched = 0;
    for (int i = 0; i < m->st.nreplicas && !m->st.finished; i++) {
        dt__replica *r = &m->st.replicas[i];
        if (r->state != DT__REPLICA_PENDING) continue;
        dt_err e = launch(L, r);
        if (e && retry_launch(L, r, e, dt__mono_s())) continue;
        if (e) {
            say(L, "%s", dt_errmsg());
            finish(L, DT_JOB_OUTCOME_FAILED, "LaunchFailed", "%s", dt_errmsg());
            break;
        }
        launched++;
    }
    if (!m->st.finished && (launched || !m->st.cond[DT__COND_RUNNING].set)) set_running(L);
    write_status(L);
    if (m->opts.ready_fd > 0) {
        /* 'R': every replica launched; 'F': the job failed while launching. */
        if (write(m->opts.ready_fd, m->st.finished ? "F" : "R", 1) != 1) {
            /* the parent is gone; go on */
        }
        close(m->opts.ready_fd);
        m->opts.ready_fd = -1;
    }
    draw_table(L);
}

/* The loop: until the job has finished and its replicas are cleaned up. */
static dt_err run_loop(loop *L) {
    dt__master *m = &L->m;
    while ((!m->st.finished || replicas_running(L)) && !L->leaving) {
        tick(L);
        if (m->st.finished && !replicas_running(L)) break;
        double t = next_deadline(L);
        int http_ms = dt__http_server_timeout_ms(m->http);
        int timeout = -1;
        if (isfinite(t)) {
            double ms = (t - mono()) * 1000.0;
            timeout = ms <= 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ceil(ms);
        }
        if (http_ms >= 0 && (timeout < 0 || http_ms < timeout)) timeout = http_ms;
        struct epoll_event evs[16];
        int n = epoll_wait(L->epfd, evs, 16, timeout);
        if (n < 0 && errno != EINTR) return dt_err_set(DT_ERR_IO, "epoll_wait: %s", strerror(errno));
        L->http_ready = 0;
        for (int k = 0; k < n; k++) ((source *)evs[k].data.ptr)->ready(L);
        if (L->http_ready || http_ms == 0) dt__http_server_run(m->http);
        double now2 = mono();
        if ((m->dirty && now2 - L->status_written >= STATUS_INTERVAL) ||
            (L->resource_dirty && now2 - L->resource_written >= 1.0))
            write_status(L);
        if (m->opts.live_table && now2 - L->table_drawn >= TABLE_INTERVAL) draw_table(L);
    }
    return DT_OK;
}

static void close_job(loop *L, int signals_set) {
    dt__master *m = &L->m;
    dt__http_server_free(m->http);
    if (m->journal && !dt__journal_ok(m->journal))
        say(L, "error: the journal could not be written (%s): its last events are lost, and "
               "a resume of this job would not see them", dt__journal_why(m->journal));
    dt__journal_close(m->journal);
    dt__backend_free(L->backend);
    dt__kube_free(L->kube);
    json_decref(L->owner);
    dt__job_state_free(&m->st);
    dt__ledger_free(m->ledger);
    dt__rdzv_free(m->rdzv);
    dt__ports_free(L->ports);
    free(m->status_cache);
    dt__series_free(m);
    if (L->sigfd >= 0) close(L->sigfd);
    if (L->epfd >= 0) close(L->epfd);
    if (signals_set) sigprocmask(SIG_SETMASK, &L->old_mask, NULL);
    if (L->lock_fd >= 0) close(L->lock_fd);
    free(L);
}

/* The simulated hosts of opts: each a namespace that exists and a numeric address. */
static dt_err check_netns(const dt_master_opts *o) {
    if (o->nnetns <= 0) return DT_OK;
    if (o->kube) return dt_err_set(DT_ERR_ARG, "--netns: simulated hosts are for the local backend");
    for (int i = 0; i < o->nnetns; i++) {
        const char *name = o->netns_names ? o->netns_names[i] : NULL;
        const char *host = o->netns_hosts ? o->netns_hosts[i] : NULL;
        unsigned char bin[16];
        size_t n = name ? strlen(name) : 0;
        if (!n || n > 64 || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789._-") != n || name[0] == '.')
            return dt_err_set(DT_ERR_ARG, "--netns: host %d: '%.64s' is not a namespace name "
                                          "(letters, digits, '.', '_', '-')", i, name ? name : "");
        if (!host || (inet_pton(AF_INET, host, bin) != 1 && inet_pton(AF_INET6, host, bin) != 1))
            return dt_err_set(DT_ERR_ARG, "--netns: %s: '%.64s' is not a numeric address", name,
                              host ? host : "");
        char path[128];
        snprintf(path, sizeof path, "/run/netns/%s", name);
        if (access(path, F_OK) != 0)
            return dt_err_set(DT_ERR_ARG, "--netns: %s: no such network namespace (%s: %s; "
                                          "ip netns add %s makes it)", name, path,
                              strerror(errno), name);
    }
    return DT_OK;
}

dt_err dt_master_run(const dt_job_spec *job, const dt_master_opts *opts_in,
                     dt_job_outcome *outcome) {
    if (check_netns(opts_in)) return DT_ERR_ARG;
    loop *L = calloc(1, sizeof *L);
    if (!L) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    L->epfd = L->sigfd = L->lock_fd = -1;
    dt__master *m = &L->m;
    m->has_loop = 1;
    L->jobv = *job; /* shallow: shares the caller's strings, never freed as a spec */
    m->job = &L->jobv;
    m->opts = *opts_in;
    if (!m->opts.bind_addr) m->opts.bind_addr = "127.0.0.1";
    if (m->opts.stop_grace_ms <= 0) m->opts.stop_grace_ms = DT_MASTER_STOP_GRACE_MS;

    char jpath[DT__PATH_MAX];
    int http_port = m->opts.port;
    dt_err e = open_job(L, opts_in);
    if (!e && !(e = path_in(L, jpath, sizeof jpath, "journal.jsonl"))) {
        e = m->opts.resume ? prepare_resumed(L, jpath, &http_port)
                           : prepare_fresh(L, opts_in, jpath, &http_port);
    }
    if (!e) e = start_services(L, jpath, http_port);
    int signals_set = L->sigfd >= 0;
    if (e) {
        close_job(L, signals_set);
        return e;
    }
    /* Given, journaled (a resume keeps the first run's), or the default. */
    if (m->opts.heartbeat_timeout_ms <= 0) m->opts.heartbeat_timeout_ms = 30000;
    dt__ledger_set_leases(m->ledger, m->opts.lease_timeout_ms / 1000.0, DT_MASTER_LEASE_FLOOR_S);
    double now = dt__wall_now(), tnow = mono();
    /* The job's start on the monotonic clock: now, or as long ago as the journal says. */
    L->start_mono = tnow - (m->opts.resume && m->st.start_time > 0 ? now - m->st.start_time : 0);
    /* The replayed ledger's times are the journal's wall times: onto the monotonic clock. */
    dt__ledger_resume(m->ledger, now, tnow);
    L->wall_offset = now - tnow;
    if (m->opts.resume)
        begin_resumed(L, now, tnow);
    else
        begin_fresh(L, now);
    launch_pending(L);
    e = run_loop(L);
    if (!e && L->leaving) {
        write_status(L);
        sync_journal(L, "the master's leave");
        *outcome = DT_JOB_OUTCOME_LEFT;
    } else if (!e) {
        result_json(L);
        write_status(L);
        draw_table(L);
        sync_journal(L, "the job's end");
        *outcome = m->st.outcome;
    }
    close_job(L, signals_set);
    return e;
}

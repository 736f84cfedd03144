/*
 * runner.c - `dtrain tune`: an experiment's trials run as jobs of a dtrain server, watched
 * until the experiment ends (runner-impl.h; docs/TUNE.md "The runner").
 *
 * One thread, one loop. Each turn:
 *   1. fill the free trial slots (parallelTrialCount) from the search (tune-impl.h): a new
 *      trial is rendered from the template, written to trials/<trial>.yaml, recorded
 *      (Pending) in state.json, then POSTed to the server with the experiment's labels; a
 *      trial the search hands back (ASHA's promotion) is resumed through the server;
 *   2. list the experiment's jobs in one request (GET /v1/jobs?labelSelector=...), and for
 *      each live trial read its metrics from its job dir (metrics.c): new observations go to
 *      the search, which may stop it (medianstop: the server's stop, the last checkpoint
 *      kept) or pause it at an ASHA rung (the server's suspend; its resume later continues
 *      from the checkpoint); a trial whose job has finished gets its final value;
 *   3. after any change, state.json is rewritten atomically and PUT to the server
 *      (/v1/experiments/:name, for the dashboard).
 * It ends at maxTrialCount (the search says done and nothing runs), at the goal, or at
 * maxFailedTrialCount failed trials, then writes best.json, copies the best trial's
 * exported model into best/ and stops the server it started.
 *
 * Restart: state.json is the truth. A runner started again with the same experiment and
 * dir loads it, rebuilds the search (dt__search_restore of each trial in order, then its
 * observations), and adopts trials whose jobs the server still knows (Pending ones too: a
 * crash between the record and the POST is found by the job's name; a missing job is
 * submitted again); finished trials are never run again. The sweep server, its own
 * session, outlives a killed runner and is found again through its server.json; a server
 * that died is started again, and its journal brings its jobs back.
 *
 * A second runner on the same dir is refused (tune.lock, flock'ed for the runner's life).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "net/http-impl.h"
#include "tune/metrics-impl.h"
#include "tune/runner-impl.h"
#include "tune/tune-impl.h"

/* Room the experiment dir leaves for its paths: the deepest are in its server's job dirs,
 * server/jobs/<trial, at most 80 bytes>/ and then a job's own (DT__JOB_DIR_ROOM). */
#define EXPERIMENT_DIR_ROOM (DT__JOB_DIR_ROOM + 100)

/* ---- trials ---- */

typedef struct obs {
    int resource;
    int64_t step;
    double value;
} obs;

typedef struct trial {
    int index;
    char name[80];
    char **values;      /* one text per parameter */
    int resource;       /* what the search sent it to reach (ASHA, hyperband); 0 none */
    int target;         /* ASHA: the rung it is to report at next; 0 none */
    char state[24];     /* Pending Running Paused Succeeded Failed EarlyStopped */
    char reason[48];
    char message[512];
    char job_state[24]; /* the server's */
    char job_dir[DT__PATH_MAX];
    int nobs, capobs;
    obs *obs;
    int has_final;
    double final;
    json_t *extra;      /* additional metrics: {name: final value} */
    int stopping;       /* medianstop stopped it: its job's end is EarlyStopped */
    char want[12];      /* a request decided and not yet taken by the server: "stop",
                           "suspend" or "resume" (sent again each turn until it is) */
    int noted;          /* its job was suspended by someone else: said once */
    double started, ended; /* unix seconds */
} trial;

typedef struct runner {
    const dt__tune_opts *o;
    dt__experiment *e;
    dt__search *s;
    dt__metric_src src; /* where metrics are read */
    const char *formats[DT__TUNE_MAX_FILTERS];
    char dir[DT__PATH_MAX];
    char state_path[DT__PATH_MAX];
    uint64_t seed;
    int ntrials, captrials;
    trial *trials;
    char status[24];  /* Running Succeeded Failed */
    char reason[48];
    char message[512];
    char created[32];
    /* the server */
    char url[1024], token[256];
    pid_t server_pid;  /* a server this runner owns (started, or found in its dir); 0 none */
    int server_child;  /* started by this process: waitpid it */
    dt__http_client *http;
    int dirty;
} runner;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static void rfc3339(double t, char *buf, size_t cap) {
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static const char *say_time(void) {
    static char buf[16];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, sizeof buf, "%H:%M:%S", &tm);
    return buf;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    va_list ap;
    printf("[%s] ", say_time());
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static int ended(const trial *t) {
    return !strcmp(t->state, "Succeeded") || !strcmp(t->state, "Failed") ||
           !strcmp(t->state, "EarlyStopped");
}

static int live(const trial *t) {
    return !strcmp(t->state, "Pending") || !strcmp(t->state, "Running");
}

static dt__trial_state search_state(const trial *t) {
    if (!strcmp(t->state, "Paused")) return DT__TRIAL_PAUSED;
    if (!strcmp(t->state, "Succeeded")) return DT__TRIAL_SUCCEEDED;
    if (!strcmp(t->state, "Failed")) return DT__TRIAL_FAILED;
    if (!strcmp(t->state, "EarlyStopped")) return DT__TRIAL_EARLY_STOPPED;
    return DT__TRIAL_RUNNING;
}

static int better(const runner *r, double a, double b) {
    return r->e->obj == DT__OBJ_MINIMIZE ? a < b : a > b;
}

/* A trial's objective: its final value, else (stopped early, paused) its last observation. */
static int objective(const trial *t, double *v) {
    if (t->has_final) {
        *v = t->final;
        return 1;
    }
    if (t->nobs && (ended(t) || !strcmp(t->state, "Paused"))) {
        *v = t->obs[t->nobs - 1].value;
        return 1;
    }
    return 0;
}

static int best_trial(const runner *r, double *v) {
    int best = -1;
    double bv = 0;
    for (int i = 0; i < r->ntrials; i++) {
        double x;
        if (!strcmp(r->trials[i].state, "Failed") || !objective(&r->trials[i], &x)) continue;
        if (best < 0 || better(r, x, bv)) {
            best = i;
            bv = x;
        }
    }
    if (best >= 0) *v = bv;
    return best;
}

static trial *add_trial(runner *r) {
    if (r->ntrials == r->captrials) {
        int cap = r->captrials ? 2 * r->captrials : 16;
        trial *t = realloc(r->trials, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        r->trials = t;
        r->captrials = cap;
    }
    trial *t = &r->trials[r->ntrials++];
    memset(t, 0, sizeof *t);
    t->index = r->ntrials - 1;
    return t;
}

static void trial_name(const runner *r, int k, char *buf, size_t cap) {
    snprintf(buf, cap, "%s-%03d", r->e->name, k);
}

static int add_obs(trial *t, int resource, int64_t step, double v) {
    if (t->nobs == t->capobs) {
        int cap = t->capobs ? 2 * t->capobs : 16;
        obs *o = realloc(t->obs, (size_t)cap * sizeof *o);
        if (!o) return -1;
        t->obs = o;
        t->capobs = cap;
    }
    t->obs[t->nobs++] = (obs){resource, step, v};
    return 0;
}

/* "lr=0.01 units=16" */
static void params_text(const runner *r, const trial *t, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < r->e->nparams && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s=%s", i ? " " : "", r->e->params[i].name,
                              t->values ? t->values[i] : "?");
}

/* ---- state.json ---- */

static json_t *trial_json(const runner *r, const trial *t) {
    json_t *params = json_object();
    for (int i = 0; i < r->e->nparams; i++)
        json_object_set_new(params, r->e->params[i].name, json_string(t->values[i]));
    json_t *ob = json_array();
    for (int i = 0; i < t->nobs; i++)
        json_array_append_new(ob, json_pack("{s:i,s:I,s:f}", "resource", t->obs[i].resource,
                                            "step", (json_int_t)t->obs[i].step, "value",
                                            t->obs[i].value));
    json_t *j = json_pack("{s:s,s:i,s:o,s:s,s:s,s:s,s:s,s:s,s:o,s:i}", "name", t->name,
                          "index", t->index, "parameters", params, "state", t->state, "reason",
                          t->reason, "message", t->message, "job", t->name, "jobDir",
                          t->job_dir, "observations", ob, "resource", t->resource);
    json_object_set_new(j, "jobState", json_string(t->job_state));
    json_object_set_new(j, "target", json_integer(t->target));
    json_object_set_new(j, "pending", json_string(t->want));
    json_object_set_new(j, "stopping", json_boolean(t->stopping));
    double v;
    json_object_set_new(j, "objective", objective(t, &v) ? json_real(v) : json_null());
    if (t->has_final) json_object_set_new(j, "final", json_real(t->final));
    json_object_set_new(j, "metrics", t->extra ? json_incref(t->extra) : json_object());
    if (t->started > 0) {
        char b[32];
        rfc3339(t->started, b, sizeof b);
        json_object_set_new(j, "startTime", json_string(b));
    }
    if (t->ended > 0) {
        char b[32];
        rfc3339(t->ended, b, sizeof b);
        json_object_set_new(j, "completionTime", json_string(b));
        json_object_set_new(j, "seconds", json_real(t->ended - t->started));
    }
    return j;
}

static json_t *state_json(const runner *r) {
    const dt__experiment *e = r->e;
    json_t *trials = json_array();
    int counts[6] = {0};
    for (int i = 0; i < r->ntrials; i++) {
        const trial *t = &r->trials[i];
        json_array_append_new(trials, trial_json(r, t));
        counts[!strcmp(t->state, "Succeeded")      ? 0
               : !strcmp(t->state, "Failed")       ? 1
               : !strcmp(t->state, "EarlyStopped") ? 2
               : !strcmp(t->state, "Paused")       ? 3
               : !strcmp(t->state, "Running")      ? 4
                                                   : 5]++;
    }
    json_t *params = json_array();
    for (int i = 0; i < e->nparams; i++)
        json_array_append_new(params, json_string(e->params[i].name));
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
    json_t *obj = json_pack("{s:s,s:s}", "metric", e->metric, "type",
                            e->obj == DT__OBJ_MINIMIZE ? "minimize" : "maximize");
    if (e->has_goal) json_object_set_new(obj, "goal", json_real(e->goal));
    json_object_set_new(obj, "metricStrategy", json_string(e->metric_strategy));
    char updated[32];
    rfc3339(now_s(), updated, sizeof updated);
    json_t *j = json_pack(
        "{s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:s,s:s,s:i,s:i,s:i,s:o,s:o,s:s,s:s}", "name", e->name,
        "spec", e->path, "dir", r->dir, "status", r->status, "reason", r->reason, "message",
        r->message, "objective", obj, "algorithm", e->algorithm, "earlyStopping", e->early,
        "parallelTrialCount", e->parallel, "maxTrialCount", e->max_trials,
        "maxFailedTrialCount", e->max_failed, "parameters", params, "trials", trials, "seed",
        seed, "server", r->url);
    json_object_set_new(j, "created", json_string(r->created));
    json_object_set_new(j, "updated", json_string(updated));
    json_object_set_new(j, "counts",
                        json_pack("{s:i,s:i,s:i,s:i,s:i,s:i}", "succeeded", counts[0], "failed",
                                  counts[1], "earlyStopped", counts[2], "paused", counts[3],
                                  "running", counts[4], "pending", counts[5]));
    double bv;
    int b = best_trial(r, &bv);
    if (b >= 0) {
        json_t *bp = json_object();
        for (int i = 0; i < e->nparams; i++)
            json_object_set_new(bp, e->params[i].name, json_string(r->trials[b].values[i]));
        json_object_set_new(j, "best", json_pack("{s:s,s:o,s:f}", "trial", r->trials[b].name,
                                                 "parameters", bp, "objective", bv));
    } else {
        json_object_set_new(j, "best", json_null());
    }
    return j;
}

/* The server keeps at most 1 MiB of an experiment: a copy for it with each trial's
 * observations thinned to at most keep, evenly spaced, the last always kept. */
static char *thinned(json_t *j, size_t keep) {
    json_t *c = json_deep_copy(j);
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(c, "trials"), i, t) {
        json_t *ob = json_object_get(t, "observations");
        size_t n = json_array_size(ob);
        if (n <= keep) continue;
        json_t *few = json_array();
        for (size_t k = 0; k < keep; k++)
            json_array_append(few, json_array_get(ob, (n - 1) - (keep - 1 - k) * (n - 1) / (keep - 1)));
        json_object_set_new(t, "observations", few);
    }
    char *text = json_dumps(c, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(c);
    return text;
}

/* Rewrite state.json (atomically) and show it to the server. */
static dt_err save(runner *r) {
    json_t *j = state_json(r);
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : NULL;
    if (!text) {
        json_decref(j);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    size_t n = strlen(text);
    dt_err e = dt__write_file_atomic(r->state_path, text, n);
    if (!e && r->http) {
        char route[256];
        snprintf(route, sizeof route, "/v1/experiments/%s", r->e->name);
        long status = 0;
        char *resp = NULL, *put = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
        for (size_t keep = 200; put && strlen(put) > 1000000 && keep >= 2; keep /= 2) {
            free(put);
            put = thinned(j, keep);
        }
        /* the dashboard's copy: a server that cannot take it is said, never fatal */
        if (!put || dt__http_client_request(r->http, "PUT", route, put, strlen(put), &status,
                                            &resp, NULL) ||
            status / 100 != 2) {
            static int said;
            if (!said++)
                fprintf(stderr, "dtrain tune: the server did not take the experiment (%ld): %s\n",
                        status, resp ? resp : dt_errmsg());
            dt_err_clear();
        }
        free(resp);
        free(put);
    }
    json_decref(j);
    free(text);
    r->dirty = 0;
    return e;
}

static const char *jstr(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* Load state.json into r (the experiment already loaded). 0 when there is none. */
static int load_state(runner *r, dt_err *err) {
    *err = DT_OK;
    struct stat st;
    if (stat(r->state_path, &st) != 0) return 0;
    json_error_t je;
    json_t *j = json_load_file(r->state_path, 0, &je);
    if (!j) {
        *err = dt_err_set(DT_ERR_FORMAT, "%s:%d: %s", r->state_path, je.line, je.text);
        return 1;
    }
    if (strcmp(jstr(j, "name"), r->e->name) != 0) {
        *err = dt_err_set(DT_ERR_STATE, "%s: the state of experiment '%s', not '%s'",
                          r->state_path, jstr(j, "name"), r->e->name);
        json_decref(j);
        return 1;
    }
    r->seed = strtoull(jstr(j, "seed"), NULL, 10);
    snprintf(r->created, sizeof r->created, "%s", jstr(j, "created"));
    json_t *trials = json_object_get(j, "trials");
    size_t i;
    json_t *tj;
    json_array_foreach(trials, i, tj) {
        trial *t = add_trial(r);
        if (!t) {
            *err = dt_err_set(DT_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(t->name, sizeof t->name, "%s", jstr(tj, "name"));
        snprintf(t->state, sizeof t->state, "%s", jstr(tj, "state"));
        snprintf(t->reason, sizeof t->reason, "%s", jstr(tj, "reason"));
        snprintf(t->message, sizeof t->message, "%s", jstr(tj, "message"));
        snprintf(t->job_state, sizeof t->job_state, "%s", jstr(tj, "jobState"));
        if ((*err = dt__path(t->job_dir, sizeof t->job_dir, "%s", jstr(tj, "jobDir")))) {
            dt_err_wrap(*err, "%s: trial %s: jobDir", r->state_path, t->name);
            break;
        }
        t->resource = (int)json_integer_value(json_object_get(tj, "resource"));
        t->target = (int)json_integer_value(json_object_get(tj, "target"));
        snprintf(t->want, sizeof t->want, "%s", jstr(tj, "pending"));
        t->stopping = json_is_true(json_object_get(tj, "stopping"));
        t->values = calloc((size_t)r->e->nparams, sizeof *t->values);
        json_t *params = json_object_get(tj, "parameters");
        for (int p = 0; t->values && p < r->e->nparams; p++) {
            const char *v = json_string_value(json_object_get(params, r->e->params[p].name));
            if (!v) {
                *err = dt_err_set(DT_ERR_FORMAT, "%s: trial %s has no parameter %s",
                                  r->state_path, t->name, r->e->params[p].name);
                break;
            }
            t->values[p] = strdup(v);
        }
        if (*err) break;
        size_t k;
        json_t *oj;
        json_array_foreach(json_object_get(tj, "observations"), k, oj)
            add_obs(t, (int)json_integer_value(json_object_get(oj, "resource")),
                    json_integer_value(json_object_get(oj, "step")),
                    json_number_value(json_object_get(oj, "value")));
        json_t *f = json_object_get(tj, "final");
        if (json_is_number(f)) {
            t->has_final = 1;
            t->final = json_number_value(f);
        }
        json_t *m = json_object_get(tj, "metrics");
        if (json_is_object(m)) t->extra = json_incref(m);
        struct tm tm = {0};
        const char *s = jstr(tj, "startTime");
        if (*s && strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm)) t->started = (double)timegm(&tm);
        s = jstr(tj, "completionTime");
        if (*s && strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm)) t->ended = (double)timegm(&tm);
    }
    json_decref(j);
    return 1;
}

/* ---- the server ---- */

static dt_err http_json(runner *r, const char *method, const char *route, json_t *body,
                        long *status, json_t **out) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    char *resp = NULL;
    *status = 0;
    if (out) *out = NULL;
    dt_err e = dt__http_client_request(r->http, method, route, text,
                                       text ? strlen(text) : 0, status, &resp, NULL);
    free(text);
    if (!e && out) *out = json_loads(resp ? resp : "", 0, NULL);
    free(resp);
    return e;
}

static int pid_alive(pid_t pid) {
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* The server.json of dir: url, token and pid; 0 when there is none readable. */
static int read_server_json(const char *dir, char *url, size_t ucap, char *token, size_t tcap,
                            pid_t *pid) {
    char p[DT__PATH_MAX];
    if (dt__path(p, sizeof p, "%s/server.json", dir)) { /* none there, as far as we can tell */
        dt_err_clear();
        return 0;
    }
    json_t *j = json_load_file(p, 0, NULL);
    if (!j) return 0;
    int ok = json_is_string(json_object_get(j, "url"));
    if (ok) {
        snprintf(url, ucap, "%s", jstr(j, "url"));
        snprintf(token, tcap, "%s", jstr(j, "token"));
        *pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
    }
    json_decref(j);
    return ok;
}

static int healthy(runner *r) {
    long status;
    json_t *j = NULL;
    if (http_json(r, "GET", "/v1/healthz", NULL, &status, &j)) {
        dt_err_clear();
        return 0;
    }
    int ok = status == 200 && json_is_true(json_object_get(j, "server"));
    json_decref(j);
    return ok;
}

static dt_err connect_to(runner *r) {
    dt__http_client_free(r->http);
    r->http = NULL;
    return dt__http_client_init(&r->http, r->url, r->token[0] ? r->token : NULL, 30000);
}

/* The sweep's own server in EXPERIMENT_DIR/server: the one running there, else a new one. */
static dt_err own_server(runner *r) {
    /* each fits: dt__tune_run checks the experiment dir leaves EXPERIMENT_DIR_ROOM */
    char sdir[DT__PATH_MAX], sj[DT__PATH_MAX], self[DT__PATH_MAX] = "/proc/self/exe",
        logp[DT__PATH_MAX];
    dt_err e;
    if ((e = dt__path(sdir, sizeof sdir, "%s/server", r->dir)) ||
        (e = dt__path(sj, sizeof sj, "%s/server.json", sdir)) ||
        (e = dt__path(logp, sizeof logp, "%s/server.log", r->dir)) ||
        (r->o->self && (e = dt__path(self, sizeof self, "%s", r->o->self))))
        return e;
    pid_t pid = 0;
    if (read_server_json(sdir, r->url, sizeof r->url, r->token, sizeof r->token, &pid) &&
        pid_alive(pid)) {
        if ((e = connect_to(r))) return e;
        if (healthy(r)) {
            r->server_pid = pid;
            say("using the sweep's server %s (pid %d)", r->url, (int)pid);
            return DT_OK;
        }
    }
    unlink(sj); /* a dead server's: the new one writes its own */
    if ((e = dt__mkdirs(sdir))) return e;
    if (!r->o->self) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) self[n] = 0;
    }
    char cpus[24];
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(cpus, sizeof cpus, "%ld", nc > 0 ? nc : 1);
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) return dt_err_set(DT_ERR_IO, "fork: %s", strerror(errno));
    if (child == 0) {
        setsid(); /* its own session: it outlives a killed runner, which finds it again */
        int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (in >= 0) dup2(in, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execl(self, "dtrain", "server", "--dir", sdir, "--cpus", cpus, /* any free port */
              (char *)NULL);
        fprintf(stderr, "dtrain tune: cannot run %s server: %s\n", self, strerror(errno));
        _exit(127);
    }
    r->server_pid = child;
    r->server_child = 1;
    /* wait for its server.json, or its end */
    for (;;) {
        int st;
        if (waitpid(child, &st, WNOHANG) == child) {
            r->server_pid = 0;
            r->server_child = 0;
            return dt_err_set(DT_ERR_IO, "the sweep's server exited (%s %d) before it listened; "
                              "see %s",
                              WIFEXITED(st) ? "code" : "signal",
                              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), logp);
        }
        if (read_server_json(sdir, r->url, sizeof r->url, r->token, sizeof r->token, &pid) &&
            pid == child)
            break;
        if (interrupted) return dt_err_set(DT_ERR_STATE, "interrupted");
        usleep(50 * 1000);
    }
    if ((e = connect_to(r))) return e;
    say("started the sweep's server %s (pid %d, log %s)", r->url, (int)child, logp);
    return DT_OK;
}

/* --server URL: token from the options, $DTRAIN_SERVER_TOKEN, or the server.json of
 * $DTRAIN_HOME/server whose url is this one. */
static dt_err given_server(runner *r) {
    snprintf(r->url, sizeof r->url, "%s", r->o->server);
    size_t l = strlen(r->url);
    while (l && r->url[l - 1] == '/')
        r->url[--l] = 0;
    const char *tok = r->o->token ? r->o->token : getenv("DTRAIN_SERVER_TOKEN");
    if (tok) {
        snprintf(r->token, sizeof r->token, "%s", tok);
    } else {
        char home[DT__PATH_MAX], url[1024], token[256];
        const char *h = getenv("DTRAIN_HOME");
        dt_err he = h && *h ? dt__path(home, sizeof home, "%s/server", h)
                            : dt__path(home, sizeof home, "%s/.dtrain/server",
                                       getenv("HOME") ? getenv("HOME") : ".");
        if (he) return dt_err_wrap(he, "the server's token (DTRAIN_HOME)");
        pid_t pid;
        if (read_server_json(home, url, sizeof url, token, sizeof token, &pid) &&
            !strcmp(url, r->url))
            snprintf(r->token, sizeof r->token, "%s", token);
    }
    dt_err e = connect_to(r);
    if (e) return e;
    long status;
    json_t *j = NULL;
    if ((e = http_json(r, "GET", "/v1/server", NULL, &status, &j))) return e;
    json_decref(j);
    if (status == 401) return dt_err_set(DT_ERR_STATE, "%s: the server wants a token (--token)", r->url);
    if (status != 200) return dt_err_set(DT_ERR_STATE, "%s: not a dtrain server (HTTP %ld)", r->url, status);
    return DT_OK;
}

static void stop_server(runner *r) {
    if (!r->server_pid) return;
    kill(r->server_pid, SIGTERM);
    for (int i = 0; i < 600; i++) { /* 30 s, then it is left as it is */
        if (r->server_child) {
            if (waitpid(r->server_pid, NULL, WNOHANG) == r->server_pid) break;
        } else if (!pid_alive(r->server_pid)) {
            break;
        }
        usleep(50 * 1000);
    }
    r->server_pid = 0;
}

/* ---- trials through the server ---- */

static dt_err submit(runner *r, trial *t) {
    char *yaml = NULL;
    dt_err e = dt__experiment_render(r->e, t->name, t->values, &yaml);
    if (e) return e;
    char path[DT__PATH_MAX];
    if ((e = dt__path(path, sizeof path, "%s/trials/%s.yaml", r->dir, t->name)) ||
        (e = dt__write_file_atomic(path, yaml, strlen(yaml)))) {
        free(yaml);
        return e;
    }
    json_t *labels = json_pack("{s:s,s:s,s:s,s:s}", "katib.kubeflow.org/experiment", r->e->name,
                               "katib.kubeflow.org/trial", t->name, "dtrain.io/experiment",
                               r->e->name, "dtrain.io/trial", t->name);
    /* the file it came from: the server resolves the manifest's relative paths (and names
     * its errors) by it */
    char abs[PATH_MAX];
    json_t *body = json_pack("{s:s,s:s,s:o}", "manifest", yaml, "path",
                             realpath(path, abs) ? abs : path, "labels", labels);
    free(yaml);
    long status;
    json_t *resp = NULL;
    e = http_json(r, "POST", "/v1/jobs", body, &status, &resp);
    json_decref(body);
    if (e) return e;
    if (status == 201) {
        snprintf(t->state, sizeof t->state, "Running");
        snprintf(t->job_state, sizeof t->job_state, "%s", jstr(resp, "state"));
        if (!t->started) t->started = now_s();
    } else {
        snprintf(t->state, sizeof t->state, "Failed");
        snprintf(t->reason, sizeof t->reason, "SubmitFailed");
        snprintf(t->message, sizeof t->message, "HTTP %ld: %s%s", status,
                 resp ? jstr(resp, "error") : "no answer",
                 status == 409 ? " (a job of that name is on the server already)" : "");
        t->started = t->ended = now_s();
    }
    json_decref(resp);
    return DT_OK;
}

static dt_err job_action(runner *r, trial *t, const char *action, long *status) {
    char route[256];
    snprintf(route, sizeof route, "/v1/jobs/%s/%s", t->name, action);
    json_t *resp = NULL, *body = json_object();
    dt_err e = http_json(r, "POST", route, body, status, &resp);
    json_decref(body);
    json_decref(resp);
    return e;
}

static int job_finished(const char *js) {
    return !strcmp(js, "Succeeded") || !strcmp(js, "Failed") || !strcmp(js, "Stopped");
}

/* Send the requests the search decided that the server has not taken yet. A 409 means the
 * job is already where the request would take it (or past it), judged by its last state. */
static void send_wants(runner *r) {
    for (int i = 0; i < r->ntrials; i++) {
        trial *t = &r->trials[i];
        if (!t->want[0]) continue;
        long st = 0;
        if (job_action(r, t, t->want, &st)) { /* the server unreachable: next turn */
            dt_err_clear();
            continue;
        }
        const char *js = t->job_state;
        /* 504: the job's master did not answer in time; the server asks it again itself */
        int done = st / 100 == 2 || st == 404 || st == 504 || job_finished(js) ||
                   (st == 409 && !strcmp(t->want, "suspend") &&
                    (!strcmp(js, "Suspending") || !strcmp(js, "Suspended"))) ||
                   (st == 409 && !strcmp(t->want, "resume") &&
                    (!strcmp(js, "Queued") || !strcmp(js, "Running")));
        if (done) {
            t->want[0] = 0;
            r->dirty = 1;
        }
    }
}

static void print_end(const runner *r, const trial *t) {
    char params[1024];
    params_text(r, t, params, sizeof params);
    double v;
    char val[64] = "-";
    if (objective(t, &v)) snprintf(val, sizeof val, "%.6g", v);
    say("trial %s %s: %s  %s=%s%s%s", t->name, t->state, params, r->e->metric, val,
        t->message[0] ? "  " : "", t->message);
}

/* The trial ended: its final value to the search; printed. */
static void finish(runner *r, trial *t, const char *state, const char *reason, const char *msg) {
    snprintf(t->state, sizeof t->state, "%s", state);
    snprintf(t->reason, sizeof t->reason, "%s", reason);
    if (msg) snprintf(t->message, sizeof t->message, "%s", msg);
    t->ended = now_s();
    if (t->has_final) dt__search_observe(r->s, t->index, t->resource, t->final, 1);
    dt__search_end(r->s, t->index, search_state(t));
    print_end(r, t);
    r->dirty = 1;
}

/* Read the trial's metrics; feed new observations to the search; act on its answers. */
static dt_err look(runner *r, trial *t, int finished) {
    if (!t->job_dir[0]) return DT_OK;
    dt__metric m = {0};
    dt_err e = dt__metric_collect(&m, t->job_dir, r->e->metric, &r->src, finished);
    if (e) {
        dt__metric_free(&m);
        return e;
    }
    int last = t->nobs ? t->obs[t->nobs - 1].resource : 0;
    for (int i = 0; i < m.n; i++) {
        if (m.obs[i].resource <= last) continue;
        last = m.obs[i].resource;
        add_obs(t, m.obs[i].resource, m.obs[i].step, m.obs[i].value);
        r->dirty = 1;
        dt__search_observe(r->s, t->index, m.obs[i].resource, m.obs[i].value, 0);
        if (finished || t->stopping || strcmp(t->state, "Running") != 0) continue;
        if (r->e->early[0] &&
            dt__search_early_stop(r->s, t->index, m.obs[i].resource, m.obs[i].value)) {
            t->stopping = 1;
            snprintf(t->want, sizeof t->want, "stop");
            snprintf(t->message, sizeof t->message,
                     "stopped early at epoch %d: %s %.6g below the median", m.obs[i].resource,
                     r->e->metric, m.obs[i].value);
            continue;
        }
        if (t->target > 0 && m.obs[i].resource >= t->target) {
            double v = 0;
            dt__metric_at(&m, t->target, &v);
            int next = dt__search_promote(r->s, t->index, t->target);
            if (next == 0) { /* paused at this rung: its job is suspended (its checkpoint) */
                snprintf(t->want, sizeof t->want, "suspend");
                snprintf(t->state, sizeof t->state, "Paused");
                snprintf(t->message, sizeof t->message, "paused at epoch %d (%s %.6g)",
                         t->target, r->e->metric, v);
                say("trial %s paused at epoch %d: %s=%.6g", t->name, t->target, r->e->metric,
                    v);
            } else {
                t->target = next > t->target && next != INT32_MAX ? next : 0;
            }
        }
    }
    if (finished) {
        double v;
        if (dt__metric_final(&m, r->e->metric_strategy, &v)) {
            t->has_final = 1;
            t->final = v;
        }
        if (r->e->nextra) {
            json_decref(t->extra);
            t->extra = json_object();
            for (int k = 0; k < r->e->nextra; k++) {
                dt__metric x = {0};
                if (!dt__metric_collect(&x, t->job_dir, r->e->extra[k], &r->src, 1) &&
                    dt__metric_final(&x, "latest", &v))
                    json_object_set_new(t->extra, r->e->extra[k], json_real(v));
                dt_err_clear();
                dt__metric_free(&x);
            }
        }
    }
    dt__metric_free(&m);
    return DT_OK;
}

/* One request: every job of the experiment. */
static dt_err poll_jobs(runner *r) {
    char route[512];
    snprintf(route, sizeof route, "/v1/jobs?labelSelector=dtrain.io%%2Fexperiment%%3D%s",
             r->e->name);
    long status;
    json_t *j = NULL;
    dt_err e = http_json(r, "GET", route, NULL, &status, &j);
    if (e) return e;
    if (status != 200 || !json_is_array(json_object_get(j, "jobs"))) {
        json_decref(j);
        return dt_err_set(DT_ERR_IO, "%s%s: HTTP %ld", r->url, route, status);
    }
    json_t *jobs = json_object_get(j, "jobs");
    for (int i = 0; i < r->ntrials; i++) {
        trial *t = &r->trials[i];
        if (ended(t)) continue;
        json_t *job = NULL, *x;
        size_t k;
        json_array_foreach(jobs, k, x) if (!strcmp(jstr(x, "name"), t->name)) job = x;
        if (!job) {
            if (!strcmp(t->state, "Pending")) continue; /* submitted in this turn's fill */
            /* the server no longer has it (deleted, or another server on the dir) */
            char msg[1200];
            snprintf(msg, sizeof msg, "the server %s has no job %s any more", r->url, t->name);
            finish(r, t, "Failed", "JobMissing", msg);
            continue;
        }
        const char *js = jstr(job, "state");
        if (strcmp(js, t->job_state) != 0) {
            snprintf(t->job_state, sizeof t->job_state, "%s", js);
            r->dirty = 1;
        }
        if (!t->job_dir[0] && *jstr(job, "jobDir")) {
            if ((e = dt__path(t->job_dir, sizeof t->job_dir, "%s", jstr(job, "jobDir")))) {
                json_decref(j);
                return dt_err_wrap(e, "the server's job %s: jobDir", t->name);
            }
            r->dirty = 1;
        }
        if (!strcmp(t->state, "Pending")) snprintf(t->state, sizeof t->state, "Running");
        int done = !strcmp(js, "Succeeded") || !strcmp(js, "Failed") || !strcmp(js, "Stopped");
        if (!strcmp(t->state, "Paused")) {
            /* a paused trial whose job finished before the suspend landed */
            if (!done) continue;
        } else if (!t->want[0] && !strcmp(js, "Suspended") && !t->noted) {
            t->noted = 1;
            say("trial %s: its job was suspended outside the sweep; the trial waits for its "
                "resume (POST /v1/jobs/%s/resume)", t->name, t->name);
        }
        if ((e = look(r, t, done))) break;
        if (!done) continue;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", jstr(job, "message"));
        if (!strcmp(js, "Succeeded")) {
            if (t->has_final) finish(r, t, "Succeeded", "Succeeded", "");
            else {
                snprintf(msg, sizeof msg, "no value of %s found (collector %s)", r->e->metric,
                         r->e->collector[0] ? r->e->collector : "StdOut");
                finish(r, t, "Failed", "MetricsUnavailable", msg);
            }
        } else if (!strcmp(js, "Stopped") && t->stopping) {
            finish(r, t, "EarlyStopped", "EarlyStopped", NULL);
        } else {
            finish(r, t, "Failed", !strcmp(js, "Stopped") ? "Killed" : "Failed", msg);
        }
    }
    json_decref(j);
    return e;
}

/* A new experiment: the server must hold no job of an experiment of the same name (its
 * trials' names would be taken, and a trial must never be mistaken for another's). */
static dt_err check_fresh(runner *r) {
    char route[512];
    snprintf(route, sizeof route, "/v1/jobs?labelSelector=dtrain.io%%2Fexperiment%%3D%s",
             r->e->name);
    long status;
    json_t *j = NULL;
    dt_err e = http_json(r, "GET", route, NULL, &status, &j);
    if (e) return e;
    json_t *jobs = json_object_get(j, "jobs");
    if (status == 200 && json_array_size(jobs) > 0)
        e = dt_err_set(DT_ERR_STATE,
                       "the server %s already has %zu jobs of an experiment named '%s' (such as "
                       "%s) that %s does not record: continue that experiment with its own "
                       "--dir, delete its jobs (DELETE /v1/jobs/NAME), or rename this one",
                       r->url, json_array_size(jobs), r->e->name,
                       jstr(json_array_get(jobs, 0), "name"), r->state_path);
    json_decref(j);
    return e;
}

/* The trials a restarted runner found recorded as running: adopt their jobs, submit again
 * those the server never got. */
static dt_err adopt(runner *r) {
    for (int i = 0; i < r->ntrials; i++) {
        trial *t = &r->trials[i];
        if (!live(t)) continue;
        char route[256];
        snprintf(route, sizeof route, "/v1/jobs/%s", t->name);
        long status;
        json_t *j = NULL;
        dt_err e = http_json(r, "GET", route, NULL, &status, &j);
        json_decref(j);
        if (e) return e;
        if (status == 200) {
            say("trial %s: adopted its job", t->name);
            snprintf(t->state, sizeof t->state, "Running");
        } else if (status == 404) {
            say("trial %s: the server has no job of it; submitting it again", t->name);
            if ((e = submit(r, t))) return e;
        } else {
            return dt_err_set(DT_ERR_IO, "%s%s: HTTP %ld", r->url, route, status);
        }
        r->dirty = 1;
    }
    return DT_OK;
}

/* ---- the experiment ---- */

static int count_state(const runner *r, const char *state) {
    int n = 0;
    for (int i = 0; i < r->ntrials; i++)
        n += !strcmp(r->trials[i].state, state);
    return n;
}

static int count_live(const runner *r) {
    int n = 0;
    for (int i = 0; i < r->ntrials; i++)
        n += live(&r->trials[i]);
    return n;
}

/* Fill the free slots. *done = 1 when the search will give nothing more. */
static dt_err fill(runner *r, int *done) {
    *done = 0;
    while (count_live(r) < r->e->parallel && !interrupted) {
        char **values = NULL;
        int resource = 0, k = -1, d = 0;
        dt_err e = dt__search_next(r->s, &values, &resource, &d, &k);
        if (e == DT_ERR_NOTFOUND) {
            dt_err_clear();
            *done = d;
            return DT_OK;
        }
        if (e) return e;
        if (k < r->ntrials) { /* ASHA: a paused trial promoted: resume it */
            trial *t = &r->trials[k];
            dt__values_free(values, r->e->nparams);
            t->resource = resource;
            t->target = resource;
            snprintf(t->want, sizeof t->want, "resume");
            snprintf(t->state, sizeof t->state, "Running");
            snprintf(t->message, sizeof t->message, "promoted to epoch %d", resource);
            say("trial %s promoted: resumed to reach epoch %d", t->name, resource);
        } else {
            trial *t = add_trial(r);
            if (!t) {
                dt__values_free(values, r->e->nparams);
                return dt_err_set(DT_ERR_NOMEM, "out of memory");
            }
            trial_name(r, k, t->name, sizeof t->name);
            t->values = values;
            t->resource = resource;
            t->target = r->e->algorithm[0] && !strcmp(r->e->algorithm, "asha") ? resource : 0;
            snprintf(t->state, sizeof t->state, "Pending");
            if ((e = save(r))) return e; /* recorded before the server has it */
            if ((e = submit(r, t))) return e;
            char params[1024];
            params_text(r, t, params, sizeof params);
            if (!strcmp(t->state, "Failed")) {
                dt__search_end(r->s, t->index, DT__TRIAL_FAILED);
                print_end(r, t);
            } else {
                say("trial %s started: %s", t->name, params);
            }
        }
        r->dirty = 1;
    }
    return DT_OK;
}

/* Copy a directory's files (one level of subdirectories and more) from src into dst. */
static dt_err copy_tree(const char *src, const char *dst) {
    dt_err e = dt__mkdirs(dst);
    if (e) return e;
    DIR *d = opendir(src);
    if (!d) return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", src, strerror(errno));
    struct dirent *de;
    while (!e && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char a[DT__PATH_MAX], b[DT__PATH_MAX];
        if ((e = dt__path(a, sizeof a, "%s/%s", src, de->d_name)) ||
            (e = dt__path(b, sizeof b, "%s/%s", dst, de->d_name)))
            break;
        struct stat st;
        if (stat(a, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            e = copy_tree(a, b);
        } else if (S_ISREG(st.st_mode)) {
            char *data;
            size_t n;
            if (!(e = dt__read_file(a, &data, &n))) {
                e = dt__write_file_atomic(b, data, n);
                free(data);
            }
        }
    }
    closedir(d);
    return e;
}

static void finish_experiment(runner *r) {
    double bv;
    int b = best_trial(r, &bv);
    json_t *best = json_null();
    if (b >= 0) {
        trial *t = &r->trials[b];
        char params[1024];
        params_text(r, t, params, sizeof params);
        printf("best trial %s: %s  %s=%.6g\n", t->name, params, r->e->metric, bv);
        json_t *bp = json_object();
        for (int i = 0; i < r->e->nparams; i++)
            json_object_set_new(bp, r->e->params[i].name, json_string(t->values[i]));
        best = json_pack("{s:s,s:o,s:s,s:f,s:s}", "trial", t->name, "parameters", bp, "metric",
                         r->e->metric, "objective", bv, "jobDir", t->job_dir);
        /* its exported model, when it made one */
        char rp[DT__PATH_MAX];
        json_t *res = dt__path(rp, sizeof rp, "%s/result.json", t->job_dir)
                          ? NULL : json_load_file(rp, 0, NULL); /* the job ran there: it fits */
        const char *exp = res ? json_string_value(json_object_get(res, "export")) : NULL;
        if (exp && *exp) {
            char dst[DT__PATH_MAX];
            dt_err e = dt__path(dst, sizeof dst, "%s/best", r->dir);
            if (!e) e = copy_tree(exp, dst);
            if (e) {
                fprintf(stderr, "dtrain tune: best model not copied: %s\n", dt_errmsg());
                dt_err_clear();
            } else {
                printf("best model: %s (from %s)\n", dst, exp);
                json_object_set_new(best, "export", json_string(dst));
                json_object_set_new(best, "exportedFrom", json_string(exp));
            }
        }
        json_decref(res);
    } else {
        printf("no trial has a value of %s\n", r->e->metric);
    }
    char *text = json_dumps(best, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    char path[DT__PATH_MAX];
    if (text && (dt__path(path, sizeof path, "%s/best.json", r->dir) ||
                 dt__write_file_atomic(path, text, strlen(text)))) {
        fprintf(stderr, "dtrain tune: %s\n", dt_errmsg());
        dt_err_clear();
    }
    free(text);
    json_decref(best);
}

/* Has the experiment reached its end? Sets status, reason, message. */
static int check_end(runner *r, int search_done) {
    const dt__experiment *e = r->e;
    int failed = count_state(r, "Failed");
    if (e->max_failed >= 0 && (e->max_failed == 0 ? failed > 0 : failed >= e->max_failed)) {
        snprintf(r->status, sizeof r->status, "Failed");
        snprintf(r->reason, sizeof r->reason, "MaxFailedTrialsReached");
        snprintf(r->message, sizeof r->message, "%d trials failed (maxFailedTrialCount %d)",
                 failed, e->max_failed);
        return 1;
    }
    if (e->has_goal) {
        for (int i = 0; i < r->ntrials; i++) {
            trial *t = &r->trials[i];
            if (!t->has_final || strcmp(t->state, "Succeeded")) continue;
            if (e->obj == DT__OBJ_MINIMIZE ? t->final <= e->goal : t->final >= e->goal) {
                snprintf(r->status, sizeof r->status, "Succeeded");
                snprintf(r->reason, sizeof r->reason, "GoalReached");
                snprintf(r->message, sizeof r->message, "trial %s reached the goal: %s=%.6g",
                         t->name, e->metric, t->final);
                return 1;
            }
        }
    }
    if (search_done && count_live(r) == 0) {
        snprintf(r->status, sizeof r->status, "Succeeded");
        snprintf(r->reason, sizeof r->reason,
                 e->max_trials && r->ntrials >= e->max_trials ? "MaxTrialsReached"
                                                               : "SearchDone");
        snprintf(r->message, sizeof r->message, "%d trials: %d succeeded, %d failed, %d stopped early%s",
                 r->ntrials, count_state(r, "Succeeded"), failed, count_state(r, "EarlyStopped"),
                 count_state(r, "Paused") ? ", some paused at a rung" : "");
        return 1;
    }
    return 0;
}

/* Stop the jobs of trials still running (the goal or the failures ended the experiment). */
static void stop_live(runner *r) {
    for (int i = 0; i < r->ntrials; i++) {
        trial *t = &r->trials[i];
        if (!live(t)) continue;
        long st;
        if (!job_action(r, t, "stop", &st) && st / 100 == 2) {
            snprintf(t->state, sizeof t->state, "Failed");
            snprintf(t->reason, sizeof t->reason, "Killed");
            snprintf(t->message, sizeof t->message, "stopped: the experiment ended (%s)",
                     r->reason);
            t->ended = now_s();
            print_end(r, t);
        }
        dt_err_clear();
    }
}

static void runner_free(runner *r) {
    for (int i = 0; i < r->ntrials; i++) {
        if (r->trials[i].values) dt__values_free(r->trials[i].values, r->e->nparams);
        free(r->trials[i].obs);
        json_decref(r->trials[i].extra);
    }
    free(r->trials);
    dt__search_free(r->s);
    dt__http_client_free(r->http);
    if (r->e) dt__experiment_free(r->e);
}

int dt__tune_run(const dt__tune_opts *o) {
    runner r = {0};
    r.o = o;
    int code = 1;
    dt_err e = dt__experiment_load(&r.e, o->experiment);
    if (e) {
        fprintf(stderr, "dtrain tune: %s\n", dt_errmsg());
        return 2;
    }
    if ((e = dt__collector_parse(r.e->collector, &r.src.kind))) {
        fprintf(stderr, "dtrain tune: %s: %s\n", r.e->path, dt_errmsg());
        dt__experiment_free(r.e);
        return 2;
    }
    for (int i = 0; i < r.e->nfilters; i++)
        r.formats[i] = r.e->filters[i];
    r.src.formats = r.formats;
    r.src.nformats = r.e->nfilters;
    r.src.file = r.e->collector_path;
    r.src.file_json = !strcmp(r.e->collector_format, "JSON");
    /* Every path the runner makes in the experiment dir fits once it leaves
     * EXPERIMENT_DIR_ROOM: the deepest are its server's job dirs (server/jobs/<trial>/...). */
    char path[DT__PATH_MAX];
    if ((e = o->dir ? dt__path(r.dir, sizeof r.dir, "%s", o->dir)
                    : dt__path(r.dir, sizeof r.dir, "runs/%s-tune", r.e->name)) ||
        (e = dt__path_room(r.dir, EXPERIMENT_DIR_ROOM, "experiment dir")) ||
        (e = dt__path(r.state_path, sizeof r.state_path, "%s/state.json", r.dir)) ||
        (e = dt__path(path, sizeof path, "%s/trials", r.dir)) || (e = dt__mkdirs(path)))
        goto out;
    /* one runner per experiment dir */
    dt__path(path, sizeof path, "%s/tune.lock", r.dir); /* fits: checked above */
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) != 0) {
        e = dt_err_set(DT_ERR_STATE, "%s: another dtrain tune runs this experiment", r.dir);
        goto out;
    }
    snprintf(r.status, sizeof r.status, "Running");
    /* the experiment as given, kept beside its state */
    {
        char *text;
        size_t n;
        if (!(e = dt__path(path, sizeof path, "%s/experiment.yaml", r.dir)) &&
            !(e = dt__read_file(r.e->path, &text, &n))) {
            e = dt__write_file_atomic(path, text, n);
            free(text);
        }
        if (e) goto out;
    }
    int restarted = load_state(&r, &e);
    if (e) goto out;
    if (!restarted) {
        r.seed = o->has_seed ? o->seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
        rfc3339(now_s(), r.created, sizeof r.created);
    }
    if ((e = dt__search_new(&r.s, r.e, r.seed))) goto out;
    for (int i = 0; i < r.ntrials; i++) {
        trial *t = &r.trials[i];
        if ((e = dt__search_restore(r.s, i, t->values, t->resource, search_state(t)))) {
            dt_err_wrap(e, "%s: trial %s", r.state_path, t->name);
            goto out;
        }
        for (int k = 0; k < t->nobs; k++)
            dt__search_observe(r.s, i, t->obs[k].resource, t->obs[k].value, 0);
        if (t->has_final) dt__search_observe(r.s, i, t->resource, t->final, 1);
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if ((e = o->server ? given_server(&r) : own_server(&r))) goto out;
    if (restarted)
        say("experiment %s: continuing from %s (%d trials recorded, %d finished)", r.e->name,
            r.state_path, r.ntrials,
            count_state(&r, "Succeeded") + count_state(&r, "Failed") +
                count_state(&r, "EarlyStopped"));
    else if (r.e->max_trials > 0)
        say("experiment %s: %s search, %d parallel, up to %d trials; dir %s", r.e->name,
            r.e->algorithm, r.e->parallel, r.e->max_trials, r.dir);
    else
        say("experiment %s: %s search, %d parallel, to the end of its space; dir %s",
            r.e->name, r.e->algorithm, r.e->parallel, r.dir);
    if (!restarted && (e = check_fresh(&r))) goto out;
    if ((e = adopt(&r)) || (e = save(&r))) goto out;

    double poll = o->poll_seconds > 0 ? o->poll_seconds : 0.25;
    int done = 0;
    while (!interrupted) {
        if ((e = poll_jobs(&r))) {
            /* a server that went away: the sweep's own is started again (its journal has
             * the jobs), a given one is waited for */
            fprintf(stderr, "dtrain tune: %s; trying again\n", dt_errmsg());
            dt_err_clear();
            e = DT_OK;
            if (!o->server && r.server_pid && !pid_alive(r.server_pid)) {
                if (r.server_child) waitpid(r.server_pid, NULL, WNOHANG);
                r.server_pid = 0;
                if ((e = own_server(&r))) goto out;
            }
            usleep((useconds_t)(poll * 2e6));
            continue;
        }
        send_wants(&r);
        if (check_end(&r, 0)) break;
        if ((e = fill(&r, &done))) goto out;
        send_wants(&r); /* a promoted trial's resume */
        if (r.dirty && (e = save(&r))) goto out;
        if (check_end(&r, done)) break;
        usleep((useconds_t)(poll * 1e6));
    }
    if (interrupted) {
        save(&r);
        fprintf(stderr, "dtrain tune: interrupted; the trials' jobs go on. The same command "
                        "continues the experiment (state in %s)\n", r.state_path);
        code = 130;
        r.server_pid = 0; /* its jobs need it */
        goto out;
    }
    stop_live(&r);
    say("experiment %s %s (%s): %s", r.e->name, r.status, r.reason, r.message);
    if ((e = save(&r))) goto out;
    finish_experiment(&r);
    code = !strcmp(r.status, "Succeeded") ? 0 : 1;
out:
    if (e) {
        fprintf(stderr, "dtrain tune: %s\n", dt_errmsg());
        code = 1;
    }
    if (!interrupted) stop_server(&r);
    runner_free(&r);
    return code;
}

/* ---- dtrain tune status ---- */

int dt__tune_status(const char *arg, int json) {
    char dir[DT__PATH_MAX], path[DT__PATH_MAX];
    struct stat st;
    if (((stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) || strchr(arg, '/')
             ? dt__path(dir, sizeof dir, "%s", arg)
             : dt__path(dir, sizeof dir, "runs/%s-tune", arg)) ||
        dt__path(path, sizeof path, "%s/state.json", dir)) {
        fprintf(stderr, "dtrain tune status: %s\n", dt_errmsg());
        return 2;
    }
    if (stat(path, &st) != 0) {
        fprintf(stderr, "dtrain tune status: no experiment in %s (no state.json)\n", dir);
        return 1;
    }
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        fprintf(stderr, "dtrain tune status: %s:%d: %s\n", path, je.line, je.text);
        return 1;
    }
    if (json) {
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        printf("\n");
        json_decref(j);
        return 0;
    }
    json_t *obj = json_object_get(j, "objective");
    const char *metric = jstr(obj, "metric");
    printf("experiment %s: %s%s%s  (%s, %s %s)\n", jstr(j, "name"), jstr(j, "status"),
           *jstr(j, "reason") ? " " : "", jstr(j, "reason"), jstr(j, "algorithm"),
           jstr(obj, "type"), metric);
    if (*jstr(j, "message")) printf("  %s\n", jstr(j, "message"));
    printf("%-24s %-13s %-12s %s\n", "TRIAL", "STATE", metric, "PARAMETERS");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(j, "trials"), i, t) {
        char val[32] = "-";
        json_t *v = json_object_get(t, "objective");
        if (json_is_number(v)) snprintf(val, sizeof val, "%.6g", json_number_value(v));
        char params[1024] = "";
        size_t o = 0;
        const char *k;
        json_t *pv;
        json_object_foreach(json_object_get(t, "parameters"), k, pv) {
            if (o < sizeof params)
                o += (size_t)snprintf(params + o, sizeof params - o, "%s%s=%s", o ? " " : "", k,
                                      json_string_value(pv));
        }
        printf("%-24s %-13s %-12s %s\n", jstr(t, "name"), jstr(t, "state"), val, params);
    }
    json_t *best = json_object_get(j, "best");
    if (json_is_object(best))
        printf("best: %s  %s=%.6g\n", jstr(best, "trial"), metric,
               json_number_value(json_object_get(best, "objective")));
    json_decref(j);
    return 0;
}

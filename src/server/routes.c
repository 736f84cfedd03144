/*
 * routes.c - the job server's HTTP API (docs/SERVER.md): submissions, the queue, each job's
 * status and result, suspend/resume/stop, experiments, metrics. Every other
 * /v1/jobs/:job/... route goes to the job's master (proxy.c).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/metrics.h"
#include "master/master-impl.h"
#include "net/http-impl.h"
#include "server/server-impl.h"

static dt__sjob *job_or_404(dt__server *s, const dt__http_req *req, dt__http_resp *resp) {
    const char *name = dt__http_req_param(req, "job");
    dt__sjob *j = dt__server_find(s, name);
    if (!j) dt__http_resp_error(resp, 404, "no job '%.64s' on this server (see GET /v1/jobs)", name ? name : "");
    return j;
}

static void healthz(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    (void)req;
    dt__http_resp_json(resp, 200, json_pack("{s:b, s:b}", "ok", 1, "server", 1));
}

static json_t *names_in(dt__server *s, int running) {
    json_t *a = json_array();
    dt__queue_plan(s, NULL, 0);
    if (running) {
        for (int i = 0; i < s->njobs; i++)
            if (s->jobs[i]->state == DT__SJOB_RUNNING || s->jobs[i]->state == DT__SJOB_SUSPENDING)
                json_array_append_new(a, json_string(s->jobs[i]->name));
        return a;
    }
    /* the queue in admission order: by position */
    for (int p = 1;; p++) {
        int found = 0;
        for (int i = 0; i < s->njobs; i++)
            if (s->jobs[i]->state == DT__SJOB_QUEUED && s->jobs[i]->position == p) {
                json_array_append_new(a, json_string(s->jobs[i]->name));
                found = 1;
            }
        if (!found) break;
    }
    return a;
}

static void get_server(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)req;
    dt__server *s = ctx;
    dt__demand u = dt__queue_used(s);
    dt__http_resp_json(resp, 200,
                       json_pack("{s:{s:f, s:I}, s:{s:f, s:I}, s:o, s:o, s:s, s:i}", "capacity",
                                 "cpus", s->cap.cpus, "memoryBytes", (json_int_t)s->cap.mem, "used",
                                 "cpus", u.cpus, "memoryBytes", (json_int_t)u.mem, "running",
                                 names_in(s, 1), "queue", names_in(s, 0), "dir", s->dir, "jobs",
                                 s->njobs));
}

/* Take a submission: 201 {"name", "state", "position"}. */
static void take(dt__server *s, dt__submission *sub, int rc, const char *err, dt__http_resp *resp) {
    if (rc) {
        dt__http_resp_error(resp, rc, "%s", err);
        return;
    }
    if (dt__server_find(s, sub->name)) {
        dt__http_resp_error(resp, 409, "a job named '%s' is on this server already (delete it "
                                       "first: DELETE /v1/jobs/%s)", sub->name, sub->name);
        return;
    }
    if (!dt__journal_ok(s->journal)) {
        dt__http_resp_error(resp, 503, "the server cannot write its journal: %s",
                            dt__journal_why(s->journal));
        return;
    }
    dt__sjob *j = calloc(1, sizeof *j);
    if (!j) return dt__http_resp_error(resp, 500, "out of memory");
    snprintf(j->name, sizeof j->name, "%s", sub->name);
    snprintf(j->kind, sizeof j->kind, "%s", sub->kind);
    memcpy(j->origin, sub->origin, sizeof j->origin); /* the same size */
    j->priority = sub->priority;
    j->labels = json_incref(sub->labels);
    j->demand = sub->demand;
    j->worker = sub->worker;
    j->seq = s->next_seq++;
    j->state = DT__SJOB_QUEUED;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    j->submit_t = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    char spec[DT__PATH_MAX];
    dt_err e = dt__path(spec, sizeof spec, "%s/specs/%s.yaml", s->dir, j->name);
    if (e || (e = dt__write_file_atomic(spec, sub->yaml, strlen(sub->yaml))) ||
        dt__server_add(s, j)) {
        dt__http_resp_error(resp, 500, "%s", dt_errmsg());
        dt_err_clear();
        dt__sjob_free(j);
        return;
    }
    if (dt__sjournal(s, "submit", j,
                     json_pack("{s:I, s:i, s:s, s:O, s:{s:f, s:I}, s:{s:f, s:I}, s:s}", "seq",
                               (json_int_t)j->seq, "priority", j->priority, "kind", j->kind,
                               "labels", j->labels, "demand", "cpus", j->demand.cpus,
                               "memoryBytes", (json_int_t)j->demand.mem, "workerDemand", "cpus",
                               j->worker.cpus, "memoryBytes", (json_int_t)j->worker.mem, "origin",
                               j->origin))) {
        dt_err_clear(); /* in the backlog: written before any later event */
    }
    dt__server_admit(s);
    dt__http_resp_json(resp, 201, json_pack("{s:s, s:s, s:i, s:s, s:s}", "name", j->name, "state",
                                            dt__sjob_state_name(j->state), "position", j->position,
                                            "reason", j->reason, "message", j->message));
}

static void post_job(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    dt__submission sub;
    char err[2048];
    int rc = dt__submit_parse_body(s, req->body, req->body_len, dt__http_req_query(req, "priority"),
                                   &sub, err, sizeof err);
    take(s, &sub, rc, err, resp);
    dt__submission_free(&sub);
}

static void get_create(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    dt__submission sub;
    char err[2048];
    int rc = dt__submit_parse_create(s, dt__http_req_query(req, "strategy"),
                                     dt__http_req_query(req, "n_worker"),
                                     dt__http_req_query(req, "n_ps"), dt__http_req_query(req, "img"),
                                     dt__http_req_query(req, "name"), &sub, err, sizeof err);
    take(s, &sub, rc, err, resp);
    dt__submission_free(&sub);
}

static void list_jobs(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    const char *sel = dt__http_req_query(req, "labelSelector");
    char key[256] = "", val[256] = "";
    if (sel) {
        const char *eq = strchr(sel, '=');
        if (!eq || eq == sel || (size_t)(eq - sel) >= sizeof key || strlen(eq + 1) >= sizeof val)
            return dt__http_resp_error(resp, 400, "labelSelector: expected KEY=VALUE");
        snprintf(key, sizeof key, "%.*s", (int)(eq - sel), sel);
        snprintf(val, sizeof val, "%s", eq + (eq[1] == '=' ? 2 : 1));
    }
    dt__queue_plan(s, NULL, 0);
    json_t *a = json_array();
    for (int i = 0; i < s->njobs; i++) {
        const dt__sjob *j = s->jobs[i];
        if (sel) {
            const char *v = json_string_value(json_object_get(j->labels, key));
            if (!v || strcmp(v, val)) continue;
        }
        json_array_append_new(a, dt__sjob_summary(s, j));
    }
    dt__http_resp_json(resp, 200, json_pack("{s:o}", "jobs", a));
}

static void get_job(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    dt__sjob *j = job_or_404(s, req, resp);
    if (!j) return;
    dt__queue_plan(s, NULL, 0);
    json_t *st = NULL;
    if (j->state == DT__SJOB_RUNNING || j->state == DT__SJOB_SUSPENDING) {
        char path[200];
        snprintf(path, sizeof path, "/v1/jobs/%s", j->name);
        dt__http_resp r = {0};
        /* a master that does not answer: what it last wrote (status.json) */
        if (dt__server_proxy(j, "GET", path, NULL, 0, &r) == 1 && r.status == 200)
            st = json_loadb(r.body, r.len, 0, NULL);
        free(r.body);
    }
    if (!st) st = dt__sjob_dir_json(j, "status.json");
    if (!json_is_object(st)) {
        json_decref(st);
        st = json_pack("{s:s, s:s, s:[], s:[]}", "name", j->name, "kind", j->kind, "conditions",
                       "replicas");
    }
    int live = json_is_string(json_object_get(st, "master"));
    if (j->state != DT__SJOB_RUNNING || !live) {
        const char *ph = j->state == DT__SJOB_RUNNING ? "Starting" : dt__sjob_state_name(j->state);
        json_object_set_new(st, "phase", json_string(ph));
        json_object_del(st, "master");
    }
    json_object_set_new(st, "server", dt__sjob_summary(s, j));
    dt__http_resp_json(resp, 200, st);
}

static void get_result(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    dt__sjob *j = job_or_404(s, req, resp);
    if (!j) return;
    json_t *r = dt__sjob_finished(j->state) ? dt__sjob_dir_json(j, "result.json") : NULL;
    if (!r)
        return dt__http_resp_error(resp, 404, "job %s has no result yet (%s)", j->name,
                                   dt__sjob_state_name(j->state));
    dt__http_resp_json(resp, 200, r);
}

static void post_request(dt__server *s, const dt__http_req *req, dt__http_resp *resp, int kind) {
    dt__sjob *j = job_or_404(s, req, resp);
    if (!j) return;
    char msg[512];
    int rc = dt__server_request(s, j, kind, msg, sizeof msg);
    if (rc != 202) return dt__http_resp_error(resp, rc, "%s", msg);
    dt__queue_plan(s, NULL, 0);
    json_t *o = dt__sjob_summary(s, j);
    json_object_set_new(o, "stopping", json_boolean(1));
    dt__http_resp_json(resp, 202, o);
}

static void post_suspend(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    post_request(ctx, req, resp, DT__WANT_SUSPEND);
}

static void post_stop(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    const char *now = dt__http_req_query(req, "now");
    if (now && strcmp(now, "true") && strcmp(now, "false"))
        return dt__http_resp_error(resp, 400, "now: expected true or false, got '%.32s'", now);
    post_request(ctx, req, resp, now && !strcmp(now, "true") ? DT__WANT_STOP_NOW : DT__WANT_STOP);
}

static void post_resume(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    dt__sjob *j = job_or_404(s, req, resp);
    if (!j) return;
    if (j->state != DT__SJOB_SUSPENDED)
        return dt__http_resp_error(resp, 409, "job %s is %s: only a suspended job is resumed",
                                   j->name, dt__sjob_state_name(j->state));
    dt__server_resume(s, j);
    dt__server_admit(s);
    dt__http_resp_json(resp, 202, dt__sjob_summary(s, j));
}

static void delete_job(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    dt__sjob *j = job_or_404(s, req, resp);
    if (!j) return;
    if (!dt__sjob_finished(j->state))
        return dt__http_resp_error(resp, 409, "job %s is %s: stop it first", j->name,
                                   dt__sjob_state_name(j->state));
    char name[64];
    snprintf(name, sizeof name, "%s", j->name);
    dt__server_forget(s, j);
    dt__http_resp_json(resp, 200, json_pack("{s:s, s:b}", "name", name, "deleted", 1));
}

/* ---- experiments (what `dtrain tune` shows) ---- */

static int safe_name(const char *n) {
    if (!n || !*n || strlen(n) > 128 || n[0] == '.') return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return 0;
    return 1;
}

static void put_experiment(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    const char *n = dt__http_req_param(req, "name");
    if (!safe_name(n)) return dt__http_resp_error(resp, 400, "bad experiment name");
    char path[DT__PATH_MAX]; /* fits: a name is at most 128 bytes (DT__SERVER_DIR_ROOM) */
    dt_err e = dt__path(path, sizeof path, "%s/experiments/%s.json", s->dir, n);
    char *text = e ? NULL : json_dumps(req->json, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!e) e = text ? dt__write_file_atomic(path, text, strlen(text)) : DT_ERR_NOMEM;
    free(text);
    if (e) {
        dt__http_resp_error(resp, 500, "%s", dt_errmsg());
        dt_err_clear();
        return;
    }
    dt__http_resp_json(resp, 200, json_pack("{s:s, s:b}", "name", n, "stored", 1));
}

static void get_experiment(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    const char *n = dt__http_req_param(req, "name");
    char path[DT__PATH_MAX];
    json_t *j = safe_name(n) && !dt__path(path, sizeof path, "%s/experiments/%s.json", s->dir, n)
                    ? json_load_file(path, 0, NULL)
                    : NULL;
    if (!j) return dt__http_resp_error(resp, 404, "no experiment '%.128s'", n ? n : "");
    dt__http_resp_json(resp, 200, j);
}

static void list_experiments(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)req;
    dt__server *s = ctx;
    char path[DT__PATH_MAX];
    json_t *a = json_array();
    DIR *d = dt__path(path, sizeof path, "%s/experiments", s->dir) ? NULL : opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json") || de->d_name[0] == '.') continue;
        char f[DT__PATH_MAX];
        json_t *j = dt__path(f, sizeof f, "%s/%s", path, de->d_name) ? NULL
                                                                     : json_load_file(f, 0, NULL);
        if (j) json_array_append_new(a, j);
    }
    if (d) closedir(d);
    dt__http_resp_json(resp, 200, json_pack("{s:o}", "experiments", a));
}

static void get_metrics(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)req;
    dt__server *s = ctx;
    dt__queue_plan(s, NULL, 0);
    dt_prom pb, *b = &pb;
    dt_prom_init(b);
    static const char *const states[] = {"Queued", "Running", "Suspending", "Suspended",
                                         "Succeeded", "Failed", "Stopped"};
    dt_prom_family(b, "dtrain_server_jobs", "gauge", "Jobs on the server by state.");
    for (int st = 0; st < 7; st++) {
        int n = 0;
        for (int i = 0; i < s->njobs; i++) n += (int)s->jobs[i]->state == st;
        const char *l[] = {"state", states[st], NULL};
        dt_prom_sample(b, "dtrain_server_jobs", l, n);
    }
    dt__demand u = dt__queue_used(s);
    const char *cpu[] = {"resource", "cpu", NULL}, *mem[] = {"resource", "memory_bytes", NULL};
    dt_prom_family(b, "dtrain_server_capacity", "gauge", "What the server can run at once.");
    dt_prom_sample(b, "dtrain_server_capacity", cpu, s->cap.cpus);
    dt_prom_sample(b, "dtrain_server_capacity", mem, (double)s->cap.mem);
    dt_prom_family(b, "dtrain_server_used", "gauge", "What running jobs hold.");
    dt_prom_sample(b, "dtrain_server_used", cpu, u.cpus);
    dt_prom_sample(b, "dtrain_server_used", mem, (double)u.mem);
    int queued = 0;
    for (int i = 0; i < s->njobs; i++) queued += s->jobs[i]->state == DT__SJOB_QUEUED;
    dt_prom_family(b, "dtrain_server_queue_length", "gauge", "Jobs waiting for admission.");
    dt_prom_sample(b, "dtrain_server_queue_length", NULL, queued);
    dt__http_server_metrics(s->http, b, NULL);
    size_t len = 0;
    char *text = dt_prom_take(b, &len);
    dt_prom_free(b);
    if (!text) return dt__http_resp_error(resp, 500, "out of memory");
    free(resp->body);
    resp->status = 200;
    resp->body = text;
    resp->len = len;
    resp->content_type = DT_PROM_CONTENT_TYPE;
}

const dt__http_route dt__server_routes[] = {
    {.method = "GET", .pattern = "/v1/healthz", .handler = healthz, .public = 1},
    {.method = "GET", .pattern = "/metrics", .handler = get_metrics, .public = 1},
    {.method = "GET", .pattern = "/", .handler = dt__ui_page, .public = 1},
    {.method = "GET", .pattern = "/ui/:file", .handler = dt__ui_asset, .public = 1},
    {.method = "GET", .pattern = "/favicon.ico", .handler = dt__ui_asset, .public = 1},
    {.method = "GET", .pattern = "/v1/server", .handler = get_server},
    {.method = "GET", .pattern = "/create", .handler = get_create},
    {.method = "POST", .pattern = "/v1/jobs", .handler = post_job},
    {.method = "GET", .pattern = "/v1/jobs", .handler = list_jobs},
    {.method = "GET", .pattern = "/v1/jobs/:job", .handler = get_job},
    {.method = "DELETE", .pattern = "/v1/jobs/:job", .handler = delete_job},
    {.method = "GET", .pattern = "/v1/jobs/:job/result", .handler = get_result},
    {.method = "POST", .pattern = "/v1/jobs/:job/suspend", .handler = post_suspend},
    {.method = "POST", .pattern = "/v1/jobs/:job/resume", .handler = post_resume},
    {.method = "POST", .pattern = "/v1/jobs/:job/stop", .handler = post_stop},
    {.method = "GET", .pattern = "/v1/jobs/:job/:a1", .handler = dt__server_pass},
    {.method = "POST", .pattern = "/v1/jobs/:job/:a1", .handler = dt__server_pass},
    {.method = "GET", .pattern = "/v1/jobs/:job/:a1/:a2", .handler = dt__server_pass},
    {.method = "POST", .pattern = "/v1/jobs/:job/:a1/:a2", .handler = dt__server_pass},
    {.method = "GET", .pattern = "/v1/jobs/:job/:a1/:a2/:a3", .handler = dt__server_pass},
    {.method = "POST", .pattern = "/v1/jobs/:job/:a1/:a2/:a3", .handler = dt__server_pass},
    {.method = "PUT", .pattern = "/v1/experiments/:name", .handler = put_experiment, .json = 1},
    {.method = "GET", .pattern = "/v1/experiments", .handler = list_experiments},
    {.method = "GET", .pattern = "/v1/experiments/:name", .handler = get_experiment},
};
const int dt__server_nroutes = sizeof dt__server_routes / sizeof dt__server_routes[0];

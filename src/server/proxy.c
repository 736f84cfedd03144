/*
 * proxy.c - the job API through the server: every /v1/jobs/:job/... route the server does not
 * answer itself (logs, replicas, scale, events, series, datasets, ...: docs/API.md) is passed
 * to the job's master with the master's token (DIR/master.json), and its answer (status,
 * body, content type, the log headers) passed back. A job whose master does not run answers
 * its logs and replicas from its job dir; other routes get 409 naming its state.
 * Requests are made on the loop's thread: a master answers them at once, and one that does
 * not (stopped, hung) is given up after DT__MASTER_TIMEOUT_MS with a 504 naming it, so it
 * holds the server's other clients up by that much at most.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/path-impl.h"
#include "net/http-impl.h"
#include "server/server-impl.h"

static dt__sjob *job_or_404(dt__server *s, const dt__http_req *req, dt__http_resp *resp) {
    const char *name = dt__http_req_param(req, "job");
    dt__sjob *j = dt__server_find(s, name);
    if (!j) dt__http_resp_error(resp, 404, "no job '%.64s' on this server (see GET /v1/jobs)", name ? name : "");
    return j;
}

int dt__server_proxy(const dt__sjob *j, const char *method, const char *path, const char *body,
                 size_t len, dt__http_resp *resp) {
    char url[1200], tok[128];
    if (!dt__server_master(j, url, sizeof url, tok, sizeof tok)) return 0;
    dt__http_client *c = NULL;
    long status = 0;
    char *out = NULL;
    size_t olen = 0;
    dt_err e = dt__http_client_init(&c, url, tok, DT__MASTER_TIMEOUT_MS);
    if (!e) e = dt__http_client_request(c, method, path, body, len, &status, &out, &olen);
    if (e) {
        char why[600];
        snprintf(why, sizeof why, "%s", dt_errmsg());
        dt__http_client_free(c);
        free(out);
        dt_err_clear();
        if (!dt__server_master(j, url, sizeof url, tok, sizeof tok)) return 0; /* it went away */
        int timeout = e == DT_ERR_TIMEOUT;
        if (timeout)
            dt__http_resp_error(resp, 504, "job %s: its master (%s) did not answer within %d s",
                                j->name, url, DT__MASTER_TIMEOUT_MS / 1000);
        else
            dt__http_resp_error(resp, 502, "job %s: its master (%s) did not answer: %s", j->name,
                                url, why);
        return -1;
    }
    free(resp->body);
    resp->status = (int)status;
    resp->body = out;
    resp->len = olen;
    const char *ct = dt__http_client_header(c, "Content-Type");
    resp->content_type = ct && !strncmp(ct, "text/plain", 10) ? "text/plain; charset=utf-8"
                                                                : "application/json";
    static const char *const pass[] = {"X-Dtrain-Log-Offset", "X-Dtrain-Replica-State",
                                       "X-Dtrain-Log-Done"};
    for (int i = 0; i < 3; i++) {
        const char *v = dt__http_client_header(c, pass[i]);
        if (v) dt__http_resp_header(resp, pass[i], "%s", v);
    }
    dt__http_client_free(c);
    return 1;
}

json_t *dt__sjob_dir_json(const dt__sjob *j, const char *file) {
    char path[DT__PATH_MAX];
    return dt__path(path, sizeof path, "%s/%s", j->dir, file) ? NULL : json_load_file(path, 0, NULL);
}

/* A replica's log from the job dir (the job's master is not running). */
static void log_from_dir(const dt__sjob *j, const dt__http_req *req, dt__http_resp *resp) {
    const char *rep = dt__http_req_param(req, "a2");
    if (!rep || strchr(rep, '/') || rep[0] == '.')
        return dt__http_resp_error(resp, 404, "no such replica");
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/logs/%s.log", j->dir, rep))
        return dt__http_resp_error(resp, 404, "job %s has no replica %.64s (%s)", j->name, rep,
                                   dt_errmsg());
    const char *o = dt__http_req_query(req, "offset"), *m = dt__http_req_query(req, "max");
    long long off = o ? atoll(o) : 0, max = m ? atoll(m) : 256 * 1024;
    if (off < 0) off = 0;
    if (max <= 0 || max > 4 << 20) max = 256 * 1024;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dt__http_resp_error(resp, 404, "job %s has no replica %.64s (no %s)", j->name, rep, path);
    char *buf = malloc((size_t)max + 1);
    ssize_t n = buf ? pread(fd, buf, (size_t)max, off) : -1;
    close(fd);
    if (n < 0) {
        free(buf);
        return dt__http_resp_error(resp, 500, "%s: %s", path, strerror(errno));
    }
    free(resp->body);
    resp->status = 200;
    resp->body = buf;
    resp->len = (size_t)n;
    resp->content_type = "text/plain; charset=utf-8";
    dt__http_resp_header(resp, "X-Dtrain-Log-Offset", "%lld", off + n);
    dt__http_resp_header(resp, "X-Dtrain-Log-Done", "1");
}

/* The master scaled the job's workers: its demand follows (journaled), so admission counts
 * what it holds now (a scale-up may take the server past its capacity: nothing new is
 * admitted until it is back under). */
static void scaled(dt__server *s, dt__sjob *j, const dt__http_resp *resp) {
    json_t *a = json_loadb(resp->body ? resp->body : "", resp->len, 0, NULL);
    long delta = (long)json_array_size(json_object_get(a, "added")) -
                 (long)json_array_size(json_object_get(a, "removed"));
    json_decref(a);
    if (!delta) return;
    j->demand.cpus += (double)delta * j->worker.cpus;
    j->demand.mem += delta * j->worker.mem;
    if (j->demand.cpus < 0) j->demand.cpus = 0;
    if (j->demand.mem < 0) j->demand.mem = 0;
    dt__sjournal(s, "demand", j, json_pack("{s:{s:f, s:I}}", "demand", "cpus", j->demand.cpus,
                                           "memoryBytes", (json_int_t)j->demand.mem));
    s->dirty = 1;
}

/* Every other /v1/jobs/:job/... route: to the job's master. */
void dt__server_pass(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__server *s = ctx;
    dt__sjob *j = job_or_404(s, req, resp);
    if (!j) return;
    char q[2048], path[4096];
    dt__http_req_query_string(req, q, sizeof q);
    if (snprintf(path, sizeof path, "%s%s", req->path, q) >= (int)sizeof path)
        return dt__http_resp_error(resp, 414, "the request's path and query are too long");
    int rc = j->state == DT__SJOB_RUNNING || j->state == DT__SJOB_SUSPENDING
                 ? dt__server_proxy(j, req->method, path, req->body_len ? req->body : NULL,
                                    req->body_len, resp)
                 : 0;
    if (rc == 1 && resp->status == 200 && !strcmp(req->method, "POST") && req->nparams == 2 &&
        !strcmp(dt__http_req_param(req, "a1"), "scale"))
        scaled(s, j, resp);
    if (rc) return;
    const char *a1 = dt__http_req_param(req, "a1"), *a3 = dt__http_req_param(req, "a3");
    if (!strcmp(req->method, "GET") && a1 && !strcmp(a1, "replicas") && a3 && !strcmp(a3, "logs"))
        return log_from_dir(j, req, resp);
    if (!strcmp(req->method, "GET") && a1 && !strcmp(a1, "replicas") && req->nparams == 2) {
        json_t *st = dt__sjob_dir_json(j, "status.json");
        json_t *r = json_object_get(st, "replicas");
        dt__http_resp_json(resp, 200, json_pack("{s:o}", "replicas", r ? json_incref(r) : json_array()));
        json_decref(st);
        return;
    }
    dt__http_resp_error(resp, 409, "job %s is %s: its master is not running", j->name,
                        dt__sjob_state_name(j->state));
}

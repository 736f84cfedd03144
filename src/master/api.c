/*
 * api.c - the job's HTTP API (docs/API.md), served by the master's event loop.
 *
 *   GET  /v1/healthz                                  liveness, no token
 *   GET  /v1/jobs/:job                                the job's status (as status.json)
 *   GET  /v1/jobs/:job/replicas                       its replicas
 *   GET  /v1/jobs/:job/replicas/:replica/logs         a replica's log from ?offset=N
 *   POST /v1/jobs/:job/replicas/:replica/report       a replica reports a JSON object
 *   POST /v1/jobs/:job/stop                           stop the job
 *
 * Every route but healthz needs the job's token (the server checks it). A :job that is
 * not this master's job is a 404, so a client that reached the wrong master learns so.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/master-impl.h"
#include "net/http-impl.h"

#define LOG_CHUNK_DEFAULT (256 << 10)
#define LOG_CHUNK_MAX (4 << 20)

static int this_job(dt__master *m, const dt__http_req *req, dt__http_resp *resp) {
    const char *name = dt__http_req_param(req, "job");
    if (name && !strcmp(name, m->job->name)) return 1;
    dt__http_resp_error(resp, 404, "no job '%s' here: this master runs job '%s'",
                        name ? name : "", m->job->name);
    return 0;
}

static dt__replica *replica(dt__master *m, const dt__http_req *req, dt__http_resp *resp) {
    const char *name = dt__http_req_param(req, "replica");
    dt__replica *r = name ? dt__job_state_find(&m->st, name) : NULL;
    if (!r)
        dt__http_resp_error(resp, 404, "job '%s' has no replica '%s' (replicas are named like "
                            "worker-0)", m->job->name, name ? name : "");
    return r;
}

static void healthz(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    (void)req;
    dt__http_resp_json(resp, 200, json_pack("{s:b}", "ok", 1));
}

static void get_job(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    if (!m->status_cache || m->status_cache_version != m->version) {
        json_t *j = dt__job_state_json(&m->st, m->job, m->url);
        json_object_set_new(j, "jobDir", json_string(m->dir));
        json_t *reps = json_array();
        for (int i = 0; i < m->st.nreplicas; i++)
            json_array_append_new(reps, dt__replica_json(&m->st.replicas[i], m->dir));
        json_object_set_new(j, "replicas", reps);
        char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(j);
        if (!text) {
            dt__http_resp_error(resp, 500, "out of memory");
            return;
        }
        free(m->status_cache);
        m->status_cache = text;
        m->status_cache_len = strlen(text);
        m->status_cache_version = m->version;
    }
    char *body = malloc(m->status_cache_len + 1);
    if (!body) {
        dt__http_resp_error(resp, 500, "out of memory");
        return;
    }
    memcpy(body, m->status_cache, m->status_cache_len + 1);
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = body;
    resp->len = m->status_cache_len;
}

static void get_replicas(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    json_t *reps = json_array();
    for (int i = 0; i < m->st.nreplicas; i++)
        json_array_append_new(reps, dt__replica_json(&m->st.replicas[i], m->dir));
    dt__http_resp_json(resp, 200, json_pack("{s:o}", "replicas", reps));
}

static int parse_size(const char *s, long long max, long long *out) {
    if (!s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max) return -1;
    *out = v;
    return 0;
}

static void get_logs(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    dt__replica *r = replica(m, req, resp);
    if (!r) return;
    long long offset = 0, max = LOG_CHUNK_DEFAULT;
    if (parse_size(dt__http_req_query(req, "offset"), (long long)1 << 50, &offset)) {
        dt__http_resp_error(resp, 400, "offset: expected a non-negative integer, got '%s'",
                            dt__http_req_query(req, "offset"));
        return;
    }
    if (parse_size(dt__http_req_query(req, "max"), LOG_CHUNK_MAX, &max) || max == 0) {
        dt__http_resp_error(resp, 400, "max: expected an integer in 1..%d, got '%s'",
                            LOG_CHUNK_MAX, dt__http_req_query(req, "max"));
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/logs/%s.log", m->dir, r->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = NULL;
    ssize_t n = 0;
    if (fd >= 0) {
        struct stat sb;
        if (fstat(fd, &sb) == 0 && offset < sb.st_size) {
            long long want = sb.st_size - offset < max ? sb.st_size - offset : max;
            buf = malloc((size_t)want + 1);
            if (buf) {
                n = pread(fd, buf, (size_t)want, offset);
                if (n < 0) n = 0;
            }
        }
        close(fd);
    }
    int done = r->state != DT__REPLICA_RUNNING && r->state != DT__REPLICA_PENDING &&
               r->state != DT__REPLICA_RESTARTING;
    resp->status = 200;
    resp->content_type = "text/plain; charset=utf-8";
    resp->body = buf;
    resp->len = (size_t)n;
    dt__http_resp_header(resp, "X-Dtrain-Log-Offset", "%lld", offset + (long long)n);
    dt__http_resp_header(resp, "X-Dtrain-Replica-State", "%s", dt__replica_state_name(r->state));
    dt__http_resp_header(resp, "X-Dtrain-Log-Done", "%d", done && m->st.finished ? 1 : done);
}

static void post_report(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    dt__replica *r = replica(m, req, resp);
    if (!r) return;
    if (dt__master_record_report(m, r, json_incref(req->json))) {
        dt__http_resp_error(resp, 500, "%s", dt_errmsg());
        return;
    }
    dt__http_resp_json(resp, 200, json_pack("{s:b}", "recorded", 1));
}

static void post_stop(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    int already = m->st.finished;
    if (!already) dt__master_request_stop(m, "stop requested through the API");
    dt__http_resp_json(resp, 202,
                       json_pack("{s:b, s:s}", "stopping", !already, "phase",
                                 dt__job_state_phase(&m->st)));
}

const dt__http_route dt__master_routes[] = {
    {.method = "GET", .pattern = "/v1/healthz", .handler = healthz, .public = 1},
    {.method = "GET", .pattern = "/v1/jobs/:job", .handler = get_job},
    {.method = "GET", .pattern = "/v1/jobs/:job/replicas", .handler = get_replicas},
    {.method = "GET", .pattern = "/v1/jobs/:job/replicas/:replica/logs", .handler = get_logs},
    {.method = "POST",
     .pattern = "/v1/jobs/:job/replicas/:replica/report",
     .handler = post_report,
     .json = 1},
    {.method = "POST", .pattern = "/v1/jobs/:job/stop", .handler = post_stop},
};
const int dt__master_nroutes = sizeof dt__master_routes / sizeof dt__master_routes[0];

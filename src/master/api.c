/*
 * api.c - the job's HTTP API (docs/API.md), served by the master's event loop.
 *
 *   GET  /v1/healthz                                  liveness, no token
 *   GET  /v1/jobs/:job                                the job's status (as status.json)
 *   GET  /v1/jobs/:job/replicas                       its replicas
 *   GET  /v1/jobs/:job/replicas/:replica/logs         a replica's log from ?offset=N
 *   POST /v1/jobs/:job/replicas/:replica/report       a replica reports a JSON object
 *   POST /v1/jobs/:job/stop[?now=true]               stop the job (now: no grace to save)
 *   POST /v1/jobs/:job/scale                          {"workers": N}: add or remove workers
 *   POST /v1/jobs/:job/rendezvous                     a trainer joins an all-reduce ring
 *   GET  /v1/jobs/:job/rendezvous?generation=G        must ring G be left?
 *
 * Every route but healthz needs the job's token (the server checks it). A :job that is
 * not this master's job is a 404, so a client that reached the wrong master learns so.
 *
 * A route that changes the job's state says yes only to what is in the journal: while the
 * journal cannot be written (a full disk), it answers 503 before it changes anything, and
 * 503 after a change whose event could not be written (the event waits in the journal's
 * backlog; the client's retry, the same request, is answered once it is written).
 *
 * The shard ledger and the rendezvous are given the monotonic clock (dt__mono_s): their
 * deadlines must not move with the system clock (ledger-impl.h, "Times").
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdint.h>
#include <unistd.h>

#include "core/clock-impl.h"
#include "dtrain/shard.h"
#include "core/path-impl.h"
#include "core/strbuf-impl.h"
#include "dtrain/metrics.h"
#include "master/master-impl.h"
#include "net/http-impl.h"
#include "net/sock-impl.h"

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

/* Before a change: 1 when the journal is writable, else a 503 answer and 0. After one:
 * the same, so that the change is acknowledged only once it is journaled. */
static int journaled_at(dt__master *m, dt__http_resp *resp, int after) {
    if (dt__journal_ok(m->journal)) return 1;
    if (!m->journal_broken) { /* said once, not for every refused request */
        char what[400];
        snprintf(what, sizeof what, "cannot write the journal: %s", dt__journal_why(m->journal));
        dt__master_journal_broken(m, what);
    }
    if (after)
        dt__http_resp_error(resp, 503,
                            "the master cannot write its journal (%s): the change is made but "
                            "not yet recorded; retry the same request, which is answered once "
                            "it is",
                            dt__journal_why(m->journal));
    else
        dt__http_resp_error(resp, 503,
                            "the master cannot write its journal (%s): nothing is changed until "
                            "it can; retry",
                            dt__journal_why(m->journal));
    return 0;
}
static int journaled(dt__master *m, dt__http_resp *resp) { return journaled_at(m, resp, 0); }
static int journaled_after(dt__master *m, dt__http_resp *resp) {
    return journaled_at(m, resp, 1);
}

static void healthz(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    (void)req;
    dt__http_resp_json(resp, 200, json_pack("{s:b, s:s}", "ok", 1, "job", m->job->name));
}

/* Prometheus' scrape: public (no secrets in it), as scrapers carry no job token. */
static void get_metrics(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)req;
    dt_prom b;
    dt_prom_init(&b);
    dt__master_metrics(ctx, &b);
    size_t len = 0;
    char *text = dt_prom_take(&b, &len);
    if (!text) return dt__http_resp_error(resp, 500, "out of memory building the metrics");
    free(resp->body);
    resp->status = 200;
    resp->body = text;
    resp->len = len;
    resp->content_type = DT_PROM_CONTENT_TYPE;
}

static void get_job(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    if (!m->status_cache || m->status_cache_version != m->version) {
        json_t *j = dt__master_status_json(m, m->url);
        json_t *jr = json_pack("{s:b}", "ok", !m->journal_broken);
        if (jr && m->journal_broken)
            json_object_set_new(jr, "error", json_string(dt__journal_why(m->journal)));
        json_object_set_new(j, "journal", jr);
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

/* The dashboard's curves. */
static void get_series(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    dt__http_resp_json(resp, 200, dt__series_json(m));
}

/* The journal's events from byte `offset` on (whole lines, at most EVENTS_CHUNK bytes), for
 * the dashboard's time line: {"events": [...], "next": OFFSET}. The job's token (in the
 * start event) is left out. */
#define EVENTS_CHUNK (256 << 10)
static void get_events(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    long long offset = 0;
    if (parse_size(dt__http_req_query(req, "offset"), (long long)1 << 50, &offset)) {
        dt__http_resp_error(resp, 400, "offset: expected a non-negative integer, got '%s'",
                            dt__http_req_query(req, "offset"));
        return;
    }
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/journal.jsonl", m->dir)) {
        dt__http_resp_error(resp, 500, "%s", dt_errmsg());
        return;
    }
    json_t *events = json_array();
    long long next = offset;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = fd >= 0 ? malloc(EVENTS_CHUNK) : NULL;
    ssize_t n = buf ? pread(fd, buf, EVENTS_CHUNK, offset) : 0;
    if (fd >= 0) close(fd);
    for (ssize_t at = 0; n > 0 && at < n;) {
        char *nl = memchr(buf + at, '\n', (size_t)(n - at));
        if (!nl) break; /* a line not written whole yet */
        json_t *ev = json_loadb(buf + at, (size_t)(nl - (buf + at)), 0, NULL);
        if (json_is_object(ev)) {
            json_object_del(ev, "token");
            json_array_append_new(events, ev);
        } else {
            json_decref(ev);
        }
        at = nl - buf + 1;
        next = offset + at;
    }
    free(buf);
    dt__http_resp_json(resp, 200, json_pack("{s:o, s:I}", "events", events, "next", (json_int_t)next));
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
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/logs/%s.log", m->dir, r->name)) {
        dt__http_resp_error(resp, 500, "%s", dt_errmsg());
        return;
    }
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
    size_t size = json_dumpb(req->json, NULL, 0, JSON_COMPACT);
    if (size > DT__REPORT_MAX) {
        dt__http_resp_error(resp, 413,
                            "a report of %zu bytes (as compact JSON) is larger than the %d a "
                            "report may carry: figures and paths, not data",
                            size, DT__REPORT_MAX);
        return;
    }
    if (!journaled(m, resp)) return;
    if (dt__master_record_report(m, r, json_incref(req->json))) {
        if (journaled_after(m, resp)) dt__http_resp_error(resp, 500, "%s", dt_errmsg());
        return;
    }
    dt__http_resp_json(resp, 200, json_pack("{s:b}", "recorded", 1));
}

/* A trainer's progress: numbers only, kept in memory (a lost one is overtaken by the next). */
static void post_progress(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    static const char *const keys[] = {"step", "epoch", "loss", "samples_per_sec", "samples", NULL};
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    dt__replica *r = replica(m, req, resp);
    if (!r) return;
    json_t *p = json_object();
    for (int i = 0; keys[i]; i++) {
        json_t *v = json_object_get(req->json, keys[i]);
        if (!v) continue;
        if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0) {
            json_decref(p);
            return dt__http_resp_error(resp, 400, "%s: expected a finite number >= 0", keys[i]);
        }
        json_object_set(p, keys[i], v);
    }
    dt__master_record_progress(m, r, p);
    dt__http_resp_json(resp, 200, json_pack("{s:b}", "recorded", 1));
}

static void post_stop(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    const char *now = dt__http_req_query(req, "now");
    if (now && strcmp(now, "true") && strcmp(now, "false") && strcmp(now, "1") && strcmp(now, "0")) {
        dt__http_resp_error(resp, 400, "now: expected true or false, got '%s'", now);
        return;
    }
    int kill = now && (!strcmp(now, "true") || !strcmp(now, "1"));
    int already = m->st.finished;
    /* a finished job's replicas may still be stopping: ?now=true cuts their grace short */
    if (!already || kill) dt__master_request_stop(m, "stop requested through the API", kill);
    dt__http_resp_json(resp, 202,
                       json_pack("{s:b, s:s}", "stopping", !already, "phase",
                                 dt__job_state_phase(&m->st)));
}

static int int_field(const json_t *obj, dt__http_resp *resp, const char *key, int64_t lo,
                     int64_t hi, int required, int64_t *out);
static int err_status(dt_err e);
static int only_fields(const json_t *obj, const char *const *known, const char *prefix,
                       const char *body, dt__http_resp *resp);

static void post_scale(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    static const char *const known[] = {"workers", NULL};
    dt__master *m = ctx;
    if (!this_job(m, req, resp) || !only_fields(req->json, known, "", "{\"workers\": N}", resp))
        return;
    int64_t n = 0;
    if (!int_field(req->json, resp, "workers", 0, DT__MAX_REPLICAS, 1, &n)) return;
    if (!journaled(m, resp)) return;
    json_t *added = NULL, *removed = NULL;
    dt_err e = dt__master_scale(m, (int)n, &added, &removed);
    if (e) {
        dt__http_resp_error(resp, err_status(e), "%s", dt_errmsg());
        return;
    }
    if (!journaled_after(m, resp)) {
        json_decref(added);
        json_decref(removed);
        return;
    }
    dt__http_resp_json(resp, 200, json_pack("{s:i, s:o, s:o}", "workers", (int)n, "added", added,
                                            "removed", removed));
}

/* ---- the shard service (docs/SHARDS.md) ---- */

/* The replica named in a shard request's body: one of this job's. */
static dt__replica *body_replica(dt__master *m, const dt__http_req *req, dt__http_resp *resp) {
    const char *name = json_string_value(json_object_get(req->json, "replica"));
    if (!name) {
        dt__http_resp_error(resp, 400, "replica: required, a string like \"worker-0\"");
        return NULL;
    }
    dt__replica *r = dt__job_state_find(&m->st, name);
    if (!r) dt__http_resp_error(resp, 400, "replica: job '%s' has no replica '%s'", m->job->name, name);
    return r;
}

/* A JSON integer field of obj in [lo, hi]; 0 and an error response when it is not. */
static int int_field(const json_t *obj, dt__http_resp *resp, const char *key, int64_t lo,
                     int64_t hi, int required, int64_t *out) {
    json_t *v = json_object_get(obj, key);
    if (!v && !required) return 1;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        dt__http_resp_error(resp, 400, "%s: expected an integer in %lld..%lld", key,
                            (long long)lo, (long long)hi);
        return 0;
    }
    *out = json_integer_value(v);
    return 1;
}

static int bool_field(const json_t *obj, dt__http_resp *resp, const char *key, int *out) {
    json_t *v = json_object_get(obj, key);
    if (!v) return 1;
    if (!json_is_boolean(v)) {
        dt__http_resp_error(resp, 400, "%s: expected true or false", key);
        return 0;
    }
    *out = json_is_true(v);
    return 1;
}

/* Every key of obj is one of known (NULL-terminated); else 0 and "PREFIXKEY: unknown field
 * (the body is BODY)", as a registration's unknown field is refused. */
static int only_fields(const json_t *obj, const char *const *known, const char *prefix,
                       const char *body, dt__http_resp *resp) {
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        const char *const *k = known;
        while (*k && strcmp(key, *k)) k++;
        if (!*k) {
            dt__http_resp_error(resp, 400, "%s%.200s: unknown field (the body is %s)", prefix, key,
                                body);
            return 0;
        }
    }
    return 1;
}

static const char *const report_fields[] = {"epoch", "id", "lease", "ok", "message", NULL};
#define REPORT_BODY "{epoch, id, lease, ok, message}"

static int err_status(dt_err e) {
    return e == DT_ERR_NOTFOUND ? 404 : e == DT_ERR_STATE ? 409 : e == DT_ERR_NOMEM ? 500 : 400;
}

static void post_dataset(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    static const char *const known[] = {"name", "dataset_size", "batch_size", "num_epochs",
                                        "num_minibatches_per_shard", "shuffle", "shuffle_shards",
                                        "seed", "max_failures"};
    const char *key;
    json_t *val;
    json_object_foreach(req->json, key, val) {
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(key, known[k])) k++;
        if (k == sizeof known / sizeof known[0]) {
            dt__http_resp_error(resp, 400, "%s: unknown field (docs/SHARDS.md lists the fields)", key);
            return;
        }
    }
    dt__dataset_conf c;
    dt__dataset_conf_init(&c);
    const char *name = json_string_value(json_object_get(req->json, "name"));
    if (!name || !*name || strlen(name) >= sizeof c.name) {
        dt__http_resp_error(resp, 400, "name: required, a string of 1 to %d bytes",
                            (int)sizeof c.name - 1);
        return;
    }
    snprintf(c.name, sizeof c.name, "%s", name);
    int64_t seed = 0, maxf = c.max_failures;
    if (!int_field(req->json, resp, "dataset_size", 1, INT64_MAX / 2, 1, &c.dataset_size) ||
        !int_field(req->json, resp, "batch_size", 1, INT32_MAX, 1, &c.batch_size) ||
        !int_field(req->json, resp, "num_epochs", 1, 1 << 20, 1, &c.num_epochs) ||
        !int_field(req->json, resp, "num_minibatches_per_shard", 1, INT32_MAX, 1,
                   &c.num_minibatches_per_shard) ||
        !int_field(req->json, resp, "seed", 0, INT64_MAX, 0, &seed) ||
        !int_field(req->json, resp, "max_failures", 0, 1000, 0, &maxf) ||
        !bool_field(req->json, resp, "shuffle", &c.shuffle) ||
        !bool_field(req->json, resp, "shuffle_shards", &c.shuffle_shards))
        return;
    c.seed = (uint64_t)seed;
    c.max_failures = (int)maxf;
    if (!journaled(m, resp)) return;
    dt_err e = dt__ledger_register(m->ledger, &c);
    if (e) {
        dt__http_resp_error(resp, err_status(e), "%s", dt_errmsg());
        return;
    }
    dt__master_touch(m);
    if (!journaled_after(m, resp)) return;
    dt__http_resp_json(resp, 200, json_pack("{s:b}", "registered", 1));
}

/* Apply the report in obj ({epoch, id, lease, ok, message}) of replica r to the dataset of
 * the route; 0 and an error response when it is malformed or refused. */
static int apply_report(dt__master *m, const dt__http_req *req, const json_t *obj,
                        const dt__replica *r, dt__http_resp *resp) {
    int64_t epoch, id, lease;
    int ok = -1;
    if (!int_field(obj, resp, "epoch", 0, INT64_MAX, 1, &epoch) ||
        !int_field(obj, resp, "id", 0, INT64_MAX, 1, &id) ||
        !int_field(obj, resp, "lease", 0, INT64_MAX, 1, &lease) || !bool_field(obj, resp, "ok", &ok))
        return 0;
    if (ok < 0) {
        dt__http_resp_error(resp, 400, "ok: required, true (done) or false (failed)");
        return 0;
    }
    json_t *jmsg = json_object_get(obj, "message");
    if (jmsg && !json_is_string(jmsg)) {
        dt__http_resp_error(resp, 400, "message: expected a string");
        return 0;
    }
    const char *msg = json_string_value(jmsg);
    dt_err e = dt__ledger_report(m->ledger, dt__http_req_param(req, "dataset"), r->name, epoch, id,
                                 (uint64_t)lease, ok, msg ? msg : "", dt__mono_s());
    if (e) {
        dt__http_resp_error(resp, err_status(e), "%s", dt_errmsg());
        return 0;
    }
    dt__master_touch(m);
    return 1;
}

/* Put "what[i]: " before the error message of resp (status kept). */
static void prefix_error(dt__http_resp *resp, const char *what, size_t i) {
    json_t *j = resp->body ? json_loadb(resp->body, resp->len, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(j, "error"));
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", msg ? msg : "refused");
    json_decref(j);
    dt__http_resp_error(resp, resp->status, "%s[%zu]: %s", what, i, copy);
}

/* The C client's batch limit is the ledger's */
_Static_assert(DT_SHARD_MAX_BATCH == DT__LEDGER_MAX_BATCH, "one batch limit");

/* A fetch's answer with shards is written as text here, not built with jansson: a shard's
 * indices (1,024 at 16 batches of 64) formatted by jansson, each with snprintf, were a
 * quarter of the master's CPU during a job (and what it spends, a trainer waits for). */
static void put_int(dt__strbuf *b, int64_t v) {
    char d[24], *p = d + sizeof d;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0) *--p = '-';
    dt__strbuf_put(b, p, (size_t)(d + sizeof d - p));
}

static void put_shard(dt__strbuf *b, const dt__shard *sh, int indices) {
    dt__strbuf_printf(b, "{\"epoch\":%lld,\"id\":%lld,\"start\":%lld,\"end\":%lld,\"lease\":%lld",
                      (long long)sh->epoch, (long long)sh->id, (long long)sh->start,
                      (long long)sh->end, (long long)(json_int_t)sh->lease);
    if (sh->indices && indices) {
        dt__strbuf_puts(b, ",\"indices\":[");
        for (int64_t i = 0; i < sh->end - sh->start; i++) {
            if (i) dt__strbuf_put(b, ",", 1);
            put_int(b, sh->indices[i]);
        }
        dt__strbuf_put(b, "]", 1);
    }
    dt__strbuf_put(b, "}", 1);
}

/* {"status": "shard", "shard": {...}}, or with `many` {"status": "shard", "shards": [...]} */
static void shards_answer(dt__http_resp *resp, const dt__shard *sh, int n, int many,
                          int indices) {
    dt__strbuf b = {0};
    dt__strbuf_puts(&b, many ? "{\"status\":\"shard\",\"shards\":["
                             : "{\"status\":\"shard\",\"shard\":");
    for (int k = 0; k < n; k++) {
        if (k) dt__strbuf_put(&b, ",", 1);
        put_shard(&b, &sh[k], indices);
    }
    dt__strbuf_puts(&b, many ? "]}" : "}");
    if (b.oom) {
        free(b.p);
        dt__http_resp_error(resp, 500, "out of memory");
        return;
    }
    free(resp->body);
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = b.p;
    resp->len = b.len;
}

/* A fetch may carry the report of the shard just finished ("report"), or of the batch just
 * finished ("reports"), and may ask for several shards ("count"): one request per batch.
 * Its events are written to the journal together, once, before the answer. A client that
 * registered the dataset knows its sample order (dt_epoch_order of its seed and the epoch)
 * and may leave the indices out ("indices": false): a shard's 1,024 of them were most of
 * what a fetch cost its trainer's core, which in a ring every member waits out. */
static void post_fetch(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    static const char *const known[] = {"replica", "request", "report", "reports", "count",
                                        "indices", NULL};
    dt__master *m = ctx;
    if (!this_job(m, req, resp) ||
        !only_fields(req->json, known, "",
                     "{replica, request, report, reports, count, indices}", resp))
        return;
    dt__replica *r = body_replica(m, req, resp);
    if (!r) return;
    int64_t request = 0, count = 0;
    int indices = 1;
    if (!int_field(req->json, resp, "request", 0, INT64_MAX, 0, &request) ||
        !int_field(req->json, resp, "count", 1, DT__LEDGER_MAX_BATCH, 0, &count) ||
        !bool_field(req->json, resp, "indices", &indices))
        return;
    json_t *report = json_object_get(req->json, "report");
    json_t *reports = json_object_get(req->json, "reports");
    if (report && reports) {
        dt__http_resp_error(resp, 400, "report, reports: give one or the other");
        return;
    }
    if (report && !json_is_object(report)) {
        dt__http_resp_error(resp, 400, "report: expected an object " REPORT_BODY);
        return;
    }
    if (report && !only_fields(report, report_fields, "report.", REPORT_BODY, resp)) return;
    if (reports && (!json_is_array(reports) || json_array_size(reports) > DT__LEDGER_MAX_BATCH)) {
        dt__http_resp_error(resp, 400, "reports: expected an array of at most %d objects "
                            REPORT_BODY, DT__LEDGER_MAX_BATCH);
        return;
    }
    size_t i;
    json_t *one;
    json_array_foreach(reports, i, one) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "reports[%zu].", i);
        if (!json_is_object(one)) {
            dt__http_resp_error(resp, 400, "reports[%zu]: expected an object " REPORT_BODY, i);
            return;
        }
        if (!only_fields(one, report_fields, prefix, REPORT_BODY, resp)) return;
    }
    if (!journaled(m, resp)) return;
    dt__journal_hold(m->journal);
    int applied = 1;
    if (report) applied = apply_report(m, req, report, r, resp);
    json_array_foreach(reports, i, one) {
        if (!applied) break;
        /* the ones before stay recorded: a retry of this request counts them once */
        if (!(applied = apply_report(m, req, one, r, resp))) prefix_error(resp, "reports", i);
    }
    dt__shard sh[DT__LEDGER_MAX_BATCH];
    dt__fetch_status st = DT__FETCH_WAIT;
    int n = 0;
    dt_err e = DT_OK;
    if (applied)
        e = dt__ledger_fetch_many(m->ledger, dt__http_req_param(req, "dataset"), r->name,
                                  (uint64_t)request, dt__mono_s(), count ? (int)count : 1, &st, sh,
                                  &n);
    dt__journal_release(m->journal);
    /* Not recorded yet (the fetch, or the reports it carried): the retry, the same request
     * id and reports, gets the same answer once it is. */
    if (!applied || !journaled_after(m, resp)) return;
    if (e) {
        dt__http_resp_error(resp, err_status(e), "%s", dt_errmsg());
        return;
    }
    if (st == DT__FETCH_WAIT || st == DT__FETCH_END) {
        dt__http_resp_json(resp, 200,
                           json_pack("{s:s}", "status", st == DT__FETCH_WAIT ? "wait" : "end"));
        return;
    }
    dt__master_touch(m);
    shards_answer(resp, sh, count ? n : 1, count != 0, indices);
}

static void post_report_shard(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    static const char *const known[] = {"replica", "epoch", "id", "lease", "ok", "message", NULL};
    dt__master *m = ctx;
    if (!this_job(m, req, resp) ||
        !only_fields(req->json, known, "", "{replica, epoch, id, lease, ok, message}", resp))
        return;
    dt__replica *r = body_replica(m, req, resp);
    if (r && journaled(m, resp) && apply_report(m, req, req->json, r, resp) &&
        journaled_after(m, resp))
        dt__http_resp_json(resp, 200, json_pack("{s:b}", "recorded", 1));
}

static void post_heartbeat(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    dt__replica *r = replica(m, req, resp);
    if (!r) return;
    dt__ledger_heartbeat(m->ledger, r->name, dt__mono_s());
    dt__http_resp_json(resp, 200, json_pack("{s:b}", "ok", 1));
}

/* ---- the rendezvous of an all-reduce job (rendezvous.c) ---- */

/* A data-plane address: "host:port", port 1..65535, printable without spaces. */
static int good_address(const char *a) {
    size_t n = strlen(a);
    if (n < 3 || n > DT__RDZV_MAX_ADDR) return 0;
    for (const char *p = a; *p; p++)
        if (*p <= ' ' || *p == 0x7f) return 0;
    char host[DT__RDZV_MAX_ADDR + 1];
    int port = 0;
    return dt__hostport_split(a, host, sizeof host, &port) == DT__HOSTPORT_OK;
}

static void post_rendezvous(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    dt_err e = dt__rdzv_check_job(m, 1);
    if (e) {
        dt__http_resp_error(resp, err_status(e), "%s", dt_errmsg());
        return;
    }
    static const char *const known[] = {"replica", "address", "generation", "step",
                                        "unreachable", NULL};
    if (!only_fields(req->json, known, "", "{replica, address, generation, step, unreachable}",
                     resp))
        return;
    dt__rdzv_reg reg = {0};
    reg.replica = json_string_value(json_object_get(req->json, "replica"));
    if (!reg.replica) {
        dt__http_resp_error(resp, 400, "replica: required, a string like \"worker-0\"");
        return;
    }
    reg.address = json_string_value(json_object_get(req->json, "address"));
    if (!reg.address || !good_address(reg.address)) {
        dt__http_resp_error(resp, 400,
                            "address: required, the replica's data-plane \"host:port\" (port "
                            "1..65535, at most %d bytes)",
                            DT__RDZV_MAX_ADDR);
        return;
    }
    if (!int_field(req->json, resp, "generation", 0, INT64_MAX, 1, &reg.generation) ||
        !int_field(req->json, resp, "step", 0, INT64_MAX, 1, &reg.step))
        return;
    json_t *un = json_object_get(req->json, "unreachable");
    if (un && !json_is_null(un) && !json_is_string(un)) {
        dt__http_resp_error(resp, 400, "unreachable: expected a replica name or null");
        return;
    }
    reg.unreachable = json_string_value(un);
    if (!journaled(m, resp)) return;
    json_t *answer;
    if ((e = dt__rdzv_join(m, &reg, dt__mono_s(), &answer))) {
        dt__http_resp_error(resp, err_status(e), "%s", dt_errmsg());
        return;
    }
    if (!journaled_after(m, resp)) {
        json_decref(answer);
        return;
    }
    dt__http_resp_json(resp, 200, answer);
}

static void get_rendezvous(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    dt_err e = dt__rdzv_check_job(m, 0);
    if (e) {
        dt__http_resp_error(resp, err_status(e), "%s", dt_errmsg());
        return;
    }
    long long generation = 0;
    const char *g = dt__http_req_query(req, "generation");
    if (parse_size(g, INT64_MAX, &generation)) {
        dt__http_resp_error(resp, 400, "generation: expected an integer >= 0, got '%s'", g);
        return;
    }
    /* A poll may form or break a ring (journaled): no change unless it can be recorded. */
    if (!journaled(m, resp)) return;
    json_t *answer;
    if ((e = dt__rdzv_status(m, generation, dt__mono_s(), &answer))) {
        dt__http_resp_error(resp, err_status(e), "%s", dt_errmsg());
        return;
    }
    if (!journaled_after(m, resp)) {
        json_decref(answer);
        return;
    }
    dt__http_resp_json(resp, 200, answer);
}

static void get_datasets(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    dt__master *m = ctx;
    if (!this_job(m, req, resp)) return;
    dt__http_resp_json(resp, 200, dt__ledger_progress(m->ledger));
}

const dt__http_route dt__master_routes[] = {
    {.method = "GET", .pattern = "/v1/healthz", .handler = healthz, .public = 1},
    {.method = "GET", .pattern = "/metrics", .handler = get_metrics, .public = 1},
    {.method = "GET", .pattern = "/", .handler = dt__ui_page, .public = 1},
    {.method = "GET", .pattern = "/ui/:file", .handler = dt__ui_asset, .public = 1},
    {.method = "GET", .pattern = "/favicon.ico", .handler = dt__ui_asset, .public = 1},
    {.method = "GET", .pattern = "/v1/jobs/:job/series", .handler = get_series},
    {.method = "GET", .pattern = "/v1/jobs/:job/events", .handler = get_events},
    {.method = "GET", .pattern = "/v1/jobs/:job", .handler = get_job},
    {.method = "GET", .pattern = "/v1/jobs/:job/replicas", .handler = get_replicas},
    {.method = "GET", .pattern = "/v1/jobs/:job/replicas/:replica/logs", .handler = get_logs},
    {.method = "POST",
     .pattern = "/v1/jobs/:job/replicas/:replica/report",
     .handler = post_report,
     .json = 1},
    {.method = "POST",
     .pattern = "/v1/jobs/:job/replicas/:replica/progress",
     .handler = post_progress,
     .json = 1},
    {.method = "POST", .pattern = "/v1/jobs/:job/stop", .handler = post_stop},
    {.method = "POST", .pattern = "/v1/jobs/:job/scale", .handler = post_scale, .json = 1},
    {.method = "GET", .pattern = "/v1/jobs/:job/datasets", .handler = get_datasets},
    {.method = "POST", .pattern = "/v1/jobs/:job/datasets", .handler = post_dataset, .json = 1},
    {.method = "POST",
     .pattern = "/v1/jobs/:job/datasets/:dataset/fetch",
     .handler = post_fetch,
     .json = 1},
    {.method = "POST",
     .pattern = "/v1/jobs/:job/datasets/:dataset/report",
     .handler = post_report_shard,
     .json = 1},
    {.method = "POST",
     .pattern = "/v1/jobs/:job/replicas/:replica/heartbeat",
     .handler = post_heartbeat},
    {.method = "POST", .pattern = "/v1/jobs/:job/rendezvous", .handler = post_rendezvous, .json = 1},
    {.method = "GET", .pattern = "/v1/jobs/:job/rendezvous", .handler = get_rendezvous},
};
const int dt__master_nroutes = sizeof dt__master_routes / sizeof dt__master_routes[0];

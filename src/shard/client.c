/*
 * client.c - the shard service's C client (include/dtrain/shard.h): the HTTP+JSON protocol
 * of src/master/api.c's shard routes, as python/dtrain_client speaks it.
 *
 * Design
 *
 * A client owns two dt__http_clients (libcurl easy handles are not thread-safe): one for
 * the caller's requests, kept alive across them, and one that only the heartbeat thread
 * uses. The heartbeat thread sleeps on a condition variable (CLOCK_MONOTONIC) for the
 * interval, sends POST .../replicas/R/heartbeat and ignores failures (a master that is
 * restarting gets the next beat); close sets `stop` under the mutex, signals and joins.
 * The heartbeat connection's request timeout is short (at most 5 s) so that close never
 * waits long for a hung master.
 *
 * Every request of the caller goes through call(): a transport failure (no connection,
 * reset, timeout; dt__http_client_request's DT_ERR_NETWORK or DT_ERR_TIMEOUT) is retried after 50 ms, doubling to
 * 2 s, until retry_ms have passed since the first try - long enough for a master that was
 * killed to be resumed on the same port (libcurl reconnects by itself). So is a 503, for as
 * long as it comes (the master cannot write its journal, a full disk: it records nothing
 * until it can). Any other
 * HTTP answer is never retried: its status maps to a dt_err and its {"error": ...} becomes
 * the message.
 * dt_shard_fetch's WAIT polling is a separate, unbounded loop on top (10 ms doubling to
 * 0.5 s): waiting for other replicas to finish an epoch is normal, not a failure.
 *
 * Retries are safe: each fetch carries a request id (random start, then counting) that its
 * retries reuse, and the master answers a repeated fetch or report as it answered the
 * first (docs/SHARDS.md).
 *
 * The dataset and replica names go into request paths percent-encoded, as the Python
 * client's urllib.parse.quote(safe="") does.
 */
#include "core/clock-impl.h"
#include "core/thread-impl.h"
#include "dtrain/data.h"
#include "dtrain/shard.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "net/http-impl.h"
#include "shard/client-impl.h"

#define DEFAULT_HEARTBEAT_MS 1000
#define DEFAULT_RETRY_MS 60000
#define DEFAULT_TIMEOUT_MS 30000
#define RETRY_FIRST_MS 50
#define RETRY_MAX_MS 2000
#define WAIT_FIRST_MS 10
#define WAIT_MAX_MS 500
#define MAX_NAME 255                  /* bytes of a dataset or replica name */
#define MAX_SHARD_COUNT (1LL << 28)   /* samples of one shard (the ledger's shuffle bound) */

struct dt_shard_client {
    dt__http_client *http; /* the caller's requests */
    char *url, *token, *replica, *job;
    char replica_q[3 * MAX_NAME + 1]; /* percent-encoded */
    char job_q[3 * MAX_NAME + 1];
    int retry_ms;
    int no_wait; /* opts.no_wait */
    int (*cancel)(void); /* opts.cancel */
    uint64_t next_request; /* id of the next fetch (a retry of it reuses it) */
    /* the heartbeat thread */
    dt__http_client *hb_http; /* used by the heartbeat thread only */
    char hb_path[4096];
    int heartbeat_ms;
    int hb_started;
    pthread_t hb_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop; /* protected by mu */
    /* The dataset this client registered (its spec the master's, or the registration was
     * refused): its fetches ask for no indices, which are taken here from the epoch's
     * sample order - the ledger's, dt_epoch_order of the seed and the epoch - cached for
     * one epoch at a time. */
    char known[MAX_NAME + 1];
    int64_t known_size;
    uint64_t known_seed;
    int known_shuffle;
    int64_t *perm, perm_epoch; /* known's order in epoch perm_epoch (perm NULL: none yet) */
};

/* Percent-encode s into out (3 * MAX_NAME + 1 bytes); -1 when s is longer than MAX_NAME. */
static int quote(const char *s, char *out) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    if (n > MAX_NAME) return -1;
    char *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return 0;
}

/* Map an HTTP answer that is not 200 to an error carrying the master's message. */
static dt_err answer_error(const char *what, long status, const char *body, size_t len) {
    json_t *j = json_loadb(body, len, 0, NULL);
    const char *msg = json_string_value(json_object_get(j, "error"));
    char text[1024];
    snprintf(text, sizeof text, "%s", msg ? msg : len ? body : "(empty answer)");
    json_decref(j);
    switch (status) {
    case 400:
        return dt_err_set(DT_ERR_ARG, "%s: %s (HTTP 400)", what, text);
    case 401:
        return dt_err_set(DT_ERR_ARG, "%s: the master refused the job token: %s (HTTP 401)",
                          what, text);
    case 404:
        return dt_err_set(DT_ERR_NOTFOUND, "%s: %s (HTTP 404)", what, text);
    case 409:
        return dt_err_set(DT_ERR_STATE, "%s: %s (HTTP 409)", what, text);
    default:
        return dt_err_set(DT_ERR_IO, "%s: %s (HTTP %ld)", what, text, status);
    }
}

/* One request of the caller: body (may be NULL; a reference is stolen) is sent as JSON;
 * transport failures are retried for retry_ms; a 200 answer is parsed into *answer (a JSON
 * object the caller decrefs), any other answer is an error (answer_error). */
/* A request, retried for retry_ms on a lost connection (retry 0: tried once). */
static dt_err call_r(dt_shard_client *c, const char *what, const char *method, const char *path,
                     json_t *body, json_t **answer, int retry) {
    *answer = NULL;
    char *text = NULL;
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        if (!text) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", what);
    }
    double t0 = dt__mono_ms(), delay = RETRY_FIRST_MS;
    long status = 0;
    char *resp = NULL;
    size_t len = 0;
    dt_err err;
    for (;;) {
        err = dt__http_client_request(c->http, method, path, text, text ? strlen(text) : 0,
                                      &status, &resp, &len);
        /* 503: the master cannot record anything now (its journal cannot be written); the
         * same request is answered as the first would have been once it can. Retried for
         * as long as it says so: it is alive (a master that gives up ends the job). */
        int busy = !err && status == 503;
        int lost = err == DT_ERR_NETWORK || err == DT_ERR_TIMEOUT;
        if (!lost && !busy) break;
        if (!retry) {
            if (busy) err = dt_err_set(DT_ERR_NETWORK, "%s: the master is busy (503)", what);
            break;
        }
        double left = (double)c->retry_ms - (dt__mono_ms() - t0);
        if (busy) { /* alive: a lost connection after this gets a whole retry_ms again */
            free(resp);
            resp = NULL;
            t0 = dt__mono_ms();
            left = RETRY_MAX_MS;
        }
        if (left <= 0) {
            err = dt_err_wrap(busy ? DT_ERR_NETWORK : err,
                              "%s: no answer from the master (retried for %.1f s)", what,
                              (dt__mono_ms() - t0) / 1000.0);
            break;
        }
        dt__sleep_ms(delay < left ? delay : left);
        delay = delay * 2 < RETRY_MAX_MS ? delay * 2 : RETRY_MAX_MS;
    }
    free(text);
    if (err) {
        if (err != DT_ERR_NETWORK && err != DT_ERR_TIMEOUT) err = dt_err_wrap(err, "%s", what);
        return err;
    }
    if (status != 200) {
        err = answer_error(what, status, resp, len);
        free(resp);
        return err;
    }
    json_error_t jerr;
    json_t *j = json_loadb(resp, len, 0, &jerr);
    free(resp);
    if (!json_is_object(j)) {
        json_decref(j);
        return dt_err_set(DT_ERR_FORMAT, "%s: the master's answer is not a JSON object", what);
    }
    *answer = j;
    return DT_OK;
}

static dt_err call(dt_shard_client *c, const char *what, const char *method, const char *path,
                   json_t *body, json_t **answer) {
    return call_r(c, what, method, path, body, answer, 1);
}

dt_err dt__shard_client_call(dt_shard_client *c, const char *what, const char *method,
                             const char *path, json_t *body, json_t **answer) {
    return call(c, what, method, path, body, answer);
}

const char *dt__shard_client_job_q(const dt_shard_client *c) { return c->job_q; }

/* ---- the heartbeat thread ---- */

static void *heartbeat_main(void *arg) {
    dt_shard_client *c = arg;
    dt__thread_background("dt-heartbeat");
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec until = dt__mono_after_ms(c->heartbeat_ms);
        while (!c->stop && pthread_cond_timedwait(&c->cv, &c->mu, &until) != ETIMEDOUT) {
        }
        if (c->stop) break;
        pthread_mutex_unlock(&c->mu);
        /* A failure is not an error: the master may be restarting; the next beat retries. */
        (void)dt__http_client_request(c->hb_http, "POST", c->hb_path, NULL, 0, NULL, NULL, NULL);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- open / close ---- */

/* opt, else the environment variable var; NULL (and an error) when neither is set. */
static const char *setting(const char *opt, const char *var, const char *what) {
    if (opt) return opt;
    const char *v = getenv(var);
    if (v && v[0]) return v;
    dt_err_set(DT_ERR_ARG,
               "%s is not set: it gives %s (dtrain sets it for every replica of a job; "
               "outside a job, set it or pass it in dt_shard_client_opts)",
               var, what);
    return NULL;
}

dt_err dt_shard_client_open(dt_shard_client **out, const dt_shard_client_opts *opts) {
    *out = NULL;
    dt_shard_client_opts o = opts ? *opts : (dt_shard_client_opts){0};
    const char *url = setting(o.url, "DTRAIN_MASTER", "the master's URL");
    if (!url) return DT_ERR_ARG;
    const char *token = setting(o.token, "DTRAIN_JOB_TOKEN", "the job's token");
    if (!token) return DT_ERR_ARG;
    const char *replica = setting(o.replica, "DTRAIN_REPLICA", "this replica's name");
    if (!replica) return DT_ERR_ARG;
    if (!replica[0] || strlen(replica) > MAX_NAME)
        return dt_err_set(DT_ERR_ARG, "replica: expected a name of 1 to %d bytes", MAX_NAME);
    int timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : DEFAULT_TIMEOUT_MS;

    dt_err err = DT_OK;
    json_t *ans = NULL;
    dt_shard_client *c = calloc(1, sizeof *c);
    if (!c) return dt_err_set(DT_ERR_NOMEM, "out of memory opening a shard client");
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->no_wait = o.no_wait != 0;
    c->cancel = o.cancel;
    c->retry_ms = o.retry_ms > 0 ? o.retry_ms : o.retry_ms < 0 ? 0 : DEFAULT_RETRY_MS;
    /* Fetch ids start at a random point: a restarted replica must not repeat its
     * predecessor's ids. */
    if (getrandom(&c->next_request, sizeof c->next_request, 0) != sizeof c->next_request)
        c->next_request = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid() << 32;
    c->next_request = (c->next_request >> 2) | 1;
    c->heartbeat_ms = o.heartbeat_ms > 0 ? o.heartbeat_ms : DEFAULT_HEARTBEAT_MS;
    c->url = strdup(url);
    c->token = strdup(token);
    c->replica = strdup(replica);
    if (!c->url || !c->token || !c->replica) {
        err = dt_err_set(DT_ERR_NOMEM, "out of memory opening a shard client");
        goto err;
    }
    quote(replica, c->replica_q);
    if ((err = dt__http_client_init(&c->http, url, token, timeout_ms))) {
        err = dt_err_wrap(err, "%s", o.url ? "shard client" : "DTRAIN_MASTER");
        goto err;
    }
    /* A connection not made in 5 s (two lost SYNs) is retried, the name looked up again: a
     * master whose pod was replaced has a new address behind its headless Service, and the
     * old one answers nothing (the replicas waited the request's whole timeout on it). */
    if ((err = dt__http_client_connect_timeout(c->http, timeout_ms < 5000 ? timeout_ms : 5000)))
        goto err;

    /* The job's name, which every route carries. */
    if ((err = call(c, "shard client: asking the master for its job", "GET", "/v1/healthz",
                    NULL, &ans)))
        goto err;
    const char *job = json_string_value(json_object_get(ans, "job"));
    if (!job || !job[0] || strlen(job) > MAX_NAME) {
        err = dt_err_set(DT_ERR_FORMAT, "shard client: %s/v1/healthz: the answer has no job name",
                         url);
        goto err;
    }
    if (!(c->job = strdup(job))) {
        err = dt_err_set(DT_ERR_NOMEM, "out of memory opening a shard client");
        goto err;
    }
    json_decref(ans);
    ans = NULL;
    quote(c->job, c->job_q);

    /* A first heartbeat checks the token and that the job has this replica. */
    snprintf(c->hb_path, sizeof c->hb_path, "/v1/jobs/%s/replicas/%s/heartbeat", c->job_q,
             c->replica_q);
    char what[400];
    snprintf(what, sizeof what, "shard client: heartbeat of %s", replica);
    if ((err = call(c, what, "POST", c->hb_path, NULL, &ans))) goto err;
    json_decref(ans);
    ans = NULL;

    if (o.heartbeat_ms >= 0) {
        long hb_timeout = c->heartbeat_ms * 2L;
        hb_timeout = hb_timeout < 1000 ? 1000 : hb_timeout > 5000 ? 5000 : hb_timeout;
        if ((err = dt__http_client_init(&c->hb_http, url, token, hb_timeout))) goto err;
        if (pthread_create(&c->hb_thread, NULL, heartbeat_main, c) != 0) {
            err = dt_err_set(DT_ERR_NOMEM, "shard client: cannot start the heartbeat thread");
            goto err;
        }
        c->hb_started = 1;
    }
    *out = c;
    return DT_OK;

err:
    json_decref(ans);
    dt_shard_client_close(c);
    return err;
}

void dt_shard_client_close(dt_shard_client *c) {
    if (!c) return;
    if (c->hb_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->hb_thread, NULL);
    }
    dt__http_client_free(c->hb_http);
    dt__http_client_free(c->http);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->url);
    free(c->token);
    free(c->replica);
    free(c->job);
    free(c->perm);
    free(c);
}

const char *dt_shard_client_job(const dt_shard_client *c) {
    return c->job;
}

const char *dt_shard_client_replica(const dt_shard_client *c) {
    return c->replica;
}

/* ---- register / fetch / report ---- */

void dt_dataset_spec_init(dt_dataset_spec *spec) {
    *spec = (dt_dataset_spec){.name = "training",
                              .dataset_size = 1,
                              .batch_size = 1,
                              .num_epochs = 1,
                              .num_minibatches_per_shard = 1,
                              .max_failures = -1};
}

/* "/v1/jobs/JOB/datasets/NAME/suffix" into path; DT_ERR_ARG for a bad dataset name. */
static dt_err dataset_path(const dt_shard_client *c, const char *dataset, const char *suffix,
                           char *path, size_t len) {
    char q[3 * MAX_NAME + 1];
    if (!dataset || !dataset[0] || quote(dataset, q))
        return dt_err_set(DT_ERR_ARG, "dataset: expected a name of 1 to %d bytes", MAX_NAME);
    snprintf(path, len, "/v1/jobs/%s/datasets/%s/%s", c->job_q, q, suffix);
    return DT_OK;
}

dt_err dt_shard_register(dt_shard_client *c, const dt_dataset_spec *spec) {
    if (!spec->name || !spec->name[0])
        return dt_err_set(DT_ERR_ARG, "register dataset: name: required");
    char what[400];
    snprintf(what, sizeof what, "register dataset %.255s", spec->name);
    if (spec->seed > (uint64_t)INT64_MAX)
        return dt_err_set(DT_ERR_ARG, "%s: seed: expected 0..%lld", what, (long long)INT64_MAX);
    json_t *body = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:b, s:b, s:I}", "name", spec->name, "dataset_size",
        (json_int_t)spec->dataset_size, "batch_size", (json_int_t)spec->batch_size, "num_epochs",
        (json_int_t)spec->num_epochs, "num_minibatches_per_shard",
        (json_int_t)spec->num_minibatches_per_shard, "shuffle", spec->shuffle != 0,
        "shuffle_shards", spec->shuffle_shards != 0, "seed", (json_int_t)spec->seed);
    if (body && spec->max_failures >= 0)
        json_object_set_new(body, "max_failures", json_integer(spec->max_failures));
    if (!body) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory (or a name that is not UTF-8)", what);
    char path[4096];
    snprintf(path, sizeof path, "/v1/jobs/%s/datasets", c->job_q);
    json_t *ans;
    dt_err err = call(c, what, "POST", path, body, &ans);
    json_decref(ans);
    if (!err && strlen(spec->name) <= MAX_NAME) {
        free(c->perm); /* an order cached for what was known before */
        c->perm = NULL;
        snprintf(c->known, sizeof c->known, "%s", spec->name);
        c->known_size = spec->dataset_size;
        c->known_seed = spec->seed;
        c->known_shuffle = spec->shuffle != 0;
    }
    return err;
}

/* POST a JSON object's text to the replica's route `what` ("report", "progress"). */
static dt_err post_object(dt_shard_client *c, const char *what, const char *route,
                          const char *json_object_text, int retry) {
    json_error_t jerr;
    json_t *body = json_loads(json_object_text, 0, &jerr);
    if (!json_is_object(body)) {
        json_decref(body);
        return dt_err_set(DT_ERR_ARG, "%s: not a JSON object (%s)", what, jerr.text);
    }
    char path[4096];
    snprintf(path, sizeof path, "/v1/jobs/%s/replicas/%s/%s", c->job_q, c->replica_q, route);
    json_t *ans;
    dt_err err = call_r(c, what, "POST", path, body, &ans, retry);
    json_decref(ans);
    return err;
}

dt_err dt_shard_client_post_progress(dt_shard_client *c, const char *json_object_text) {
    return post_object(c, "replica progress", "progress", json_object_text, 0);
}

dt_err dt_shard_client_post_report(dt_shard_client *c, const char *json_object_text) {
    return post_object(c, "replica report", "report", json_object_text, 1);
}

void dt_shard_free(dt_shard *s) {
    if (!s) return;
    free(s->indices);
    *s = (dt_shard){0};
}

/* An integer field of the answer's shard object in [0, INT64_MAX]. */
static int get_i64(const json_t *o, const char *key, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = json_integer_value(v);
    return 0;
}

/* The known dataset's sample order in epoch e (c->perm), computed when not cached. */
static dt_err epoch_order(dt_shard_client *c, const char *what, int64_t e) {
    if (c->perm && c->perm_epoch == e) return DT_OK;
    if (!c->perm && !(c->perm = malloc((size_t)c->known_size * sizeof *c->perm)))
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory for the sample order of %lld samples",
                          what, (long long)c->known_size);
    dt_epoch_order(c->perm, c->known_size, c->known_seed, e, 1);
    c->perm_epoch = e;
    return DT_OK;
}

/* Fill s from the answer's "shard" object; with `local`, indices left out are the known
 * dataset's (an answer that carries them is taken as it is). */
static dt_err fill_shard(dt_shard_client *c, const char *what, const json_t *o, dt_shard *s,
                         int local) {
    int64_t lease = 0;
    const char *bad = get_i64(o, "epoch", &s->epoch)   ? "epoch"
                      : get_i64(o, "id", &s->id)       ? "id"
                      : get_i64(o, "start", &s->start) ? "start"
                      : get_i64(o, "end", &s->end)     ? "end"
                      : get_i64(o, "lease", &lease)    ? "lease"
                                                       : NULL;
    if (bad)
        return dt_err_set(DT_ERR_FORMAT, "%s: the master's answer: shard.%s: expected an integer >= 0",
                          what, bad);
    s->lease = (uint64_t)lease;
    if (s->end < s->start || s->end - s->start > MAX_SHARD_COUNT)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: the master's answer: shard [%lld, %lld): expected start <= end and "
                          "at most %lld samples",
                          what, (long long)s->start, (long long)s->end, MAX_SHARD_COUNT);
    int64_t n = s->end - s->start;
    const json_t *idx = json_object_get(o, "indices");
    const int64_t *order = NULL; /* the known sample order, for indices left out */
    if (!idx && local && c->known_shuffle) {
        if (s->end > c->known_size)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: the master's answer: shard [%lld, %lld) beyond the dataset's "
                              "%lld samples",
                              what, (long long)s->start, (long long)s->end,
                              (long long)c->known_size);
        dt_err e = epoch_order(c, what, s->epoch);
        if (e) return e;
        order = c->perm + s->start;
    }
    if (idx && (!json_is_array(idx) || (int64_t)json_array_size(idx) != n))
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: the master's answer: shard.indices: expected %lld integers", what,
                          (long long)n);
    if ((size_t)n > s->cap) {
        int64_t *p = realloc(s->indices, (size_t)n * sizeof *p);
        if (!p)
            return dt_err_set(DT_ERR_NOMEM, "%s: out of memory for %lld indices", what,
                              (long long)n);
        s->indices = p;
        s->cap = (size_t)n;
    }
    for (int64_t i = 0; i < n; i++) {
        if (!idx) {
            s->indices[i] = order ? order[i] : s->start + i;
            continue;
        }
        const json_t *v = json_array_get(idx, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: the master's answer: shard.indices[%lld]: expected an integer "
                              ">= 0",
                              what, (long long)i);
        s->indices[i] = json_integer_value(v);
    }
    s->count = n;
    return DT_OK;
}

/* A report of shard: the "report" member of a fetch that carries one, and, with "replica"
 * added, the report route's body. */
static json_t *report_body(const dt_shard *shard, int ok, const char *message) {
    return json_pack("{s:I, s:I, s:I, s:b, s:s}", "epoch", (json_int_t)shard->epoch, "id",
                     (json_int_t)shard->id, "lease", (json_int_t)shard->lease, "ok", ok != 0,
                     "message", message ? message : "");
}

/* Fetch into shards: count 0 asks for one shard (the answer's "shard"), count k for up to k
 * (the answer's "shards", *n of them). reports (a new reference, taken; may be NULL) goes
 * with the first ask as the body's member key ("report" or "reports"). */
static dt_err fetch(dt_shard_client *c, const char *dataset, dt_shard *shards, int count, int *n,
                    dt_shard_fetch_status *status, const char *key, json_t *reports) {
    *status = DT_SHARD_FETCH_END;
    *n = 0;
    char path[4096], what[400];
    dt_err err = dataset_path(c, dataset, "fetch", path, sizeof path);
    if (err) {
        json_decref(reports);
        return err;
    }
    snprintf(what, sizeof what, "%s from dataset %s for %s",
             reports ? "report and fetch" : "fetch", dataset, c->replica);
    int local = c->known[0] && !strcmp(c->known, dataset); /* no indices asked for */
    double delay = WAIT_FIRST_MS;
    for (;;) {
        /* The id goes with every retry of this request: a fetch the master recorded
         * before its answer was lost gives back the same shards, not more. */
        uint64_t request = c->next_request++ & (UINT64_MAX >> 2);
        json_t *body = json_pack("{s:s, s:I}", "replica", c->replica, "request",
                                 (json_int_t)(request ? request : 1)),
               *ans;
        if (!body) json_decref(reports);
        if (!body || (reports && json_object_set_new(body, key, reports)) ||
            (count && json_object_set_new(body, "count", json_integer(count))) ||
            (local && json_object_set_new(body, "indices", json_false()))) {
            json_decref(body);
            return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", what);
        }
        reports = NULL; /* a WAIT answer means the reports were recorded: ask again without */
        if ((err = call(c, what, "POST", path, body, &ans))) return err;
        const char *st = json_string_value(json_object_get(ans, "status"));
        if (st && !strcmp(st, "shard")) {
            const json_t *list = count ? json_object_get(ans, "shards") : NULL;
            size_t got = count ? json_array_size(list) : 1;
            if (count && (!json_is_array(list) || got < 1 || got > (size_t)count))
                err = dt_err_set(DT_ERR_FORMAT,
                                 "%s: the master's answer: shards: expected 1 to %d shards", what,
                                 count);
            for (size_t i = 0; !err && i < got; i++)
                err = fill_shard(c, what,
                                 count ? json_array_get(list, i) : json_object_get(ans, "shard"),
                                 &shards[i], local);
            json_decref(ans);
            if (err) {
                shards[0].count = 0;
                return err;
            }
            *n = (int)got;
            *status = DT_SHARD_FETCH_SHARD;
            return DT_OK;
        }
        int end = st && !strcmp(st, "end"), wait = st && !strcmp(st, "wait");
        json_decref(ans);
        if (end) {
            shards[0].count = 0;
            return DT_OK;
        }
        if (!wait)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: the master's answer: status: expected shard, wait or end", what);
        if (c->no_wait || (c->cancel && c->cancel())) {
            shards[0].count = 0;
            *status = DT_SHARD_FETCH_WAIT;
            return DT_OK;
        }
        dt__sleep_ms(delay);
        delay = delay * 2 < WAIT_MAX_MS ? delay * 2 : WAIT_MAX_MS;
    }
}

dt_err dt_shard_fetch(dt_shard_client *c, const char *dataset, dt_shard *shard,
                      dt_shard_fetch_status *status) {
    shard->count = 0;
    int n;
    return fetch(c, dataset, shard, 0, &n, status, NULL, NULL);
}

dt_err dt_shard_report_fetch(dt_shard_client *c, const char *dataset, dt_shard *shard, int ok,
                             const char *message, dt_shard_fetch_status *status) {
    *status = DT_SHARD_FETCH_END;
    json_t *report = report_body(shard, ok, message);
    if (!report)
        return dt_err_set(DT_ERR_NOMEM, "report of shard %lld of dataset %s: out of memory "
                                        "(or a message that is not UTF-8)",
                          (long long)shard->id, dataset);
    int n;
    return fetch(c, dataset, shard, 0, &n, status, "report", report);
}

dt_err dt_shard_fetch_many(dt_shard_client *c, const char *dataset, const dt_shard *done,
                           int ndone, dt_shard *shards, int max, int *n,
                           dt_shard_fetch_status *status) {
    *status = DT_SHARD_FETCH_END;
    *n = 0;
    if (max < 1 || max > DT_SHARD_MAX_BATCH || ndone < 0 || ndone > DT_SHARD_MAX_BATCH)
        return dt_err_set(DT_ERR_ARG, "fetch of dataset %s: max and ndone: expected 1..%d and "
                                      "0..%d", dataset, DT_SHARD_MAX_BATCH, DT_SHARD_MAX_BATCH);
    json_t *reports = NULL;
    if (ndone > 0 && (reports = json_array()))
        for (int i = 0; i < ndone; i++)
            if (json_array_append_new(reports, report_body(&done[i], 1, ""))) {
                json_decref(reports);
                reports = NULL;
                break;
            }
    if (ndone > 0 && !reports)
        return dt_err_set(DT_ERR_NOMEM, "reports of dataset %s: out of memory", dataset);
    return fetch(c, dataset, shards, max, n, status, "reports", reports);
}

dt_err dt_shard_report(dt_shard_client *c, const char *dataset, const dt_shard *shard, int ok,
                       const char *message) {
    char path[4096], what[400];
    dt_err err = dataset_path(c, dataset, "report", path, sizeof path);
    if (err) return err;
    snprintf(what, sizeof what, "report of shard %lld of epoch %lld of dataset %s by %s",
             (long long)shard->id, (long long)shard->epoch, dataset, c->replica);
    json_t *body = report_body(shard, ok, message);
    if (body && json_object_set_new(body, "replica", json_string(c->replica))) {
        json_decref(body);
        body = NULL;
    }
    if (!body)
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory (or a message that is not UTF-8)",
                          what);
    json_t *ans;
    err = call(c, what, "POST", path, body, &ans);
    json_decref(ans);
    return err;
}

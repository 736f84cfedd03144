/*
 * serve-impl.h - `dtrain serve`: a model server that speaks TensorFlow Serving's REST API
 * (docs/SERVING.md) over exports in TF Serving's layout (include/dtrain/export.h).
 *
 * The parts, one file each:
 *   tensor_json.c  the predict and classify request bodies -> float tensors, and the float
 *                  formatting of responses (TF Serving's rules, NaN/Infinity included)
 *   config.c       --model_config_file (protobuf text format: model_config_list)
 *   models.c       models and their versions: loading, the version policy, polling the base
 *                  path, reference counts so that a retired version outlives its requests
 *   batcher.c      inference: inline on the HTTP thread, or queued for batch executors that
 *                  take every request waiting for the same version at once
 *   rest.c         the HTTP server (libmicrohttpd, a thread pool, suspend/resume while a
 *                  request waits for its batch) and the routes
 */
#ifndef DTRAIN_SERVE_IMPL_H
#define DTRAIN_SERVE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/path-impl.h"
#include "core/strbuf-impl.h"
#include "dtrain/export.h"

/* ---- options ---- */

#define DT__SV_NAME_MAX 256
#define DT__SV_MAX_LABELS 16
#define DT__SV_MAX_SPECIFIC 64

typedef enum { DT__SV_POLICY_LATEST = 0, DT__SV_POLICY_ALL, DT__SV_POLICY_SPECIFIC } dt__sv_policy_kind;

typedef struct dt__sv_model_conf {
    char name[DT__SV_NAME_MAX];
    char base_path[DT__PATH_MAX];
    dt__sv_policy_kind policy;
    int latest_n;                            /* LATEST: how many of the newest (default 1) */
    int nspecific;
    int64_t specific[DT__SV_MAX_SPECIFIC];   /* SPECIFIC: these versions */
    int nlabels;
    char label_names[DT__SV_MAX_LABELS][64]; /* version_labels */
    int64_t label_versions[DT__SV_MAX_LABELS];
} dt__sv_model_conf;

typedef struct dt__sv_opts {
    int port;                 /* --rest_api_port */
    const char *host;         /* --rest_api_host? default "0.0.0.0" */
    int poll_seconds;         /* --file_system_poll_wait_seconds (default 1; 0 = load once) */
    int batching;             /* --enable_batching */
    int max_batch_size;       /* rows per batch (default 64) */
    int64_t batch_timeout_us; /* how long a batch may wait to fill (default 0: never waits) */
    int batch_threads;        /* batch executors (default: online CPUs) */
    int http_threads;         /* --rest_api_num_threads (default: online CPUs) */
    size_t max_body;          /* request body limit in bytes */
    /* Bounds (docs/SERVING.md "Limits"; 0 = the default in rest.c) */
    int max_connections;      /* --rest_api_max_connections: open at once; at the cap the
                                 connection waiting longest on its client is closed */
    int header_timeout_ms;    /* --rest_api_header_timeout_ms: headers within this of the open
                                 or the previous answer (ends idle keep-alives too) */
    int body_timeout_ms;      /* --rest_api_body_timeout_ms: the body within this of the headers */
    int nmodels;
    dt__sv_model_conf *models; /* owned */
    FILE *log;
} dt__sv_opts;

/* Parse a model_config_list file into opts->models (config.c). Errors: "FILE:LINE: ...". */
dt_err dt__sv_config_load(const char *path, dt__sv_opts *opts);
/* --batching_parameters_file (BatchingParameters text format) into opts (config.c). */
dt_err dt__sv_batching_load(const char *path, dt__sv_opts *opts);

/* ---- canonical errors, as TF Serving maps them to HTTP (FORMATS.md 2.5) ---- */

typedef enum {
    DT__SV_OK = 0,
    DT__SV_INVALID_ARGUMENT, /* 400 */
    DT__SV_FAILED_PRECONDITION, /* 400 */
    DT__SV_NOT_FOUND,        /* 404 */
    DT__SV_RESOURCE_EXHAUSTED, /* 429 */
    DT__SV_INTERNAL,         /* 500 */
    DT__SV_UNIMPLEMENTED,    /* 501 */
    DT__SV_UNAVAILABLE,      /* 503 */
} dt__sv_code;

int dt__sv_http_status(dt__sv_code c);
const char *dt__sv_code_name(dt__sv_code c);

/* ---- request bodies (tensor_json.c) ---- */

/* One request's input: rows samples of `sample_n` floats each, raw (not normalized). */
typedef struct dt__sv_input {
    float *x; /* rows * sample_n, malloc'd */
    int64_t rows;
    int columnar; /* "inputs" (answer with "outputs") rather than "instances" */
    char signature[128];
} dt__sv_input;

/* Parse a :predict body against the one input `name` of per-sample shape `sample`. On error
 * returns the code and writes a message into err (TF Serving's wording where it has one). */
dt__sv_code dt__sv_parse_predict(const char *body, size_t len, const char *name,
                                 const dt_shape *sample, dt__sv_input *in, char *err,
                                 size_t errlen);
/* Parse a :classify body: "examples" (and "context") each holding feature `name` with the
 * sample's values (flat or nested). */
dt__sv_code dt__sv_parse_classify(const char *body, size_t len, const char *name,
                                  const dt_shape *sample, dt__sv_input *in, char *err,
                                  size_t errlen);

/* A growable output buffer. */
typedef dt__strbuf dt__sv_buf;
#define dt__sv_buf_put dt__strbuf_put
#define dt__sv_buf_puts dt__strbuf_puts
/* A float as TF Serving prints it: shortest of %.6g / %.9g that reads back the same, ".0"
 * after a whole number, NaN / Infinity / -Infinity. */
void dt__sv_buf_float(dt__sv_buf *b, float v);
/* A JSON string literal. */
void dt__sv_buf_str(dt__sv_buf *b, const char *s);

/* ---- models and versions (models.c) ---- */

typedef enum {
    DT__SV_STATE_UNKNOWN = 0,
    DT__SV_STATE_START = 10,
    DT__SV_STATE_LOADING = 20,
    DT__SV_STATE_AVAILABLE = 30,
    DT__SV_STATE_UNLOADING = 40,
    DT__SV_STATE_END = 50,
} dt__sv_state;

const char *dt__sv_state_name(dt__sv_state s);

typedef struct dt__sv_model dt__sv_model;
typedef struct dt__sv_server dt__sv_server;

/* A loaded version, shared by the requests that use it. */
typedef struct dt__sv_version {
    dt__sv_model *model;
    int64_t version;
    dt_exported *ex;        /* spec, normalization, class names; ex->model is instance 0 */
    int ninst;
    dt_model **inst;        /* inference instances (the model is not re-entrant) */
    int nfree;
    int *free_idx;          /* a stack of free instances, under the model's lock */
    pthread_cond_t inst_cv;
    atomic_int refs;        /* one for being served, one per request holding it */
    char input_name[64], output_name[64];
} dt__sv_version;

/* Version records (also those unloaded or failed), for the status endpoint. */
typedef struct dt__sv_record {
    int64_t version;
    dt__sv_state state;
    dt__sv_code code;
    char message[512];
    dt__sv_version *live; /* AVAILABLE (served) */
    long long dir_mtime;  /* a failed load is retried when its directory changes */
} dt__sv_record;

struct dt__sv_model {
    dt__sv_server *server;
    dt__sv_model_conf conf;
    pthread_mutex_t mu;
    int nrec, caprec;
    dt__sv_record *rec;
};

struct dt__sv_server {
    dt__sv_opts opts;
    int nmodels;
    dt__sv_model *models;
    pthread_t poller;
    int poller_started;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    int stopping;
    struct dt__sv_batcher *batcher;
    struct dt__sv_rest *rest;
    struct dt__sv_metrics *metrics;
    atomic_long requests, failures;
};

/* Load what every model's policy wants now, then (poll_seconds > 0) poll in a thread. */
dt_err dt__sv_models_start(dt__sv_server *s);
void dt__sv_models_stop(dt__sv_server *s);

/* The version a request names: version >= 0, or label != NULL, or the latest available.
 * Takes a reference (release with dt__sv_version_put). NOT_FOUND with TF's message. */
dt__sv_code dt__sv_version_get(dt__sv_server *s, const char *model, int64_t version,
                               const char *label, dt__sv_version **out, char *err, size_t errlen);
void dt__sv_version_put(dt__sv_version *v);
dt__sv_model *dt__sv_model_find(dt__sv_server *s, const char *name);

/* An inference instance of v (waits for a free one) and its return. */
int dt__sv_instance_take(dt__sv_version *v);
void dt__sv_instance_give(dt__sv_version *v, int i);

/* ---- inference (batcher.c) ---- */

/* A request's inference: the input in, the output out (rows * k floats). done() is called
 * (on an executor thread, or inline) when out is ready or failed. */
typedef struct dt__sv_job {
    dt__sv_version *v;
    dt__sv_input *in;
    float *out;
    int64_t k;
    dt__sv_code code;
    char err[256];
    void (*done)(struct dt__sv_job *job);
    void *ctx;
    struct dt__sv_job *next;
} dt__sv_job;

dt_err dt__sv_batcher_start(dt__sv_server *s);
void dt__sv_batcher_stop(dt__sv_server *s);
/* Run the job: inline (no batching; done() before this returns) or queued. */
void dt__sv_infer(dt__sv_server *s, dt__sv_job *job);

/* From now on batches run as soon as an executor is free, without waiting to fill. */
void dt__sv_batcher_flush(dt__sv_server *s);
/* Requests waiting in the batch queue now (0 without batching). */
int64_t dt__sv_batcher_queued(dt__sv_server *s);

/* ---- metrics (metrics.c, docs/METRICS.md) ---- */

typedef struct dt__sv_metrics dt__sv_metrics;
dt_err dt__sv_metrics_init(dt__sv_server *s); /* after the models are known */
void dt__sv_metrics_free(dt__sv_server *s);
/* "predict", "classify", "regress", "status", "metadata" -> its index; else "other"'s. */
int dt__sv_metrics_method(const char *name);
/* One answered request: its model (as named in the URL; NULL: none), method, status code
 * and time from its first byte. */
void dt__sv_metrics_request(dt__sv_server *s, const char *model, int method, int code,
                            double seconds);
/* One forward pass of `rows` samples. */
void dt__sv_metrics_batch(dt__sv_server *s, int64_t rows);
/* The exposition text (malloc'd), NULL when out of memory. */
char *dt__sv_metrics_text(dt__sv_server *s, size_t *len);

/* ---- the HTTP side (rest.c) ---- */

dt_err dt__sv_rest_start(dt__sv_server *s, char *url, size_t urllen);
void dt__sv_rest_stop(dt__sv_server *s);

/* The whole server: start everything, run until SIGTERM/SIGINT, stop. */
int dt__sv_run(const dt__sv_opts *opts);

#endif

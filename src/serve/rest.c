/*
 * rest.c - TF Serving's REST API over libmicrohttpd (FORMATS.md 2; docs/SERVING.md).
 *
 * --rest_api_num_threads libmicrohttpd daemons run one thread each, with its own epoll set
 * and no listening socket: an acceptor thread takes every new connection and deals them out
 * in turn. (libmicrohttpd's own thread pool lets whichever thread wakes first accept up to
 * ten connections at once, which put all 16 of a load generator's connections on one thread
 * and left the other core idle; round-robin keeps the threads evenly loaded.)
 * A predict or classify request is parsed on its connection's thread; without batching
 * the model runs there too, with batching the connection is suspended while the request
 * waits in the batch queue and resumed by the executor that ran it, so no thread blocks on a
 * queued request. Every answer is JSON; errors are {"error": "..."} with the HTTP status
 * TF Serving gives the canonical error code.
 *
 * Bounds (docs/SERVING.md "Limits"). There is no token, so every connection counts in one cap.
 * The acceptor records each connection (an rconn, libmicrohttpd's socket context from
 * MHD_OPTION_NOTIFY_CONNECTION, bound to the connection by its fd) before handing it to a
 * daemon; at the cap it first closes the connection that has waited longest on its client
 * (idle between requests, or sending its headers or body, or accepted and not yet started by
 * its daemon, which takes it up in its own thread some time after MHD_add_connection), never
 * one whose request is being answered; when every connection is being answered the new one
 * is closed instead. Each waiting connection has a total deadline: headers within header_ms
 * of the open or of the previous answer, the body within body_ms of the headers, however
 * slowly it trickles. The acceptor sleeps until the next deadline (a daemon thread that sets
 * an earlier one wakes it through wake_pipe) and closes the late ones. Closing is shutdown()
 * of the socket: its daemon reads the end of the stream and tears the connection down itself;
 * one not yet started is shut down when its daemon reports it started. The list is shared by
 * the acceptor and the daemon threads under mu; an rconn is freed only when its daemon reports
 * the connection closed, which it does before it closes the socket, so an fd on the list is
 * always the connection's own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <microhttpd.h>

#include "core/clock-impl.h"
#include "dtrain/metrics.h"
#include "serve/serve-impl.h"

/* A load generator opens tens of connections and a fleet of clients a few hundred: 1024 keeps
 * them all while bounding the sockets and memory a flood can hold. */
#define DEFAULT_MAX_CONNECTIONS 1024
/* Request headers are one small write: 30 s is slow even on a congested link. */
#define DEFAULT_HEADER_TIMEOUT_MS 30000
/* Bodies go up to --max_body_bytes (64 MiB): 120 s is about 0.5 MiB/s for the largest. */
#define DEFAULT_BODY_TIMEOUT_MS 120000

int dt__sv_http_status(dt__sv_code c) {
    switch (c) {
    case DT__SV_OK: return 200;
    case DT__SV_INVALID_ARGUMENT:
    case DT__SV_FAILED_PRECONDITION: return 400;
    case DT__SV_NOT_FOUND: return 404;
    case DT__SV_RESOURCE_EXHAUSTED: return 429;
    case DT__SV_UNIMPLEMENTED: return 501;
    case DT__SV_UNAVAILABLE: return 503;
    default: return 500;
    }
}

const char *dt__sv_code_name(dt__sv_code c) {
    switch (c) {
    case DT__SV_OK: return "OK";
    case DT__SV_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case DT__SV_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case DT__SV_NOT_FOUND: return "NOT_FOUND";
    case DT__SV_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case DT__SV_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case DT__SV_UNAVAILABLE: return "UNAVAILABLE";
    default: return "INTERNAL";
    }
}

/* One TCP connection (see Bounds above). */
typedef struct rconn {
    struct rconn *prev, *next; /* in open order */
    struct MHD_Connection *conn; /* NULL until its daemon reports it started */
    int fd;
    int busy;        /* a request is being answered: no deadline, never evicted */
    int closing;     /* shut down (or to be, when started): not yet reaped; counted no more */
    double since;    /* monotonic seconds: when it began to wait on its client */
    double deadline; /* 0: none */
} rconn;

typedef struct dt__sv_rest {
    dt__sv_server *s;
    int nd;
    struct MHD_Daemon **d; /* nd daemons, one thread each */
    int listen_fd;
    int stop_pipe[2];      /* the acceptor's wake-up on stop */
    pthread_t acceptor;
    int acceptor_started;
    /* requests suspended while their batch runs: MHD_stop_daemon must not find any (it
     * aborts the process), so stopping waits for them, and a while for their answers to
     * go out (unanswered: batched requests not yet completed); none is suspended after */
    atomic_int suspended, unanswered, stopping;
    /* bounds: the connections, under mu */
    pthread_mutex_t mu;
    rconn *head, *tail;
    int max_conns;
    double header_s, body_s;
    double wake_at;   /* when the acceptor will next look at deadlines (0: no deadline) */
    int wake_pipe[2]; /* a daemon thread set a deadline before wake_at */
} dt__sv_rest;

static void rconn_unlink(dt__sv_rest *rest, rconn *r) {
    if (r->prev) r->prev->next = r->next;
    else rest->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else rest->tail = r->prev;
    r->prev = r->next = NULL;
}

/* Close a connection (under mu): its daemon sees the end of the stream and reaps it. One its
 * daemon has yet to start is shut down when it starts (on_connection), as its daemon may have
 * dropped it and its fd be another file's by now; it keeps its deadline, at which sweep
 * forgets it if it never started. */
static void rconn_close(rconn *r) {
    if (r->conn) {
        shutdown(r->fd, SHUT_RDWR);
        r->deadline = 0;
    }
    r->closing = 1;
}

/* A new wait on the client starts (under mu): deadline after secs. */
static void rconn_wait(dt__sv_rest *rest, rconn *r, double secs) {
    double now = dt__mono_s();
    r->busy = 0;
    r->since = now;
    r->deadline = now + secs;
    if (rest->wake_at == 0 || r->deadline < rest->wake_at) {
        rest->wake_at = r->deadline;
        ssize_t w = write(rest->wake_pipe[1], "w", 1); /* full pipe: a wake-up is pending */
        (void)w;
    }
}

static rconn *rconn_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The phase of the request changes: its headers are in (body: the body's deadline starts),
 * the request is complete (answering), or the answer went out (keep-alive: the next
 * request's headers). */
typedef enum { PH_BODY, PH_ANSWERING, PH_NEXT } phase;

static void rconn_phase(dt__sv_rest *rest, struct MHD_Connection *conn, phase ph) {
    rconn *r = rconn_of(conn);
    if (!r) return;
    pthread_mutex_lock(&rest->mu);
    if (!r->closing) {
        if (ph == PH_ANSWERING) {
            r->busy = 1;
            r->deadline = 0;
        } else {
            rconn_wait(rest, r, ph == PH_BODY ? rest->body_s : rest->header_s);
        }
    }
    pthread_mutex_unlock(&rest->mu);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    dt__sv_rest *rest = cls;
    pthread_mutex_lock(&rest->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        rconn *r = rest->head;
        while (r && (r->conn || !ci || r->fd != ci->connect_fd))
            r = r->next;
        if (r) {
            r->conn = conn;
            *socket_context = r;
            if (r->closing) { /* evicted before it started */
                shutdown(ci->connect_fd, SHUT_RDWR);
                r->deadline = 0;
            }
        } else if (ci) {
            shutdown(ci->connect_fd, SHUT_RDWR); /* untracked: it would escape the cap */
        }
    } else if (*socket_context) {
        rconn *r = *socket_context;
        rconn_unlink(rest, r);
        free(r);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&rest->mu);
}

/* Make room for one more connection (under mu): 0 when every connection is being answered. */
static int make_room(dt__sv_rest *rest) {
    int open = 0;
    for (rconn *r = rest->head; r; r = r->next)
        open += !r->closing;
    if (open < rest->max_conns) return 1;
    rconn *oldest = NULL;
    for (rconn *r = rest->head; r; r = r->next)
        if (!r->busy && !r->closing && (!oldest || r->since < oldest->since)) oldest = r;
    if (!oldest) return 0;
    rconn_close(oldest);
    return 1;
}

/* Close every connection past its deadline (under mu); the next deadline (0: none). */
static double sweep(dt__sv_rest *rest) {
    double now = dt__mono_s(), next = 0;
    rconn *after;
    for (rconn *r = rest->head; r; r = after) {
        after = r->next;
        if (r->deadline <= 0) continue;
        if (r->deadline > now) {
            if (next == 0 || r->deadline < next) next = r->deadline;
        } else if (r->conn) {
            rconn_close(r);
        } else {
            /* never started: its daemon dropped it (and closed the fd, which may now be
             * another file's), so forget it rather than shut the fd down */
            rconn_unlink(rest, r);
            free(r);
        }
    }
    return next;
}

typedef enum { VERB_NONE = 0, VERB_PREDICT, VERB_CLASSIFY, VERB_REGRESS } verb;

/* One request, from its first callback to its completion. */
typedef struct request {
    dt__sv_server *s;
    struct dt__sv_rest *rest;
    struct MHD_Connection *conn;
    char *body;
    size_t len, cap;
    int too_big;
    int waiting; /* suspended while its batch runs */
    int batched; /* counted in rest->unanswered until completed */
    double t0;   /* its first byte (monotonic seconds), for the latency metric */
    int method;  /* dt__sv_metrics_method's index */
    char model[DT__SV_NAME_MAX]; /* as the URL names it ("": none) */
    verb verb;
    dt__sv_input in;
    dt__sv_job job;
} request;

/* ---- answers ---- */

static enum MHD_Result answer_ct(struct MHD_Connection *c, int status, const char *ctype,
                                 char *body, size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body, body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result answer(struct MHD_Connection *c, int status, char *body, size_t len) {
    return answer_ct(c, status, "application/json", body, len);
}

static enum MHD_Result answer_status(struct MHD_Connection *c, int status, const char *msg) {
    dt__sv_buf b = {0};
    dt__sv_buf_puts(&b, "{ \"error\": ");
    dt__sv_buf_str(&b, msg);
    dt__sv_buf_puts(&b, " }");
    if (b.oom) {
        free(b.p);
        return MHD_NO;
    }
    return answer(c, status, b.p, b.len);
}

static enum MHD_Result answer_error(struct MHD_Connection *c, dt__sv_code code, const char *msg) {
    return answer_status(c, dt__sv_http_status(code), msg);
}

static enum MHD_Result answer_json(struct MHD_Connection *c, json_t *j) {
    char *text = j ? json_dumps(j, JSON_INDENT(4) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!text) return answer_error(c, DT__SV_INTERNAL, "out of memory");
    return answer(c, 200, text, strlen(text));
}

/* ---- status and metadata ---- */

static json_t *status_entry(const dt__sv_record *r) {
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)r->version);
    return json_pack("{s:s, s:s, s:{s:s, s:s}}", "version", v, "state",
                     dt__sv_state_name(r->state), "status", "error_code",
                     dt__sv_code_name(r->code), "error_message", r->message);
}

static enum MHD_Result get_status(dt__sv_server *s, struct MHD_Connection *c, const char *name,
                                  int64_t version, const char *label) {
    dt__sv_model *m = dt__sv_model_find(s, name);
    char msg[512];
    if (m && label) {
        version = -2;
        for (int i = 0; i < m->conf.nlabels; i++)
            if (!strcmp(m->conf.label_names[i], label)) version = m->conf.label_versions[i];
        if (version == -2) {
            snprintf(msg, sizeof msg, "Unrecognized servable version label: %s", label);
            return answer_error(c, DT__SV_INVALID_ARGUMENT, msg);
        }
    }
    json_t *list = json_array();
    if (m) {
        pthread_mutex_lock(&m->mu);
        for (int i = 0; i < m->nrec; i++)
            if (version < 0 || m->rec[i].version == version)
                json_array_append_new(list, status_entry(&m->rec[i]));
        pthread_mutex_unlock(&m->mu);
    }
    if (json_array_size(list) == 0) {
        json_decref(list);
        if (version >= 0)
            snprintf(msg, sizeof msg, "Could not find version %lld of model %s",
                     (long long)version, name);
        else
            snprintf(msg, sizeof msg, "Could not find any versions of model %s", name);
        return answer_error(c, DT__SV_NOT_FOUND, msg);
    }
    return answer_json(c, json_pack("{s:o}", "model_version_status", list));
}

static json_t *tensor_info(const char *dtype, const dt_shape *shape, int batch, const char *name) {
    json_t *dims = json_array();
    if (batch) json_array_append_new(dims, json_pack("{s:s, s:s}", "size", "-1", "name", ""));
    for (int i = 0; shape && i < shape->ndim; i++) {
        char d[32];
        snprintf(d, sizeof d, "%lld", (long long)shape->dim[i]);
        json_array_append_new(dims, json_pack("{s:s, s:s}", "size", d, "name", ""));
    }
    return json_pack("{s:s, s:{s:o, s:b}, s:s}", "dtype", dtype, "tensor_shape", "dim", dims,
                     "unknown_rank", 0, "name", name);
}

static json_t *predict_signature(const dt__sv_version *v, const char *sig) {
    char in[160], out[160];
    snprintf(in, sizeof in, "%s_%s:0", sig, v->input_name);
    snprintf(out, sizeof out, "StatefulPartitionedCall:0");
    const dt_shape *is = dt_model_input_shape(v->ex->model);
    const dt_shape *os = dt_model_output_shape(v->ex->model);
    json_t *inputs = json_object(), *outputs = json_object();
    json_object_set_new(inputs, v->input_name, tensor_info("DT_FLOAT", is, 1, in));
    json_object_set_new(outputs, v->output_name, tensor_info("DT_FLOAT", os, 1, out));
    return json_pack("{s:o, s:o, s:s}", "inputs", inputs, "outputs", outputs, "method_name",
                     "tensorflow/serving/predict");
}

static json_t *classify_signature(const dt__sv_version *v) {
    dt_shape k = {.ndim = 1, .dim = {v->ex->num_classes}};
    json_t *inputs = json_object(), *outputs = json_object();
    json_object_set_new(inputs, "inputs", tensor_info("DT_STRING", NULL, 1, "input_example_tensor:0"));
    json_object_set_new(outputs, "classes", tensor_info("DT_STRING", &k, 1, "classes:0"));
    json_object_set_new(outputs, "scores", tensor_info("DT_FLOAT", &k, 1, "scores:0"));
    return json_pack("{s:o, s:o, s:s}", "inputs", inputs, "outputs", outputs, "method_name",
                     "tensorflow/serving/classify");
}

static int is_regressor(const dt__sv_version *v) {
    return v->ex->num_classes == 0 && dt_shape_numel(dt_model_output_shape(v->ex->model)) == 1;
}

static json_t *regress_signature(const dt__sv_version *v) {
    dt_shape one = {.ndim = 1, .dim = {1}};
    json_t *inputs = json_object(), *outputs = json_object();
    json_object_set_new(inputs, "inputs", tensor_info("DT_STRING", NULL, 1, "input_example_tensor:0"));
    json_object_set_new(outputs, "outputs", tensor_info("DT_FLOAT", &one, 1, "outputs:0"));
    (void)v;
    return json_pack("{s:o, s:o, s:s}", "inputs", inputs, "outputs", outputs, "method_name",
                     "tensorflow/serving/regress");
}

static enum MHD_Result get_metadata(dt__sv_server *s, struct MHD_Connection *c, const char *name,
                                    int64_t version, const char *label) {
    dt__sv_version *v;
    char msg[512];
    dt__sv_code code = dt__sv_version_get(s, name, version, label, &v, msg, sizeof msg);
    if (code) return answer_error(c, code, msg);
    json_t *sigs = json_object();
    json_object_set_new(sigs, "serving_default", predict_signature(v, "serving_default"));
    json_object_set_new(sigs, "predict", predict_signature(v, "predict"));
    if (v->ex->num_classes > 0) json_object_set_new(sigs, "classify", classify_signature(v));
    if (is_regressor(v)) json_object_set_new(sigs, "regress", regress_signature(v));
    char ver[32];
    snprintf(ver, sizeof ver, "%lld", (long long)v->version);
    json_t *j = json_pack("{s:{s:s, s:s, s:s}, s:{s:{s:o}}}", "model_spec", "name", name,
                          "signature_name", "", "version", ver, "metadata", "signature_def",
                          "signature_def", sigs);
    dt__sv_version_put(v);
    return answer_json(c, j);
}

/* ---- predict / classify / regress ---- */

/* One sample of the output, nested by its per-sample shape (dims from d on). */
static void put_sample(dt__sv_buf *b, const float *y, const dt_shape *shape, int d) {
    if (shape->ndim == 0) return dt__sv_buf_float(b, *y);
    int64_t inner = 1;
    for (int i = d + 1; i < shape->ndim && i < DT_MAX_DIMS; i++)
        inner *= shape->dim[i];
    int64_t count = d < DT_MAX_DIMS ? shape->dim[d] : 1;
    dt__sv_buf_put(b, "[", 1);
    for (int64_t i = 0; i < count; i++) {
        if (i) dt__sv_buf_put(b, ", ", 2);
        if (d + 1 >= shape->ndim) dt__sv_buf_float(b, y[i]);
        else put_sample(b, y + i * inner, shape, d + 1);
    }
    dt__sv_buf_put(b, "]", 1);
}

static enum MHD_Result answer_inference(request *q) {
    dt__sv_job *j = &q->job;
    if (j->code) return answer_error(q->conn, j->code, j->err);
    const dt__sv_version *v = j->v;
    const dt_shape *os = dt_model_output_shape(v->ex->model);
    dt__sv_buf b = {0};
    int64_t rows = q->in.rows, k = j->k;
    if (q->verb == VERB_PREDICT) {
        dt__sv_buf_puts(&b, q->in.columnar ? "{\n    \"outputs\": [" : "{\n    \"predictions\": [");
        for (int64_t r = 0; r < rows; r++) {
            if (r) dt__sv_buf_put(&b, ", ", 2);
            put_sample(&b, j->out + r * k, os, 0);
        }
        dt__sv_buf_puts(&b, "]\n}");
    } else if (q->verb == VERB_CLASSIFY) {
        dt__sv_buf_puts(&b, "{\n    \"results\": [");
        for (int64_t r = 0; r < rows; r++) {
            dt__sv_buf_puts(&b, r ? ", [" : "[");
            for (int64_t i = 0; i < k; i++) {
                dt__sv_buf_puts(&b, i ? ", [" : "[");
                if (v->ex->class_names) {
                    dt__sv_buf_str(&b, v->ex->class_names[i]);
                } else {
                    char id[32];
                    snprintf(id, sizeof id, "\"%lld\"", (long long)i);
                    dt__sv_buf_puts(&b, id);
                }
                dt__sv_buf_put(&b, ", ", 2);
                dt__sv_buf_float(&b, j->out[r * k + i]);
                dt__sv_buf_put(&b, "]", 1);
            }
            dt__sv_buf_put(&b, "]", 1);
        }
        dt__sv_buf_puts(&b, "]\n}");
    } else {
        dt__sv_buf_puts(&b, "{\n    \"results\": [");
        for (int64_t r = 0; r < rows; r++) {
            if (r) dt__sv_buf_put(&b, ", ", 2);
            dt__sv_buf_float(&b, j->out[r]);
        }
        dt__sv_buf_puts(&b, "]\n}");
    }
    if (b.oom) {
        free(b.p);
        return answer_error(q->conn, DT__SV_RESOURCE_EXHAUSTED, "out of memory for the answer");
    }
    return answer(q->conn, 200, b.p, b.len);
}

static void job_done(dt__sv_job *j) {
    request *q = j->ctx;
    if (q->waiting) {
        dt__sv_rest *rest = q->rest; /* q may be gone once resumed */
        MHD_resume_connection(q->conn);
        atomic_fetch_sub(&rest->suspended, 1);
    }
}

static const char *method_of(verb vb) {
    return vb == VERB_CLASSIFY ? "tensorflow/serving/classify"
           : vb == VERB_REGRESS ? "tensorflow/serving/regress"
                                : "tensorflow/serving/predict";
}

/* Which of the version's signatures a request names, checked against its verb. */
static dt__sv_code check_signature(const dt__sv_version *v, verb vb, const char *sig, char *err,
                                   size_t errlen) {
    verb has = VERB_NONE;
    if (!sig[0] || !strcmp(sig, "serving_default")) has = vb; /* the default fits every verb */
    else if (!strcmp(sig, "predict")) has = VERB_PREDICT;
    else if (!strcmp(sig, "classify") && v->ex->num_classes > 0) has = VERB_CLASSIFY;
    else if (!strcmp(sig, "regress") && is_regressor(v)) has = VERB_REGRESS;
    if (has == VERB_NONE) {
        snprintf(err, errlen, "Serving signature name: \"%s\" not found in signature def", sig);
        return DT__SV_INVALID_ARGUMENT;
    }
    if (vb != VERB_PREDICT && has != vb) {
        snprintf(err, errlen, "Expected %s signature method_name to be %s. Was: %s",
                 vb == VERB_CLASSIFY ? "classification" : "regression", method_of(vb),
                 method_of(has));
        return DT__SV_INVALID_ARGUMENT;
    }
    if (vb == VERB_CLASSIFY && v->ex->num_classes == 0) {
        snprintf(err, errlen, "the model is not a classifier: use :predict");
        return DT__SV_INVALID_ARGUMENT;
    }
    if (vb == VERB_REGRESS && !is_regressor(v)) {
        snprintf(err, errlen, "the model is not a regressor of one output: use :predict");
        return DT__SV_INVALID_ARGUMENT;
    }
    return DT__SV_OK;
}

static enum MHD_Result post_infer(request *q, const char *name, int64_t version,
                                  const char *label) {
    dt__sv_server *s = q->s;
    char err[512];
    dt__sv_version *v;
    dt__sv_code code = dt__sv_version_get(s, name, version, label, &v, err, sizeof err);
    if (code) return answer_error(q->conn, code, err);
    const dt_shape *is = dt_model_input_shape(v->ex->model);
    if (q->verb == VERB_PREDICT)
        code = dt__sv_parse_predict(q->body ? q->body : "", q->len, v->input_name, is, &q->in,
                                    err, sizeof err);
    else
        code = dt__sv_parse_classify(q->body ? q->body : "", q->len, v->input_name, is, &q->in,
                                     err, sizeof err);
    if (!code) code = check_signature(v, q->verb, q->in.signature, err, sizeof err);
    dt__sv_job *j = &q->job;
    j->v = v; /* released when the request completes */
    if (code) return answer_error(q->conn, code, err);
    j->k = dt_shape_numel(dt_model_output_shape(v->ex->model));
    j->in = &q->in;
    j->done = job_done;
    j->ctx = q;
    if (!(j->out = malloc((size_t)(q->in.rows * j->k) * sizeof *j->out)))
        return answer_error(q->conn, DT__SV_RESOURCE_EXHAUSTED, "out of memory");
    if (s->batcher) {
        atomic_fetch_add(&q->rest->unanswered, 1);
        q->batched = 1;
        atomic_fetch_add(&q->rest->suspended, 1);
        if (atomic_load(&q->rest->stopping)) {
            atomic_fetch_sub(&q->rest->suspended, 1);
            return answer_error(q->conn, DT__SV_UNAVAILABLE, "the server is shutting down");
        }
        q->waiting = 1;
        MHD_suspend_connection(q->conn); /* before the job can finish and resume it */
        dt__sv_infer(s, j);
        return MHD_YES;
    }
    dt__sv_infer(s, j); /* inline: done when it returns */
    return answer_inference(q);
}

/* ---- routing ---- */

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* "/v1/models/NAME[/versions/N | /labels/L][/metadata]" (GET) or
 * "/v1/models/NAME[/versions/N | /labels/L]:VERB" (POST), after TF Serving's patterns. */
typedef struct route {
    char name[DT__SV_NAME_MAX];
    int64_t version;
    char label[64];
    int metadata;
    verb verb;
} route;

/* %XX escapes decoded in place (the daemon leaves the path raw, so that an escaped '/' or
 * ':' is part of a name, as TF Serving matches its patterns before unescaping). */
static void unescape(char *s) {
    char *o = s;
    for (const char *p = s; *p; p++) {
        int hi, lo;
        if (*p == '%' && (hi = hexval(p[1])) >= 0 && (lo = hexval(p[2])) >= 0) {
            *o++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    return strlen(s);
}

static int parse_route(const char *url, int post, route *r) {
    memset(r, 0, sizeof *r);
    r->version = -1;
    const char *p = url + strlen("/v1/models/");
    const char *colon = post ? strrchr(p, ':') : NULL;
    size_t end = post ? (colon ? (size_t)(colon - p) : strlen(p)) : strlen(p);
    if (post) {
        if (!colon) return -1;
        const char *vb = colon + 1;
        if (!strcasecmp(vb, "predict")) r->verb = VERB_PREDICT;
        else if (!strcasecmp(vb, "classify")) r->verb = VERB_CLASSIFY;
        else if (!strcasecmp(vb, "regress")) r->verb = VERB_REGRESS;
        else return -1;
    }
    /* the name: up to the first '/' or ':' */
    size_t n = strcspn(p, "/:");
    if (n == 0 || n >= sizeof r->name || n > end) return -1;
    memcpy(r->name, p, n);
    r->name[n] = 0;
    unescape(r->name);
    const char *rest = p + n, *stop = p + end;
    if (rest < stop && !strncasecmp(rest, "/versions/", 10)) {
        rest += 10;
        int64_t v = 0;
        int digits = 0;
        while (rest < stop && *rest >= '0' && *rest <= '9' && digits < 18)
            v = v * 10 + (*rest++ - '0'), digits++;
        if (!digits) return -1;
        r->version = v;
    } else if (rest < stop && !strncasecmp(rest, "/labels/", 8)) {
        rest += 8;
        size_t l = strcspn(rest, "/:");
        if (l == 0 || l >= sizeof r->label || rest + l > stop) return -1;
        memcpy(r->label, rest, l);
        r->label[l] = 0;
        unescape(r->label);
        rest += l;
    }
    if (!post && rest < stop && !strcasecmp(rest, "/metadata")) {
        r->metadata = 1;
        rest = stop;
    }
    return rest == stop ? 0 : -1;
}

static enum MHD_Result dispatch(request *q, const char *url, const char *method) {
    char msg[600];
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (get && (!strcmp(url, "/metrics") || !strcmp(url, "/monitoring/prometheus/metrics"))) {
        size_t len = 0;
        char *text = dt__sv_metrics_text(q->s, &len);
        if (!text) return answer_error(q->conn, DT__SV_RESOURCE_EXHAUSTED, "out of memory");
        return answer_ct(q->conn, 200, DT_PROM_CONTENT_TYPE, text, len);
    }
    if (strncasecmp(url, "/v1/", 4) != 0) {
        snprintf(msg, sizeof msg, "Not found: %s %.200s", method, url);
        return answer_error(q->conn, DT__SV_NOT_FOUND, msg);
    }
    if (!strcasecmp(url, "/v1/models") || !strcasecmp(url, "/v1/models/"))
        return answer_error(q->conn, DT__SV_INVALID_ARGUMENT, "Missing model name in request.");
    route r;
    if ((!get && !post) || strncasecmp(url, "/v1/models/", 11) != 0 || parse_route(url, post, &r)) {
        snprintf(msg, sizeof msg, "Malformed request: %s %.400s", method, url);
        return answer_error(q->conn, DT__SV_INVALID_ARGUMENT, msg);
    }
    snprintf(q->model, sizeof q->model, "%s", r.name);
    q->method = dt__sv_metrics_method(get ? (r.metadata ? "metadata" : "status")
                                          : r.verb == VERB_PREDICT   ? "predict"
                                          : r.verb == VERB_CLASSIFY  ? "classify"
                                                                     : "regress");
    if (get) {
        if (r.metadata) return get_metadata(q->s, q->conn, r.name, r.version, r.label[0] ? r.label : NULL);
        return get_status(q->s, q->conn, r.name, r.version, r.label[0] ? r.label : NULL);
    }
    q->verb = r.verb;
    return post_infer(q, r.name, r.version, r.label[0] ? r.label : NULL);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload, size_t *upload_size, void **con_cls) {
    dt__sv_rest *rest = cls;
    request *q = *con_cls;
    (void)version;
    if (!q) {
        if (!(q = calloc(1, sizeof *q))) return MHD_NO;
        q->s = rest->s;
        q->rest = rest;
        q->conn = conn;
        q->t0 = dt__mono_s();
        q->method = dt__sv_metrics_method("other");
        *con_cls = q;
        rconn_phase(rest, conn, PH_BODY);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > rest->s->opts.max_body) q->too_big = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!q->too_big && q->len + *upload_size > rest->s->opts.max_body) q->too_big = 1;
        if (!q->too_big) {
            if (q->len + *upload_size + 1 > q->cap) {
                size_t cap = q->cap ? q->cap : 4096;
                while (cap < q->len + *upload_size + 1)
                    cap *= 2;
                char *b = realloc(q->body, cap);
                if (!b) return MHD_NO;
                q->body = b;
                q->cap = cap;
            }
            memcpy(q->body + q->len, upload, *upload_size);
            q->len += *upload_size;
            q->body[q->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->waiting) { /* resumed: the batch ran */
        q->waiting = 0;
        return answer_inference(q);
    }
    rconn_phase(rest, conn, PH_ANSWERING);
    atomic_fetch_add(&rest->s->requests, 1);
    if (q->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "Request body too large: at most %zu bytes",
                 rest->s->opts.max_body);
        return answer_status(conn, 413, msg);
    }
    return dispatch(q, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    request *q = *con_cls;
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) rconn_phase(cls, conn, PH_NEXT);
    if (!q) return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    if (ci && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        dt__sv_metrics_request(q->s, q->model, q->method, (int)ci->http_status,
                               dt__mono_s() - q->t0);
    if (q->batched) atomic_fetch_sub(&q->rest->unanswered, 1);
    if (q->job.v) dt__sv_version_put(q->job.v);
    free(q->job.out);
    free(q->in.x);
    free(q->body);
    free(q);
    *con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    dt__sv_rest *rest = cls;
    fputs("dtrain serve: libmicrohttpd: ", rest->s->opts.log);
    vfprintf(rest->s->opts.log, fmt, ap);
}

/* The acceptor: every new connection goes to the next daemon in turn. */
static void *acceptor(void *arg) {
    dt__sv_rest *rest = arg;
    unsigned next = 0;
    struct pollfd p[3] = {{.fd = rest->listen_fd, .events = POLLIN},
                          {.fd = rest->stop_pipe[0], .events = POLLIN},
                          {.fd = rest->wake_pipe[0], .events = POLLIN}};
    for (;;) {
        pthread_mutex_lock(&rest->mu);
        double due = sweep(rest);
        rest->wake_at = due;
        pthread_mutex_unlock(&rest->mu);
        int ms = -1;
        if (due > 0) {
            double d = ceil((due - dt__mono_s()) * 1e3);
            ms = d < 0 ? 0 : d > 3600000 ? 3600000 : (int)d;
        }
        if (poll(p, 3, ms) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        if (p[2].revents) {
            char buf[64];
            while (read(rest->wake_pipe[0], buf, sizeof buf) > 0) {
            }
        }
        if (!(p[0].revents & POLLIN)) continue;
        for (;;) { /* everything waiting */
            struct sockaddr_storage sa;
            socklen_t salen = sizeof sa;
            int fd = accept4(rest->listen_fd, (struct sockaddr *)&sa, &salen,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) {
                /* EMFILE and the like: let the poll come round again rather than spin */
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                    errno != ECONNABORTED)
                    poll(NULL, 0, 10);
                break;
            }
            rconn *r = calloc(1, sizeof *r);
            pthread_mutex_lock(&rest->mu);
            for (rconn *o = rest->head, *after; o; o = after) { /* a dropped one's fd, reused */
                after = o->next;
                if (!o->conn && o->fd == fd) {
                    rconn_unlink(rest, o);
                    free(o);
                }
            }
            if (!r || !make_room(rest)) { /* out of memory, or every connection is busy */
                pthread_mutex_unlock(&rest->mu);
                free(r);
                close(fd);
                continue;
            }
            r->fd = fd;
            r->prev = rest->tail;
            if (rest->tail) rest->tail->next = r;
            else rest->head = r;
            rest->tail = r;
            rconn_wait(rest, r, rest->header_s);
            pthread_mutex_unlock(&rest->mu);
            /* MHD closes the socket itself when it cannot take it */
            if (MHD_add_connection(rest->d[next++ % (unsigned)rest->nd], fd,
                                   (struct sockaddr *)&sa, salen) != MHD_YES) {
                /* r is still listed unless the daemon started and closed it (and freed r);
                 * only this thread allocates rconns, so the address cannot be another's */
                pthread_mutex_lock(&rest->mu);
                rconn *o = rest->head;
                while (o && o != r)
                    o = o->next;
                if (o && !o->conn) {
                    rconn_unlink(rest, o);
                    free(o);
                }
                pthread_mutex_unlock(&rest->mu);
            }
        }
    }
    return NULL;
}

static void rest_free(dt__sv_rest *rest) {
    if (rest->acceptor_started) {
        ssize_t w = write(rest->stop_pipe[1], "x", 1);
        (void)w;
        pthread_join(rest->acceptor, NULL);
    }
    /* the batch executors still run: let them answer every suspended request now (no batch
     * waits to fill any more), then give the answers up to 5 s to go out (a client that does
     * not read its answer must not hold the server) */
    atomic_store(&rest->stopping, 1);
    dt__sv_batcher_flush(rest->s);
    while (atomic_load(&rest->suspended) > 0)
        poll(NULL, 0, 5);
    for (int ms = 0; atomic_load(&rest->unanswered) > 0 && ms < 5000; ms += 5)
        poll(NULL, 0, 5);
    if (rest->listen_fd >= 0) close(rest->listen_fd);
    for (int i = 0; i < rest->nd; i++)
        if (rest->d[i]) MHD_stop_daemon(rest->d[i]);
    while (rest->head) { /* the daemons report every close; in case not */
        rconn *r = rest->head;
        rconn_unlink(rest, r);
        free(r);
    }
    pthread_mutex_destroy(&rest->mu);
    for (int i = 0; i < 2; i++) {
        if (rest->stop_pipe[i] >= 0) close(rest->stop_pipe[i]);
        if (rest->wake_pipe[i] >= 0) close(rest->wake_pipe[i]);
    }
    free(rest->d);
    free(rest);
}

dt_err dt__sv_rest_start(dt__sv_server *s, char *url, size_t urllen) {
    dt__sv_rest *rest = calloc(1, sizeof *rest);
    if (!rest) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    rest->s = s;
    rest->listen_fd = rest->stop_pipe[0] = rest->stop_pipe[1] = -1;
    rest->wake_pipe[0] = rest->wake_pipe[1] = -1;
    rest->max_conns = s->opts.max_connections > 0 ? s->opts.max_connections
                                                  : DEFAULT_MAX_CONNECTIONS;
    rest->header_s = (s->opts.header_timeout_ms > 0 ? s->opts.header_timeout_ms
                                                    : DEFAULT_HEADER_TIMEOUT_MS) / 1e3;
    rest->body_s = (s->opts.body_timeout_ms > 0 ? s->opts.body_timeout_ms
                                                : DEFAULT_BODY_TIMEOUT_MS) / 1e3;
    if (pthread_mutex_init(&rest->mu, NULL) != 0) {
        free(rest);
        return dt_err_set(DT_ERR_NOMEM, "cannot create the HTTP server's lock");
    }
    dt_err e = DT_OK;
    if (pipe2(rest->wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        e = dt_err_set(DT_ERR_IO, "cannot start the HTTP acceptor: %s", strerror(errno));
        goto err;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->opts.port)};
    const char *host = s->opts.host ? s->opts.host : "0.0.0.0";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        e = dt_err_set(DT_ERR_ARG, "--rest_api_host: '%s' is not an IPv4 address", host);
        goto err;
    }
    int one = 1;
    rest->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (rest->listen_fd < 0 ||
        setsockopt(rest->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(rest->listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        listen(rest->listen_fd, 1024) != 0) {
        e = dt_err_set(DT_ERR_IO, "cannot listen on %s:%d: %s", host, s->opts.port,
                       strerror(errno));
        goto err;
    }
    struct sockaddr_in bound;
    socklen_t blen = sizeof bound;
    if (getsockname(rest->listen_fd, (struct sockaddr *)&bound, &blen) != 0) bound = addr;
    rest->nd = s->opts.http_threads > 0 ? s->opts.http_threads : 1;
    if (!(rest->d = calloc((size_t)rest->nd, sizeof *rest->d))) {
        e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        goto err;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_TURBO | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    for (int i = 0; i < rest->nd; i++) {
        rest->d[i] = MHD_start_daemon(
            flags, 0, NULL, NULL, on_access, rest, MHD_OPTION_EXTERNAL_LOGGER, on_log, rest,
            MHD_OPTION_CONNECTION_LIMIT, 10000u, MHD_OPTION_CONNECTION_TIMEOUT, 600u,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, rest, MHD_OPTION_NOTIFY_CONNECTION,
            on_connection, rest, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, NULL,
            MHD_OPTION_END);
        if (!rest->d[i]) {
            e = dt_err_set(DT_ERR_IO, "cannot start the HTTP server's thread %d", i);
            goto err;
        }
    }
    if (pipe2(rest->stop_pipe, O_CLOEXEC) != 0 ||
        pthread_create(&rest->acceptor, NULL, acceptor, rest) != 0) {
        e = dt_err_set(DT_ERR_IO, "cannot start the HTTP acceptor: %s", strerror(errno));
        goto err;
    }
    rest->acceptor_started = 1;
    snprintf(url, urllen, "http://%s:%u", host, (unsigned)ntohs(bound.sin_port));
    s->rest = rest;
    return DT_OK;
err:
    rest_free(rest);
    return e;
}

void dt__sv_rest_stop(dt__sv_server *s) {
    if (!s->rest) return;
    rest_free(s->rest);
    s->rest = NULL;
}

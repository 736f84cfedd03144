/*
 * kube_client.c - talk to a Kubernetes API server as kubectl does (kube-impl.h).
 *
 * Design: the credentials are loaded once into a dt__kube (strings and PEM blobs in
 * memory; a token file's name rather than its content, so a rotated token is used). Each
 * dt__kube has one libcurl easy handle, which keeps its connection alive between requests.
 * A watch runs on its own thread with its own handle (dt__kube_clone) and hands events to
 * the event loop through a queue and an eventfd.
 */
#include "backend/kube-impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "net/http-impl.h"
#include "spec/yaml_doc-impl.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_ANSWER ((size_t)64 << 20)

struct dt__kube {
    char server[512];
    char ns[64];
    char source[600];
    char *token;          /* inline bearer token (owned) */
    char token_file[DT__PATH_MAX];
    char *ca_pem;         /* certificate authority, PEM (owned) */
    char *cert_pem, *key_pem;
    int insecure;
    CURL *curl;
    struct curl_slist *headers;
    char errbuf[CURL_ERROR_SIZE];
};

/* ---- loading the configuration ---- */

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static dt_err read_text(const char *path, char **out) {
    size_t len;
    /* a device or FIFO named as a certificate (/dev/zero) would be read without end */
    dt_err e = dt__check_regular(path);
    if (!e) e = dt__read_file(path, out, &len);
    if (e) return e;
    while (len && ((*out)[len - 1] == '\n' || (*out)[len - 1] == '\r')) (*out)[--len] = 0;
    return DT_OK;
}

char *dt__kube_b64_decode(const char *in) {
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in);
    char *out = malloc(n * 3 / 4 + 4);
    if (!out) return NULL;
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == '=' || in[i] == '\n' || in[i] == '\r' || in[i] == ' ') continue;
        const char *p = strchr(tbl, in[i]);
        if (!p || !*p) {
            free(out);
            return NULL;
        }
        acc = acc << 6 | (unsigned)(p - tbl);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)(acc >> bits & 0xff);
        }
    }
    out[o] = 0;
    return out;
}

/* A "-data" field (base64) or a file field (relative to the kubeconfig's dir). */
static dt_err pem_of(const json_t *obj, const char *key, const char *base, const char *cfg,
                     char **out) {
    char dkey[96];
    snprintf(dkey, sizeof dkey, "%s-data", key);
    const char *data = json_string_value(json_object_get(obj, dkey));
    const char *file = json_string_value(json_object_get(obj, key));
    *out = NULL;
    if (data) {
        if (!(*out = dt__kube_b64_decode(data)))
            return dt_err_set(DT_ERR_SPEC, "%s: %s: not base64", cfg, dkey);
        return DT_OK;
    }
    if (!file) return DT_OK;
    char path[DT__PATH_MAX];
    dt_err e = file[0] == '/' ? dt__path(path, sizeof path, "%s", file)
                              : dt__path(path, sizeof path, "%s/%s", base, file);
    if (!e) e = read_text(path, out);
    return e ? dt_err_wrap(e, "%s: %s", cfg, key) : DT_OK;
}

/* The entry named name in the list at key ("contexts": [{name, context}, ...]). */
static const json_t *named(const json_t *root, const char *list, const char *name,
                           const char *inner) {
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(root, list), i, it) {
        const char *n = json_string_value(json_object_get(it, "name"));
        if (n && name && !strcmp(n, name)) return json_object_get(it, inner);
    }
    return NULL;
}

static dt_err load_kubeconfig(dt__kube *k, const char *path, const char *context) {
    dt__ystream *s;
    dt__ydoc *d = NULL;
    dt_err e = dt__ystream_open_file(&s, path);
    if (e) return e;
    json_t *root = NULL;
    if (!(e = dt__ystream_next(s, &d)) && d) {
        dt__yval v;
        dt__ydoc_root(d, "", &v);
        e = dt__yval_to_json(&v, &root);
        dt__ydoc_free(d);
    }
    dt__ystream_free(s);
    if (e) return e;
    if (!json_is_object(root)) {
        json_decref(root);
        return dt_err_set(DT_ERR_SPEC, "%s: not a kubeconfig (expected a mapping)", path);
    }
    char base[DT__PATH_MAX];
    if ((e = dt__path(base, sizeof base, "%s", path))) {
        json_decref(root);
        return e;
    }
    char *slash = strrchr(base, '/');
    if (slash) *slash = 0;
    else snprintf(base, sizeof base, ".");
    const char *ctx_name = context ? context : json_string_value(json_object_get(root, "current-context"));
    const json_t *ctx = named(root, "contexts", ctx_name, "context");
    if (!ctx) {
        e = dt_err_set(DT_ERR_SPEC, "%s: %s", path,
                       ctx_name ? "the context is not in contexts" : "no current-context: give --context");
        if (ctx_name) dt_err_set(DT_ERR_SPEC, "%s: context \"%s\" not found", path, ctx_name);
        json_decref(root);
        return e;
    }
    const char *cluster_name = json_string_value(json_object_get(ctx, "cluster"));
    const char *user_name = json_string_value(json_object_get(ctx, "user"));
    const char *ns = json_string_value(json_object_get(ctx, "namespace"));
    const json_t *cluster = named(root, "clusters", cluster_name, "cluster");
    const json_t *user = named(root, "users", user_name, "user");
    const char *server = json_string_value(json_object_get(cluster, "server"));
    if (!cluster || !server) {
        e = dt_err_set(DT_ERR_SPEC, "%s: context \"%s\": cluster \"%s\" has no server", path,
                       ctx_name, cluster_name ? cluster_name : "");
        json_decref(root); /* after the message: the names live in root */
        return e;
    }
    snprintf(k->server, sizeof k->server, "%s", server);
    size_t sl = strlen(k->server);
    while (sl && k->server[sl - 1] == '/') k->server[--sl] = 0;
    snprintf(k->ns, sizeof k->ns, "%s", ns ? ns : "default");
    k->insecure = json_is_true(json_object_get(cluster, "insecure-skip-tls-verify"));
    if ((e = pem_of(cluster, "certificate-authority", base, path, &k->ca_pem)) ||
        (e = pem_of(user, "client-certificate", base, path, &k->cert_pem)) ||
        (e = pem_of(user, "client-key", base, path, &k->key_pem))) {
        json_decref(root);
        return e;
    }
    k->token = dup_or_null(json_string_value(json_object_get(user, "token")));
    const char *tf = json_string_value(json_object_get(user, "tokenFile"));
    if (tf) {
        e = tf[0] == '/' ? dt__path(k->token_file, sizeof k->token_file, "%s", tf)
                         : dt__path(k->token_file, sizeof k->token_file, "%s/%s", base, tf);
        if (e) {
            json_decref(root);
            return dt_err_wrap(DT_ERR_SPEC, "%s: tokenFile", path);
        }
    }
    if (json_object_get(user, "exec") || json_object_get(user, "auth-provider")) {
        e = dt_err_set(DT_ERR_SPEC,
                       "%s: user \"%s\" authenticates through an exec or auth-provider plugin, "
                       "which dtrain does not run: give a token, a tokenFile or a client "
                       "certificate",
                       path, user_name ? user_name : "");
        json_decref(root);
        return e;
    }
    snprintf(k->source, sizeof k->source, "kubeconfig %s, context %s", path, ctx_name);
    json_decref(root);
    return DT_OK;
}

static dt_err load_in_cluster(dt__kube *k) {
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port)
        return dt_err_set(DT_ERR_STATE,
                          "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in "
                          "a pod (KUBERNETES_SERVICE_HOST is not set)");
    snprintf(k->server, sizeof k->server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s",
             host, port);
    snprintf(k->token_file, sizeof k->token_file, "%s/token", SA_DIR);
    dt_err e = read_text(SA_DIR "/ca.crt", &k->ca_pem);
    if (e) return dt_err_wrap(e, "in-cluster");
    char *ns = NULL;
    if (read_text(SA_DIR "/namespace", &ns) == DT_OK) {
        snprintf(k->ns, sizeof k->ns, "%s", ns);
        free(ns);
    } else {
        dt_err_clear();
        snprintf(k->ns, sizeof k->ns, "default");
    }
    snprintf(k->source, sizeof k->source, "in-cluster (service account)");
    return DT_OK;
}

static dt_err open_handle(dt__kube *k) {
    dt_err e = dt__http_global_init();
    if (e) return e;
    if (!(k->curl = curl_easy_init())) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    return DT_OK;
}

dt_err dt__kube_connect(dt__kube **out, const dt__kube_conn *c) {
    dt__kube *k = calloc(1, sizeof *k);
    if (!k) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    dt_err e = DT_OK;
    char path[DT__PATH_MAX] = "";
    if (!c->in_cluster) {
        if (c->kubeconfig) {
            e = dt__path(path, sizeof path, "%s", c->kubeconfig);
        } else if (getenv("KUBECONFIG") && *getenv("KUBECONFIG")) {
            /* kubectl merges the list; dtrain takes the first file that exists */
            char *list = strdup(getenv("KUBECONFIG"));
            e = list ? DT_OK : dt_err_set(DT_ERR_NOMEM, "out of memory");
            for (char *save, *p = list ? strtok_r(list, ":", &save) : NULL; p;
                 p = strtok_r(NULL, ":", &save))
                if (access(p, R_OK) == 0) {
                    e = dt__path(path, sizeof path, "%s", p);
                    break;
                }
            free(list);
        } else if (getenv("HOME")) {
            if (dt__path(path, sizeof path, "%s/.kube/config", getenv("HOME"))) dt_err_clear();
            if (path[0] && access(path, R_OK) != 0) path[0] = 0; /* none: in-cluster */
        }
        if (e) {
            dt__kube_free(k);
            return dt_err_wrap(e, "kubeconfig");
        }
    }
    e = path[0] ? load_kubeconfig(k, path, c->context) : load_in_cluster(k);
    if (!e) e = open_handle(k);
    if (e) {
        dt__kube_free(k);
        return e;
    }
    *out = k;
    return DT_OK;
}

dt_err dt__kube_clone(dt__kube **out, const dt__kube *src) {
    dt__kube *k = calloc(1, sizeof *k);
    if (!k) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    memcpy(k->server, src->server, sizeof k->server);
    memcpy(k->ns, src->ns, sizeof k->ns);
    memcpy(k->source, src->source, sizeof k->source);
    memcpy(k->token_file, src->token_file, sizeof k->token_file);
    k->insecure = src->insecure;
    k->token = dup_or_null(src->token);
    k->ca_pem = dup_or_null(src->ca_pem);
    k->cert_pem = dup_or_null(src->cert_pem);
    k->key_pem = dup_or_null(src->key_pem);
    dt_err e = open_handle(k);
    if (e) {
        dt__kube_free(k);
        return e;
    }
    *out = k;
    return DT_OK;
}

void dt__kube_free(dt__kube *k) {
    if (!k) return;
    if (k->curl) curl_easy_cleanup(k->curl);
    curl_slist_free_all(k->headers);
    if (k->token) memset(k->token, 0, strlen(k->token));
    free(k->token);
    free(k->ca_pem);
    free(k->cert_pem);
    if (k->key_pem) memset(k->key_pem, 0, strlen(k->key_pem));
    free(k->key_pem);
    free(k);
}

const char *dt__kube_namespace(const dt__kube *k) { return k->ns; }
const char *dt__kube_server(const dt__kube *k) { return k->server; }
const char *dt__kube_source(const dt__kube *k) { return k->source; }

/* ---- requests ---- */

typedef struct sink {
    char *buf;
    size_t len, cap;
    int too_big;
} sink;

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
    sink *s = ud;
    size_t n = size * nmemb;
    if (s->len + n + 1 > MAX_ANSWER) {
        s->too_big = 1;
        return 0;
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n + 1) cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b) return 0;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    s->buf[s->len] = 0;
    return n;
}

/* Set up k's handle for one request to path; headers holds Authorization (from the token
 * file, read now) and the content type. */
static dt_err prepare(dt__kube *k, const char *method, const char *path, const char *ctype,
                      long timeout_ms) {
    CURL *c = k->curl;
    curl_easy_reset(c);
    curl_slist_free_all(k->headers);
    k->headers = NULL;
    char url[8192];
    if (snprintf(url, sizeof url, "%s%s", k->server, path) >= (int)sizeof url)
        return dt_err_set(DT_ERR_ARG, "%s: path too long", path);
    char *token = NULL;
    if (k->token_file[0] && read_text(k->token_file, &token)) {
        dt_err_clear();
        token = NULL;
    }
    const char *tok = token ? token : k->token;
    if (tok && *tok) {
        size_t n = strlen(tok) + 32;
        char *h = malloc(n);
        if (h) {
            snprintf(h, n, "Authorization: Bearer %s", tok);
            k->headers = curl_slist_append(k->headers, h);
            memset(h, 0, n);
            free(h);
        }
    }
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    char ct[160];
    snprintf(ct, sizeof ct, "Content-Type: %s", ctype ? ctype : "application/json");
    k->headers = curl_slist_append(k->headers, ct);
    k->headers = curl_slist_append(k->headers, "Accept: application/json, */*");
    k->errbuf[0] = 0;
    CURLcode rc = curl_easy_setopt(c, CURLOPT_URL, url);
    if (!rc) rc = curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (!rc) rc = curl_easy_setopt(c, CURLOPT_HTTPHEADER, k->headers);
    if (!rc) rc = curl_easy_setopt(c, CURLOPT_PROXY, "");
    if (!rc) rc = curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http");
    if (!rc) rc = curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (!rc) rc = curl_easy_setopt(c, CURLOPT_ERRORBUFFER, k->errbuf);
    if (!rc) rc = curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if (!rc && timeout_ms > 0) rc = curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    if (!rc && k->ca_pem) {
        struct curl_blob b = {.data = k->ca_pem, .len = strlen(k->ca_pem), .flags = CURL_BLOB_COPY};
        rc = curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &b);
    }
    if (!rc && k->cert_pem) {
        struct curl_blob b = {.data = k->cert_pem, .len = strlen(k->cert_pem), .flags = CURL_BLOB_COPY};
        rc = curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &b);
        if (!rc) rc = curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (!rc && k->key_pem) {
        struct curl_blob b = {.data = k->key_pem, .len = strlen(k->key_pem), .flags = CURL_BLOB_COPY};
        rc = curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &b);
        if (!rc) rc = curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (!rc && k->insecure) {
        rc = curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        if (!rc) rc = curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (rc) return dt_err_set(DT_ERR_IO, "libcurl: %s", curl_easy_strerror(rc));
    return DT_OK;
}

static dt_err perform(dt__kube *k, const char *method, const char *path, sink *s, long *status) {
    curl_easy_setopt(k->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(k->curl, CURLOPT_WRITEDATA, s);
    CURLcode rc = curl_easy_perform(k->curl);
    /* worth retrying: the API server could not be reached or did not answer in time (it
     * restarts, a load balancer moves); not: TLS, a refused certificate, a huge answer */
    dt_err code = rc == CURLE_OPERATION_TIMEDOUT ? DT_ERR_TIMEOUT
                  : rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                          rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR ||
                          rc == CURLE_GOT_NOTHING
                      ? DT_ERR_NETWORK
                      : DT_ERR_IO;
    if (rc != CURLE_OK)
        return dt_err_set(s->too_big ? DT_ERR_IO : code, "%s %s%s: %s", method, k->server, path,
                          s->too_big ? "answer larger than 64 MiB"
                                     : k->errbuf[0] ? k->errbuf : curl_easy_strerror(rc));
    curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, status);
    return DT_OK;
}

dt_err dt__kube_call(dt__kube *k, const char *method, const char *path, const json_t *body,
                     const char *ctype, long *status, json_t **resp) {
    *resp = NULL;
    *status = 0;
    dt_err e = prepare(k, method, path, ctype, 30000);
    if (e) return e;
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    if (text) {
        curl_easy_setopt(k->curl, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(k->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(text));
    }
    sink s = {0};
    e = perform(k, method, path, &s, status);
    free(text);
    if (!e && s.buf) *resp = json_loadb(s.buf, s.len, 0, NULL);
    free(s.buf);
    return e;
}

dt_err dt__kube_get_text(dt__kube *k, const char *path, long *status, char **text) {
    *text = NULL;
    dt_err e = prepare(k, "GET", path, NULL, 30000);
    if (e) return e;
    sink s = {0};
    if ((e = perform(k, "GET", path, &s, status))) {
        free(s.buf);
        return e;
    }
    *text = s.buf ? s.buf : strdup("");
    return *text ? DT_OK : dt_err_set(DT_ERR_NOMEM, "out of memory");
}

const char *dt__kube_why(const json_t *resp, long status, char *buf, size_t len) {
    const char *msg = json_string_value(json_object_get(resp, "message"));
    if (msg)
        snprintf(buf, len, "%s", msg);
    else
        snprintf(buf, len, "HTTP %ld", status);
    return buf;
}

const char *dt__kube_escape(const char *s, char *buf, size_t len) {
    size_t o = 0;
    for (; *s && o + 4 < len; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~')
            buf[o++] = (char)ch;
        else
            o += (size_t)snprintf(buf + o, len - o, "%%%02X", ch);
    }
    buf[o] = 0;
    return buf;
}

/* ---- watches ---- */

typedef struct event {
    struct event *next;
    char type[16];
    json_t *object;
} event;

struct dt__kube_watch {
    dt__kube *k; /* the thread's own connection */
    char path[1024];
    char selector[512];
    pthread_t thread;
    int started;
    int efd;
    pthread_mutex_t mu;
    event *head, *tail;
    atomic_int stop;         /* set by the owner's thread, read by the watch's */
    atomic_int lists, watches;
    /* the stream being read */
    char rv[64];
    char *line;
    size_t line_len, line_cap;
    int gone; /* the stream said 410 Gone: list again */
};

static event *new_event(const char *type, json_t *obj) {
    event *ev = calloc(1, sizeof *ev);
    if (!ev) {
        json_decref(obj);
        return NULL;
    }
    snprintf(ev->type, sizeof ev->type, "%s", type);
    ev->object = obj;
    return ev;
}

/* Append the chain first..last to the queue at once and wake the reader. */
static void enqueue(dt__kube_watch *w, event *first, event *last) {
    pthread_mutex_lock(&w->mu);
    if (w->tail) w->tail->next = first;
    else w->head = first;
    w->tail = last;
    pthread_mutex_unlock(&w->mu);
    uint64_t one = 1;
    if (write(w->efd, &one, sizeof one) < 0) {
        /* the counter is full: the reader is woken already */
    }
}

static void push(dt__kube_watch *w, const char *type, json_t *obj) {
    event *ev = new_event(type, obj);
    if (ev) enqueue(w, ev, ev);
}

static void take_rv(dt__kube_watch *w, const json_t *obj) {
    const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    if (rv) snprintf(w->rv, sizeof w->rv, "%s", rv);
}

/* One line of the stream: {"type": ..., "object": ...}. */
static void on_line(dt__kube_watch *w, const char *line, size_t len) {
    json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *obj = json_object_get(ev, "object");
    if (!type || !obj) {
        json_decref(ev);
        return;
    }
    if (!strcmp(type, "ERROR")) {
        json_int_t code = json_integer_value(json_object_get(obj, "code"));
        if (code == 410 || code == 0) w->gone = 1; /* expired: list again */
    } else if (!strcmp(type, "BOOKMARK")) {
        take_rv(w, obj);
    } else {
        take_rv(w, obj);
        push(w, type, json_incref(obj));
    }
    json_decref(ev);
}

static size_t on_stream(char *data, size_t size, size_t nmemb, void *ud) {
    dt__kube_watch *w = ud;
    size_t n = size * nmemb;
    if (w->stop) return 0;
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\n') {
            if (w->line_len) on_line(w, w->line, w->line_len);
            w->line_len = 0;
            continue;
        }
        if (w->line_len + 1 >= w->line_cap) {
            size_t cap = w->line_cap ? 2 * w->line_cap : 65536;
            if (cap > MAX_ANSWER) return 0;
            char *b = realloc(w->line, cap);
            if (!b) return 0;
            w->line = b;
            w->line_cap = cap;
        }
        w->line[w->line_len++] = data[i];
    }
    return n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    return ((dt__kube_watch *)ud)->stop; /* non-zero aborts the transfer */
}

static void nap(dt__kube_watch *w, int ms) {
    for (int t = 0; t < ms && !w->stop; t += 50) usleep(50 * 1000);
}

/* A list answer's objects: RELIST, the objects, SYNCED, queued at once, so the reader never
 * sees part of a list (and takes what it lacks for deleted). 0: out of memory (the list is
 * dropped, and listed again). */
static int queue_list(dt__kube_watch *w, const json_t *resp) {
    w->lists++;
    event *first = new_event("RELIST", NULL), *last = first;
    int whole = first != NULL;
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(resp, "items"), i, it) {
        event *ev = whole ? new_event("ADDED", json_incref(it)) : NULL;
        if (ev) last = last->next = ev;
        else whole = 0;
    }
    event *synced = whole ? new_event("SYNCED", NULL) : NULL;
    if (!synced) { /* a part of a list would say its other objects were deleted */
        for (event *ev = first, *next; ev; ev = next) {
            next = ev->next;
            json_decref(ev->object);
            free(ev);
        }
        return 0;
    }
    last->next = synced;
    enqueue(w, first, synced);
    take_rv(w, resp);
    return 1;
}

static int do_list(dt__kube_watch *w) {
    char path[2048], sel[1024];
    snprintf(path, sizeof path, "%s%s%s", w->path, w->selector[0] ? "?labelSelector=" : "",
             w->selector[0] ? dt__kube_escape(w->selector, sel, sizeof sel) : "");
    long status;
    json_t *resp;
    if (dt__kube_call(w->k, "GET", path, NULL, NULL, &status, &resp) || status != 200) {
        dt_err_clear();
        json_decref(resp);
        return 0;
    }
    int ok = queue_list(w, resp);
    json_decref(resp);
    return ok;
}

/* One watch stream, until it ends; the HTTP status it had (0: none). */
static long do_watch(dt__kube_watch *w) {
    char path[2048], sel[1024];
    snprintf(path, sizeof path, "%s?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion=%s%s%s",
             w->path, w->rv, w->selector[0] ? "&labelSelector=" : "",
             w->selector[0] ? dt__kube_escape(w->selector, sel, sizeof sel) : "");
    if (prepare(w->k, "GET", path, NULL, 0)) {
        dt_err_clear();
        return 0;
    }
    CURL *c = w->k->curl;
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, w);
    /* A stream that sends nothing (not even a bookmark) for long is presumed dead. */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 660L);
    w->line_len = 0;
    w->watches++;
    curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status == 410) w->gone = 1;
    return status;
}

static void *watch_main(void *arg) {
    dt__kube_watch *w = arg;
    int backoff = 200;
    while (!w->stop) {
        if (!do_list(w)) {
            nap(w, backoff);
            backoff = backoff < 5000 ? backoff * 2 : 5000;
            continue;
        }
        backoff = 200;
        w->gone = 0;
        int refused = 100;
        while (!w->stop && !w->gone) {
            long status = do_watch(w);
            /* Dropped: resumed from the last version seen. A server that refuses (401, 403,
             * 5xx) or cannot be reached is asked again less and less often, up to 5 s. */
            if (w->gone) break;
            if (status == 200) {
                refused = 100;
                nap(w, 100);
            } else {
                nap(w, refused);
                refused = refused < 5000 ? refused * 2 : 5000;
            }
        }
    }
    return NULL;
}

dt_err dt__kube_watch_start(dt__kube_watch **out, const dt__kube *k, const char *path,
                            const char *label_selector) {
    dt__kube_watch *w = calloc(1, sizeof *w);
    if (!w) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->selector, sizeof w->selector, "%s", label_selector ? label_selector : "");
    pthread_mutex_init(&w->mu, NULL);
    w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    dt_err e = w->efd < 0 ? dt_err_set(DT_ERR_IO, "eventfd: %s", strerror(errno))
                          : dt__kube_clone(&w->k, k);
    if (!e && pthread_create(&w->thread, NULL, watch_main, w) != 0)
        e = dt_err_set(DT_ERR_IO, "cannot start the watch thread");
    if (e) {
        dt__kube_watch_stop(w);
        return e;
    }
    w->started = 1;
    *out = w;
    return DT_OK;
}

int dt__kube_watch_fd(const dt__kube_watch *w) { return w->efd; }

void dt__kube_watch_wake(dt__kube_watch *w) {
    uint64_t one = 1;
    if (write(w->efd, &one, sizeof one) < 0) {
        /* the counter is full: the reader is woken already */
    }
}

int dt__kube_watch_next(dt__kube_watch *w, char *type, size_t len, json_t **object) {
    pthread_mutex_lock(&w->mu);
    event *ev = w->head;
    if (ev) {
        w->head = ev->next;
        if (!w->head) w->tail = NULL;
    } else {
        uint64_t n;
        if (read(w->efd, &n, sizeof n) < 0) {
            /* nothing to reset */
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (!ev) return 0;
    snprintf(type, len, "%s", ev->type);
    *object = ev->object;
    free(ev);
    return 1;
}

void dt__kube_watch_counts(const dt__kube_watch *w, int *lists, int *watches) {
    *lists = w->lists;
    *watches = w->watches;
}

dt_err dt__kube_watch_offline(dt__kube_watch **out) {
    dt__kube_watch *w = calloc(1, sizeof *w);
    if (!w) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->efd < 0) {
        dt__kube_watch_stop(w);
        return dt_err_set(DT_ERR_IO, "eventfd: %s", strerror(errno));
    }
    *out = w;
    return DT_OK;
}

int dt__kube_watch_feed_list(dt__kube_watch *w, const json_t *list) {
    w->gone = 0;
    return queue_list(w, list);
}

size_t dt__kube_watch_feed(dt__kube_watch *w, const char *data, size_t len) {
    return on_stream((char *)data, 1, len, w);
}

int dt__kube_watch_gone(const dt__kube_watch *w) { return w->gone; }

const char *dt__kube_watch_version(const dt__kube_watch *w) { return w->rv; }

void dt__kube_watch_stop(dt__kube_watch *w) {
    if (!w) return;
    w->stop = 1;
    if (w->started) pthread_join(w->thread, NULL);
    for (event *ev = w->head, *next; ev; ev = next) {
        next = ev->next;
        json_decref(ev->object);
        free(ev);
    }
    dt__kube_free(w->k);
    if (w->efd >= 0) close(w->efd);
    free(w->line);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* ---- other clients of the cluster ---- */

dt_err dt__kube_master_client(dt__kube *k, const char *ns, const char *job, const char *job_token,
                              long timeout_ms, dt__http_client **out) {
    char url[1200];
    snprintf(url, sizeof url, "%s/api/v1/namespaces/%s/services/%s-master:http/proxy", k->server,
             ns, job);
    dt_err e = dt__http_client_init(out, url, job_token, timeout_ms);
    if (e) return e;
    char *token = NULL;
    if (k->token_file[0] && read_text(k->token_file, &token)) {
        dt_err_clear();
        token = NULL;
    }
    dt__http_via v = {.ca_pem = k->ca_pem, .cert_pem = k->cert_pem, .key_pem = k->key_pem,
                      .insecure = k->insecure, .token = token ? token : k->token};
    e = dt__http_client_via(*out, &v);
    if (token) {
        memset(token, 0, strlen(token));
        free(token);
    }
    if (e) {
        dt__http_client_free(*out);
        *out = NULL;
    }
    return e;
}

static size_t to_file(char *data, size_t size, size_t nmemb, void *ud) {
    size_t n = fwrite(data, size, nmemb, ud) * size;
    fflush(ud);
    return n;
}

dt_err dt__kube_stream(dt__kube *k, const char *path, FILE *out, long *status) {
    dt_err e = prepare(k, "GET", path, NULL, 0);
    if (e) return e;
    curl_easy_setopt(k->curl, CURLOPT_WRITEFUNCTION, to_file);
    curl_easy_setopt(k->curl, CURLOPT_WRITEDATA, out);
    CURLcode rc = curl_easy_perform(k->curl);
    *status = 0;
    curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, status);
    if (rc != CURLE_OK)
        return dt_err_set(DT_ERR_IO, "GET %s%s: %s", k->server, path,
                          k->errbuf[0] ? k->errbuf : curl_easy_strerror(rc));
    return DT_OK;
}

/*
 * http_client.c - the control plane's HTTP client over libcurl.
 *
 * Design
 *
 * One libcurl easy handle per client: libcurl keeps the connection of the last request
 * open and reuses it for the next one to the same host, so a client that polls the master
 * pays one TCP handshake, not one per request. An easy handle is not thread-safe, hence one
 * client per thread. The options that never change (timeouts, no proxy, no signals, the
 * response sink) are set once in dt__http_client_init; a request sets only its URL, method
 * and body, resetting whatever the previous request set.
 *
 * Responses are collected into one malloc'd buffer that grows geometrically and is handed
 * to the caller NUL-terminated. It is bounded: a response announcing more than
 * DT__HTTP_CLIENT_MAX_RESP bytes is refused before its body is read, and one that sends
 * more without announcing it is cut off at the limit, both as DT_ERR_IO "URL: response
 * larger than 64 MiB".
 *
 * libcurl's own "Expect: 100-continue" on bodies over 1 MiB is kept: the server can then
 * refuse a body that is too large before a byte of it is sent.
 *
 * libcurl's global state is set up once per process with pthread_once (curl_global_init is
 * not thread-safe) and never torn down; libcurl asks for exactly that pattern when the
 * library is used from several threads.
 */
#include "net/http-impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#define DT__HTTP_CLIENT_MAX_RESP ((size_t)64 << 20)
#define DEFAULT_TIMEOUT_MS 30000L

struct dt__http_client {
    CURL *curl;
    char *base_url;                  /* without a trailing '/' */
    struct curl_slist *headers;      /* Authorization */
    struct curl_slist *json_headers; /* the same plus Content-Type: application/json */
    char *url;                       /* base_url + path of the current request */
    size_t url_cap;
    char *buf; /* the response being received */
    size_t len, cap;
    int too_big;
    char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void) {
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

dt_err dt__http_global_init(void) {
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return dt_err_set(DT_ERR_IO, "cannot initialize libcurl: %s",
                          curl_easy_strerror(global_rc));
    return DT_OK;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *userdata) {
    dt__http_client *c = userdata;
    size_t n = size * nmemb;
    if (n > DT__HTTP_CLIENT_MAX_RESP - c->len) {
        c->too_big = 1;
        return 0; /* libcurl aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (c->len + n + 1 > c->cap) {
        size_t want = c->cap ? c->cap : 4096;
        while (want < c->len + n + 1)
            want *= 2;
        char *b = realloc(c->buf, want);
        if (!b) return 0;
        c->buf = b;
        c->cap = want;
    }
    memcpy(c->buf + c->len, data, n);
    c->len += n;
    return n;
}

static int has_ctl(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
    return 0;
}

dt_err dt__http_client_init(dt__http_client **out, const char *base_url, const char *token,
                            long timeout_ms) {
    *out = NULL;
    if (!base_url || (strncmp(base_url, "http://", 7) && strncmp(base_url, "https://", 8)))
        return dt_err_set(DT_ERR_ARG, "bad base URL '%s': expected http://HOST:PORT",
                          base_url ? base_url : "(null)");
    if (has_ctl(base_url))
        return dt_err_set(DT_ERR_ARG, "bad base URL: it holds control characters");
    if (token && (has_ctl(token) || !token[0]))
        return dt_err_set(DT_ERR_ARG, "bad token: empty or holds control characters");
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return dt_err_set(DT_ERR_IO, "cannot initialize libcurl: %s",
                          curl_easy_strerror(global_rc));

    dt_err err = DT_OK;
    char *auth = NULL;
    dt__http_client *c = calloc(1, sizeof *c);
    if (!c) return dt_err_set(DT_ERR_NOMEM, "out of memory creating an HTTP client");
    c->base_url = strdup(base_url);
    if (!c->base_url) goto err_nomem;
    size_t n = strlen(c->base_url);
    while (n > 0 && c->base_url[n - 1] == '/')
        c->base_url[--n] = '\0';
    c->curl = curl_easy_init();
    if (!c->curl) goto err_nomem;

    if (token) {
        size_t an = strlen("Authorization: Bearer ") + strlen(token) + 1;
        if (!(auth = malloc(an))) goto err_nomem;
        snprintf(auth, an, "Authorization: Bearer %s", token);
    }
    struct curl_slist *h = auth ? curl_slist_append(NULL, auth) : NULL;
    if (auth && !h) goto err_nomem;
    c->headers = h;
    struct curl_slist *jh = auth ? curl_slist_append(NULL, auth) : NULL;
    if (auth && !jh) goto err_nomem;
    c->json_headers = jh;
    if (!(jh = curl_slist_append(c->json_headers, "Content-Type: application/json")))
        goto err_nomem;
    c->json_headers = jh;
    free(auth);
    auth = NULL;

    long t = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
    CURL *e = c->curl;
    CURLcode rc = CURLE_OK;
    /* no proxy whatever http_proxy says: the control plane talks to a known address */
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_PROXY, "");
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, t);
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    /* A name is looked up again after 2 s, not libcurl's 60: the master behind a headless
     * Service (as on Kubernetes) gets a new address when its pod is replaced, and a cached
     * old one would keep the replicas from it - their heartbeats failing, their shards
     * re-queued - for up to a minute. Connections are kept alive: lookups stay rare. */
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_DNS_CACHE_TIMEOUT, 2L);
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    if (!rc)
        rc = curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)DT__HTTP_CLIENT_MAX_RESP);
    if (rc) {
        err = dt_err_set(DT_ERR_IO, "%s: cannot configure libcurl: %s", c->base_url,
                         curl_easy_strerror(rc));
        goto err;
    }
    *out = c;
    return DT_OK;

err_nomem:
    err = dt_err_set(DT_ERR_NOMEM, "out of memory creating an HTTP client");
err:
    free(auth);
    dt__http_client_free(c);
    return err;
}

dt_err dt__http_client_connect_timeout(dt__http_client *c, long ms) {
    CURLcode rc = curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, ms);
    if (rc)
        return dt_err_set(DT_ERR_IO, "%s: cannot set the connect timeout: %s", c->base_url,
                          curl_easy_strerror(rc));
    return DT_OK;
}

/* Prepend h to both header lists (so it is sent with and without a body). */
static int add_header(dt__http_client *c, const char *h) {
    struct curl_slist *a = curl_slist_append(NULL, h), *b = curl_slist_append(NULL, h);
    if (!a || !b) {
        curl_slist_free_all(a);
        curl_slist_free_all(b);
        return 0;
    }
    a->next = c->headers;
    c->headers = a;
    b->next = c->json_headers;
    c->json_headers = b;
    return 1;
}

dt_err dt__http_client_via(dt__http_client *c, const dt__http_via *v) {
    CURL *e = c->curl;
    CURLcode rc = CURLE_OK;
    if (v->ca_pem) {
        struct curl_blob b = {.data = (void *)v->ca_pem, .len = strlen(v->ca_pem), .flags = CURL_BLOB_COPY};
        rc = curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &b);
    }
    if (!rc && v->cert_pem) {
        struct curl_blob b = {.data = (void *)v->cert_pem, .len = strlen(v->cert_pem), .flags = CURL_BLOB_COPY};
        rc = curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &b);
    }
    if (!rc && v->key_pem) {
        struct curl_blob b = {.data = (void *)v->key_pem, .len = strlen(v->key_pem), .flags = CURL_BLOB_COPY};
        rc = curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &b);
    }
    if (!rc && v->insecure) rc = curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    if (!rc && v->insecure) rc = curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    if (rc) return dt_err_set(DT_ERR_IO, "%s: cannot configure TLS: %s", c->base_url, curl_easy_strerror(rc));
    /* The job's token moves to X-Dtrain-Auth (a name as long as Authorization, so it is
     * renamed in place), whether or not the gateway takes a bearer token of its own: the
     * gateway never sees it as its Authorization. */
    for (struct curl_slist *l = c->headers; l; l = l->next)
        if (!strncmp(l->data, "Authorization:", 14)) memcpy(l->data, "X-Dtrain-Auth", 13);
    for (struct curl_slist *l = c->json_headers; l; l = l->next)
        if (!strncmp(l->data, "Authorization:", 14)) memcpy(l->data, "X-Dtrain-Auth", 13);
    if (v->token) {
        if (has_ctl(v->token)) return dt_err_set(DT_ERR_ARG, "bad API token: it holds control characters");
        size_t n = strlen(v->token) + 32;
        char *h = malloc(n);
        if (!h) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        snprintf(h, n, "Authorization: Bearer %s", v->token);
        int ok = add_header(c, h);
        memset(h, 0, n);
        free(h);
        if (!ok) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    return DT_OK;
}

void dt__http_client_free(dt__http_client *c) {
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    curl_slist_free_all(c->json_headers);
    free(c->base_url);
    free(c->url);
    free(c->buf);
    free(c);
}

/* Set the URL and method options of one request, resetting those of the last one. */
static CURLcode set_request(dt__http_client *c, const char *method, const char *body,
                            size_t body_len) {
    CURL *e = c->curl;
    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, c->url);
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_HTTPHEADER, body ? c->json_headers : c->headers);
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_NOBODY, 0L);
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_HTTPGET, 1L); /* clears POST and CUSTOMREQUEST */
    if (!rc) rc = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
    if (rc) return rc;
    if (!strcmp(method, "HEAD")) return curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (body || !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH")) {
        /* POSTFIELDS does not copy: the body outlives curl_easy_perform */
        rc = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
        if (!rc) rc = curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? body : "");
        if (rc) return rc;
    }
    if (strcmp(method, "GET") && strcmp(method, "POST"))
        rc = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    return rc;
}

dt_err dt__http_client_request(dt__http_client *c, const char *method, const char *path,
                               const char *body, size_t body_len, long *status, char **resp,
                               size_t *resp_len) {
    if (status) *status = 0;
    if (resp) *resp = NULL;
    if (resp_len) *resp_len = 0;
    if (!method || !method[0] || strspn(method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(method))
        return dt_err_set(DT_ERR_ARG, "%s: bad HTTP method '%s'", c->base_url,
                          method ? method : "(null)");
    if (!path || path[0] != '/' || has_ctl(path))
        return dt_err_set(DT_ERR_ARG, "%s: bad request path '%s': expected /...", c->base_url,
                          path ? path : "(null)");
    size_t un = strlen(c->base_url) + strlen(path) + 1;
    if (un > c->url_cap) {
        char *u = realloc(c->url, un);
        if (!u) return dt_err_set(DT_ERR_NOMEM, "out of memory for a URL");
        c->url = u;
        c->url_cap = un;
    }
    snprintf(c->url, un, "%s%s", c->base_url, path);

    c->len = 0;
    c->too_big = 0;
    c->errbuf[0] = '\0';
    CURLcode rc = set_request(c, method, body, body_len);
    if (!rc) rc = curl_easy_perform(c->curl);
    if (rc != CURLE_OK) {
        if (c->too_big || rc == CURLE_FILESIZE_EXCEEDED)
            return dt_err_set(DT_ERR_IO, "%s: response larger than %zu MiB", c->url,
                              DT__HTTP_CLIENT_MAX_RESP >> 20);
        /* the request did not get an answer: worth retrying (no connection, reset, no
         * answer in time), unlike an answer that says no */
        return dt_err_set(rc == CURLE_OPERATION_TIMEDOUT ? DT_ERR_TIMEOUT : DT_ERR_NETWORK,
                          "%s: %s", c->url, c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc));
    }
    long code = 0;
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &code);
    if (status) *status = code;

    if (!c->buf) {
        c->buf = malloc(1);
        if (!c->buf) return dt_err_set(DT_ERR_NOMEM, "out of memory for a response");
        c->cap = 1;
    }
    c->buf[c->len] = '\0';
    if (resp_len) *resp_len = c->len;
    if (resp) {
        *resp = c->buf; /* handed over; the next request starts a new buffer */
        c->buf = NULL;
        c->cap = 0;
    }
    c->len = 0;
    return DT_OK;
}

const char *dt__http_client_header(dt__http_client *c, const char *name) {
    struct curl_header *h = NULL;
    if (curl_easy_header(c->curl, name, 0, CURLH_HEADER, -1, &h) != CURLHE_OK) return NULL;
    return h->value;
}

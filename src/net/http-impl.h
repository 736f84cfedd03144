/*
 * http-impl.h - the control plane's HTTP/1.1 + JSON server (over libmicrohttpd) and client
 * (over libcurl).
 *
 * Server: one event-loop thread owns it. The server runs in libmicrohttpd's external-epoll
 * mode: the owner adds dt__http_server_fd() to its own epoll set (or polls it) and calls
 * dt__http_server_run() when it is readable or dt__http_server_timeout_ms() has passed.
 * Handlers therefore run on the owner's thread and may touch its state without locks.
 *
 * Routes are a table of {method, pattern, handler} built with designated initializers.
 * Patterns are literal segments and ":name" captures: "/v1/jobs/:job/replicas/:replica/logs".
 * The server answers itself: 404 (no route matches the path), 405 (the path matches with
 * another method), 401 (token missing or wrong, unless the route is .public), 413 (a body
 * longer than max_body), 400 (a body that a route declared .json does not parse as a JSON
 * object) - each with a JSON body {"error": "what is wrong"}. Tokens travel as
 * "Authorization: Bearer TOKEN" and are compared in constant time.
 *
 * Bounds: connections that have not authenticated are capped (the oldest is closed to admit a
 * new one), authenticated ones have their own cap, and a request's headers and body each have
 * a total deadline however slowly they trickle in (dt__http_server_opts; docs/HTTP.md).
 *
 * Client: one libcurl easy handle per dt__http_client, so the connection is kept alive
 * across requests. Not thread-safe; one client per thread.
 */
#ifndef DTRAIN_HTTP_IMPL_H
#define DTRAIN_HTTP_IMPL_H

#include <stddef.h>

#include <jansson.h>

#include "dtrain/err.h"

#define DT__HTTP_MAX_PARAMS 4

typedef struct dt__http_server dt__http_server;

typedef struct dt__http_req {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* without the query string */
    int nparams;        /* captures of the route pattern, in order */
    const char *param_names[DT__HTTP_MAX_PARAMS];
    const char *param_values[DT__HTTP_MAX_PARAMS]; /* URL-decoded */
    const char *body;   /* NUL-terminated (may hold NULs before body_len); "" when none */
    size_t body_len;
    json_t *json;       /* the parsed body when the route is .json; borrowed */
    void *conn;         /* the libmicrohttpd connection, for dt__http_req_query */
} dt__http_req;

/* A capture by name (NULL when the pattern has none of that name). */
const char *dt__http_req_param(const dt__http_req *req, const char *name);
/* A query-string argument (?offset=10), URL-decoded; NULL when absent. */
const char *dt__http_req_query(const dt__http_req *req, const char *name);
/* The whole query string, URL-encoded again, with its '?' ("" when none), into buf (for a
 * proxy: arguments that do not fit are cut). Returns buf. */
const char *dt__http_req_query_string(const dt__http_req *req, char *buf, size_t cap);

typedef struct dt__http_resp {
    int status;               /* default 200 */
    const char *content_type; /* default "application/json" */
    char *body;               /* malloc'd; the server frees it; NULL = empty */
    size_t len;
    /* up to 4 extra headers ("X-Dtrain-Log-Offset", value); names are static strings */
    int nheaders;
    const char *header_names[4];
    char header_values[4][128];
} dt__http_resp;

/* Fill resp with a JSON body: dt__http_resp_json steals a reference to j (decref'd);
 * dt__http_resp_error gives {"error": "..."} with status. Both free a body already in resp
 * (so resp must be zero-initialized or filled by the server) and set content_type to
 * "application/json"; a NULL j or an encoding failure gives a 500 error body.
 * dt__http_resp_header replaces a header of the same name; a fifth name is dropped; control
 * characters in the value become spaces; values are cut at 127 bytes. */
void dt__http_resp_json(dt__http_resp *resp, int status, json_t *j);
void dt__http_resp_error(dt__http_resp *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void dt__http_resp_header(dt__http_resp *resp, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef void (*dt__http_handler)(void *ctx, const dt__http_req *req, dt__http_resp *resp);

typedef struct dt__http_route {
    const char *method;
    const char *pattern;
    dt__http_handler handler;
    int json;   /* the body must be a JSON object (400 otherwise); parsed into req->json */
    int public; /* no token needed */
} dt__http_route;

typedef struct dt__http_server_opts {
    const char *bind_addr; /* default "127.0.0.1" */
    int port;              /* 0: any free port (see dt__http_server_port) */
    const char *token;     /* required on every non-public route; NULL: no check */
    size_t max_body;       /* default 1 MiB */
    const dt__http_route *routes;
    int nroutes;
    void *ctx; /* passed to handlers */
    int idle_timeout_s;  /* a connection idle this long is closed; 0: 60 s */
    /* Bounds (docs/HTTP.md "Limits"; 0 = the default). A connection is authenticated once it
     * sent a request with the valid token on a non-public route (any such request when the
     * server has no token). */
    int max_unauth_connections; /* not yet authenticated; at the cap the oldest is closed to
                                   admit a new one; 0: 128 */
    int max_auth_connections;   /* kept alive once authenticated; past it a request is still
                                   answered, then its connection closed; 0: 256 */
    int max_connections;        /* libmicrohttpd's hard limit, which must leave room for
                                   closed connections not yet reaped; 0: auth + 2 x unauth */
    int header_timeout_ms; /* headers complete within this of the connection's open or the
                              previous response's end (also ends an idle keep-alive); 0: 30 s */
    int body_timeout_ms;   /* the body complete within this of the headers; 0: 60 s */
} dt__http_server_opts;

/* Bind and listen. DT_ERR_IO "cannot listen on ADDR:PORT: reason" on failure. The opts'
 * strings and route table must outlive the server (token is copied). */
dt_err dt__http_server_start(dt__http_server **out, const dt__http_server_opts *opts);
void dt__http_server_free(dt__http_server *s); /* closes every connection; NULL: no-op */
int dt__http_server_port(const dt__http_server *s);
/* An fd that becomes readable when the server has work: poll it, then call run. */
int dt__http_server_fd(const dt__http_server *s);
/* The server's own metrics (docs/METRICS.md): dtrain_http_requests_total{method, route,
 * code} and dtrain_http_request_duration_seconds{method, route} (route "(none)": requests
 * no route took), each with the extra labels given (NULL-terminated name, value pairs). */
struct dt_prom;
void dt__http_server_metrics(dt__http_server *s, struct dt_prom *b, const char *const *labels);
/* Do all work that is ready without blocking (accept, read, call handlers, write). */
dt_err dt__http_server_run(dt__http_server *s);
/* Milliseconds until the server needs dt__http_server_run for its own timers; -1: none. */
int dt__http_server_timeout_ms(const dt__http_server *s);

typedef struct dt__http_client dt__http_client;

/* libcurl's global state, set up once per process (thread-safe): for other users of
 * libcurl in the program (the Kubernetes client). */
dt_err dt__http_global_init(void);
/* base_url "http://127.0.0.1:PORT"; token sent as a Bearer token when not NULL.
 * timeout_ms bounds each request (0: 30 s). */
dt_err dt__http_client_init(dt__http_client **out, const char *base_url, const char *token,
                            long timeout_ms);
void dt__http_client_free(dt__http_client *c);
/* Give up a connection not opened within ms (default: the request's whole timeout), for a
 * caller that retries: an address that answers nothing (a pod gone) is then left quickly
 * and the retry looks the name up again. DT_ERR_IO if libcurl refuses. */
dt_err dt__http_client_connect_timeout(dt__http_client *c, long ms);
/* Reach the server through a gateway, such as the Kubernetes API server's service proxy:
 * TLS trusted by ca_pem (PEM text; NULL: the system's), a client certificate and key, and
 * the gateway's own bearer token, sent as Authorization while the job's token moves to
 * X-Dtrain-Auth (which dtrain's servers take as well). Fields may be NULL. */
typedef struct dt__http_via {
    const char *ca_pem, *cert_pem, *key_pem;
    int insecure;
    const char *token;
} dt__http_via;
dt_err dt__http_client_via(dt__http_client *c, const dt__http_via *v);
/* One request on the kept-alive connection. body may be NULL (no body). On success
 * *status is the HTTP status and *resp (malloc'd, NUL-terminated, caller frees) the body;
 * a transport failure (refused, timed out) is DT_ERR_IO "URL: reason". status, resp and
 * resp_len may each be NULL when not wanted. A response over 64 MiB is DT_ERR_IO "URL:
 * response larger than 64 MiB"; a bad method or a path not starting with '/' DT_ERR_ARG. */
dt_err dt__http_client_request(dt__http_client *c, const char *method, const char *path,
                               const char *body, size_t body_len, long *status, char **resp,
                               size_t *resp_len);
/* A header of the last response ("X-Dtrain-Log-Offset"), any letter case; NULL when absent.
 * Valid until the next request on c. */
const char *dt__http_client_header(dt__http_client *c, const char *name);

#endif

/*
 * http_server.c - the control plane's HTTP/1.1 + JSON server over libmicrohttpd.
 *
 * Design
 *
 * Threading. libmicrohttpd runs in external-epoll mode (MHD_USE_EPOLL without an internal
 * thread): the daemon never starts a thread, and every callback below runs inside
 * dt__http_server_run() on the owner's event-loop thread. No field here is locked; the owner
 * thread is the lock (docs/DESIGN.md, STYLE rule 8).
 *
 * One request = one http_call. libmicrohttpd hands the request target to uri_begin() (its
 * URI-log callback) before it unescapes anything in place; we copy the path there,
 * percent-decode it ourselves and keep the call as the request's context. libmicrohttpd
 * then calls on_access() once when the headers are in, once per chunk of body and once
 * more when the request is complete; request_done() frees the call however the request
 * ended (answered, aborted, timed out, daemon stopped).
 *
 * Deciding before the body. On the first call we route (404/405), check the token (401)
 * and compare Content-Length with max_body (413). A request in error is not stored: its
 * body is read and thrown away, and the error goes out once the request is complete, so
 * the connection stays usable. Only when draining would be costly (Content-Length beyond
 * max_body + DRAIN_MAX, a chunked body that grows beyond max_body + DRAIN_CHUNKED_MAX, or a
 * client that waits for "100 Continue" before sending) is the error answered at once;
 * libmicrohttpd then closes the connection after the response, since the rest of the body
 * was never read (a client still sending a chunked body may see that as a reset).
 *
 * Bounded memory. A body is stored in one buffer that grows geometrically but never past
 * max_body + 1 bytes, whatever Content-Length claims. Request headers are bounded by
 * libmicrohttpd's per-connection pool (MHD_OPTION_CONNECTION_MEMORY_LIMIT, 32 KiB by
 * default), which answers larger ones itself; connections by max_connections; idle or
 * stalled connections are closed after idle_timeout_s.
 *
 * Bounds (docs/HTTP.md "Limits"). Every connection has a conn_slot (libmicrohttpd's socket
 * context, from MHD_OPTION_NOTIFY_CONNECTION) on one of two lists: unauthenticated, oldest
 * first, and authenticated. A connection moves to the second when a request on it passes the
 * token check of a non-public route. At accept (MHD's accept-policy callback), when the
 * unauthenticated list is at max_unauth, its oldest connection is closed, so a flood of idle
 * or slow clients can never lock out a peer that sends its request at once. A request that
 * authenticates while max_auth connections are already authenticated is answered with
 * "Connection: close", so the authenticated set stays bounded too. Each slot carries a total
 * deadline: headers complete within header_ms of the connection's open or of the end of the
 * previous response, the body within body_ms of the headers, however slowly it trickles
 * (libmicrohttpd's CONNECTION_TIMEOUT only closes idle connections); no deadline while a
 * response is being produced or sent. dt__http_server_run sweeps the deadlines and
 * dt__http_server_timeout_ms includes the next one. We close a connection by shutdown() of
 * its socket: libmicrohttpd sees the end of the stream on its next run and tears the
 * connection down itself (freeing its request and our slot through the usual callbacks);
 * until then the slot waits on a third list, counted on neither cap. MHD_OPTION_CONNECTION_LIMIT
 * is set above both caps so that such closing connections never make it refuse a new one.
 *
 * Paths. Routes match segment by segment on the percent-decoded path. A path whose escapes
 * are malformed, or that encodes '/' (%2F) or NUL (%00), is answered 400: decoding such a
 * path would either move segment boundaries or cut the string short, so a capture can
 * never contain '/' and never be truncated.
 *
 * SIGPIPE. libmicrohttpd 0.9.75 sends with sendmsg(..., MSG_NOSIGNAL) on Linux (seen with
 * strace; http_test.c, which leaves SIGPIPE at its default, resets connections while large
 * responses are being written), so a client that goes away cannot kill the process.
 */
#include "net/http-impl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "core/clock-impl.h"
#include "net/token-impl.h"
#include "dtrain/metrics.h"

#define DEFAULT_MAX_BODY ((size_t)1 << 20)
#define DEFAULT_IDLE_TIMEOUT_S 60
/* 128 clients may be connecting at once before the oldest that has not yet sent a valid
 * request is closed: libmicrohttpd accepts ten at a time and reads each new request in the
 * same run, so a real burst of workers is far below it, while a flood holds 128 sockets. */
#define DEFAULT_MAX_UNAUTH 128
/* Authenticated keep-alive connections: one or two per replica and CLI, with room to spare. */
#define DEFAULT_MAX_AUTH 256
/* Request headers are one small write; 30 s is slow even for a congested link, and bounds how
 * long a trickling client or an idle keep-alive connection holds a socket. */
#define DEFAULT_HEADER_TIMEOUT_MS 30000
/* A body is at most max_body (1 MiB by default): 60 s is 17 KiB/s. */
#define DEFAULT_BODY_TIMEOUT_MS 60000
/* How many bytes of a refused body we read and discard to keep the connection usable: a
 * Content-Length body beyond max_body + DRAIN_MAX is answered before it is sent. A chunked
 * body announces no size, and a response queued while it still arrives is lost when the
 * connection closes on the client's unread bytes (a reset): it is drained much further. */
#define DRAIN_MAX ((size_t)1 << 20)
#define DRAIN_CHUNKED_MAX ((size_t)64 << 20)
/* Segments in a path; a longer path matches no route (patterns are checked at start). */
#define MAX_SEGS 32

/* A route pattern split into segments; captures are ":name". */
typedef struct route_seg {
    const char *text; /* NUL-terminated, into compiled_route.pat (without the ':') */
    int capture;
} route_seg;

typedef struct compiled_route {
    const dt__http_route *route;
    char *pat; /* a copy of the pattern with '/' turned into NULs */
    int nsegs;
    route_seg segs[MAX_SEGS];
    int ncaps;
    const char *cap_names[DT__HTTP_MAX_PARAMS];
} compiled_route;

/* What a route has answered: requests by status code, and how long they took from the first
 * byte of the request to the response queued. Owned by the server's thread. */
#define MAX_CODES 12
typedef struct route_stats {
    int ncodes;
    int code[MAX_CODES + 1]; /* [MAX_CODES]: every other code (counted as 0) */
    uint64_t count[MAX_CODES + 1];
    dt_prom_hist latency;
} route_stats;

/* One TCP connection (libmicrohttpd's socket context), on one of the server's lists. */
typedef enum slot_list { LIST_UNAUTH = 0, LIST_AUTH, LIST_CLOSING, NLISTS } slot_list;

typedef struct conn_slot {
    struct conn_slot *prev, *next;
    struct MHD_Connection *conn;
    int fd;
    slot_list list;
    int close_after; /* authenticated past max_auth: "Connection: close" on the answer */
    double deadline; /* monotonic seconds; 0: none (a response is being produced or sent) */
} conn_slot;

typedef struct slot_dll {
    conn_slot *head, *tail; /* head: the oldest */
    int n;
} slot_dll;

struct dt__http_server {
    struct MHD_Daemon *daemon;
    const dt__http_route *routes;
    compiled_route *compiled;
    int nroutes;
    void *ctx;
    char *token; /* NULL: no check */
    size_t token_len;
    size_t max_body;
    int port;
    int epoll_fd;
    char bind_addr[64];
    char last_log[256]; /* the last libmicrohttpd message: why a start failed */
    route_stats *stats; /* nroutes + 1 (the last: requests no route took) */
    slot_dll lists[NLISTS];
    int max_unauth, max_auth;
    double header_s, body_s;
    unsigned reaped; /* connections closed so far (notified) */
};


typedef enum call_state {
    CALL_STATE_NEW = 0,  /* headers not seen yet */
    CALL_STATE_BODY,     /* reading (storing or discarding) the body */
    CALL_STATE_ANSWERED, /* a response is queued */
} call_state;

typedef struct http_call {
    call_state state;
    int bad_path; /* the path's percent-encoding is malformed or encodes '/' or NUL */
    char *path;   /* decoded, without the query string */
    char *segbuf; /* the decoded path with '/' turned into NULs */
    int nsegs;    /* -1: more than MAX_SEGS */
    const char *segs[MAX_SEGS];
    const compiled_route *route;
    const char *caps[DT__HTTP_MAX_PARAMS];
    int refused; /* err holds the answer; the body is discarded */
    dt__http_resp err;
    int expect_continue; /* the client waits for "100 Continue" before sending the body */
    size_t received;     /* body bytes seen, stored or not */
    char *body;
    size_t len, cap;
    double t0; /* monotonic seconds at its first byte */
} http_call;

/* ---- connections: caps and deadlines -------------------------------------------------- */

static void slot_unlink(dt__http_server *s, conn_slot *k) {
    slot_dll *l = &s->lists[k->list];
    if (k->prev) k->prev->next = k->next;
    else l->head = k->next;
    if (k->next) k->next->prev = k->prev;
    else l->tail = k->prev;
    k->prev = k->next = NULL;
    l->n--;
}

static void slot_append(dt__http_server *s, conn_slot *k, slot_list which) {
    slot_dll *l = &s->lists[which];
    k->list = which;
    k->next = NULL;
    k->prev = l->tail;
    if (l->tail) l->tail->next = k;
    else l->head = k;
    l->tail = k;
    l->n++;
}

/* Close a connection: libmicrohttpd reads the end of the stream and tears it down. */
static void slot_close(dt__http_server *s, conn_slot *k) {
    if (k->list == LIST_CLOSING) return;
    shutdown(k->fd, SHUT_RDWR);
    slot_unlink(s, k);
    slot_append(s, k, LIST_CLOSING);
    k->deadline = 0;
}

static conn_slot *slot_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* At accept: make room among the unauthenticated by closing the oldest. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    (void)addr;
    (void)addrlen;
    dt__http_server *s = cls;
    while (s->lists[LIST_UNAUTH].n >= s->max_unauth)
        slot_close(s, s->lists[LIST_UNAUTH].head);
    return MHD_YES;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    dt__http_server *s = cls;
    conn_slot *k = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(k = calloc(1, sizeof *k))) {
            /* out of memory: an untracked connection would escape the caps, so close it */
            if (ci) shutdown(ci->connect_fd, SHUT_RDWR);
            return;
        }
        k->conn = conn;
        k->fd = ci->connect_fd;
        k->deadline = dt__mono_s() + s->header_s;
        slot_append(s, k, LIST_UNAUTH);
        *socket_context = k;
    } else if (k) {
        s->reaped++;
        slot_unlink(s, k);
        free(k);
        *socket_context = NULL;
    }
}

/* A request on the connection passed the token check. */
static void slot_authenticated(dt__http_server *s, conn_slot *k) {
    if (!k || k->list != LIST_UNAUTH) return;
    if (s->lists[LIST_AUTH].n >= s->max_auth) k->close_after = 1;
    slot_unlink(s, k);
    slot_append(s, k, LIST_AUTH);
}

/* Close every connection whose deadline has passed; how many. */
static int sweep(dt__http_server *s) {
    double now = dt__mono_s();
    int closed = 0;
    for (int l = LIST_UNAUTH; l <= LIST_AUTH; l++) {
        conn_slot *next;
        for (conn_slot *k = s->lists[l].head; k; k = next) {
            next = k->next;
            if (k->deadline > 0 && k->deadline <= now) {
                slot_close(s, k);
                closed++;
            }
        }
    }
    return closed;
}

/* ---- responses ---------------------------------------------------------------------- */

static void resp_set_body(dt__http_resp *resp, int status, char *body, size_t len) {
    free(resp->body);
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = body;
    resp->len = body ? len : 0;
}

/* {"error": msg} as a malloc'd string; msg need not be valid UTF-8 (bytes >= 0x80 become
 * '?' when it is not). NULL only when out of memory. */
static char *error_json(const char *msg) {
    json_t *s = json_string(msg);
    if (!s) {
        char *copy = strdup(msg);
        if (!copy) return NULL;
        for (char *p = copy; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
        s = json_string(copy);
        free(copy);
        if (!s) return NULL;
    }
    json_t *o = json_object();
    char *out = NULL;
    if (o && json_object_set_new(o, "error", s) == 0)
        out = json_dumps(o, JSON_COMPACT);
    else
        json_decref(s);
    json_decref(o);
    return out;
}

void dt__http_resp_json(dt__http_resp *resp, int status, json_t *j) {
    char *body = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!body) {
        dt__http_resp_error(resp, 500, "cannot encode the response as JSON (out of memory)");
        return;
    }
    resp_set_body(resp, status, body, strlen(body));
}

void dt__http_resp_error(dt__http_resp *resp, int status, const char *fmt, ...) {
    char small[512];
    char *msg = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof small && (msg = malloc((size_t)n + 1))) {
        va_start(ap, fmt);
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    if (!msg) msg = small; /* out of memory: the truncated message */
    if (n < 0) snprintf(small, sizeof small, "error %d", status);
    char *body = error_json(msg);
    if (msg != small) free(msg);
    resp_set_body(resp, status, body, body ? strlen(body) : 0);
}

void dt__http_resp_header(dt__http_resp *resp, const char *name, const char *fmt, ...) {
    int i;
    for (i = 0; i < resp->nheaders; i++)
        if (!strcasecmp(resp->header_names[i], name)) break;
    if (i == resp->nheaders) {
        if (resp->nheaders >= 4) return; /* documented limit: the fifth header is dropped */
        resp->nheaders++;
    }
    resp->header_names[i] = name;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(resp->header_values[i], sizeof resp->header_values[i], fmt, ap);
    va_end(ap);
    /* no header injection: a CR or LF would end the header early */
    for (char *p = resp->header_values[i]; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\t') *p = ' ';
}

/* Queue resp on conn and give its body to libmicrohttpd (or free it). */
static enum MHD_Result send_resp(struct MHD_Connection *conn, dt__http_resp *resp) {
    struct MHD_Response *r = NULL;
    if (resp->body && resp->len > 0) {
        r = MHD_create_response_from_buffer_with_free_callback(resp->len, resp->body, free);
        if (!r) free(resp->body);
    } else {
        free(resp->body);
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    resp->body = NULL;
    resp->len = 0;
    if (!r) return MHD_NO; /* out of memory: drop the connection */
    enum MHD_Result ok = MHD_YES;
    const char *ct = resp->content_type ? resp->content_type : "application/json";
    if (MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ct) != MHD_YES) ok = MHD_NO;
    for (int i = 0; i < resp->nheaders && i < 4; i++)
        if (resp->header_names[i] &&
            MHD_add_response_header(r, resp->header_names[i], resp->header_values[i]) != MHD_YES)
            ok = MHD_NO;
    conn_slot *k = slot_of(conn);
    if (ok == MHD_YES && k && k->close_after &&
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES)
        ok = MHD_NO;
    if (ok == MHD_YES) ok = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return ok;
}

/* ---- routes -------------------------------------------------------------------------- */

static dt_err compile_route(compiled_route *cr, const dt__http_route *r, int index) {
    if (!r->method || !r->pattern || !r->handler)
        return dt_err_set(DT_ERR_ARG, "route %d: method, pattern and handler are required", index);
    if (r->pattern[0] != '/')
        return dt_err_set(DT_ERR_ARG, "route %d (%s %s): the pattern must start with '/'", index,
                          r->method, r->pattern);
    cr->route = r;
    cr->pat = strdup(r->pattern + 1);
    if (!cr->pat) return dt_err_set(DT_ERR_NOMEM, "out of memory compiling routes");
    char *p = cr->pat;
    for (;;) {
        if (cr->nsegs == MAX_SEGS)
            return dt_err_set(DT_ERR_ARG, "route %d (%s %s): more than %d segments", index,
                              r->method, r->pattern, MAX_SEGS);
        char *slash = strchr(p, '/');
        if (slash) *slash = '\0';
        route_seg *seg = &cr->segs[cr->nsegs++];
        seg->capture = p[0] == ':';
        seg->text = p + seg->capture;
        if (seg->capture) {
            if (!seg->text[0])
                return dt_err_set(DT_ERR_ARG, "route %d (%s %s): a capture without a name", index,
                                  r->method, r->pattern);
            if (cr->ncaps == DT__HTTP_MAX_PARAMS)
                return dt_err_set(DT_ERR_ARG, "route %d (%s %s): more than %d captures", index,
                                  r->method, r->pattern, DT__HTTP_MAX_PARAMS);
            cr->cap_names[cr->ncaps++] = seg->text;
        }
        if (!slash) break;
        p = slash + 1;
    }
    return DT_OK;
}

/* Does the call's path match cr's pattern? Fills caps with the captured segments. */
static int route_match(const compiled_route *cr, const http_call *c, const char **caps) {
    if (cr->nsegs != c->nsegs) return 0;
    int ncaps = 0;
    for (int i = 0; i < cr->nsegs; i++) {
        const route_seg *seg = &cr->segs[i];
        if (seg->capture) {
            if (!c->segs[i][0]) return 0; /* a capture is never empty */
            caps[ncaps++] = c->segs[i];
        } else if (strcmp(seg->text, c->segs[i]) != 0) {
            return 0;
        }
    }
    return 1;
}

/* ---- paths --------------------------------------------------------------------------- */

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Decode n bytes of raw into out (room for n + 1). 0 on success; -1 when an escape is
 * malformed or decodes to '/' or NUL. */
static int path_decode(const char *raw, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (raw[i] != '%') {
            out[o++] = raw[i];
            continue;
        }
        if (i + 2 >= n) return -1;
        int h = hexval((unsigned char)raw[i + 1]), l = hexval((unsigned char)raw[i + 2]);
        if (h < 0 || l < 0) return -1;
        int ch = h * 16 + l;
        if (ch == 0 || ch == '/') return -1;
        out[o++] = (char)ch;
        i += 2;
    }
    out[o] = '\0';
    return 0;
}

/* libmicrohttpd's URI-log callback: the first sight of a request, with its raw target. */
static void *uri_begin(void *cls, const char *uri, struct MHD_Connection *conn) {
    (void)cls;
    (void)conn;
    /* the absolute form "http://host:port/path" (RFC 9112 3.2.2): keep the path */
    if (!strncasecmp(uri, "http://", 7) || !strncasecmp(uri, "https://", 8)) {
        const char *p = strchr(strstr(uri, "//") + 2, '/');
        uri = p ? p : "/";
    }
    size_t n = strcspn(uri, "?");
    http_call *c = calloc(1, sizeof *c + 2 * (n + 1));
    if (!c) return NULL; /* on_access answers by closing the connection */
    c->t0 = dt__mono_s();
    c->path = (char *)(c + 1);
    c->segbuf = c->path + n + 1;
    if (path_decode(uri, n, c->path) != 0) {
        c->bad_path = 1;
        memcpy(c->path, uri, n); /* for the error message */
        c->path[n] = '\0';
        return c;
    }
    size_t dn = strlen(c->path);
    memcpy(c->segbuf, c->path, dn + 1);
    if (c->segbuf[0] != '/') {
        c->nsegs = -1; /* "*" or an absolute URI: no route matches */
        return c;
    }
    char *p = c->segbuf + 1;
    for (;;) {
        if (c->nsegs == MAX_SEGS) {
            c->nsegs = -1;
            break;
        }
        c->segs[c->nsegs++] = p;
        char *slash = strchr(p, '/');
        if (!slash) break;
        *slash = '\0';
        p = slash + 1;
    }
    return c;
}

static void request_done(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
    dt__http_server *s = cls;
    conn_slot *k = slot_of(conn);
    if (k && k->list != LIST_CLOSING && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        k->deadline = dt__mono_s() + s->header_s; /* the next request's headers (keep-alive) */
    http_call *c = *req_cls;
    if (!c) return;
    free(c->err.body);
    free(c->body);
    free(c);
    *req_cls = NULL;
}

/* ---- requests ------------------------------------------------------------------------ */

/* Constant-time comparison of an Authorization header with "Bearer <token>". */
static int token_ok(const dt__http_server *s, const char *auth) {
    if (!auth || strncasecmp(auth, "Bearer", 6) != 0 || (auth[6] != ' ' && auth[6] != '\t'))
        return 0;
    const char *t = auth + 7;
    while (*t == ' ' || *t == '\t')
        t++;
    size_t n = strlen(t);
    while (n > 0 && (t[n - 1] == ' ' || t[n - 1] == '\t'))
        n--;
    return dt__token_eq(t, n, s->token, s->token_len);
}

static void refuse(http_call *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(http_call *c, int status, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->refused = 1;
    dt__http_resp_error(&c->err, status, "%s", msg);
}

/* Parse a Content-Length value; -1 when absent or malformed (libmicrohttpd rejects those). */
static long long content_length(struct MHD_Connection *conn) {
    const char *v =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!v) return -1;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end || n < 0 || errno) return -1;
    return n;
}

/* The headers are in: route, authenticate, size up the body. */
static void begin(dt__http_server *s, http_call *c, struct MHD_Connection *conn,
                  const char *method) {
    c->state = CALL_STATE_BODY;
    conn_slot *k = slot_of(conn);
    if (k && k->list != LIST_CLOSING) k->deadline = dt__mono_s() + s->body_s;
    const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Expect");
    c->expect_continue = expect && !strcasecmp(expect, "100-continue");
    if (c->bad_path) {
        refuse(c, 400, "bad path '%.200s': malformed percent-encoding, or an encoded '/' or NUL",
               c->path);
        return;
    }
    char allowed[256] = "";
    size_t na = 0;
    for (int i = 0; i < s->nroutes && c->nsegs >= 0; i++) {
        const compiled_route *cr = &s->compiled[i];
        const char *caps[DT__HTTP_MAX_PARAMS] = {0};
        if (!route_match(cr, c, caps)) continue;
        if (!strcmp(cr->route->method, method)) {
            c->route = cr;
            memcpy(c->caps, caps, sizeof caps);
            break;
        }
        if (!strstr(allowed, cr->route->method) &&
            na + strlen(cr->route->method) + 3 < sizeof allowed)
            na += (size_t)snprintf(allowed + na, sizeof allowed - na, "%s%s", na ? ", " : "",
                                   cr->route->method);
    }
    if (!c->route) {
        if (na) {
            refuse(c, 405, "method %.20s not allowed on %.200s (allowed: %s)", method, c->path,
                   allowed);
            dt__http_resp_header(&c->err, "Allow", "%s", allowed);
        } else {
            refuse(c, 404, "no route for %.20s %.200s", method, c->path);
        }
        return;
    }
    /* X-Dtrain-Auth: the same, for a client that reaches the master through a
     * gateway whose own Authorization it must send (the Kubernetes API server's proxy). */
    if (s->token && !c->route->route->public &&
        !token_ok(s, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_AUTHORIZATION)) &&
        !token_ok(s, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 "X-Dtrain-Auth"))) {
        refuse(c, 401, "missing or wrong job token: send 'Authorization: Bearer <token>'");
        dt__http_resp_header(&c->err, "WWW-Authenticate", "Bearer");
        return;
    }
    if (!c->route->route->public) slot_authenticated(s, k);
    long long cl = content_length(conn);
    if (cl > 0 && (unsigned long long)cl > s->max_body) {
        refuse(c, 413, "request body of %lld bytes is larger than the limit of %zu bytes", cl,
               s->max_body);
        return;
    }
    if (cl > 0) {
        c->cap = (size_t)cl + 1;
        c->body = malloc(c->cap);
        if (!c->body) {
            c->cap = 0;
            refuse(c, 500, "out of memory for a request body of %lld bytes", cl);
        }
    }
}

/* Store (or, for a refused request, discard) one chunk of body. */
static void absorb(dt__http_server *s, http_call *c, const char *data, size_t n) {
    c->received += n;
    if (c->refused) return;
    if (c->received > s->max_body) {
        refuse(c, 413, "request body is larger than the limit of %zu bytes", s->max_body);
        free(c->body);
        c->body = NULL;
        c->len = c->cap = 0;
        return;
    }
    if (c->len + n + 1 > c->cap) {
        size_t want = c->cap ? c->cap : 4096;
        while (want < c->len + n + 1)
            want *= 2;
        if (want > s->max_body + 1) want = s->max_body + 1;
        char *b = realloc(c->body, want);
        if (!b) {
            refuse(c, 500, "out of memory for a request body of %zu bytes", c->received);
            return;
        }
        c->body = b;
        c->cap = want;
    }
    memcpy(c->body + c->len, data, n);
    c->len += n;
}

/* Answer a refused request now rather than after its body? */
static int answer_early(const dt__http_server *s, const http_call *c, struct MHD_Connection *conn) {
    if (c->expect_continue) return 1;
    long long cl = content_length(conn);
    size_t limit = s->max_body + (cl < 0 ? DRAIN_CHUNKED_MAX : DRAIN_MAX);
    return (cl > 0 && (unsigned long long)cl > limit) || c->received > limit;
}

/* Count the answer under its route and code, then queue it. */
static enum MHD_Result answer(dt__http_server *s, const http_call *c, struct MHD_Connection *conn,
                              dt__http_resp *resp) {
    conn_slot *k = slot_of(conn);
    if (k) k->deadline = 0; /* the request is in; no deadline while the answer goes out */
    if (s->stats) {
        route_stats *st = &s->stats[c->route ? (int)(c->route - s->compiled) : s->nroutes];
        int i = 0;
        while (i < st->ncodes && st->code[i] != resp->status)
            i++;
        if (i == st->ncodes && st->ncodes < MAX_CODES) st->code[st->ncodes++] = resp->status;
        st->count[i]++;
        dt_prom_hist_observe(&st->latency, dt__mono_s() - c->t0);
    }
    return send_resp(conn, resp);
}

void dt__http_server_metrics(dt__http_server *s, dt_prom *b, const char *const *labels) {
    if (!s->stats) return;
    const char *l[16];
    int n = 0;
    for (; labels && labels[n] && n < 10; n++)
        l[n] = labels[n];
    dt_prom_family(b, "dtrain_http_requests_total", "counter",
                   "HTTP requests answered, by route and status code.");
    for (int r = 0; r <= s->nroutes; r++) {
        route_stats *st = &s->stats[r];
        if (!st->latency.count) continue; /* a route never asked: no series yet */
        l[n] = "method";
        l[n + 1] = r < s->nroutes ? s->routes[r].method : "";
        l[n + 2] = "route";
        l[n + 3] = r < s->nroutes ? s->routes[r].pattern : "(none)";
        l[n + 4] = "code";
        l[n + 6] = NULL;
        for (int i = 0; i < st->ncodes; i++) {
            char code[16];
            snprintf(code, sizeof code, "%d", st->code[i]);
            l[n + 5] = code;
            dt_prom_sample(b, "dtrain_http_requests_total", l, (double)st->count[i]);
        }
        if (st->count[MAX_CODES]) { /* codes past the first MAX_CODES distinct ones */
            l[n + 5] = "other";
            dt_prom_sample(b, "dtrain_http_requests_total", l, (double)st->count[MAX_CODES]);
        }
    }
    dt_prom_family(b, "dtrain_http_request_duration_seconds", "histogram",
                   "Time from a request's first byte to its answer, by route.");
    for (int r = 0; r <= s->nroutes; r++) {
        if (!s->stats[r].latency.count) continue;
        l[n] = "method";
        l[n + 1] = r < s->nroutes ? s->routes[r].method : "";
        l[n + 2] = "route";
        l[n + 3] = r < s->nroutes ? s->routes[r].pattern : "(none)";
        l[n + 4] = NULL;
        dt_prom_hist_write(b, "dtrain_http_request_duration_seconds", l, &s->stats[r].latency);
    }
}

/* The request is complete and accepted: parse, call the handler, answer. */
static enum MHD_Result dispatch(dt__http_server *s, http_call *c, struct MHD_Connection *conn,
                                const char *method) {
    const dt__http_route *r = c->route->route;
    dt__http_req req = {
        .method = method,
        .path = c->path,
        .nparams = c->route->ncaps,
        .body = c->body ? c->body : "",
        .body_len = c->len,
        .conn = conn,
    };
    if (c->body) c->body[c->len] = '\0';
    for (int i = 0; i < req.nparams; i++) {
        req.param_names[i] = c->route->cap_names[i];
        req.param_values[i] = c->caps[i];
    }
    dt__http_resp resp = {.status = 200};
    json_t *j = NULL;
    if (r->json) {
        json_error_t jerr;
        if (c->len == 0) {
            dt__http_resp_error(&resp, 400,
                                "%s %.200s: the request body is empty; expected a JSON "
                                "object",
                                method, c->path);
            return answer(s, c, conn, &resp);
        }
        j = json_loadb(req.body, req.body_len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        if (!j) {
            dt__http_resp_error(&resp, 400,
                                "%s %.200s: the request body is not valid JSON: %s at line %d "
                                "column %d",
                                method, c->path, jerr.text, jerr.line, jerr.column);
            return answer(s, c, conn, &resp);
        }
        if (!json_is_object(j)) {
            static const char *const names[] = {
                [JSON_OBJECT] = "an object", [JSON_ARRAY] = "an array", [JSON_STRING] = "a string",
                [JSON_INTEGER] = "a number", [JSON_REAL] = "a number",  [JSON_TRUE] = "true",
                [JSON_FALSE] = "false",      [JSON_NULL] = "null",
            };
            dt__http_resp_error(&resp, 400,
                                "%s %.200s: the request body must be a JSON object, not %s", method,
                                c->path, names[json_typeof(j)]);
            json_decref(j);
            return answer(s, c, conn, &resp);
        }
        req.json = j;
    }
    r->handler(s->ctx, &req, &resp);
    json_decref(j);
    if (resp.status < 100 || resp.status > 599) {
        int bad = resp.status;
        dt__http_resp_error(&resp, 500, "%s %.200s: the handler set an invalid status %d", method,
                            c->path, bad);
    }
    return answer(s, c, conn, &resp);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **req_cls) {
    (void)url;
    (void)version;
    dt__http_server *s = cls;
    http_call *c = *req_cls;
    if (!c) return MHD_NO; /* uri_begin ran out of memory: close */
    switch (c->state) {
    case CALL_STATE_NEW:
        begin(s, c, conn, method);
        if (c->refused && answer_early(s, c, conn)) break;
        return MHD_YES;
    case CALL_STATE_BODY:
        if (*upload_data_size) {
            absorb(s, c, upload_data, *upload_data_size);
            *upload_data_size = 0;
            if (c->refused && answer_early(s, c, conn)) break;
            return MHD_YES;
        }
        if (c->refused) break;
        c->state = CALL_STATE_ANSWERED;
        return dispatch(s, c, conn, method);
    case CALL_STATE_ANSWERED:
        /* libmicrohttpd only calls again with body bytes it could not stop: ignore them */
        *upload_data_size = 0;
        return MHD_YES;
    }
    c->state = CALL_STATE_ANSWERED;
    return answer(s, c, conn, &c->err);
}

/* ---- the daemon ---------------------------------------------------------------------- */

static void on_log(void *cls, const char *fmt, va_list ap) {
    dt__http_server *s = cls;
    vsnprintf(s->last_log, sizeof s->last_log, fmt, ap);
    size_t n = strlen(s->last_log);
    while (n > 0 && (s->last_log[n - 1] == '\n' || s->last_log[n - 1] == '.'))
        s->last_log[--n] = '\0';
}

dt_err dt__http_server_start(dt__http_server **out, const dt__http_server_opts *opts) {
    *out = NULL;
    dt_err err = DT_OK;
    struct addrinfo *ai = NULL;
    const char *addr = opts->bind_addr ? opts->bind_addr : "127.0.0.1";
    if (opts->port < 0 || opts->port > 65535)
        return dt_err_set(DT_ERR_ARG, "cannot listen on %s:%d: port out of range", addr,
                          opts->port);
    if (opts->nroutes < 0 || (opts->nroutes > 0 && !opts->routes))
        return dt_err_set(DT_ERR_ARG, "bad route table (%d routes)", opts->nroutes);
    if (opts->token && !opts->token[0])
        return dt_err_set(DT_ERR_ARG, "empty token: pass NULL to serve without one");
    dt__http_server *s = calloc(1, sizeof *s);
    if (!s) return dt_err_set(DT_ERR_NOMEM, "out of memory starting the HTTP server");
    snprintf(s->bind_addr, sizeof s->bind_addr, "%s", addr);
    s->routes = opts->routes;
    s->nroutes = opts->nroutes;
    s->ctx = opts->ctx;
    s->max_body = opts->max_body ? opts->max_body : DEFAULT_MAX_BODY;
    if (opts->token) {
        s->token = strdup(opts->token);
        s->token_len = strlen(opts->token);
        if (!s->token) goto err_nomem;
    }
    if (s->nroutes > 0) {
        s->compiled = calloc((size_t)s->nroutes, sizeof *s->compiled);
        if (!s->compiled) goto err_nomem;
        for (int i = 0; i < s->nroutes; i++)
            if ((err = compile_route(&s->compiled[i], &s->routes[i], i))) goto err;
    }
    if (!(s->stats = calloc((size_t)s->nroutes + 1, sizeof *s->stats))) goto err_nomem;
    for (int i = 0; i <= s->nroutes; i++)
        dt_prom_hist_init(&s->stats[i].latency, dt_prom_latency_buckets,
                          dt_prom_latency_nbuckets);

    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV};
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", opts->port);
    /* numeric addresses only (no name lookup that could block), and "localhost" */
    int gai = getaddrinfo(strcmp(addr, "localhost") ? addr : "127.0.0.1", portstr, &hints, &ai);
    if (gai != 0) {
        err = dt_err_set(DT_ERR_IO, "cannot listen on %s:%d: %s", addr, opts->port,
                         gai == EAI_NONAME ? "not a numeric IPv4 or IPv6 address"
                                           : gai_strerror(gai));
        goto err;
    }
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->max_unauth = opts->max_unauth_connections > 0 ? opts->max_unauth_connections
                                                     : DEFAULT_MAX_UNAUTH;
    s->max_auth = opts->max_auth_connections > 0 ? opts->max_auth_connections : DEFAULT_MAX_AUTH;
    s->header_s =
        (opts->header_timeout_ms > 0 ? opts->header_timeout_ms : DEFAULT_HEADER_TIMEOUT_MS) / 1e3;
    s->body_s = (opts->body_timeout_ms > 0 ? opts->body_timeout_ms : DEFAULT_BODY_TIMEOUT_MS) / 1e3;
    unsigned max_conns = opts->max_connections > 0
                             ? (unsigned)opts->max_connections
                             : (unsigned)s->max_auth + 2u * (unsigned)s->max_unauth;
    unsigned idle =
        opts->idle_timeout_s > 0 ? (unsigned)opts->idle_timeout_s : DEFAULT_IDLE_TIMEOUT_S;
    s->daemon = MHD_start_daemon(
        flags, 0, on_accept, s, on_access, s, MHD_OPTION_EXTERNAL_LOGGER, on_log, s,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, max_conns,
        MHD_OPTION_CONNECTION_TIMEOUT, idle, MHD_OPTION_URI_LOG_CALLBACK, uri_begin, s,
        MHD_OPTION_NOTIFY_COMPLETED, request_done, s, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, s, MHD_OPTION_END);
    if (!s->daemon) {
        /* libmicrohttpd says "Failed to bind to port 0: Address already in use" (the port
         * it names is the unused argument): keep the reason */
        const char *why = strrchr(s->last_log, ':');
        why = why ? why + 1 : s->last_log;
        while (*why == ' ')
            why++;
        if (!*why) why = "libmicrohttpd could not start";
        err = dt_err_set(DT_ERR_IO, "cannot listen on %s:%d: %s", addr, opts->port, why);
        goto err;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : opts->port;
    info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info || info->epoll_fd < 0) {
        err = dt_err_set(DT_ERR_IO, "cannot listen on %s:%d: libmicrohttpd has no epoll fd", addr,
                         opts->port);
        goto err;
    }
    s->epoll_fd = info->epoll_fd;
    freeaddrinfo(ai);
    *out = s;
    return DT_OK;

err_nomem:
    err = dt_err_set(DT_ERR_NOMEM, "out of memory starting the HTTP server");
err:
    if (ai) freeaddrinfo(ai);
    dt__http_server_free(s);
    return err;
}

void dt__http_server_free(dt__http_server *s) {
    if (!s) return;
    if (s->daemon) MHD_stop_daemon(s->daemon);
    for (int l = 0; l < NLISTS; l++) /* libmicrohttpd notifies every close; in case not */
        while (s->lists[l].head) {
            conn_slot *k = s->lists[l].head;
            slot_unlink(s, k);
            free(k);
        }
    for (int i = 0; s->compiled && i < s->nroutes; i++)
        free(s->compiled[i].pat);
    free(s->compiled);
    for (int i = 0; s->stats && i <= s->nroutes; i++)
        dt_prom_hist_free(&s->stats[i].latency);
    free(s->stats);
    free(s->token);
    free(s);
}

int dt__http_server_port(const dt__http_server *s) {
    return s->port;
}

int dt__http_server_fd(const dt__http_server *s) {
    return s->epoll_fd;
}

dt_err dt__http_server_run(dt__http_server *s) {
    /* Run again when the sweep shut connections down (to reap them) or when connections were
     * reaped: libmicrohttpd at its connection limit stops listening, and it listens again
     * only at the start of its next run, which nothing else would trigger. */
    for (int pass = 0; pass < 4; pass++) {
        unsigned reaped = s->reaped;
        if (MHD_run(s->daemon) != MHD_YES)
            return dt_err_set(DT_ERR_IO, "HTTP server on %s:%d: %s", s->bind_addr, s->port,
                              s->last_log[0] ? s->last_log : "libmicrohttpd's run failed");
        if (!sweep(s) && s->reaped == reaped) break;
    }
    return DT_OK;
}

int dt__http_server_timeout_ms(const dt__http_server *s) {
    MHD_UNSIGNED_LONG_LONG t;
    long long ms = MHD_get_timeout(s->daemon, &t) == MHD_YES ? (t > INT_MAX ? INT_MAX : (long long)t)
                                                             : -1;
    double next = 0;
    for (int l = LIST_UNAUTH; l <= LIST_AUTH; l++)
        for (const conn_slot *k = s->lists[l].head; k; k = k->next)
            if (k->deadline > 0 && (next == 0 || k->deadline < next)) next = k->deadline;
    if (next > 0) {
        double d = ceil((next - dt__mono_s()) * 1e3);
        long long dms = d <= 0 ? 0 : d > INT_MAX ? INT_MAX : (long long)d;
        if (ms < 0 || dms < ms) ms = dms;
    }
    return (int)ms;
}

/* ---- requests: accessors ------------------------------------------------------------- */

const char *dt__http_req_param(const dt__http_req *req, const char *name) {
    for (int i = 0; i < req->nparams && i < DT__HTTP_MAX_PARAMS; i++)
        if (req->param_names[i] && !strcmp(req->param_names[i], name)) return req->param_values[i];
    return NULL;
}

const char *dt__http_req_query(const dt__http_req *req, const char *name) {
    if (!req->conn) return NULL;
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

typedef struct query_buf {
    char *buf;
    size_t cap, len;
} query_buf;

static void query_put(query_buf *q, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    ch == '-' || ch == '_' || ch == '.' || ch == '~';
        if (q->len + 4 >= q->cap) return;
        if (plain) q->buf[q->len++] = (char)ch;
        else {
            q->buf[q->len++] = '%';
            q->buf[q->len++] = hex[ch >> 4];
            q->buf[q->len++] = hex[ch & 15];
        }
    }
    q->buf[q->len] = 0;
}

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value) {
    (void)kind;
    query_buf *q = cls;
    if (q->len + 2 < q->cap) {
        char sep = q->len ? '&' : '?';
        q->buf[q->len++] = sep;
        q->buf[q->len] = 0;
    }
    query_put(q, key);
    if (value && q->len + 2 < q->cap) {
        q->buf[q->len++] = '=';
        q->buf[q->len] = 0;
        query_put(q, value);
    }
    return MHD_YES;
}

const char *dt__http_req_query_string(const dt__http_req *req, char *buf, size_t cap) {
    query_buf q = {buf, cap, 0};
    if (cap) buf[0] = 0;
    if (req->conn && cap > 8)
        MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, query_arg, &q);
    return buf;
}

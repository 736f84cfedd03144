/*
 * http_test.c - the HTTP server and client over real sockets on loopback.
 *
 * Each test starts a server whose event loop (poll on dt__http_server_fd with
 * dt__http_server_timeout_ms, then dt__http_server_run) runs on its own thread until an
 * eventfd tells it to stop, and drives it with the real client from the test thread, or
 * with raw sockets where a client would never send what the test needs (garbage, half
 * requests, resets). SIGPIPE is left at its default on purpose: a write to a reset
 * connection that raised it would kill the test.
 */
#include "net/http-impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <microhttpd.h>

#include "testing/dt_test.h"

#define TOKEN "s3cret-token"
#define MAX_BODY 1024

/* ---- handlers (run on the server's thread) ------------------------------------------- */

static void h_replica(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:i, s:b}", "job", dt__http_req_param(req, "job"), "replica",
                  dt__http_req_param(req, "replica"), "path", req->path, "nparams", req->nparams,
                  "missing", dt__http_req_param(req, "nope") == NULL);
    dt__http_resp_json(resp, 200, j);
}

static void h_delete(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    (void)req;
    resp->status = 204;
}

static json_t *str_or_null(const char *s) {
    return s ? json_string(s) : json_null();
}

static void h_query(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    json_t *j =
        json_pack("{s:o, s:o, s:o}", "offset", str_or_null(dt__http_req_query(req, "offset")), "q",
                  str_or_null(dt__http_req_query(req, "q")), "absent",
                  str_or_null(dt__http_req_query(req, "absent")));
    dt__http_resp_json(resp, 200, j);
}

static void h_create(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    json_t *name = json_object_get(req->json, "name");
    dt__http_resp_json(resp, 201,
                       json_pack("{s:O, s:i}", "name", name ? name : json_null(), "keys",
                                 (json_int_t)json_object_size(req->json)));
}

static void h_raw(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    int sum = 0;
    for (size_t i = 0; i < req->body_len; i++)
        sum += (unsigned char)req->body[i];
    dt__http_resp_json(resp, 200,
                       json_pack("{s:i, s:i, s:b, s:s}", "len", (json_int_t)req->body_len, "sum",
                                 sum, "terminated", req->body[req->body_len] == '\0', "method",
                                 req->method));
}

static void h_health(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    (void)req;
    dt__http_resp_json(resp, 200, json_pack("{s:b}", "ok", 1));
}

static void h_headers(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    (void)req;
    resp->content_type = "text/plain; charset=utf-8";
    resp->body = strdup("hello\n");
    resp->len = 6;
    dt__http_resp_header(resp, "X-Dtrain-Log-Offset", "%d", 42);
    dt__http_resp_header(resp, "X-Two", "two");
}

/* The client's source port: one port for many requests means one kept-alive connection. */
static void h_peer(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr_in *sin = (const struct sockaddr_in *)ci->client_addr;
    dt__http_resp_json(resp, 200, json_pack("{s:i}", "port", ntohs(sin->sin_port)));
}

static void h_big(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    const char *n = dt__http_req_query(req, "n");
    size_t len = n ? strtoull(n, NULL, 10) : 0;
    resp->content_type = "application/octet-stream";
    resp->body = malloc(len ? len : 1);
    if (resp->body) memset(resp->body, 'x', len);
    resp->len = resp->body ? len : 0;
}

static void h_badstatus(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    (void)req;
    resp->status = 42;
}

static const dt__http_route routes[] = {
    {.method = "GET", .pattern = "/v1/jobs/:job/replicas/:replica", .handler = h_replica},
    {.method = "DELETE", .pattern = "/v1/jobs/:job/replicas/:replica", .handler = h_delete},
    {.method = "GET", .pattern = "/v1/query", .handler = h_query},
    {.method = "POST", .pattern = "/v1/jobs", .handler = h_create, .json = 1},
    {.method = "POST", .pattern = "/v1/raw", .handler = h_raw},
    {.method = "PUT", .pattern = "/v1/raw", .handler = h_raw},
    {.method = "GET", .pattern = "/v1/health", .handler = h_health, .public = 1},
    {.method = "GET", .pattern = "/v1/headers", .handler = h_headers},
    {.method = "GET", .pattern = "/v1/peer", .handler = h_peer},
    {.method = "GET", .pattern = "/v1/big", .handler = h_big, .public = 1},
    {.method = "GET", .pattern = "/v1/badstatus", .handler = h_badstatus},
};

/* ---- a server on its own event-loop thread ------------------------------------------- */

typedef struct test_server {
    dt__http_server *s;
    pthread_t thread;
    int stop_fd;
    int port;
    char url[64];
    int failed; /* dt__http_server_run failed on the loop thread */
} test_server;

static void *server_loop(void *arg) {
    test_server *ts = arg;
    struct pollfd p[2] = {{.fd = dt__http_server_fd(ts->s), .events = POLLIN},
                          {.fd = ts->stop_fd, .events = POLLIN}};
    for (;;) {
        int n = poll(p, 2, dt__http_server_timeout_ms(ts->s));
        if (n < 0 && errno != EINTR) break;
        if (p[1].revents) break;
        if (dt__http_server_run(ts->s) != DT_OK) {
            ts->failed = 1;
            break;
        }
    }
    return NULL;
}

/* A server with the test routes and the bounds of o (its routes and port are set here). */
static dt_err server_start_opts(test_server *ts, dt__http_server_opts o) {
    memset(ts, 0, sizeof *ts);
    o.port = 0;
    o.routes = routes;
    o.nroutes = (int)(sizeof routes / sizeof routes[0]);
    dt_err err = dt__http_server_start(&ts->s, &o);
    if (err) return err;
    ts->port = dt__http_server_port(ts->s);
    snprintf(ts->url, sizeof ts->url, "http://127.0.0.1:%d", ts->port);
    ts->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (ts->stop_fd < 0 || pthread_create(&ts->thread, NULL, server_loop, ts) != 0) {
        dt__http_server_free(ts->s);
        return dt_err_set(DT_ERR_IO, "cannot start the server thread");
    }
    return DT_OK;
}

static dt_err server_start(test_server *ts, size_t max_body, const char *token,
                           int idle_timeout_s) {
    return server_start_opts(ts, (dt__http_server_opts){.token = token,
                                                        .max_body = max_body,
                                                        .idle_timeout_s = idle_timeout_s});
}

static void server_stop(test_server *ts) {
    uint64_t one = 1;
    if (write(ts->stop_fd, &one, sizeof one) != sizeof one) perror("eventfd write");
    pthread_join(ts->thread, NULL);
    close(ts->stop_fd);
    dt__http_server_free(ts->s);
    ts->s = NULL;
}

/* One request; the body parsed as JSON (NULL when it is not JSON). */
static json_t *call(dt__http_client *c, const char *method, const char *path, const char *body,
                    long *status) {
    char *resp = NULL;
    size_t len = 0;
    *status = -1;
    if (dt__http_client_request(c, method, path, body, body ? strlen(body) : 0, status, &resp,
                                &len) != DT_OK) {
        fprintf(stderr, "request %s %s: %s\n", method, path, dt_errmsg());
        return NULL;
    }
    json_t *j = json_loadb(resp, len, 0, NULL);
    free(resp);
    return j;
}

static const char *jstr(json_t *j, const char *key) {
    return json_string_value(json_object_get(j, key));
}

/* ---- raw sockets --------------------------------------------------------------------- */

static int raw_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send all of buf; a peer that closed early is not an error here (MSG_NOSIGNAL). */
static void raw_send(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        len -= (size_t)w;
    }
}

/* Read until the peer closes (or cap bytes); returns the bytes read, NUL-terminated. */
static size_t raw_read_all(int fd, char *buf, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return n;
}

/* Read one response with a Content-Length body (no more); returns its length or 0. */
static size_t raw_read_response(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (;;) {
        buf[n] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            const char *cl = strcasestr(buf, "Content-Length:");
            size_t want = (size_t)(end + 4 - buf) + (cl ? strtoull(cl + 15, NULL, 10) : 0);
            if (n >= want) return n;
        }
        if (n + 1 >= cap) return 0;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        n += (size_t)r;
    }
}

/* Wait (20 s at most) until the server closes fd: end of stream or a reset, whatever it sent
 * before. 1 when it did. */
static int raw_wait_closed(int fd) {
    char buf[512];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, 20000);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return 1;
    }
}

/* Send text and then one byte of fill every 20 ms, never completing, until the server closes
 * the connection (1) or 20 s have passed (0). */
static int raw_trickle_until_closed(int fd, const char *text, char fill) {
    raw_send(fd, text, strlen(text));
    for (int i = 0; i < 1000; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, 20);
        if (n < 0 && errno != EINTR) return 0;
        if (n > 0) {
            char buf[512];
            ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return 1;
        }
        if (send(fd, &fill, 1, MSG_NOSIGNAL) < 0 && errno != EINTR && errno != EAGAIN) return 1;
    }
    return 0;
}

/* ---- tests --------------------------------------------------------------------------- */

static void test_routes_and_captures(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/jobs/mnist/replicas/worker-0", NULL, &st);
    DT_CHECK(st == 200 && j);
    DT_CHECK(!strcmp(jstr(j, "job"), "mnist"));
    DT_CHECK(!strcmp(jstr(j, "replica"), "worker-0"));
    DT_CHECK(!strcmp(jstr(j, "path"), "/v1/jobs/mnist/replicas/worker-0"));
    DT_CHECK(json_integer_value(json_object_get(j, "nparams")) == 2);
    DT_CHECK(json_is_true(json_object_get(j, "missing")));
    json_decref(j);

    /* captures are URL-decoded; '+' is literal in a path */
    j = call(c, "GET", "/v1/jobs/a%20b+c/replicas/%C3%A9t%c3%a9", NULL, &st);
    DT_CHECK(st == 200 && j);
    DT_CHECK(!strcmp(jstr(j, "job"), "a b+c"));
    DT_CHECK(!strcmp(jstr(j, "replica"), "\xc3\xa9t\xc3\xa9"));
    json_decref(j);
    /* so are literal segments */
    j = call(c, "GET", "/v1/%6aobs/x/replicas/y", NULL, &st);
    DT_CHECK(st == 200 && j && !strcmp(jstr(j, "job"), "x"));
    json_decref(j);

    /* an encoded '/' or NUL, or a malformed escape, never reaches a handler */
    const char *bad[] = {"/v1/jobs/a%2Fb/replicas/x", "/v1/jobs/a%2fb/replicas/x",
                         "/v1/jobs/a%00/replicas/x", "/v1/jobs/a%zz/replicas/x",
                         "/v1/jobs/a/replicas/x%4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = call(c, "GET", bad[i], NULL, &st);
        DT_CHECK(st == 400 && j);
        DT_CHECK(strstr(jstr(j, "error"), "bad path"));
        json_decref(j);
    }
    /* captures are whole, non-empty segments */
    const char *nomatch[] = {"/v1/jobs//replicas/x", "/v1/jobs/a/replicas/x/", "/v1/jobs/a/b",
                             "/v1/jobs/a/replicas/x/y", "/v1/jobs/a/replicas"};
    for (size_t i = 0; i < sizeof nomatch / sizeof nomatch[0]; i++) {
        j = call(c, "GET", nomatch[i], NULL, &st);
        DT_CHECK(st == 404 && j);
        json_decref(j);
    }

    /* the absolute form of a request target */
    int fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    const char abs_req[] = "GET http://127.0.0.1/v1/jobs/abs/replicas/r?x=1 HTTP/1.1\r\nHost: x\r\n"
                           "Authorization: Bearer " TOKEN "\r\nConnection: close\r\n\r\n";
    raw_send(fd, abs_req, sizeof abs_req - 1);
    char buf[4096];
    raw_read_all(fd, buf, sizeof buf);
    close(fd);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "\"job\":\"abs\""));

    /* DELETE on the same pattern; an empty 204 */
    char *resp = NULL;
    size_t len = 99;
    DT_CHECK_OK(
        dt__http_client_request(c, "DELETE", "/v1/jobs/a/replicas/b", NULL, 0, &st, &resp, &len));
    DT_CHECK(st == 204 && len == 0 && resp && resp[0] == '\0');
    free(resp);
    dt__http_client_free(c);
    server_stop(&ts);
}

static void test_query_args(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/query?offset=10&q=a%20b%26c", NULL, &st);
    DT_CHECK(st == 200 && j);
    DT_CHECK(!strcmp(jstr(j, "offset"), "10"));
    DT_CHECK(!strcmp(jstr(j, "q"), "a b&c"));
    DT_CHECK(json_is_null(json_object_get(j, "absent")));
    json_decref(j);
    /* libmicrohttpd's decoding of arguments: '+' is a space */
    j = call(c, "GET", "/v1/query?q=a+b%2Bc&offset", NULL, &st);
    DT_CHECK(st == 200 && j && !strcmp(jstr(j, "q"), "a b+c"));
    json_decref(j);
    j = call(c, "GET", "/v1/query", NULL, &st);
    DT_CHECK(st == 200 && j && json_is_null(json_object_get(j, "offset")));
    json_decref(j);
    dt__http_client_free(c);
    server_stop(&ts);
}

static void test_json_bodies(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "POST", "/v1/jobs", "{\"name\": \"mnist\", \"replicas\": 2}", &st);
    DT_CHECK(st == 201 && j);
    DT_CHECK(!strcmp(jstr(j, "name"), "mnist"));
    DT_CHECK(json_integer_value(json_object_get(j, "keys")) == 2);
    json_decref(j);

    struct {
        const char *body, *want;
    } bad[] = {
        {"{\"name\": ", "not valid JSON"},
        {"{\"name\": \"x\"} trailing", "not valid JSON"},
        {"[1, 2, 3]", "must be a JSON object, not an array"},
        {"\"mnist\"", "must be a JSON object, not a string"},
        {"{\"a\": 1, \"a\": 2}", "duplicate"},
        {"\xff\xfe{}", "not valid JSON"},
        {"", "the request body is empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = call(c, "POST", "/v1/jobs", bad[i].body, &st);
        DT_CHECK(st == 400 && j);
        const char *e = jstr(j, "error");
        if (!e || !strstr(e, bad[i].want) || !strstr(e, "POST /v1/jobs"))
            DT_FAIL("body '%s': error '%s' lacks '%s'", bad[i].body, e ? e : "(none)", bad[i].want);
        json_decref(j);
    }
    /* no body at all */
    j = call(c, "POST", "/v1/jobs", NULL, &st);
    DT_CHECK(st == 400 && j && strstr(jstr(j, "error"), "empty"));
    json_decref(j);

    /* a body with NUL bytes reaches a raw route whole, NUL-terminated after body_len */
    char bin[300];
    int sum = 0;
    for (size_t i = 0; i < sizeof bin; i++) {
        bin[i] = (char)(i % 7 == 0 ? 0 : i);
        sum += (unsigned char)bin[i];
    }
    char *resp;
    size_t len;
    DT_CHECK_OK(dt__http_client_request(c, "PUT", "/v1/raw", bin, sizeof bin, &st, &resp, &len));
    j = json_loadb(resp, len, 0, NULL);
    free(resp);
    DT_CHECK(st == 200 && j);
    DT_CHECK(json_integer_value(json_object_get(j, "len")) == (json_int_t)sizeof bin);
    DT_CHECK(json_integer_value(json_object_get(j, "sum")) == sum);
    DT_CHECK(json_is_true(json_object_get(j, "terminated")));
    DT_CHECK(!strcmp(jstr(j, "method"), "PUT"));
    json_decref(j);
    dt__http_client_free(c);
    server_stop(&ts);
}

/* Deep nesting, long strings, a body right at a 1 MiB limit: a 400 or a 200, no crash. */
static void test_json_limits(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, 1 << 20, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    size_t n = 1 << 20;
    char *body = malloc(n + 1);
    DT_CHECK(body);
    memset(body, '[', n);
    body[n] = '\0';
    long st;
    json_t *j = call(c, "POST", "/v1/jobs", body, &st);
    DT_CHECK(st == 400 && j && strstr(jstr(j, "error"), "not valid JSON"));
    json_decref(j);
    memset(body, '{', n);
    j = call(c, "POST", "/v1/jobs", body, &st);
    DT_CHECK(st == 400 && j);
    json_decref(j);
    /* {"name": "xxx...x"} of exactly 1 MiB */
    memset(body, 'x', n);
    memcpy(body, "{\"name\": \"", 10);
    memcpy(body + n - 2, "\"}", 2);
    j = call(c, "POST", "/v1/jobs", body, &st);
    DT_CHECK(st == 201 && j && strlen(jstr(j, "name")) == n - 12);
    json_decref(j);
    free(body);
    dt__http_client_free(c);
    server_stop(&ts);
}

static void test_auth(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *none, *wrong, *longer, *good;
    DT_CHECK_OK(dt__http_client_init(&none, ts.url, NULL, 0));
    DT_CHECK_OK(dt__http_client_init(&wrong, ts.url, "s3cret-tokem", 0));
    DT_CHECK_OK(dt__http_client_init(&longer, ts.url, TOKEN "x", 0));
    DT_CHECK_OK(dt__http_client_init(&good, ts.url, TOKEN, 0));
    dt__http_client *refused[] = {none, wrong, longer};
    long st;
    for (int i = 0; i < 3; i++) {
        json_t *j = call(refused[i], "GET", "/v1/jobs/a/replicas/b", NULL, &st);
        DT_CHECK(st == 401 && j);
        DT_CHECK(!strcmp(jstr(j, "error"), "missing or wrong job token: send 'Authorization: "
                                           "Bearer <token>'"));
        DT_CHECK(dt__http_client_header(refused[i], "WWW-Authenticate"));
        json_decref(j);
        /* a refused request with a body: the body is drained, the connection kept */
        j = call(refused[i], "POST", "/v1/jobs", "{\"name\": \"x\"}", &st);
        DT_CHECK(st == 401 && j);
        json_decref(j);
        /* public routes need no token */
        j = call(refused[i], "GET", "/v1/health", NULL, &st);
        DT_CHECK(st == 200 && j && json_is_true(json_object_get(j, "ok")));
        json_decref(j);
    }
    json_t *j = call(good, "GET", "/v1/jobs/a/replicas/b", NULL, &st);
    DT_CHECK(st == 200 && j);
    json_decref(j);

    /* other schemes, spacing and letter case, by hand */
    struct {
        const char *auth;
        int ok;
    } cases[] = {
        {"Authorization: Bearer " TOKEN, 1},
        {"authorization: bearer  " TOKEN, 1},
        {"Authorization: Basic " TOKEN, 0},
        {"Authorization: Bearer", 0},
        {"Authorization: Bearer ", 0},
        {"Authorization: Bearer" TOKEN, 0},
        {"Authorization: " TOKEN, 0},
        {"Authorization: Bearer s3cret", 0},
        {"Authorization: Bearer " TOKEN TOKEN, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = raw_connect(ts.port);
        DT_CHECK(fd >= 0);
        char req[512], buf[4096];
        int n = snprintf(req, sizeof req,
                         "GET /v1/peer HTTP/1.1\r\nHost: x\r\n%s\r\nConnection: close\r\n\r\n",
                         cases[i].auth);
        raw_send(fd, req, (size_t)n);
        raw_read_all(fd, buf, sizeof buf);
        close(fd);
        const char *want = cases[i].ok ? "HTTP/1.1 200" : "HTTP/1.1 401";
        if (strncmp(buf, want, strlen(want)))
            DT_FAIL("'%s': got '%.40s', want '%s'", cases[i].auth, buf, want);
    }
    dt__http_client_free(none);
    dt__http_client_free(wrong);
    dt__http_client_free(longer);
    dt__http_client_free(good);
    server_stop(&ts);
}

static void test_not_found_and_method(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/x", NULL, &st);
    DT_CHECK(st == 404 && j);
    DT_CHECK(!strcmp(jstr(j, "error"), "no route for GET /v1/x"));
    DT_CHECK(dt__http_client_header(c, "Content-Type") &&
             !strcmp(dt__http_client_header(c, "Content-Type"), "application/json"));
    json_decref(j);
    /* a 404 even without a token: routing comes first */
    dt__http_client *anon;
    DT_CHECK_OK(dt__http_client_init(&anon, ts.url, NULL, 0));
    j = call(anon, "POST", "/nothing/here", "{}", &st);
    DT_CHECK(st == 404 && j && !strcmp(jstr(j, "error"), "no route for POST /nothing/here"));
    json_decref(j);
    dt__http_client_free(anon);

    j = call(c, "POST", "/v1/jobs/a/replicas/b", "{}", &st);
    DT_CHECK(st == 405 && j);
    DT_CHECK(strstr(jstr(j, "error"), "method POST not allowed on /v1/jobs/a/replicas/b"));
    const char *allow = dt__http_client_header(c, "Allow");
    DT_CHECK(allow && !strcmp(allow, "GET, DELETE"));
    json_decref(j);
    j = call(c, "PATCH", "/v1/health", NULL, &st);
    DT_CHECK(st == 405 && j);
    json_decref(j);
    /* methods are case-sensitive; unknown ones are 405 on a known path */
    int fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    const char req[] = "get /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    raw_send(fd, req, sizeof req - 1);
    char buf[4096];
    raw_read_all(fd, buf, sizeof buf);
    close(fd);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 405", 12));

    /* a handler that sets an impossible status */
    j = call(c, "GET", "/v1/badstatus", NULL, &st);
    DT_CHECK(st == 500 && j && strstr(jstr(j, "error"), "invalid status 42"));
    json_decref(j);
    dt__http_client_free(c);
    server_stop(&ts);
}

static void test_body_limit(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    char *body = malloc(4 << 20);
    DT_CHECK(body);
    memset(body, 'a', 4 << 20);
    long st;
    char *resp;
    size_t len;
    /* exactly max_body is fine */
    DT_CHECK_OK(dt__http_client_request(c, "POST", "/v1/raw", body, MAX_BODY, &st, &resp, &len));
    DT_CHECK(st == 200 && strstr(resp, "\"len\":1024"));
    free(resp);
    /* one byte more is 413, answered after the body is drained (connection kept) ... */
    DT_CHECK_OK(
        dt__http_client_request(c, "POST", "/v1/raw", body, MAX_BODY + 1, &st, &resp, &len));
    DT_CHECK(st == 413 && strstr(resp, "larger than the limit of 1024 bytes"));
    free(resp);
    /* ... and a body of 4 MiB is refused before it is sent (curl waits for 100 Continue) */
    DT_CHECK_OK(dt__http_client_request(c, "POST", "/v1/raw", body, 4 << 20, &st, &resp, &len));
    DT_CHECK(st == 413 && strstr(resp, "4194304 bytes is larger than the limit of 1024 bytes"));
    free(resp);
    /* the client recovers */
    DT_CHECK_OK(dt__http_client_request(c, "POST", "/v1/raw", body, 10, &st, &resp, &len));
    DT_CHECK(st == 200 && strstr(resp, "\"len\":10"));
    free(resp);
    free(body);

    /* a chunked body has no Content-Length: the limit is applied as it arrives */
    int fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    const char head[] = "POST /v1/raw HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                        "\r\nTransfer-Encoding: chunked\r\n\r\n";
    raw_send(fd, head, sizeof head - 1);
    char chunk[600];
    memset(chunk, 'b', sizeof chunk);
    for (int i = 0; i < 4; i++) {
        raw_send(fd, "258\r\n", 5); /* 0x258 = 600 */
        raw_send(fd, chunk, sizeof chunk);
        raw_send(fd, "\r\n", 2);
    }
    raw_send(fd, "0\r\n\r\n", 5);
    char buf[8192];
    DT_CHECK(raw_read_response(fd, buf, sizeof buf) > 0);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 413", 12));
    DT_CHECK(strstr(buf, "{\"error\":\"request body is larger than the limit of 1024 bytes\"}"));
    /* same connection, next request */
    const char next[] = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n";
    raw_send(fd, next, sizeof next - 1);
    DT_CHECK(raw_read_response(fd, buf, sizeof buf) > 0);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 200", 12));
    close(fd);

    /* a chunked body well beyond the limit (more than a Content-Length body is drained):
     * still read to its end and answered 413, not a reset connection, which stays usable */
    fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    raw_send(fd, head, sizeof head - 1);
    static char big[64 * 1024];
    memset(big, 'c', sizeof big);
    for (int i = 0; i < 24; i++) { /* 1.5 MiB: beyond max_body + 1 MiB */
        raw_send(fd, "10000\r\n", 7);
        raw_send(fd, big, sizeof big);
        raw_send(fd, "\r\n", 2);
    }
    raw_send(fd, "0\r\n\r\n", 5);
    memset(buf, 0, sizeof buf);
    DT_CHECK(raw_read_response(fd, buf, sizeof buf) > 0);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 413", 12));
    DT_CHECK(strstr(buf, "{\"error\":\"request body is larger than the limit of 1024 bytes\"}"));
    raw_send(fd, next, sizeof next - 1);
    DT_CHECK(raw_read_response(fd, buf, sizeof buf) > 0);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 200", 12));
    close(fd);

    /* a chunked body within the limit */
    fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    raw_send(fd, head, sizeof head - 1);
    raw_send(fd, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 26);
    DT_CHECK(raw_read_response(fd, buf, sizeof buf) > 0);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "\"len\":11"));
    close(fd);

    /* a claimed Content-Length far beyond the limit is answered at once and the
     * connection closed, without waiting for (or reading) the body */
    fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    const char huge[] = "POST /v1/raw HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                        "\r\nContent-Length: 100000000000\r\n\r\nabc";
    raw_send(fd, huge, sizeof huge - 1);
    raw_read_all(fd, buf, sizeof buf);
    close(fd);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 413", 12));
    DT_CHECK(strstr(buf, "100000000000 bytes is larger than the limit"));

    dt__http_client_free(c);
    server_stop(&ts);
}

static void test_response_headers(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    char *resp;
    size_t len;
    DT_CHECK_OK(dt__http_client_request(c, "GET", "/v1/headers", NULL, 0, &st, &resp, &len));
    DT_CHECK(st == 200 && len == 6 && !strcmp(resp, "hello\n"));
    free(resp);
    const char *v = dt__http_client_header(c, "x-dtrain-log-offset");
    DT_CHECK(v && !strcmp(v, "42"));
    v = dt__http_client_header(c, "X-Two");
    DT_CHECK(v && !strcmp(v, "two"));
    v = dt__http_client_header(c, "Content-Type");
    DT_CHECK(v && !strcmp(v, "text/plain; charset=utf-8"));
    DT_CHECK(dt__http_client_header(c, "X-Absent") == NULL);

    /* the same on the wire */
    int fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    const char req[] = "GET /v1/headers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                       "\r\nConnection: close\r\n\r\n";
    raw_send(fd, req, sizeof req - 1);
    char buf[4096];
    raw_read_all(fd, buf, sizeof buf);
    close(fd);
    DT_CHECK(strstr(buf, "\r\nX-Dtrain-Log-Offset: 42\r\n"));
    DT_CHECK(strstr(buf, "\r\nContent-Type: text/plain; charset=utf-8\r\n"));
    DT_CHECK(strstr(buf, "\r\n\r\nhello\n"));
    dt__http_client_free(c);
    server_stop(&ts);
}

static void test_keep_alive(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c, *other;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    DT_CHECK_OK(dt__http_client_init(&other, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/peer", NULL, &st);
    DT_CHECK(st == 200 && j);
    json_int_t port = json_integer_value(json_object_get(j, "port"));
    json_decref(j);
    for (int i = 0; i < 500; i++) {
        const char *path = i % 3 == 0 ? "/v1/peer" : i % 3 == 1 ? "/v1/x" : "/v1/jobs";
        j = call(c, i % 3 == 2 ? "POST" : "GET", path, i % 3 == 2 ? "{\"name\":\"n\"}" : NULL, &st);
        DT_CHECK(j);
        if (i % 3 == 0 && json_integer_value(json_object_get(j, "port")) != port)
            DT_FAIL("request %d came on a new connection", i);
        DT_CHECK(st == (i % 3 == 0 ? 200 : i % 3 == 1 ? 404 : 201));
        json_decref(j);
    }
    j = call(other, "GET", "/v1/peer", NULL, &st);
    DT_CHECK(st == 200 && j && json_integer_value(json_object_get(j, "port")) != port);
    json_decref(j);
    dt__http_client_free(c);
    dt__http_client_free(other);
    server_stop(&ts);
}

typedef struct worker_arg {
    const char *url;
    int ok;
} worker_arg;

static void *worker(void *arg) {
    worker_arg *w = arg;
    dt__http_client *c;
    if (dt__http_client_init(&c, w->url, TOKEN, 0) != DT_OK) return NULL;
    for (int i = 0; i < 200; i++) {
        long st;
        char path[64];
        snprintf(path, sizeof path, "/v1/jobs/j%d/replicas/r%d", i, i);
        json_t *j = call(c, "GET", path, NULL, &st);
        char want[16];
        snprintf(want, sizeof want, "j%d", i);
        if (st == 200 && j && jstr(j, "job") && !strcmp(jstr(j, "job"), want)) w->ok++;
        json_decref(j);
    }
    dt__http_client_free(c);
    return NULL;
}

static void test_concurrent_clients(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    pthread_t th[4];
    worker_arg w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_arg){.url = ts.url};
        DT_CHECK(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        DT_CHECK(w[i].ok == 200);
    server_stop(&ts);
}

static void test_garbage_and_half_requests(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    char buf[8192];
    /* complete garbage: the server answers (libmicrohttpd's 400), closes, or waits for
     * more (then we give up after 2 s) */
#define JUNK(lit)                                                                                  \
    { lit, sizeof lit - 1 }
    static const struct {
        const char *s;
        size_t n;
    } junk[] = {
        JUNK("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"), /* TLS hello */
        JUNK("\x00\x01\x02\xff\xfe\r\n\r\n"),
        JUNK("GET\r\n\r\n"),
        JUNK("GET / HTTP/9.9\r\nHost: x\r\n\r\n"),
        JUNK("GET /v1/health HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n"),
        JUNK("GET /v1/he\x00alth HTTP/1.1\r\nHost: x\r\n\r\n"),
        JUNK("POST /v1/raw HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"),
        JUNK("POST /v1/raw HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"),
        JUNK("POST /v1/raw HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n"),
    };
#undef JUNK
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        /* send and close at once (the server may be mid-answer) ... */
        int fd = raw_connect(ts.port);
        DT_CHECK(fd >= 0);
        raw_send(fd, junk[i].s, junk[i].n);
        close(fd);
        /* ... send, half-close our side and read whatever comes back */
        fd = raw_connect(ts.port);
        DT_CHECK(fd >= 0);
        struct timeval tv = {.tv_sec = 2};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        raw_send(fd, junk[i].s, junk[i].n);
        shutdown(fd, SHUT_WR);
        raw_read_all(fd, buf, sizeof buf);
        close(fd);
    }
    /* half requests, then the client goes away (libmicrohttpd 0.9.75 may only notice at the
     * idle timeout, see test_idle_timeout) */
    const char *half[] = {
        "GET /v1/health HTTP/1.1\r\nHost: x\r\n",                             /* no blank line */
        "POST /v1/raw HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc", /* half body */
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
        "\r\nContent-Length: 5\r\n\r\n{\"a\":", /* bad JSON, complete */
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
        "\r\nContent-Length: 50\r\n\r\n{\"a\":", /* half JSON */
        "GET /v1/heal",
    };
    for (size_t i = 0; i < sizeof half / sizeof half[0]; i++) {
        int fd = raw_connect(ts.port);
        DT_CHECK(fd >= 0);
        raw_send(fd, half[i], strlen(half[i]));
        close(fd);
        fd = raw_connect(ts.port);
        DT_CHECK(fd >= 0);
        raw_send(fd, half[i], strlen(half[i]));
        shutdown(fd, SHUT_WR);
        close(fd);
    }
    /* a header section far beyond the per-connection memory limit */
    size_t big = 256 << 10;
    char *huge = malloc(big + 128);
    DT_CHECK(huge);
    int n = snprintf(huge, 128, "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(huge + n, 'a', big);
    memcpy(huge + n + big, "\r\n\r\n", 4);
    int fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    raw_send(fd, huge, (size_t)n + big + 4);
    raw_read_all(fd, buf, sizeof buf);
    close(fd);
    free(huge);
    DT_CHECK(!strncmp(buf, "HTTP/1.1 431", 12)); /* from libmicrohttpd */

    /* the server still answers */
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/jobs/a/replicas/b", NULL, &st);
    DT_CHECK(st == 200 && j);
    json_decref(j);
    dt__http_client_free(c);
    DT_CHECK(!ts.failed);
    server_stop(&ts);
}

/* A client that resets its connection while a large response is being written: the
 * server's send fails with ECONNRESET/EPIPE and must not raise SIGPIPE. */
static void test_reset_mid_response(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    for (int i = 0; i < 5; i++) {
        int fd = raw_connect(ts.port);
        DT_CHECK(fd >= 0);
        int small = 4096;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        const char req[] = "GET /v1/big?n=16000000 HTTP/1.1\r\nHost: x\r\n\r\n"
                           "GET /v1/big?n=16000000 HTTP/1.1\r\nHost: x\r\n\r\n";
        raw_send(fd, req, sizeof req - 1);
        char buf[1024];
        DT_CHECK(recv(fd, buf, sizeof buf, 0) > 0); /* the answer has started */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd); /* RST */
    }
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/health", NULL, &st);
    DT_CHECK(st == 200 && j);
    json_decref(j);
    dt__http_client_free(c);
    server_stop(&ts);
}

static void test_client_response_limit(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    char *resp = (char *)1;
    size_t len;
    char path[64];
    snprintf(path, sizeof path, "/v1/big?n=%zu", ((size_t)64 << 20) + 1);
    char url[256];
    snprintf(url, sizeof url, "%s%s: response larger than 64 MiB", ts.url, path);
    DT_CHECK_ERR(dt__http_client_request(c, "GET", path, NULL, 0, &st, &resp, &len), DT_ERR_IO,
                 url);
    DT_CHECK(resp == NULL);
    /* exactly 1 MiB is fine, on the same client */
    DT_CHECK_OK(dt__http_client_request(c, "GET", "/v1/big?n=1048576", NULL, 0, &st, &resp, &len));
    DT_CHECK(st == 200 && len == 1048576 && resp[0] == 'x' && resp[len] == '\0');
    free(resp);
    /* status, resp and resp_len are optional */
    DT_CHECK_OK(dt__http_client_request(c, "GET", "/v1/health", NULL, 0, NULL, NULL, NULL));
    dt__http_client_free(c);
    server_stop(&ts);
}

/* A free port: bind to port 0, read it back, close. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static void test_client_errors(void) {
    int port = free_port();
    DT_CHECK(port > 0);
    char base[64], want[128];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, base, TOKEN, 2000));
    long st = 7;
    char *resp = (char *)1;
    snprintf(want, sizeof want, "http://127.0.0.1:%d/v1/health: ", port);
    DT_CHECK_ERR(dt__http_client_request(c, "GET", "/v1/health", NULL, 0, &st, &resp, NULL),
                 DT_ERR_NETWORK, want); /* nobody listens: worth retrying */
    DT_CHECK(resp == NULL && st == 0);
    DT_CHECK_ERR(dt__http_client_request(c, "get", "/v1/health", NULL, 0, &st, &resp, NULL),
                 DT_ERR_ARG, "bad HTTP method 'get'");
    DT_CHECK_ERR(dt__http_client_request(c, "GET", "v1/health", NULL, 0, &st, &resp, NULL),
                 DT_ERR_ARG, "bad request path 'v1/health'");
    DT_CHECK_ERR(dt__http_client_request(c, "GET", "/v1/a\r\nX: y", NULL, 0, &st, &resp, NULL),
                 DT_ERR_ARG, "bad request path");
    dt__http_client_free(c);
    dt__http_client_free(NULL);

    DT_CHECK_ERR(dt__http_client_init(&c, "ftp://x", NULL, 0), DT_ERR_ARG,
                 "bad base URL 'ftp://x'");
    DT_CHECK(c == NULL);
    DT_CHECK_ERR(dt__http_client_init(&c, base, "tok\r\nX-Evil: 1", 0), DT_ERR_ARG, "bad token");

    /* a server that accepts but never answers: the request times out */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    DT_CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 4) == 0 &&
             getsockname(lfd, (struct sockaddr *)&a, &al) == 0);
    snprintf(base, sizeof base, "http://127.0.0.1:%d", ntohs(a.sin_port));
    DT_CHECK_OK(dt__http_client_init(&c, base, NULL, 300));
    DT_CHECK_ERR(dt__http_client_request(c, "GET", "/slow", NULL, 0, &st, &resp, NULL),
                 DT_ERR_TIMEOUT, "/slow: ");
    DT_CHECK(strstr(dt_errmsg(), "imeout") || strstr(dt_errmsg(), "timed out"));
    dt__http_client_free(c);
    close(lfd);
}

static void test_server_start_errors(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_server *s = (dt__http_server *)1;
    char want[64];
    snprintf(want, sizeof want, "cannot listen on 127.0.0.1:%d: ", ts.port);
    dt__http_server_opts o = {.port = ts.port, .routes = routes, .nroutes = 1};
    DT_CHECK_ERR(dt__http_server_start(&s, &o), DT_ERR_IO, want);
    DT_CHECK(s == NULL && !strstr(dt_errmsg(), "port 0"));
    server_stop(&ts);

    o = (dt__http_server_opts){.bind_addr = "127.0.0.300", .routes = routes, .nroutes = 1};
    DT_CHECK_ERR(dt__http_server_start(&s, &o), DT_ERR_IO,
                 "cannot listen on 127.0.0.300:0: not a numeric IPv4 or IPv6 address");
    o = (dt__http_server_opts){.port = 70000, .routes = routes, .nroutes = 1};
    DT_CHECK_ERR(dt__http_server_start(&s, &o), DT_ERR_ARG, "port out of range");
    o = (dt__http_server_opts){.token = "", .routes = routes, .nroutes = 1};
    DT_CHECK_ERR(dt__http_server_start(&s, &o), DT_ERR_ARG, "empty token");

    static const dt__http_route bad_routes[][1] = {
        {{.method = "GET", .pattern = "v1/x", .handler = h_health}},
        {{.method = "GET", .pattern = "/v1/:", .handler = h_health}},
        {{.method = "GET", .pattern = "/:a/:b/:c/:d/:e", .handler = h_health}},
        {{.method = "GET", .pattern = "/v1/x"}},
    };
    const char *msgs[] = {"must start with '/'", "a capture without a name", "more than 4 captures",
                          "handler are required"};
    for (int i = 0; i < 4; i++) {
        o = (dt__http_server_opts){.routes = bad_routes[i], .nroutes = 1};
        DT_CHECK_ERR(dt__http_server_start(&s, &o), DT_ERR_ARG, msgs[i]);
        DT_CHECK(strstr(dt_errmsg(), "route 0"));
    }
    dt__http_server_free(NULL);

    /* "localhost" and an IPv6 loopback */
    o = (dt__http_server_opts){.bind_addr = "localhost", .routes = routes, .nroutes = 1};
    DT_CHECK_OK(dt__http_server_start(&s, &o));
    DT_CHECK(dt__http_server_port(s) > 0);
    dt__http_server_free(s);
    o = (dt__http_server_opts){.bind_addr = "::1", .routes = routes, .nroutes = 1};
    if (dt__http_server_start(&s, &o) == DT_OK) dt__http_server_free(s); /* IPv6 may be off */
}

/* A connection that stalls mid-request is closed after idle_timeout_s. */
static void test_idle_timeout(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 1));
    int fd = raw_connect(ts.port); /* SO_RCVTIMEO of 20 s: far beyond the 1 s timeout */
    DT_CHECK(fd >= 0);
    const char half[] = "POST /v1/raw HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc";
    raw_send(fd, half, sizeof half - 1);
    char buf[256];
    ssize_t r;
    while ((r = recv(fd, buf, sizeof buf, 0)) < 0 && errno == EINTR) {
    }
    close(fd);
    if (r != 0) DT_FAIL("the server did not close a stalled connection (recv: %zd)", r);
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/health", NULL, &st);
    DT_CHECK(st == 200 && j);
    json_decref(j);
    dt__http_client_free(c);
    server_stop(&ts);
}

/* Unauthenticated connections are capped: idle ones fill the cap, then a client with the
 * token still gets its answer, the oldest idle one is closed to admit it, the others stay. */
static void test_unauth_cap(void) {
    test_server ts;
    DT_CHECK_OK(server_start_opts(&ts, (dt__http_server_opts){.token = TOKEN,
                                                               .max_unauth_connections = 4,
                                                               .header_timeout_ms = 120000}));
    int idle[4];
    for (int i = 0; i < 4; i++)
        DT_CHECK((idle[i] = raw_connect(ts.port)) >= 0);
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/jobs/a/replicas/b", NULL, &st);
    DT_CHECK(st == 200 && j && !strcmp(jstr(j, "job"), "a"));
    json_decref(j);
    if (!raw_wait_closed(idle[0])) DT_FAIL("the oldest unauthenticated connection stayed open");
    /* the newer idle ones were kept: one of them is answered */
    const char req[] = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n";
    raw_send(idle[3], req, sizeof req - 1);
    char buf[2048];
    DT_CHECK(raw_read_response(idle[3], buf, sizeof buf) > 0 && !strncmp(buf, "HTTP/1.1 200", 12));
    for (int i = 0; i < 4; i++)
        close(idle[i]);
    dt__http_client_free(c);
    server_stop(&ts);
}

/* An authenticated keep-alive connection is not evicted by a flood of new unauthenticated
 * ones; one authenticated past max_auth is answered, then closed. */
static void test_auth_survives_flood(void) {
    test_server ts;
    DT_CHECK_OK(server_start_opts(&ts, (dt__http_server_opts){.token = TOKEN,
                                                               .max_unauth_connections = 4,
                                                               .max_auth_connections = 1,
                                                               .header_timeout_ms = 120000}));
    const char req[] = "GET /v1/jobs/a/replicas/b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                       "\r\n\r\n";
    char buf[2048];
    int a = raw_connect(ts.port);
    DT_CHECK(a >= 0);
    raw_send(a, req, sizeof req - 1);
    DT_CHECK(raw_read_response(a, buf, sizeof buf) > 0 && !strncmp(buf, "HTTP/1.1 200", 12));
    DT_CHECK(!strcasestr(buf, "Connection: close"));
    int flood[12];
    for (int i = 0; i < 12; i++)
        DT_CHECK((flood[i] = raw_connect(ts.port)) >= 0);
    /* every flood connection but the newest 4 is closed: the last of them once all are in */
    if (!raw_wait_closed(flood[7])) DT_FAIL("the flood was not bounded");
    raw_send(a, req, sizeof req - 1);
    DT_CHECK(raw_read_response(a, buf, sizeof buf) > 0 && !strncmp(buf, "HTTP/1.1 200", 12));
    /* a second authenticated connection (max_auth is 1): answered, then closed */
    int b = raw_connect(ts.port);
    DT_CHECK(b >= 0);
    raw_send(b, req, sizeof req - 1);
    DT_CHECK(raw_read_response(b, buf, sizeof buf) > 0 && !strncmp(buf, "HTTP/1.1 200", 12));
    DT_CHECK(strcasestr(buf, "Connection: close"));
    DT_CHECK(raw_wait_closed(b));
    raw_send(a, req, sizeof req - 1); /* the first is still kept */
    DT_CHECK(raw_read_response(a, buf, sizeof buf) > 0 && !strncmp(buf, "HTTP/1.1 200", 12));
    close(a);
    close(b);
    for (int i = 0; i < 12; i++)
        close(flood[i]);
    server_stop(&ts);
}

/* Headers and body have total deadlines: a client that trickles a byte every 20 ms (never
 * idle) is closed, and the server keeps answering. */
static void test_trickle_deadlines(void) {
    test_server ts;
    DT_CHECK_OK(server_start_opts(&ts, (dt__http_server_opts){.token = TOKEN,
                                                               .max_body = MAX_BODY,
                                                               .header_timeout_ms = 300,
                                                               .body_timeout_ms = 300}));
    int fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    if (!raw_trickle_until_closed(fd, "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ", 'a'))
        DT_FAIL("a client trickling its headers was not closed");
    close(fd);
    fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    if (!raw_trickle_until_closed(fd,
                                  "POST /v1/raw HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                                  "\r\nContent-Length: 1000\r\n\r\n",
                                  'b'))
        DT_FAIL("a client trickling its body was not closed");
    close(fd);
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/health", NULL, &st);
    DT_CHECK(st == 200 && j);
    json_decref(j);
    dt__http_client_free(c);
    server_stop(&ts);
}

/* Closing a server with connections open (idle, mid-request) frees every request. */
static void test_free_with_open_connections(void) {
    test_server ts;
    DT_CHECK_OK(server_start(&ts, MAX_BODY, TOKEN, 0));
    dt__http_client *c;
    DT_CHECK_OK(dt__http_client_init(&c, ts.url, TOKEN, 0));
    long st;
    json_t *j = call(c, "GET", "/v1/health", NULL, &st); /* leaves an idle kept-alive conn */
    DT_CHECK(st == 200);
    json_decref(j);
    int fd = raw_connect(ts.port);
    DT_CHECK(fd >= 0);
    const char half[] = "POST /v1/raw HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " TOKEN
                        "\r\nContent-Length: 500\r\n\r\nabcdef";
    raw_send(fd, half, sizeof half - 1);
    /* wait until the server has the request in hand: a full request on another socket */
    j = call(c, "GET", "/v1/health", NULL, &st);
    json_decref(j);
    server_stop(&ts);
    close(fd);
    dt__http_client_free(c);
}

static void test_resp_helpers(void) {
    dt__http_resp r = {0};
    dt__http_resp_error(&r, 409, "job %s exists: \xff\xfe", "mnist");
    DT_CHECK(r.status == 409 && r.body && !strcmp(r.content_type, "application/json"));
    json_t *j = json_loadb(r.body, r.len, 0, NULL);
    DT_CHECK(j && !strcmp(jstr(j, "error"), "job mnist exists: ??"));
    json_decref(j);
    /* a long message is kept whole */
    char longmsg[3000];
    memset(longmsg, 'm', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = '\0';
    dt__http_resp_error(&r, 400, "%s", longmsg); /* replaces (frees) the last body */
    j = json_loadb(r.body, r.len, 0, NULL);
    DT_CHECK(j && strlen(jstr(j, "error")) == sizeof longmsg - 1);
    json_decref(j);
    dt__http_resp_json(&r, 200, json_pack("[i, i]", 1, 2));
    DT_CHECK(r.status == 200 && r.len == 5 && !memcmp(r.body, "[1,2]", 5));
    dt__http_resp_json(&r, 200, NULL);
    DT_CHECK(r.status == 500 && strstr(r.body, "cannot encode"));
    free(r.body);

    dt__http_resp h = {0};
    dt__http_resp_header(&h, "X-A", "a\r\nSet-Cookie: evil");
    DT_CHECK(h.nheaders == 1 && !strchr(h.header_values[0], '\r') &&
             !strchr(h.header_values[0], '\n'));
    dt__http_resp_header(&h, "x-a", "%d", 2); /* the same name replaces */
    DT_CHECK(h.nheaders == 1 && !strcmp(h.header_values[0], "2"));
    dt__http_resp_header(&h, "X-B", "b");
    dt__http_resp_header(&h, "X-C", "c");
    dt__http_resp_header(&h, "X-D", "d");
    dt__http_resp_header(&h, "X-E", "e"); /* a fifth is dropped */
    DT_CHECK(h.nheaders == 4);

    dt__http_req req = {.nparams = 1, .param_names = {"job"}, .param_values = {"x"}};
    DT_CHECK(!strcmp(dt__http_req_param(&req, "job"), "x"));
    DT_CHECK(dt__http_req_param(&req, "replica") == NULL);
    DT_CHECK(dt__http_req_query(&req, "offset") == NULL); /* no connection */
}

DT_TEST_MAIN(DT_T(test_routes_and_captures), DT_T(test_query_args), DT_T(test_json_bodies),
             DT_T(test_json_limits), DT_T(test_auth), DT_T(test_not_found_and_method),
             DT_T(test_body_limit), DT_T(test_response_headers), DT_T(test_keep_alive),
             DT_T(test_concurrent_clients), DT_T(test_garbage_and_half_requests),
             DT_T(test_reset_mid_response), DT_T(test_client_response_limit),
             DT_T(test_client_errors), DT_T(test_server_start_errors), DT_T(test_idle_timeout),
             DT_T(test_unauth_cap), DT_T(test_auth_survives_flood),
             DT_T(test_trickle_deadlines), DT_T(test_free_with_open_connections),
             DT_T(test_resp_helpers))

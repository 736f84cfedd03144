/*
 * fuzz-http-impl.h - what the harnesses of HTTP routes share (fuzz_master_routes.c,
 * fuzz_server_routes.c): an input's requests sent to a real dt__http_server, each on a
 * connection of its own, the harness running the server (dt__http_server_run, as its
 * owner's event loop does) until the answer is in and the server has closed.
 *
 * Requests: "METHOD TARGET\n" then the body, separated by lines "%%" (at most 16 an input).
 * A first line starting with '!' is sent without the token. Bytes of the first line outside
 * '!'..'~' become '_', but the first space (the request line stays HTTP; the method and the
 * target are the fuzzer's). A 500 answer aborts (a finding: the routes answer 500 only when
 * memory runs out). With DT_FUZZ_TRACE set, each request's status is printed (to write
 * seeds).
 */
#ifndef DTRAIN_FUZZ_HTTP_IMPL_H
#define DTRAIN_FUZZ_HTTP_IMPL_H

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "fuzz-impl.h"
#include "net/http-impl.h"

static char dt__fuzz_http_body[160]; /* the last answer's body's start, for DT_FUZZ_TRACE */

/* One request on a connection of its own; the answer's status. */
static int dt__fuzz_http_request(dt__http_server *server, const char *head, size_t head_len, const uint8_t *body, size_t body_len) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)dt__http_server_port(server)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS)) {
        perror("fuzz: connect");
        abort();
    }
    size_t off = 0, total = head_len + body_len;
    int shut = 0, status = 0;
    char first[1024]; /* the answer's start: its status (and, traced, its body's start) */
    size_t nfirst = 0;
    for (;;) {
        while (off < total) {
            const void *p = off < head_len ? (const void *)(head + off) : body + (off - head_len);
            size_t n = off < head_len ? head_len - off : total - off;
            ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                off += (size_t)w;
            } else {
                if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTCONN)) break;
                off = total; /* the server closed early (it refused): the rest is not sent */
            }
        }
        if (off == total && !shut) {
            shutdown(fd, SHUT_WR);
            shut = 1;
        }
        struct pollfd p[2] = {{.fd = dt__http_server_fd(server), .events = POLLIN},
                              {.fd = fd, .events = POLLIN}};
        int t = dt__http_server_timeout_ms(server);
        poll(p, 2, t < 0 || t > 50 ? 50 : t);
        dt__http_server_run(server);
        char buf[4096];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
            size_t k = (size_t)n < sizeof first - nfirst ? (size_t)n : sizeof first - nfirst;
            memcpy(first + nfirst, buf, k); /* k == 0 once first is full */
            nfirst += k;
        }
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
    }
    close(fd);
    if (nfirst >= 12 && !memcmp(first, "HTTP/1.", 7)) status = atoi(first + 9);
    first[nfirst < sizeof first ? nfirst : sizeof first - 1] = 0;
    char *b = strstr(first, "\r\n\r\n");
    snprintf(dt__fuzz_http_body, sizeof dt__fuzz_http_body, "%s", b ? b + 4 : "");
    return status;
}

/* Every request of data[0..size) to server, with token. */
static void dt__fuzz_http_requests(dt__http_server *server, const char *token, const uint8_t *data,
                                   size_t size) {
    const uint8_t *p = data, *end = data + size;
    for (int k = 0; p < end && k < 16; k++) {
        const uint8_t *rec_end = end;
        for (const uint8_t *q = p; q + 3 <= end; q++)
            if ((q == p || q[-1] == '\n') && !memcmp(q, "%%\n", 3)) {
                rec_end = q;
                break;
            }
        const uint8_t *nl = memchr(p, '\n', (size_t)(rec_end - p));
        const uint8_t *line_end = nl ? nl : rec_end, *body = nl ? nl + 1 : rec_end;
        size_t body_len = (size_t)(rec_end - body);
        if (body_len && body[body_len - 1] == '\n') body_len--; /* the separator's line */
        int auth = !(line_end > p && *p == '!');
        char line[1024];
        size_t n = 0;
        for (const uint8_t *q = p + !auth; q < line_end && n < 512; q++)
            line[n++] = *q >= '!' && *q <= '~' ? (char)*q : (*q == ' ' ? ' ' : '_');
        line[n] = 0;
        char *sp = strchr(line, ' ');
        if (sp && sp != line && sp[1] == '/') {
            *sp = 0;
            for (char *c = sp + 1; *c; c++)
                if (*c == ' ') *c = '_'; /* one request line: METHOD TARGET HTTP/1.1 */
            char head[1400];
            int hn = snprintf(head, sizeof head,
                              "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                              "%s%s%sContent-Length: %zu\r\n\r\n",
                              line, sp + 1, auth ? "Authorization: Bearer " : "",
                              auth ? token : "", auth ? "\r\n" : "", body_len);
            int status = dt__fuzz_http_request(server, head, (size_t)hn, body, body_len);
            if (getenv("DT_FUZZ_TRACE"))
                fprintf(stderr, "%d %s %s\n  %s\n", status, line, sp + 1, dt__fuzz_http_body);
            if (status == 500) {
                fprintf(stderr, "fuzz: %s %s answered 500\n", line, sp + 1);
                abort();
            }
        }
        p = rec_end + (rec_end < end ? 3 : 0);
    }
}

#endif

/*
 * sock.c - TCP socket setup shared by the data plane (net/sock-impl.h).
 *
 * Design: plain POSIX sockets, close-on-exec from the start (a replica's children must not
 * inherit them). A connect with a timeout is a non-blocking connect and a poll for the rest
 * of the time, then the socket goes back to blocking for callers that read and write
 * straight-line. Reads and writes with a deadline poll before each call while a deadline
 * is set, so a peer trickling one byte at a time cannot stretch them past it: the deadline
 * is a total, not an idle, timeout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/clock-impl.h"
#include "net/sock-impl.h"

void dt__sock_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void dt__sock_buffers(int fd) {
    int bytes = DT__SOCK_BUF_BYTES;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

int dt__sock_nonblock(int fd, int on) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -1;
    int want = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
    return want == fl ? 0 : fcntl(fd, F_SETFL, want);
}

int dt__sock_self_connected(int fd) {
    struct sockaddr_storage a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
        getpeername(fd, (struct sockaddr *)&b, &lb) != 0)
        return 0;
    if (la != lb || memcmp(&a, &b, la) != 0) return 0;
    errno = ECONNREFUSED;
    return 1;
}

void dt__sock_addr_text(const struct sockaddr_storage *sa, char *out, size_t cap) {
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        snprintf(out, cap, "%s:%d", host, ntohs(a->sin_port));
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        snprintf(out, cap, "[%s]:%d", host, ntohs(a->sin6_port));
    } else {
        snprintf(out, cap, "an unknown address");
    }
}

/* ---- listening ---- */

dt_err dt__sock_listen(const char *host, int port, int backlog, int *fd, int *bound_port) {
    *fd = -1;
    if (port < 0 || port > 65535)
        return dt_err_set(DT_ERR_ARG, "listen port %d is out of range", port);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const char *h = host && *host ? host : NULL;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int rc = getaddrinfo(h, ps, &hints, &ai);
    if (rc != 0)
        return dt_err_set(DT_ERR_ARG, "cannot resolve listen address %s:%s: %s", h ? h : "*", ps,
                          gai_strerror(rc));
    dt_err err = DT_OK;
    int s = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        s = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) continue;
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        dt__sock_buffers(s);
        if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, backlog) == 0) break;
        err = dt_err_set(DT_ERR_NETWORK, "cannot listen on %s:%s: %s", h ? h : "*", ps,
                         strerror(errno));
        close(s);
        s = -1;
    }
    freeaddrinfo(ai);
    if (s < 0) return err ? err : dt_err_set(DT_ERR_NETWORK, "no usable listen address");
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getsockname(s, (struct sockaddr *)&sa, &sl) != 0) {
        err = dt_err_set(DT_ERR_NETWORK, "getsockname: %s", strerror(errno));
        close(s);
        return err;
    }
    if (bound_port)
        *bound_port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                               : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    *fd = s;
    return DT_OK;
}

/* ---- connecting ---- */

/* One address: 0 connected (blocking again), else -1 with errno (ETIMEDOUT at the deadline). */
static int connect_one(const struct addrinfo *a, int64_t deadline, int *out) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    dt__sock_nodelay(fd);
    dt__sock_buffers(fd); /* before connect: the window scale is fixed at the handshake */
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS && errno != EINTR) goto fail;
    while (rc != 0) {
        int wait = -1;
        if (deadline >= 0) {
            int64_t left = deadline - dt__now_ms();
            if (left <= 0) {
                errno = ETIMEDOUT;
                goto fail;
            }
            wait = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int k = poll(&pf, 1, wait);
        if (k < 0 && errno != EINTR) goto fail;
        if (k <= 0) continue;
        int e = 0;
        socklen_t el = sizeof e;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0) goto fail;
        if (e == EINPROGRESS || e == EALREADY) continue;
        if (e) {
            errno = e;
            goto fail;
        }
        rc = 0;
    }
    if (dt__sock_self_connected(fd) || dt__sock_nonblock(fd, 0) != 0) goto fail;
    *out = fd;
    return 0;
fail:;
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

dt_err dt__sock_connect(const char *host, int port, int timeout_ms, int *fd) {
    *fd = -1;
    if (port <= 0 || port > 65535) return dt_err_set(DT_ERR_ARG, "port %d is out of range", port);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int64_t deadline = timeout_ms > 0 ? dt__now_ms() + timeout_ms : -1;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc != 0) {
        errno = 0;
        /* a name may appear later (a pod's DNS record once the pod exists) */
        return dt_err_set(DT_ERR_NETWORK, "cannot resolve: %s", gai_strerror(rc));
    }
    int saved = 0;
    for (struct addrinfo *a = ai; a && *fd < 0; a = a->ai_next)
        if (connect_one(a, deadline, fd) != 0) saved = errno;
    freeaddrinfo(ai);
    if (*fd >= 0) return DT_OK;
    errno = saved;
    if (saved == ETIMEDOUT && deadline >= 0)
        return dt_err_set(DT_ERR_TIMEOUT, "cannot connect: no answer within %d ms", timeout_ms);
    return dt_err_set(DT_ERR_NETWORK, "cannot connect: %s", strerror(saved));
}

/* ---- every byte, before a deadline ---- */

/* Wait until fd is ready for `events` or the deadline: 0 ready, -1 with errno ETIMEDOUT. */
static int wait_ready(int fd, short events, int64_t deadline) {
    for (;;) {
        int wait = -1;
        if (deadline >= 0) {
            int64_t left = deadline - dt__now_ms();
            if (left <= 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            wait = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd pf = {.fd = fd, .events = events};
        int k = poll(&pf, 1, wait);
        if (k > 0) return 0;
        if (k < 0 && errno != EINTR) return -1;
    }
}

dt_err dt__sock_read_full(int fd, void *buf, size_t n, int64_t deadline_ms, size_t *got) {
    uint8_t *p = buf;
    size_t done = 0;
    dt_err err = DT_OK;
    while (done < n) {
        if (deadline_ms >= 0 && wait_ready(fd, POLLIN, deadline_ms) != 0) {
            err = errno == ETIMEDOUT
                      ? dt_err_set(DT_ERR_TIMEOUT, "%zu of %zu bytes came before the deadline",
                                   done, n)
                      : dt_err_set(DT_ERR_NETWORK, "poll: %s", strerror(errno));
            break;
        }
        ssize_t k = recv(fd, p + done, n - done, deadline_ms >= 0 ? MSG_DONTWAIT : 0);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (deadline_ms >= 0) continue; /* woken for nothing: poll again */
            int saved = errno;
            err = dt_err_set(DT_ERR_TIMEOUT, "no data (%zu of %zu bytes came)", done, n);
            errno = saved;
            break;
        }
        if (k == 0) {
            errno = 0;
            err = dt_err_set(DT_ERR_NETWORK,
                             "the peer closed the connection after %zu of %zu bytes", done, n);
            errno = 0;
        } else {
            int saved = errno;
            err = dt_err_set(DT_ERR_NETWORK, "%s after %zu of %zu bytes", strerror(errno), done, n);
            errno = saved;
        }
        break;
    }
    if (got) *got = done;
    return err;
}

dt_err dt__sock_writev_all(int fd, struct iovec *iov, int n, int64_t deadline_ms) {
    while (n > 0) {
        if (iov->iov_len == 0) { /* skip empty entries */
            iov++;
            n--;
            continue;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)(n < IOV_MAX ? n : IOV_MAX)};
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL | (deadline_ms >= 0 ? MSG_DONTWAIT : 0));
        if (k < 0) {
            if (errno == EINTR) continue;
            int saved = errno;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) && deadline_ms >= 0) {
                if (wait_ready(fd, POLLOUT, deadline_ms) == 0) continue;
                saved = errno;
            }
            dt_err e = saved == EAGAIN || saved == EWOULDBLOCK || saved == ETIMEDOUT
                           ? dt_err_set(DT_ERR_TIMEOUT, "sending: the peer does not read")
                           : dt_err_set(DT_ERR_NETWORK, "sending: %s", strerror(saved));
            errno = saved;
            return e;
        }
        size_t left = (size_t)k;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0 && left) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return DT_OK;
}

const char *dt__hostport_why(int status) {
    return status == DT__HOSTPORT_PORT_NAN     ? ": port is not a number"
           : status == DT__HOSTPORT_PORT_RANGE ? ": port is out of range"
                                               : " is not host:port";
}

int dt__hostport_split(const char *addr, char *host, size_t cap, int *port) {
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon || colon == addr || !colon[1]) return DT__HOSTPORT_FORM;
    long pn = 0;
    for (const char *c = colon + 1; *c; c++) {
        if (*c < '0' || *c > '9') return DT__HOSTPORT_PORT_NAN;
        if (pn <= 65535) pn = pn * 10 + (*c - '0');
    }
    if (pn < 1 || pn > 65535) return DT__HOSTPORT_PORT_RANGE;
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') h++, hl -= 2; /* [::1]:port */
    if (hl == 0 || hl >= cap) return DT__HOSTPORT_FORM;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)pn;
    return DT__HOSTPORT_OK;
}

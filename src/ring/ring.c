/*
 * ring.c - forming and closing a ring (include/dtrain/ring.h; frames in ring-impl.h and
 * docs/WIRE.md, "Ring frames").
 *
 * Design
 *
 * dt_ring_open runs one poll loop over non-blocking sockets that does both halves of the
 * handshake at once (done one after the other, every member would wait for its next
 * member's answer while that member waits for its own next: a deadlock round the ring):
 *
 *   out  the connection to the next member: connect (on refusal, or when the address does
 *        not resolve yet, again after 10 ms doubling to 500 ms), send HELLO, wait for OK.
 *        An ERROR answer (the next member is still forming another generation, or belongs
 *        to another job) is logged once per distinct reason and retried the same way: the
 *        acceptor may be at the right generation by the next attempt.
 *   in   the listening socket and up to IN_MAX accepted connections reading their HELLO.
 *        Each is checked whole (magic, version, type, length, token, generation, size, the
 *        sender being the previous member, the wire dtype); the first that matches gets OK
 *        and becomes the receiving connection; one that does not is logged as one line
 *        naming its address and the reason, answered ERROR with the same reason and closed,
 *        and the loop goes on waiting for the right one. When IN_MAX are pending, the oldest
 *        is dropped (after reading what it has sent: a HELLO already complete in its socket
 *        is not lost to a flood behind it), and one that has not sent its whole HELLO within
 *        hello_timeout_ms of its accept is refused ("no HELLO within N ms") however slowly
 *        its bytes come. A previous member whose wire dtype differs (every check but that
 *        one passed: it is the ring's member, configured otherwise) is a mistake no retry
 *        mends: it is answered ERROR with arg 1 ("give up") and both members fail with
 *        DT_ERR_PROTOCOL naming the two dtypes, instead of waiting out the timeout or, worse,
 *        reading each other's data at the wrong width. Only one connection is ever
 *        authenticated (the previous member's); another valid HELLO is refused as
 *        "connected already". Between dt_ring_open calls nothing is accepted: connections
 *        wait in the listen backlog (LISTEN_BACKLOG).
 *
 * Both halves share one deadline, timeout_ms after the call. A connection that TCP
 * simultaneous open connected to itself (possible when the next member's port is in the
 * local ephemeral range and nobody listens on it) counts as refused.
 *
 * After the handshake (and lane.c's offer of shared memory, unless no_shm) both sockets stay
 * non-blocking for collective.c. dt_ring_abort only
 * touches the atomic flag and the eventfd, so it is safe from any thread while a call runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock-impl.h"
#include "net/sock-impl.h"
#include "ring/ring-impl.h"

/* Accepted connections waiting for their HELLO, at most: a ring has one previous member,
 * and a few stragglers of older generations may knock at once; 16 is room for them while a
 * flood of idle clients holds 16 descriptors and buffers, no more. */
#define IN_MAX 16
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 500
#define LISTEN_BACKLOG 64

size_t dt__ring_small_bytes = 16 << 10;

#define FATAL_MAX (2 * DT__RING_TEXT_MAX + 512) /* a handshake's give-up reason */

/* ---- helpers ---- */

const char *dt__ring_dtype_name(uint32_t dtype) {
    return dtype == DT_RING_WIRE_F32    ? "float32"
           : dtype == DT_RING_WIRE_BF16 ? "bfloat16"
                                        : "unknown";
}

void dt__ring_log(const dt_ring *r, const char *fmt, ...) {
    FILE *f = r->log ? r->log : stderr;
    char line[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one fprintf: lines of members sharing a stream do not interleave */
    fprintf(f, "ring gen %" PRId64 " rank %d: %s\n", r->generation, r->rank, line);
    fflush(f);
}

dt_err dt__ring_peer_parse(dt__ring_peer *p, const char *addr, const char *what) {
    if (!addr) return dt_err_set(DT_ERR_ARG, "ring: %s is NULL, not host:port", what);
    int port = 0;
    int rc = strlen(addr) >= sizeof p->addr
                 ? DT__HOSTPORT_FORM
                 : dt__hostport_split(addr, p->host, sizeof p->host, &port);
    if (rc)
        return dt_err_set(DT_ERR_ARG, "ring: %s \"%s\"%s", what, addr, dt__hostport_why(rc));
    snprintf(p->addr, sizeof p->addr, "%s", addr);
    snprintf(p->port, sizeof p->port, "%d", port);
    return DT_OK;
}

void dt__ring_tune(int fd) {
    /* the data plane's buffer size (net/sock-impl.h): loopback and LAN rings measured
     * fastest with it (docs/PERFORMANCE.md) */
    dt__sock_nodelay(fd);
    dt__sock_buffers(fd);
    dt__sock_nonblock(fd, 1);
}

/* ---- listening ---- */

dt_err dt_ring_listen(const char *host, int port, int *fd, int *bound_port) {
    *fd = -1;
    /* net/sock-impl.h sets the buffer sizes before listen: accepted sockets inherit them */
    dt_err e = dt__sock_listen(host, port, LISTEN_BACKLOG, fd, bound_port);
    if (e) return dt_err_wrap(e, "ring");
    dt__ring_tune(*fd);
    return DT_OK;
}

/* ---- the handshake ---- */

enum { OUT_WAIT, OUT_CONNECTING, OUT_HELLO, OUT_REPLY, OUT_DONE };

typedef struct outconn {
    int state, fd;
    struct addrinfo *ai, *cur; /* the next member's addresses, the one being tried */
    int64_t retry_at, backoff;
    uint8_t hello[DT__FRAME_HDR + DT__RING_HELLO_MAX];
    size_t hello_len, hello_sent;
    uint8_t reply[DT__FRAME_HDR + DT__RING_TEXT_MAX];
    size_t got, want;
    int attempts;
    char last[DT__RING_TEXT_MAX + 128];   /* why the last attempt failed */
    char logged[DT__RING_TEXT_MAX + 128]; /* the last refusal logged */
    char fatal[FATAL_MAX]; /* the next member gave up on this ring (ERROR arg 1): why */
} outconn;

typedef struct inconn {
    int fd;
    char who[64]; /* the peer's address */
    uint8_t buf[DT__FRAME_HDR + DT__RING_HELLO_MAX];
    size_t got, want;
    int64_t deadline; /* dt__now_ms: its whole HELLO must have come by then */
} inconn;

static void out_close(outconn *o) {
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
}

/* The attempt failed: try the next address, or wait and resolve again. */
static void out_fail(dt_ring *r, outconn *o, int64_t now, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void out_fail(dt_ring *r, outconn *o, int64_t now, const char *fmt, ...) {
    (void)r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->last, sizeof o->last, fmt, ap);
    va_end(ap);
    out_close(o);
    o->state = OUT_WAIT;
    if (o->cur) o->cur = o->cur->ai_next;
    if (o->cur) {
        o->retry_at = now; /* another address of the same name: at once */
        return;
    }
    if (o->ai) freeaddrinfo(o->ai);
    o->ai = NULL;
    o->retry_at = now + o->backoff;
    o->backoff = o->backoff * 2 < BACKOFF_MAX_MS ? o->backoff * 2 : BACKOFF_MAX_MS;
}

static void out_connected(dt_ring *r, outconn *o, int64_t now) {
    if (dt__sock_self_connected(o->fd)) {
        out_fail(r, o, now, "connection refused (connected to itself)");
        return;
    }
    o->state = OUT_HELLO;
    o->hello_sent = 0;
    o->got = 0;
    o->want = DT__FRAME_HDR;
}

static void out_start(dt_ring *r, outconn *o, int64_t now) {
    const dt__ring_peer *p = &r->peers[r->next];
    if (!o->ai) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
        int rc = getaddrinfo(p->host, p->port, &hints, &o->ai);
        if (rc != 0) {
            o->ai = NULL;
            o->cur = NULL;
            out_fail(r, o, now, "cannot resolve: %s", gai_strerror(rc));
            return;
        }
        o->cur = o->ai;
    }
    o->attempts++;
    o->fd = socket(o->cur->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (o->fd < 0) {
        out_fail(r, o, now, "socket: %s", strerror(errno));
        return;
    }
    dt__ring_tune(o->fd);
    if (connect(o->fd, o->cur->ai_addr, o->cur->ai_addrlen) == 0) {
        out_connected(r, o, now);
    } else if (errno == EINPROGRESS || errno == EINTR) {
        o->state = OUT_CONNECTING;
    } else {
        out_fail(r, o, now, "cannot connect: %s", strerror(errno));
    }
}

/* Progress on the outgoing connection after poll reported events (or to start). */
static void out_step(dt_ring *r, outconn *o, short revents, int64_t now) {
    if (o->state == OUT_CONNECTING) {
        if (!revents) return;
        int e = 0;
        socklen_t el = sizeof e;
        if (getsockopt(o->fd, SOL_SOCKET, SO_ERROR, &e, &el) != 0) e = errno;
        if (e == EINPROGRESS || e == EALREADY) return;
        if (e) {
            out_fail(r, o, now, "cannot connect: %s", strerror(e));
            return;
        }
        out_connected(r, o, now);
    }
    if (o->state == OUT_HELLO) {
        while (o->hello_sent < o->hello_len) {
            ssize_t k = send(o->fd, o->hello + o->hello_sent, o->hello_len - o->hello_sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            if (k < 0) {
                out_fail(r, o, now, "sending HELLO: %s", strerror(errno));
                return;
            }
            o->hello_sent += (size_t)k;
        }
        o->state = OUT_REPLY;
        return; /* the answer comes later: poll for it */
    }
    if (o->state == OUT_REPLY) {
        for (;;) {
            ssize_t k = recv(o->fd, o->reply + o->got, o->want - o->got, MSG_DONTWAIT);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            if (k < 0) {
                out_fail(r, o, now, "waiting for the answer to HELLO: %s", strerror(errno));
                return;
            }
            if (k == 0) {
                out_fail(r, o, now, "closed the connection before answering HELLO");
                return;
            }
            o->got += (size_t)k;
            if (o->got < o->want) continue;
            dt__frame_hdr h;
            dt__frame_decode(o->reply, &h);
            if (dt__frame_check(&h)) {
                out_fail(r, o, now,
                         "answered HELLO with something else than a dtrain frame (magic "
                         "0x%08" PRIx32 ", version %u)",
                         h.magic, h.version);
                return;
            }
            if (h.type == DT__RING_ERROR) {
                size_t tl = h.len < DT__RING_TEXT_MAX ? (size_t)h.len : DT__RING_TEXT_MAX;
                if (o->want == DT__FRAME_HDR && tl > 0) {
                    o->want += tl;
                    continue;
                }
                if (h.arg == 1) { /* no retry can mend it */
                    char text[DT__RING_TEXT_MAX + 1];
                    memcpy(text, o->reply + DT__FRAME_HDR, o->got - DT__FRAME_HDR);
                    dt__frame_text_clean(text, o->got - DT__FRAME_HDR);
                    snprintf(o->fatal, sizeof o->fatal, "rank %d (%s) refused the ring: %s",
                             r->next, r->peers[r->next].addr, text);
                    out_close(o);
                    o->state = OUT_WAIT;
                    return;
                }
                out_fail(r, o, now, "refused the connection: %.*s", (int)(o->got - DT__FRAME_HDR),
                         (const char *)o->reply + DT__FRAME_HDR);
                if (strcmp(o->last, o->logged) != 0) {
                    snprintf(o->logged, sizeof o->logged, "%s", o->last);
                    dt__ring_log(r, "rank %d (%s) %s; trying again", r->next,
                                 r->peers[r->next].addr, o->last);
                }
                return;
            }
            if (h.type != DT__RING_OK || h.len != 0 || h.arg != r->generation) {
                out_fail(r, o, now,
                         "answered HELLO with type %u, arg %" PRId64 ", %" PRIu64
                         " bytes (want OK, generation %" PRId64 ", no payload)",
                         h.type, h.arg, h.len, r->generation);
                return;
            }
            o->state = OUT_DONE;
            return;
        }
    }
}

static void in_close(inconn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* Log the reason, answer ERROR with it (best effort; arg 1 with give_up: the connector must
 * not try again), close. */
static void in_refuse_as(dt_ring *r, inconn *c, int give_up, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void in_refuse_as(dt_ring *r, inconn *c, int give_up, const char *fmt, ...) {
    char why[DT__RING_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    dt__ring_log(r, "refused a connection from %s: %s", c->who, why);
    char text[DT__RING_TEXT_MAX];
    if (snprintf(text, sizeof text, "rank %d (%s): %s", r->rank, r->peers[r->rank].addr, why) < 0)
        text[0] = '\0';
    uint8_t fr[DT__FRAME_HDR + DT__FRAME_TEXT_MAX];
    size_t fl = dt__frame_error(fr, DT__RING_ERROR, give_up ? 1 : 0, text);
    (void)!send(c->fd, fr, fl, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(c->fd, SHUT_WR);
    /* discard what already came (a few KiB at most), so that the close sends a FIN, not a
     * reset that could destroy the ERROR before the peer reads it */
    uint8_t junk[4096];
    for (int i = 0; i < 16 && recv(c->fd, junk, sizeof junk, MSG_DONTWAIT) > 0; i++) {
    }
    in_close(c);
}
#define in_refuse(r, c, ...) in_refuse_as(r, c, 0, __VA_ARGS__)

/* Read what an accepted connection sent. Returns 1 when it is the previous member's valid
 * HELLO (answered OK; c->fd is then the caller's). The previous member with another wire
 * dtype is refused for good and the reason written to fatal (FATAL_MAX bytes). */
static int in_step(dt_ring *r, inconn *c, int have_prev, char *fatal) {
    for (;;) {
        ssize_t k = recv(c->fd, c->buf + c->got, c->want - c->got, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) {
            dt__ring_log(r, "a connection from %s %s before its HELLO; closed it", c->who,
                         k == 0 ? "closed" : strerror(errno));
            in_close(c);
            return 0;
        }
        c->got += (size_t)k;
        if (c->got < c->want) continue;
        dt__frame_hdr h;
        dt__frame_decode(c->buf, &h);
        if (c->want == DT__FRAME_HDR) {
            if (dt__frame_check(&h)) {
                in_refuse(r, c, "not a dtrain frame (magic 0x%08" PRIx32 ", version %u)", h.magic,
                          h.version);
                return 0;
            }
            if (h.type != DT__RING_HELLO) {
                in_refuse(r, c, "a frame of type %u where a ring HELLO (%d) was expected", h.type,
                          DT__RING_HELLO);
                return 0;
            }
            if (h.len < DT__RING_HELLO_MIN || h.len > DT__RING_HELLO_MAX) {
                in_refuse(r, c, "a HELLO of %" PRIu64 " bytes (%d to %d allowed)", h.len,
                          DT__RING_HELLO_MIN, DT__RING_HELLO_MAX);
                return 0;
            }
            c->want += (size_t)h.len;
            continue;
        }
        /* the shared HELLO (net/frame-impl.h); the wire dtype follows the token */
        dt__frame_hello hl;
        if (dt__frame_hello_parse(c->buf + DT__FRAME_HDR, (size_t)h.len, &hl) != DT_OK ||
            hl.rest_len != DT__RING_HELLO_OWN) {
            in_refuse(r, c,
                      "a HELLO whose token length %" PRIu32 " does not fit its %" PRIu64
                      " bytes (with the 4-byte wire dtype after the token)",
                      dt__get32(c->buf + DT__FRAME_HDR + 8), h.len);
            return 0;
        }
        uint32_t rank = hl.a, size = hl.b;
        if (!dt__frame_hello_token_ok(&hl, r->token)) {
            in_refuse(r, c, "wrong token");
            return 0;
        }
        if (h.arg != r->generation) {
            in_refuse(r, c, "generation %" PRId64 ", this ring is generation %" PRId64, h.arg,
                      r->generation);
            return 0;
        }
        if (size != (uint32_t)r->size) {
            in_refuse(r, c, "ring size %" PRIu32 ", this ring has %d members", size, r->size);
            return 0;
        }
        if (rank != (uint32_t)r->prev) {
            in_refuse(r, c, "rank %" PRIu32 ", expected rank %d (the previous member)", rank,
                      r->prev);
            return 0;
        }
        uint32_t dtype = dt__get32(hl.rest), mine = (uint32_t)r->bf16;
        if (dtype != mine) {
            char why[FATAL_MAX / 2];
            snprintf(why, sizeof why,
                     "rank %" PRIu32 " sends %s (wire dtype %" PRIu32 ") on the wire, this member "
                     "%s: every member of a ring must use the same wire dtype "
                     "(allreduce.wireDtype)",
                     rank, dt__ring_dtype_name(dtype), dtype, dt__ring_dtype_name(mine));
            snprintf(fatal, FATAL_MAX, "rank %" PRIu32 " (%s, connecting from %s): %s", rank,
                     r->peers[r->prev].addr, c->who, why);
            in_refuse_as(r, c, 1, "%s", why);
            return 0;
        }
        if (have_prev) {
            in_refuse(r, c, "rank %" PRIu32 " is connected already", rank);
            return 0;
        }
        uint8_t ok[DT__FRAME_HDR];
        dt__frame_encode(ok, DT__RING_OK, r->generation, 0);
        ssize_t s;
        do
            s = send(c->fd, ok, sizeof ok, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (s < 0 && errno == EINTR);
        if (s != (ssize_t)sizeof ok) {
            dt__ring_log(r, "could not answer rank %d's HELLO from %s: %s; closed it", r->prev,
                         c->who, s < 0 ? strerror(errno) : "short write");
            in_close(c);
            return 0;
        }
        return 1;
    }
}

static void in_accept(dt_ring *r, int lfd, inconn *in, int *nin, char *fatal) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN, or a connection that went away: poll again */
        if (*nin == IN_MAX) {
            /* the oldest may have its whole HELLO in its socket already: read it first */
            if (in_step(r, &in[0], r->prev_fd >= 0, fatal)) {
                r->prev_fd = in[0].fd;
                in[0].fd = -1;
            }
            if (in[0].fd >= 0)
                dt__ring_log(r, "%d connections wait for their HELLO; dropped the oldest, from %s",
                             IN_MAX, in[0].who);
            in_close(&in[0]);
            memmove(&in[0], &in[1], (IN_MAX - 1) * sizeof in[0]);
            (*nin)--;
        }
        inconn *c = &in[(*nin)++];
        c->fd = fd;
        c->got = 0;
        c->want = DT__FRAME_HDR;
        c->deadline = dt__now_ms() + r->hello_timeout_ms;
        dt__sock_addr_text(&sa, c->who, sizeof c->who);
        dt__ring_tune(fd);
    }
}

static dt_err handshake(dt_ring *r, int lfd) {
    dt_err err = DT_OK;
    outconn *o = calloc(1, sizeof *o);
    inconn *in = calloc(IN_MAX, sizeof *in);
    int nin = 0;
    char fatal[FATAL_MAX] = ""; /* the previous member's wire dtype differs: why */
    if (!o || !in) {
        err = dt_err_set(DT_ERR_NOMEM, "ring: out of memory for the handshake");
        goto end;
    }
    o->fd = -1;
    o->backoff = BACKOFF_FIRST_MS;
    snprintf(o->last, sizeof o->last, "no attempt yet");
    size_t pl = dt__frame_hello_put(o->hello + DT__FRAME_HDR, (uint32_t)r->rank, (uint32_t)r->size,
                                    r->token);
    dt__put32(o->hello + DT__FRAME_HDR + pl, (uint32_t)r->bf16);
    pl += DT__RING_HELLO_OWN;
    dt__frame_encode(o->hello, DT__RING_HELLO, r->generation, pl);
    o->hello_len = DT__FRAME_HDR + pl;

    int64_t start = dt__now_ms(), deadline = start + r->timeout_ms;
    o->retry_at = start;
    for (;;) {
        int64_t now = dt__now_ms();
        if (fatal[0] || o->fatal[0]) {
            const char *why = fatal[0] ? fatal : o->fatal;
            dt__ring_log(r, "%s", why);
            err = dt_err_set(DT_ERR_PROTOCOL, "ring gen %" PRId64 " rank %d: %s", r->generation,
                             r->rank, why);
            goto end;
        }
        if (o->state == OUT_WAIT && now >= o->retry_at) {
            out_start(r, o, now);
            out_step(r, o, 0, now); /* an immediate connect goes on to HELLO */
        }
        if (o->state == OUT_DONE && r->prev_fd >= 0) break;
        if (now >= deadline) {
            char why[2 * DT__RING_TEXT_MAX + 512];
            if (r->prev_fd < 0)
                snprintf(why, sizeof why, "no valid connection from rank %d (%s) within %d ms",
                         r->prev, r->peers[r->prev].addr, r->timeout_ms);
            else
                snprintf(why, sizeof why,
                         "could not join rank %d (%s) within %d ms (%d attempts): %s", r->next,
                         r->peers[r->next].addr, r->timeout_ms, o->attempts, o->last);
            dt__ring_log(r, "%s", why);
            err = dt_err_set(DT_ERR_TIMEOUT, "ring gen %" PRId64 " rank %d: %s", r->generation,
                             r->rank, why);
            goto end;
        }
        /* a connection's HELLO has one deadline in all, however slowly it trickles */
        int64_t next_expiry = deadline;
        int m = 0;
        for (int i = 0; i < nin; i++) {
            if (now >= in[i].deadline)
                in_refuse(r, &in[i], "no HELLO within %d ms (%zu of %zu bytes came)",
                          r->hello_timeout_ms, in[i].got, in[i].want);
            else if (in[i].deadline < next_expiry)
                next_expiry = in[i].deadline;
            if (in[i].fd >= 0) in[m++] = in[i];
        }
        nin = m;
        struct pollfd pf[2 + IN_MAX];
        int np = 0, lpos = -1, opos = -1;
        if (r->prev_fd < 0) {
            lpos = np;
            pf[np++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        }
        if (o->state == OUT_CONNECTING || o->state == OUT_HELLO || o->state == OUT_REPLY) {
            opos = np;
            pf[np++] =
                (struct pollfd){.fd = o->fd, .events = o->state == OUT_REPLY ? POLLIN : POLLOUT};
        }
        int ipos = np;
        for (int i = 0; i < nin; i++)
            pf[np++] = (struct pollfd){.fd = in[i].fd, .events = POLLIN};
        int64_t wait = deadline - now;
        if (o->state == OUT_WAIT && o->retry_at - now < wait) wait = o->retry_at - now;
        if (next_expiry - now < wait) wait = next_expiry - now;
        if (wait < 0) wait = 0;
        int k = poll(pf, (nfds_t)np, (int)wait);
        if (k < 0 && errno != EINTR) {
            err = dt_err_set(DT_ERR_NETWORK, "ring gen %" PRId64 " rank %d: poll: %s",
                             r->generation, r->rank, strerror(errno));
            goto end;
        }
        if (k <= 0) continue;
        now = dt__now_ms();
        if (opos >= 0 && pf[opos].revents) out_step(r, o, pf[opos].revents, now);
        for (int i = 0; i < nin; i++) {
            if (!pf[ipos + i].revents) continue;
            if (in_step(r, &in[i], r->prev_fd >= 0, fatal)) {
                r->prev_fd = in[i].fd;
                in[i].fd = -1;
            }
        }
        /* drop the closed ones */
        m = 0;
        for (int i = 0; i < nin; i++)
            if (in[i].fd >= 0) in[m++] = in[i];
        nin = m;
        if (lpos >= 0 && (pf[lpos].revents & POLLIN) && r->prev_fd < 0)
            in_accept(r, lfd, in, &nin, fatal);
    }
    r->next_fd = o->fd;
    o->fd = -1;
end:
    if (o) {
        out_close(o);
        if (o->ai) freeaddrinfo(o->ai);
    }
    for (int i = 0; i < nin; i++)
        in_close(&in[i]);
    free(in);
    free(o);
    return err;
}

/* ---- life cycle ---- */

dt_err dt_ring_open(dt_ring **out, int listen_fd, const dt_ring_conf *conf) {
    *out = NULL;
    if (!conf) return dt_err_set(DT_ERR_ARG, "ring: conf is NULL");
    if (conf->size < 1 || conf->rank < 0 || conf->rank >= conf->size)
        return dt_err_set(DT_ERR_ARG, "ring: rank %d of size %d is out of range", conf->rank,
                          conf->size);
    if (!conf->peers) return dt_err_set(DT_ERR_ARG, "ring: peers is NULL");
    if (conf->timeout_ms < 0)
        return dt_err_set(DT_ERR_ARG, "ring: timeout_ms %d is negative", conf->timeout_ms);
    if (conf->chunk_bytes != 0 && conf->chunk_bytes < 4)
        return dt_err_set(DT_ERR_ARG, "ring: chunk_bytes %zu is below one float (4 bytes)",
                          conf->chunk_bytes);
    const char *token = conf->token ? conf->token : "";
    if (strlen(token) > DT__RING_TOKEN_MAX)
        return dt_err_set(DT_ERR_ARG, "ring: the token is longer than %d bytes",
                          DT__RING_TOKEN_MAX);
    if (conf->wire_dtype != DT_RING_WIRE_F32 && conf->wire_dtype != DT_RING_WIRE_BF16)
        return dt_err_set(DT_ERR_ARG, "ring: wire_dtype %d is neither float32 nor bfloat16",
                          (int)conf->wire_dtype);
    if (conf->size > 1 && listen_fd < 0)
        return dt_err_set(DT_ERR_ARG, "ring: listen_fd %d is not a socket", listen_fd);

    dt_err err = DT_OK;
    dt_ring *r = calloc(1, sizeof *r);
    if (!r) return dt_err_set(DT_ERR_NOMEM, "ring: out of memory");
    r->next_fd = r->prev_fd = r->wake_fd = -1;
    r->generation = conf->generation;
    r->rank = conf->rank;
    r->size = conf->size;
    r->prev = (conf->rank - 1 + conf->size) % conf->size;
    r->next = (conf->rank + 1) % conf->size;
    r->timeout_ms = conf->timeout_ms ? conf->timeout_ms : DT_RING_DEFAULT_TIMEOUT_MS;
    r->spin_us = DT_RING_DEFAULT_SPIN_US;
    r->hello_timeout_ms =
        conf->hello_timeout_ms > 0 ? conf->hello_timeout_ms : DT_RING_DEFAULT_HELLO_TIMEOUT_MS;
    size_t chunk = conf->chunk_bytes ? conf->chunk_bytes : DT_RING_DEFAULT_CHUNK;
    if (chunk > DT__RING_CHUNK_MAX) chunk = DT__RING_CHUNK_MAX;
    r->chunk = chunk & ~(size_t)3;
    r->bf16 = conf->wire_dtype == DT_RING_WIRE_BF16;
    r->shared_floats = conf->size == 2 ? conf->shared_floats : 0;
    r->log = conf->log;
    r->failed_peer = -1;
    atomic_init(&r->aborted, 0);
    r->token = strdup(token);
    r->peers = calloc((size_t)conf->size, sizeof *r->peers);
    if (!r->token || !r->peers) {
        err = dt_err_set(DT_ERR_NOMEM, "ring: out of memory");
        goto fail;
    }
    for (int i = 0; i < conf->size; i++) {
        char what[32];
        snprintf(what, sizeof what, "peers[%d]", i);
        if ((err = dt__ring_peer_parse(&r->peers[i], conf->peers[i], what))) goto fail;
    }
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->wake_fd < 0) {
        err = dt_err_set(DT_ERR_IO, "ring: eventfd: %s", strerror(errno));
        goto fail;
    }
    if (conf->size > 1) {
        int fl = fcntl(listen_fd, F_GETFL);
        if (fl < 0) {
            err = dt_err_set(DT_ERR_ARG, "ring: listen_fd %d: %s", listen_fd, strerror(errno));
            goto fail;
        }
        if (!(fl & O_NONBLOCK)) fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK);
        if ((err = handshake(r, listen_fd))) goto fail;
        /* said once a ring, as the PS says it of a bfloat16 client: a job's logs show it */
        if (r->bf16) dt__ring_log(r, "all-reduce values go as bfloat16 (wire dtype 1)");
        if (!conf->no_shm && (err = dt__ring_lane_open(r, dt__now_ms() + r->timeout_ms))) goto fail;
    }
    *out = r;
    return DT_OK;
fail:
    dt_ring_close(r);
    return err;
}

void dt_ring_close(dt_ring *r) {
    if (!r) return;
    if (r->next_fd >= 0) close(r->next_fd);
    if (r->prev_fd >= 0) close(r->prev_fd);
    if (r->wake_fd >= 0) close(r->wake_fd);
    dt__ring_lane_close(r);
    free(r->stage);
    free(r->items);
    free(r->wire);
    free(r->peers);
    free(r->token);
    free(r);
}

int dt_ring_rank(const dt_ring *r) {
    return r->rank;
}

int dt_ring_size(const dt_ring *r) {
    return r->size;
}

int dt_ring_failed_peer(const dt_ring *r) {
    return r->failed_peer;
}

float *dt_ring_shared_buffer(dt_ring *r) {
    /* both set only for 2 members, float32 on the wire, both connections lanes (lane.c) */
    return r && r->in.shared ? r->out.shared : NULL;
}

void dt_ring_set_spin_us(dt_ring *r, int us) {
    r->spin_us = us > 0 ? us : 0;
}

void dt_ring_abort(dt_ring *r) {
    atomic_store(&r->aborted, 1);
    uint64_t one = 1;
    (void)!write(r->wake_fd, &one, sizeof one);
}

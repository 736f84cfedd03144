/*
 * client.c - the parameter-server client (include/dtrain/ps.h, docs/WIRE.md).
 *
 * Design
 *
 * One TCP connection per PS ("link"), opened lazily by the first operation that needs it
 * and greeted with HELLO (token, replica name, the partition index and count the client
 * expects). Everything a frame needs is built once in dt_ps_client_open: the variables
 * each PS owns (dt_ps_partition over the params' numel), the tensor descriptions, and an
 * iovec array whose data entries point straight at params[i]->grad.data (push) - so an
 * operation allocates nothing and copies nothing: a push is one sendmsg loop over the
 * params' own gradient memory, and VALUES replies are read straight into
 * params[i]->value.data (after the description is checked byte for byte against what the
 * client expects).
 *
 * An operation runs in phases over all PS at once: send every request, then read every
 * reply, so that the PS compute while the client is still sending to the others. A link
 * whose transport fails (refused, reset, closed, short read) is closed; after the phase the
 * operation is redone on the failed links only, after reconnecting with backoff (50 ms
 * doubling to 1 s) for up to retry_ms since the first failure, and a line is logged when
 * the reconnection succeeds. A PS that answers ERROR (a refusal: wrong token, bad shape...)
 * fails the operation with DT_ERR_STATE and the PS's text; it is not retried, nor is a reply
 * the protocol does not allow (DT_ERR_PROTOCOL); giving up on a transport failure is
 * DT_ERR_NETWORK (DT_ERR_TIMEOUT for a PS that stopped answering). A request
 * answered with NOT_INITIALIZED is sent again (10 ms doubling to 500 ms) until the PS has
 * values; a client with conf.offer_init (the chief's) first gives the PS its own with INIT.
 *
 * Wire dtype: with conf.wire_dtype bfloat16, a push over TCP narrows each gradient into the
 * link's own buffer (round to nearest even) and the iovecs point there, halving the
 * gradient bytes; the header's arg says so (docs/WIRE.md). A PUSH_PULL's reply then comes
 * as VALUES_BF16, read into the upper half of each value's room and widened in place. INIT
 * and PULL stay float32 (the model as the PS holds it: checkpoints, the end, the
 * evaluator), and so does the shared-memory lane (a memcpy on the same host: nothing to
 * save).
 *
 * Redoing a push after a lost reply may apply it twice (at-least-once; docs/WIRE.md).
 *
 * The shared-memory lane: right after HELLO a link offers the PS its segment (a fresh one
 * for every connection; src/core/shm-impl.h) with SHM_ATTACH. Once the PS
 * has attached it, a push copies each gradient into the segment at the PS's layout and
 * rings the segment's request bell, and the values the reply bell announces are copied out
 * of the segment into params[i]->value - one memcpy each way instead of the kernel's socket
 * copies, and no system call but the futex wake-ups (docs/WIRE.md, "Doorbells"). Frames
 * still sent on the socket of such a link are followed by a ring that says so. A link the
 * PS declines stays on the tensor-list frames for good (logged once).
 *
 * With conf.zero_copy there is no copy at all: while a link is on the lane its params'
 * data pointers point into the segment (lane_bind), and back to the caller's own buffers
 * before that segment is dropped (a reconnect makes a fresh one) and at close.
 *
 * Otherwise the params' values and grads must keep their data pointers between open and
 * close (a model's do: they live in its arena); the iovecs hold the gradients' (a link is
 * unbound whenever it is on TCP).
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/assert-impl.h"
#include "core/clock-impl.h"
#include "core/shm-impl.h"
#include "dtrain/ps.h"
#include "net/sock-impl.h"
#include "ps/wire-impl.h"

#define READ_BUF (64 << 10)

/* LINK_INIT: the PS answered NOT_INITIALIZED to a client that offers its values (the
 * chief's): send them with INIT, then the request again. */
typedef enum link_state {
    LINK_DONE = 0,
    LINK_PENDING,
    LINK_RETRY,
    LINK_WAIT,
    LINK_INIT
} link_state;

typedef struct pslink {
    int index;
    char addr[256];
    char host[256];
    int portno;
    int fd;
    dt__ps_reader rd;
    int *vars; /* client param indices this PS owns, in partition order */
    int nvars;
    uint8_t *meta; /* u32 count, then each variable's description */
    size_t *meta_off, *meta_len;
    uint64_t list_bytes; /* a float32 tensor list's payload (INIT, VALUES, float32 pushes) */
    uint64_t push_bytes; /* a push's payload in the client's wire dtype */
    uint16_t *narrow;    /* bfloat16 pushes: the gradients narrowed, per variable at
                            narrow_off[k] (NULL for float32) */
    size_t *narrow_off;
    struct iovec *iov; /* push frame: header, count, (meta, grad) pairs */
    struct iovec *work;
    uint8_t hdr[DT__PS_HDR];
    uint8_t *scratch; /* for checking a reply's descriptions */
    size_t scratch_len;
    link_state state;
    int sent; /* a request is out, its reply not yet read */
    int64_t step;
    int64_t wait_ms; /* NOT_INITIALIZED backoff */
    int64_t wait_until;
    /* the shared-memory lane: the current connection's segment (made at connect);
     * shm_on while its PS has attached it */
    dt__shm shm;
    size_t *lay;      /* per variable: float offset in the segment's areas (PS layout) */
    size_t lay_total; /* floats in one area */
    int shm_on;
    int shm_off;      /* never again on this link: the segment could not be made, or declined */
    uint32_t req_rings; /* this client's rings of the segment's request bell */
    int64_t sock_sent;  /* frames sent on the socket since the attach (each ring says) */
    uint32_t rep_seen;  /* the PS's rings of the reply bell taken so far */
    /* conf.zero_copy: per variable, the caller's own value and grad buffers (the params
     * point into the segment instead while `bound`) */
    float **own_val, **own_grad;
    int bound;
    dt_err fail_code; /* the last transport failure's: DT_ERR_NETWORK or DT_ERR_TIMEOUT */
} pslink;

struct dt_ps_client {
    dt_ps_client_conf conf;
    char *token, *replica;
    dt_param **params;
    int nparams;
    pslink *links;
    int nps;
};

static void clog_(dt_ps_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void clog_(dt_ps_client *c, const char *fmt, ...) {
    FILE *f = c->conf.log ? c->conf.log : stderr;
    va_list ap;
    va_start(ap, fmt);
    fprintf(f, "%s: ", c->replica[0] ? c->replica : "ps client");
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
    va_end(ap);
}

static void link_close(pslink *l) {
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
    l->shm_on = 0;
}

/* ---- zero copy: the params' data in the segment ---- */

/* Point this link's params' values and gradients into its segment (the value area and the
 * gradient area at the PS's layout), carrying over what they hold: from then on backward
 * writes each gradient where the PS reads it and the PS writes the values where forward
 * reads them. */
static void lane_bind(dt_ps_client *c, pslink *l) {
    float *g = dt__ps_lane_grads(&l->shm), *v = g + l->lay_total;
    for (int k = 0; k < l->nvars; k++) {
        dt_param *p = c->params[l->vars[k]];
        size_t bytes = (size_t)dt_tensor_numel(&p->value) * sizeof(float);
        memcpy(v + l->lay[k], p->value.data, bytes);
        memcpy(g + l->lay[k], p->grad.data, bytes);
        p->value.data = v + l->lay[k];
        p->grad.data = g + l->lay[k];
    }
    l->bound = 1;
}

/* Back to the caller's buffers, with what the segment holds, before the segment goes. */
static void lane_unbind(dt_ps_client *c, pslink *l) {
    if (!l->bound) return;
    for (int k = 0; k < l->nvars; k++) {
        dt_param *p = c->params[l->vars[k]];
        size_t bytes = (size_t)dt_tensor_numel(&p->value) * sizeof(float);
        memcpy(l->own_val[k], p->value.data, bytes);
        memcpy(l->own_grad[k], p->grad.data, bytes);
        p->value.data = l->own_val[k];
        p->grad.data = l->own_grad[k];
    }
    l->bound = 0;
}

/* ---- connecting ---- */

/* Transport-level failure (worth retrying): a message recorded with DT_ERR_NETWORK, or
 * DT_ERR_TIMEOUT when the PS did not answer in time; l->fail_code gets the code. Refusal
 * (not retried): a dt_err. */
typedef enum { OUT_OK = 0, OUT_TRANSPORT = 1, OUT_FAIL = 2 } outcome;

static outcome fail_transport(pslink *l, const char *what) {
    int e = errno;
    l->fail_code =
        e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT ? DT_ERR_TIMEOUT : DT_ERR_NETWORK;
    dt_err_set(l->fail_code, "ps-%d (%s): %s: %s", l->index, l->addr, what,
               e == EAGAIN || e == EWOULDBLOCK ? "no answer in time"
               : e                             ? strerror(e)
                                               : "the connection was closed");
    link_close(l);
    return OUT_TRANSPORT;
}

/* An ERROR frame's text as the error (the PS closes the connection after it). */
static outcome read_error(dt_ps_client *c, pslink *l, uint64_t len, dt_err *err) {
    char text[DT__PS_TEXT_MAX + 1];
    size_t n = len < DT__PS_TEXT_MAX ? (size_t)len : DT__PS_TEXT_MAX;
    if (dt__ps_read(&l->rd, text, n, NULL) != 0) n = 0;
    dt__frame_text_clean(text, n);
    *err = dt_err_set(DT_ERR_STATE, "ps-%d (%s) refused: %s", l->index, l->addr,
                      n ? text : "(no reason given)");
    link_close(l);
    (void)c;
    return OUT_FAIL;
}

/* Read a header and check it against the limits. */
static outcome read_hdr(dt_ps_client *c, pslink *l, dt__ps_hdr *h, dt_err *err) {
    uint8_t b[DT__PS_HDR];
    if (dt__ps_read(&l->rd, b, sizeof b, NULL) != 0) return fail_transport(l, "reading a reply");
    dt__ps_hdr_decode(b, h);
    if (dt__frame_check(h)) {
        *err = dt_err_set(DT_ERR_PROTOCOL,
                          "ps-%d (%s): not a dtrain PS reply (magic 0x%08" PRIx32 ", version %u)",
                          l->index, l->addr, h->magic, h->version);
        link_close(l);
        return OUT_FAIL;
    }
    if (h->len > (uint64_t)c->conf.max_frame) {
        *err = dt_err_set(DT_ERR_PROTOCOL,
                          "ps-%d (%s): a %s reply of %" PRIu64 " bytes exceeds max_frame %" PRId64,
                          l->index, l->addr, dt__ps_type_name(h->type), h->len, c->conf.max_frame);
        link_close(l);
        return OUT_FAIL;
    }
    if (h->type == DT__PS_ERROR) return read_error(c, l, h->len, err);
    return OUT_OK;
}

/* Offer the PS this link's shared-memory segment (made at the first connect). OUT_OK with
 * shm_on set when it attached; OUT_OK with the link on TCP for good when the segment cannot
 * be made or the PS declines it (another host, another pid namespace: logged once). */
static outcome shm_offer(dt_ps_client *c, pslink *l, dt_err *err) {
    /* A fresh segment for every connection: a thread of the PS still busy with the broken
     * connection's request keeps only the old mapping, never touching the new one. With
     * zero_copy the params leave the old one here, carrying what it holds: values that such
     * a thread may be writing (torn between two states), which the request redone on the new
     * connection replaces; should that fail too, the client's call fails and the params
     * stay in the old segment until close. */
    lane_unbind(c, l);
    dt__shm_free(&l->shm);
    {
        char name[32];
        snprintf(name, sizeof name, "dtrain-ps-%d", l->index);
        if (dt__shm_create(&l->shm, name, dt__ps_lane_size(l->lay_total)) != DT_OK) {
            clog_(c, "ps-%d (%s): no shared memory (%s); tensors go over TCP", l->index, l->addr,
                  dt_errmsg());
            dt_err_clear();
            l->shm_off = 1;
            return OUT_OK;
        }
    }
    uint8_t fixed[DT__PS_SHM_FIXED], hdr[DT__PS_HDR];
    dt__shm_offer_encode(&l->shm, fixed);
    size_t mb = l->nvars ? l->meta_off[l->nvars - 1] + l->meta_len[l->nvars - 1] : 4;
    dt__ps_hdr_encode(hdr, DT__PS_SHM_ATTACH, 0, DT__PS_SHM_FIXED + mb);
    struct iovec iov[3] = {{hdr, sizeof hdr}, {fixed, sizeof fixed}, {l->meta, mb}};
    if (dt__ps_writev_all(l->fd, iov, 3) != 0) return fail_transport(l, "sending SHM_ATTACH");
    dt__ps_hdr h;
    outcome o = read_hdr(c, l, &h, err);
    if (o) return o;
    if (h.type == DT__PS_OK && h.len == 0) {
        l->shm_on = 1;
        l->req_rings = l->rep_seen = 0; /* a fresh segment's bells */
        l->sock_sent = 0;
        if (c->conf.zero_copy) lane_bind(c, l);
        return OUT_OK;
    }
    if (h.type == DT__PS_SHM_DECLINED && h.len <= DT__PS_TEXT_MAX) {
        char text[DT__PS_TEXT_MAX + 1];
        if (dt__ps_read(&l->rd, text, (size_t)h.len, NULL) != 0)
            return fail_transport(l, "reading SHM_DECLINED");
        dt__frame_text_clean(text, (size_t)h.len);
        clog_(c, "ps-%d (%s) declined shared memory (%s); tensors go over TCP", l->index, l->addr,
              text);
        l->shm_off = 1;
        dt__shm_free(&l->shm);
        return OUT_OK;
    }
    *err =
        dt_err_set(DT_ERR_PROTOCOL, "ps-%d (%s): SHM_ATTACH answered with %s (%" PRIu64 " bytes)",
                   l->index, l->addr, dt__ps_type_name(h.type), h.len);
    link_close(l);
    return OUT_FAIL;
}

/* Connect within timeout_ms (a connection that TCP simultaneous open made to itself, while
 * no PS listens on a port in the ephemeral range, counts as refused: net/sock-impl.h), greet
 * with HELLO, offer shared memory. */
static outcome link_connect(dt_ps_client *c, pslink *l, int64_t timeout_ms, dt_err *err) {
    int fd = -1;
    dt_err e = dt__sock_connect(l->host, l->portno,
                                timeout_ms > INT32_MAX ? INT32_MAX : (int)timeout_ms, &fd);
    if (e) {
        l->fail_code = e == DT_ERR_TIMEOUT ? DT_ERR_TIMEOUT : DT_ERR_NETWORK;
        dt_err_wrap(l->fail_code, "ps-%d (%s)", l->index, l->addr);
        /* a name may appear once the PS's pod exists: a transport failure too */
        return OUT_TRANSPORT;
    }
    /* A PS that stops answering (stopped, its host gone without a reset) fails the read
     * after retry_ms, which the caller treats as a broken connection: reconnect, redo. */
    struct timeval tv = {.tv_sec = (time_t)(c->conf.retry_ms / 1000),
                         .tv_usec = (suseconds_t)(c->conf.retry_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    l->fd = fd;
    dt__ps_reader_reset(&l->rd, fd);
    /* HELLO: the shared part (u32 index, u32 nps, u32 token_len, token: net/frame-impl.h),
     * then u32 replica_len, replica */
    size_t rl = strlen(c->replica);
    uint8_t head[DT__FRAME_HELLO_MIN + DT__FRAME_TOKEN_MAX], rlen[4];
    size_t hl = dt__frame_hello_put(head, (uint32_t)l->index, (uint32_t)c->nps, c->token);
    dt__put32(rlen, (uint32_t)rl);
    uint8_t hdr[DT__PS_HDR];
    dt__ps_hdr_encode(hdr, DT__PS_HELLO, 0, hl + 4 + rl);
    struct iovec iov[4] = {{hdr, sizeof hdr}, {head, hl}, {rlen, 4}, {c->replica, rl}};
    if (dt__ps_writev_all(fd, iov, 4) != 0) return fail_transport(l, "sending HELLO");
    dt__ps_hdr h;
    outcome o = read_hdr(c, l, &h, err);
    if (o) return o;
    if (h.type != DT__PS_OK || h.len != 0) {
        *err = dt_err_set(DT_ERR_PROTOCOL, "ps-%d (%s): HELLO answered with %s", l->index, l->addr,
                          dt__ps_type_name(h.type));
        link_close(l);
        return OUT_FAIL;
    }
    return c->conf.no_shm || l->shm_off ? OUT_OK : shm_offer(c, l, err);
}

/* Connect with backoff until retry_ms have passed since `since` (ms). */
static dt_err link_ensure(dt_ps_client *c, pslink *l, int64_t since, int reconnect) {
    if (l->fd >= 0) return DT_OK;
    int64_t delay = 50;
    int attempts = 0;
    for (;;) {
        dt_err err = DT_OK;
        attempts++;
        /* the last try is a real one (at least 100 ms to connect), so that what it says -
         * refused, or no answer - is the PS's state, not the end of the budget */
        int64_t left = since + c->conf.retry_ms - dt__now_ms();
        outcome o = link_connect(c, l, left > 100 ? left : 100, &err);
        if (o == OUT_OK) {
            if (reconnect || attempts > 1)
                clog_(c, "%s ps-%d (%s) after %" PRId64 " ms (%d attempts)",
                      reconnect ? "reconnected to" : "connected to", l->index, l->addr,
                      dt__now_ms() - since, attempts);
            return DT_OK;
        }
        if (o == OUT_FAIL) return err;
        left = since + c->conf.retry_ms - dt__now_ms();
        if (left <= 0)
            return dt_err_wrap(l->fail_code ? l->fail_code : DT_ERR_NETWORK,
                               "gave up after %" PRId64 " ms and %d attempts", dt__now_ms() - since,
                               attempts);
        dt__sleep_ms((double)delay < left ? delay : left);
        delay = delay * 2 > 1000 ? 1000 : delay * 2;
    }
}

/* ---- requests and replies ---- */

/* Whether a request of this type goes by the lane (tensors in the segment, the bells
 * instead of frames). */
static int by_lane(const pslink *l, int type) {
    return l->shm_on && (type == DT__PS_PUSH || type == DT__PS_PUSH_PULL || type == DT__PS_PULL);
}

/* After a frame on the socket of an attached link: the PS may be asleep on the request bell. */
static void ring_for_socket(pslink *l) {
    if (l->shm_on)
        dt__ps_bell_ring(&dt__ps_lane_ctl_of(&l->shm)->req, ++l->req_rings, DT__PS_BELL_SOCKET,
                         ++l->sock_sent);
}

static outcome send_request(dt_ps_client *c, pslink *l, int type) {
    if (by_lane(l, type)) {
        if (type != DT__PS_PULL) {
            float *g = dt__ps_lane_grads(&l->shm);
            for (int k = 0; k < l->nvars; k++) {
                const dt_param *p = c->params[l->vars[k]];
                if (p->grad.data != g + l->lay[k]) /* else bound: already there */
                    memcpy(g + l->lay[k], p->grad.data,
                           (size_t)dt_tensor_numel(&p->value) * sizeof(float));
            }
        }
        int wire = type == DT__PS_PUSH        ? DT__PS_SHM_PUSH
                   : type == DT__PS_PUSH_PULL ? DT__PS_SHM_PUSH_PULL
                                              : DT__PS_SHM_PULL;
        dt__ps_bell_ring(&dt__ps_lane_ctl_of(&l->shm)->req, ++l->req_rings, (uint32_t)wire,
                         l->sock_sent);
        return OUT_OK;
    }
    if (type == DT__PS_PUSH || type == DT__PS_PUSH_PULL || type == DT__PS_INIT) {
        int n = 2 + 2 * l->nvars;
        int bf16 = type != DT__PS_INIT && l->narrow;
        dt__ps_hdr_encode(l->hdr, type, bf16 ? DT__PS_BF16 : DT__PS_F32,
                          bf16 ? l->push_bytes : l->list_bytes);
        memcpy(l->work, l->iov, (size_t)n * sizeof *l->work);
        if (type == DT__PS_INIT)
            for (int k = 0; k < l->nvars; k++)
                l->work[3 + 2 * k].iov_base = c->params[l->vars[k]]->value.data;
        if (bf16)
            for (int k = 0; k < l->nvars; k++) {
                const dt_param *p = c->params[l->vars[k]];
                size_t numel = (size_t)dt_tensor_numel(&p->value);
                dt__bf16_narrow(l->narrow + l->narrow_off[k], p->grad.data, numel);
                l->work[3 + 2 * k] =
                    (struct iovec){l->narrow + l->narrow_off[k], numel * sizeof(uint16_t)};
            }
        if (dt__ps_writev_all(l->fd, l->work, n) != 0) return fail_transport(l, "sending");
        ring_for_socket(l);
        return OUT_OK;
    }
    if (dt__ps_send_frame(l->fd, type, 0, NULL, 0) != 0) return fail_transport(l, "sending");
    ring_for_socket(l);
    return OUT_OK;
}

/* The answer to a request by the lane: the reply bell's type and arg as a header, or
 * whatever came on the socket instead (an ERROR frame, a hang-up); no answer within
 * retry_ms fails as a socket read would (SO_RCVTIMEO). */
static outcome await_bell(dt_ps_client *c, pslink *l, dt__ps_hdr *h, dt_err *err) {
    dt__ps_bell *rep = &dt__ps_lane_ctl_of(&l->shm)->rep;
    int64_t until = dt__now_ms() + c->conf.retry_ms;
    for (;;) {
        uint32_t n = atomic_load_explicit(&rep->count, memory_order_acquire);
        if (n != l->rep_seen) {
            l->rep_seen = n;
            uint32_t type = atomic_load_explicit(&rep->type, memory_order_relaxed);
            *h = (dt__ps_hdr){.type = type > UINT16_MAX ? UINT16_MAX : (uint16_t)type,
                              .arg = atomic_load_explicit(&rep->arg, memory_order_relaxed)};
            return OUT_OK;
        }
        /* between slices: the socket (an ERROR frame, a hang-up) and the clock */
        if (dt__ps_bell_sleep(rep, n, DT__PS_BELL_SLICE_NS)) continue;
        struct pollfd pf = {.fd = l->fd, .events = POLLIN | POLLRDHUP};
        if (poll(&pf, 1, 0) > 0) return read_hdr(c, l, h, err);
        if (dt__now_ms() >= until) {
            errno = EAGAIN;
            return fail_transport(l, "reading a reply");
        }
    }
}

/* A VALUES payload straight into the params' values; VALUES_BF16's bfloat16 data into the
 * upper half of each value's room, then widened in place. */
static outcome read_values(dt_ps_client *c, pslink *l, const dt__ps_hdr *h, dt_err *err) {
    int bf16 = h->type == DT__PS_VALUES_BF16;
    uint64_t want = bf16 ? l->push_bytes : l->list_bytes;
    if (h->len != want) {
        *err = dt_err_set(DT_ERR_PROTOCOL,
                          "ps-%d (%s): %s of %" PRIu64 " bytes, expected %" PRIu64
                          " (does the PS serve the same model?)",
                          l->index, l->addr, dt__ps_type_name(h->type), h->len, want);
        link_close(l);
        return OUT_FAIL;
    }
    if (dt__ps_read(&l->rd, l->scratch, 4, NULL) != 0) return fail_transport(l, "reading VALUES");
    if (memcmp(l->scratch, l->meta, 4) != 0) goto mismatch;
    for (int k = 0; k < l->nvars; k++) {
        const dt_param *p = c->params[l->vars[k]];
        if (dt__ps_read(&l->rd, l->scratch, l->meta_len[k], NULL) != 0)
            return fail_transport(l, "reading VALUES");
        if (memcmp(l->scratch, l->meta + l->meta_off[k], l->meta_len[k]) != 0) {
            *err = dt_err_set(DT_ERR_PROTOCOL,
                              "ps-%d (%s): VALUES: tensor %d does not describe %s as expected",
                              l->index, l->addr, k, p->name);
            link_close(l);
            return OUT_FAIL;
        }
        size_t numel = (size_t)dt_tensor_numel(&p->value);
        if (bf16) {
            if (dt__ps_read(&l->rd, (uint8_t *)p->value.data + 2 * numel, 2 * numel, NULL) != 0)
                return fail_transport(l, "reading VALUES_BF16");
            dt__bf16_widen_tail(p->value.data, numel);
        } else if (dt__ps_read(&l->rd, p->value.data, numel * sizeof(float), NULL) != 0) {
            return fail_transport(l, "reading VALUES");
        }
    }
    return OUT_OK;
mismatch:
    *err = dt_err_set(DT_ERR_PROTOCOL, "ps-%d (%s): VALUES: tensor count differs from %d", l->index,
                      l->addr, l->nvars);
    link_close(l);
    return OUT_FAIL;
}

static outcome read_reply(dt_ps_client *c, pslink *l, int type, dt_err *err) {
    dt__ps_hdr h;
    outcome o = by_lane(l, type) ? await_bell(c, l, &h, err) : read_hdr(c, l, &h, err);
    if (o) return o;
    if (h.type == DT__PS_NOT_INITIALIZED && h.len == 0) {
        /* A PS without values (started, or restarted without a checkpoint): the chief's
         * client gives it its own; the others wait for someone to, then ask again. */
        if (type == DT__PS_INIT) {
            *err = dt_err_set(DT_ERR_PROTOCOL, "ps-%d (%s): INIT answered NOT_INITIALIZED",
                              l->index, l->addr);
            link_close(l);
            return OUT_FAIL;
        }
        l->state = c->conf.offer_init ? LINK_INIT : LINK_WAIT;
        return OUT_OK;
    }
    int want = (type == DT__PS_PULL || type == DT__PS_PUSH_PULL) ? DT__PS_VALUES : DT__PS_ACK;
    if (want == DT__PS_VALUES && l->shm_on) want = DT__PS_SHM_VALUES;
    /* a bfloat16 PUSH_PULL is answered VALUES_BF16 (or VALUES by a PS short of memory) */
    if (want == DT__PS_VALUES && type == DT__PS_PUSH_PULL && l->narrow &&
        h.type == DT__PS_VALUES_BF16)
        want = DT__PS_VALUES_BF16;
    if (h.type != want || (want != DT__PS_VALUES && want != DT__PS_VALUES_BF16 && h.len != 0)) {
        *err =
            dt_err_set(DT_ERR_PROTOCOL, "ps-%d (%s): %s answered with %s (%" PRIu64 " bytes)",
                       l->index, l->addr, dt__ps_type_name(type), dt__ps_type_name(h.type), h.len);
        link_close(l);
        return OUT_FAIL;
    }
    if ((want == DT__PS_VALUES || want == DT__PS_VALUES_BF16) && (o = read_values(c, l, &h, err)))
        return o;
    if (want == DT__PS_SHM_VALUES) {
        const float *v = dt__ps_lane_grads(&l->shm) + l->lay_total;
        for (int k = 0; k < l->nvars; k++) {
            const dt_param *p = c->params[l->vars[k]];
            if (p->value.data != v + l->lay[k]) /* else bound: already there */
                memcpy(p->value.data, v + l->lay[k],
                       (size_t)dt_tensor_numel(&p->value) * sizeof(float));
        }
    }
    l->step = h.arg;
    l->state = LINK_DONE;
    return OUT_OK;
}

/* One operation on every PS. INIT's acks (taken) are summed into *acks. */
static dt_err run(dt_ps_client *c, int type, int64_t *step, int *acks) {
    dt_err first = DT_OK;
    char first_msg[DT__PS_TEXT_MAX + 256] = "";
    int64_t fail_since = -1;
    for (int i = 0; i < c->nps; i++)
        c->links[i].state = LINK_PENDING;
    int64_t wait_delay = 10;
    int waited_logged = 0;
    for (;;) {
        /* connect and send */
        int64_t now = dt__now_ms();
        for (int i = 0; i < c->nps; i++) {
            pslink *l = &c->links[i];
            if (l->state == LINK_WAIT && now >= l->wait_until) l->state = LINK_PENDING;
            if (l->state == LINK_INIT) {
                dt_err err = DT_OK;
                outcome o = send_request(c, l, DT__PS_INIT);
                if (o == OUT_OK) o = read_reply(c, l, DT__PS_INIT, &err);
                if (o == OUT_FAIL) {
                    if (!first) {
                        first = err;
                        snprintf(first_msg, sizeof first_msg, "%s", dt_errmsg());
                    }
                    l->state = LINK_DONE;
                    continue;
                }
                if (o == OUT_OK && l->step)
                    clog_(c, "ps-%d (%s) had no values: gave it this replica's", l->index, l->addr);
                l->state = o == OUT_OK ? LINK_PENDING : LINK_RETRY;
                if (o != OUT_OK && fail_since < 0) fail_since = dt__now_ms();
                if (o != OUT_OK) continue;
            }
            if (l->state != LINK_PENDING && l->state != LINK_RETRY) continue;
            int again = l->state == LINK_RETRY;
            dt_err err = DT_OK;
            if (again && now - fail_since > c->conf.retry_ms)
                err = dt_err_wrap(l->fail_code ? l->fail_code : DT_ERR_NETWORK,
                                  "gave up after %" PRId64 " ms", now - fail_since);
            else
                err = link_ensure(c, l, again ? fail_since : now, again);
            if (err) {
                if (!first) {
                    first = err;
                    snprintf(first_msg, sizeof first_msg, "%s", dt_errmsg());
                }
                l->state = LINK_DONE;
                continue;
            }
            l->state = LINK_PENDING;
            if (send_request(c, l, type) != OUT_OK) {
                l->state = LINK_RETRY;
                if (fail_since < 0) fail_since = dt__now_ms();
                continue;
            }
            l->sent = 1;
        }
        /* read */
        for (int i = 0; i < c->nps; i++) {
            pslink *l = &c->links[i];
            if (!l->sent) continue;
            l->sent = 0;
            dt_err err = DT_OK;
            outcome o = read_reply(c, l, type, &err);
            if (o == OUT_TRANSPORT) {
                l->state = LINK_RETRY;
                if (fail_since < 0) fail_since = dt__now_ms();
            } else if (o == OUT_FAIL) {
                if (!first) {
                    first = err;
                    snprintf(first_msg, sizeof first_msg, "%s", dt_errmsg());
                }
                l->state = LINK_DONE;
            } else if (l->state == LINK_WAIT) {
                if (!waited_logged) {
                    clog_(c, "ps-%d (%s) has no values yet; waiting", l->index, l->addr);
                    waited_logged = 1;
                }
                l->wait_until = dt__now_ms() + wait_delay;
            } else if (type == DT__PS_INIT && acks) {
                *acks += l->step != 0;
            }
        }
        /* anything left? */
        int retry = 0, wait = 0;
        for (int i = 0; i < c->nps; i++) {
            retry += c->links[i].state == LINK_RETRY || c->links[i].state == LINK_INIT;
            wait += c->links[i].state == LINK_WAIT;
        }
        if (!retry && !wait) break;
        if (first && !retry) break; /* a refusal is known: do not wait on another PS */
        if (!retry && wait) {
            dt__sleep_ms((double)wait_delay);
            wait_delay = wait_delay * 2 > 500 ? 500 : wait_delay * 2;
        }
    }
    if (first) return dt_err_set(first, "%s", first_msg);
    if (step) {
        int64_t m = INT64_MAX;
        for (int i = 0; i < c->nps; i++)
            if (c->links[i].step < m) m = c->links[i].step;
        *step = c->nps ? m : 0;
    }
    return DT_OK;
}

dt_err dt_ps_client_init(dt_ps_client *c, int *taken) {
    int acks = 0;
    dt_err err = run(c, DT__PS_INIT, NULL, &acks);
    if (taken) *taken = acks;
    return err;
}

dt_err dt_ps_client_pull(dt_ps_client *c, int64_t *step) {
    return run(c, DT__PS_PULL, step, NULL);
}

dt_err dt_ps_client_push(dt_ps_client *c, int64_t *step) {
    return run(c, DT__PS_PUSH, step, NULL);
}

dt_err dt_ps_client_push_pull(dt_ps_client *c, int64_t *step) {
    return run(c, DT__PS_PUSH_PULL, step, NULL);
}

dt_err dt_ps_client_save(dt_ps_client *c) {
    return run(c, DT__PS_SAVE, NULL, NULL);
}

/* ---- life cycle ---- */

static dt_err split_addr(pslink *l, const char *addr) {
    int rc = strlen(addr) >= sizeof l->addr
                 ? DT__HOSTPORT_FORM
                 : dt__hostport_split(addr, l->host, sizeof l->host, &l->portno);
    if (rc)
        return dt_err_set(DT_ERR_ARG, "ps client: addrs[%d]: \"%s\"%s", l->index, addr,
                          dt__hostport_why(rc));
    snprintf(l->addr, sizeof l->addr, "%s", addr);
    return DT_OK;
}

dt_err dt_ps_client_open(dt_ps_client **out, const dt_ps_client_conf *conf, dt_param *const *params,
                         int n) {
    DT_ASSERT(out && conf && n >= 0 && (n == 0 || params));
    *out = NULL;
    if (conf->nps < 1 || !conf->addrs)
        return dt_err_set(DT_ERR_ARG, "ps client: nps must be >= 1 with an address each, got %d",
                          conf->nps);
    if (conf->max_frame < 0 || conf->retry_ms < 0)
        return dt_err_set(DT_ERR_ARG, "ps client: max_frame and retry_ms must be >= 0");
    if (conf->wire_dtype != DT_PS_WIRE_F32 && conf->wire_dtype != DT_PS_WIRE_BF16)
        return dt_err_set(DT_ERR_ARG, "ps client: wire_dtype %d is neither float32 nor bfloat16",
                          (int)conf->wire_dtype);
    dt_ps_client *c = calloc(1, sizeof *c);
    if (!c) return dt_err_set(DT_ERR_NOMEM, "ps client: out of memory");
    dt_err err = DT_OK;
    int *owner = NULL;
    int64_t *numel = NULL;
    c->conf = *conf;
    if (!c->conf.max_frame) c->conf.max_frame = DT_PS_DEFAULT_MAX_FRAME;
    if (!c->conf.retry_ms) c->conf.retry_ms = 120000;
    c->nps = conf->nps;
    c->nparams = n;
    c->token = strdup(conf->token ? conf->token : "");
    c->replica = strdup(conf->replica ? conf->replica : "");
    c->links = calloc((size_t)c->nps, sizeof *c->links);
    for (int i = 0; c->links && i < c->nps; i++)
        c->links[i].fd = -1; /* before any exit: close() must not see fd 0 */
    if (n > 0) {
        c->params = malloc((size_t)n * sizeof *c->params);
        owner = malloc((size_t)n * sizeof *owner);
        numel = malloc((size_t)n * sizeof *numel);
    }
    if (!c->token || !c->replica || !c->links || (n > 0 && (!c->params || !owner || !numel)))
        goto nomem;
    c->conf.addrs = NULL; /* not kept */
    c->conf.token = c->token;
    c->conf.replica = c->replica;
    if (strlen(c->token) > DT__FRAME_TOKEN_MAX || strlen(c->replica) > 1024) {
        err =
            dt_err_set(DT_ERR_ARG, "ps client: token and replica name must be at most 1024 bytes");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        c->params[i] = params[i];
        numel[i] = dt_tensor_numel(&params[i]->value);
        size_t nl = strlen(params[i]->name);
        if (nl == 0 || nl > DT__PS_NAME_MAX) {
            err = dt_err_set(DT_ERR_ARG,
                             "ps client: variable %d: name \"%s\" must have 1 to %d characters", i,
                             params[i]->name, DT__PS_NAME_MAX);
            goto fail;
        }
    }
    if (n > 0) dt_ps_partition(numel, n, c->nps, owner);
    for (int p = 0; p < c->nps; p++) {
        pslink *l = &c->links[p];
        l->index = p;
        if (!conf->addrs[p]) {
            err = dt_err_set(DT_ERR_ARG, "ps client: addrs[%d] is NULL", p);
            goto fail;
        }
        if ((err = split_addr(l, conf->addrs[p]))) goto fail;
        for (int i = 0; i < n; i++)
            l->nvars += owner[i] == p;
        l->vars = calloc((size_t)l->nvars + 1, sizeof *l->vars);
        l->meta_off = calloc((size_t)l->nvars + 1, sizeof *l->meta_off);
        l->meta_len = calloc((size_t)l->nvars + 1, sizeof *l->meta_len);
        l->iov = calloc((size_t)(2 * l->nvars + 2), sizeof *l->iov);
        l->lay = calloc((size_t)l->nvars + 1, sizeof *l->lay);
        l->narrow_off = calloc((size_t)l->nvars + 1, sizeof *l->narrow_off);
        l->work = calloc((size_t)(2 * l->nvars + 2), sizeof *l->work);
        l->own_val = calloc((size_t)l->nvars + 1, sizeof *l->own_val);
        l->own_grad = calloc((size_t)l->nvars + 1, sizeof *l->own_grad);
        if (!l->vars || !l->meta_off || !l->meta_len || !l->iov || !l->work || !l->lay ||
            !l->narrow_off || !l->own_val || !l->own_grad)
            goto nomem;
        if ((err = dt__ps_reader_init(&l->rd, -1, READ_BUF))) goto fail;
        size_t mb = 4, maxm = 4;
        for (int i = 0, k = 0; i < n; i++) {
            if (owner[i] != p) continue;
            l->vars[k] = i;
            l->lay[k] = l->lay_total;
            l->lay_total += dt__ps_shm_floats(numel[i]);
            l->meta_off[k] = mb;
            l->meta_len[k] = dt__ps_meta_size(params[i]->name, &params[i]->value.shape);
            if (l->meta_len[k] > maxm) maxm = l->meta_len[k];
            mb += l->meta_len[k];
            l->list_bytes += (uint64_t)numel[i] * sizeof(float);
            l->narrow_off[k] = (size_t)(l->push_bytes / sizeof(uint16_t));
            l->push_bytes += (uint64_t)numel[i] * sizeof(uint16_t);
            k++;
        }
        if (conf->wire_dtype == DT_PS_WIRE_BF16) {
            l->narrow = malloc(l->push_bytes ? (size_t)l->push_bytes : 1);
            if (!l->narrow) goto nomem;
            l->push_bytes += mb;
        } else {
            l->push_bytes = l->list_bytes + mb;
        }
        l->list_bytes += mb;
        if (l->list_bytes > (uint64_t)c->conf.max_frame) {
            err = dt_err_set(DT_ERR_ARG,
                             "ps client: ps-%d's frames (%" PRIu64
                             " bytes) exceed max_frame %" PRId64,
                             p, l->list_bytes, c->conf.max_frame);
            goto fail;
        }
        l->meta = malloc(mb);
        l->scratch = malloc(maxm);
        if (!l->meta || !l->scratch) goto nomem;
        dt__put32(l->meta, (uint32_t)l->nvars);
        l->iov[0] = (struct iovec){l->hdr, DT__PS_HDR};
        l->iov[1] = (struct iovec){l->meta, 4};
        for (int k = 0; k < l->nvars; k++) {
            const dt_param *prm = params[l->vars[k]];
            l->own_val[k] = prm->value.data;
            l->own_grad[k] = prm->grad.data;
            dt__ps_meta_encode(l->meta + l->meta_off[k], prm->name, &prm->value.shape);
            l->iov[2 + 2 * k] = (struct iovec){l->meta + l->meta_off[k], l->meta_len[k]};
            l->iov[3 + 2 * k] = (struct iovec){
                prm->grad.data, (size_t)dt_tensor_numel(&prm->value) * sizeof(float)};
        }
    }
    free(owner);
    free(numel);
    *out = c;
    return DT_OK;
nomem:
    err = dt_err_set(DT_ERR_NOMEM, "ps client: out of memory");
fail:
    free(owner);
    free(numel);
    dt_ps_client_close(c);
    return err;
}

void dt_ps_client_close(dt_ps_client *c) {
    if (!c) return;
    for (int i = 0; c->links && i < c->nps; i++) {
        pslink *l = &c->links[i];
        link_close(l);
        lane_unbind(c, l);
        dt__ps_reader_free(&l->rd);
        free(l->vars);
        free(l->meta_off);
        free(l->meta_len);
        free(l->iov);
        free(l->work);
        free(l->lay);
        free(l->narrow);
        free(l->narrow_off);
        free(l->own_val);
        free(l->own_grad);
        dt__shm_free(&l->shm);
        free(l->meta);
        free(l->scratch);
    }
    free(c->links);
    free(c->params);
    free(c->token);
    free(c->replica);
    free(c);
}

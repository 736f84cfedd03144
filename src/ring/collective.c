/*
 * collective.c - the ring's all-reduce and broadcast (include/dtrain/ring.h, docs/WIRE.md).
 *
 * Design
 *
 * Every collective is compiled into a plan: the list of DATA frames this member sends to
 * the next member, in order, and the list it receives from the previous one, in order. Both
 * ends of a connection derive the same list from the call's arguments, so every frame's
 * sequence number and length is known before it arrives: a header that is not exactly the
 * expected one (magic, version, type, sequence, length) fails the call before a byte of its
 * payload is read. The plan has one dependency rule: send item i (i >= free) may go once
 * i - free + 1 receive items are complete, where `free` is the number of items that depend
 * on nothing. That single rule expresses every collective here:
 *
 *   ring all-reduce  reduce-scatter then all-gather over `size` segments, each cut in
 *                    chunk_bytes chunks. Reduce-scatter step k sends segment (rank - k) and
 *                    receives segment (rank - k - 1), which it adds into data; all-gather step
 *                    k sends segment (rank + 1 - k) and receives segment (rank - k) straight
 *                    into data. The segment sent at step k + 1 is the one received at step k,
 *                    so chunk c of it can go as soon as chunk c arrived: the send and receive
 *                    lists line up item for item, offset by the chunks of the first step
 *                    (free). The owner of a segment (the member that adds its last
 *                    contribution) sends its value round unchanged, so every member ends
 *                    with the same bits.
 *   small all-reduce every member's whole buffer goes round the ring (size - 1 steps instead of
 *                    2(size - 1): latency, not bandwidth, is what counts below
 *                    dt__ring_small_bytes); each member keeps them all and sums them in rank
 *                    order, so again every member has the same bits.
 *   broadcast        the root sends chunks (free = all); every other member receives them
 *                    into the buffer and forwards each (free = 0) unless its next is the root.
 *
 * bfloat16 on the wire (conf.wire_dtype; docs/WIRE.md, "Ring wire dtype"): the all-reduce's
 * values travel narrowed (core/bf16-impl.h: round to nearest even, a NaN stays a quiet NaN)
 * while every sum is taken in float32. The plan is the same with items of half the bytes
 * (chunk_bytes is still the frame's payload: twice the values a chunk) and three duties:
 * a reduce-scatter send narrows its float32 partial sum into r->wire (the data's narrow
 * image, element for element) as the item is first offered; a reduce-scatter receive widens
 * the staged values and adds them into data; an all-gather receive lands in r->wire (from
 * which the next step forwards it unchanged, as float32 forwards data) and is widened into
 * data. The owner of a segment narrows its final float32 sum once (all-gather step 0) and
 * writes the rounded value back into its own data: it sends the bfloat16 value, so it must
 * keep that value too, or the members would end with different weights. Every member thus
 * ends with the same bits, each a bfloat16 value. The small all-reduce narrows each member's
 * whole buffer once (its owner included) and sums the widened buffers in rank order: the
 * same bits everywhere again, a float32 sum of bfloat16 values.
 * The region of r->wire a reduce-scatter send narrows into is overwritten by the all-gather
 * receive of the same segment only after that send left: the all-gather value depends,
 * through the ring, on it (the argument below).
 * The shared-memory lane carries the same bfloat16 items rather than float32: memory on one
 * host is not the bottleneck bf16 is for (links between hosts are), but a ring mixes lanes
 * and TCP connections (2 hosts x 2 members), and its members must round at the same points
 * of the algorithm whatever carries each hop, or their weights would differ; one rule for
 * every hop keeps the bits identical (and halves the lane's copies besides).
 *
 * Receiving never waits for sending (data received is never data still to be sent: a
 * segment's all-gather value depends, through the ring, on this member's own reduce-scatter
 * send of it), so the engine cannot deadlock whatever the sizes and socket buffers.
 *
 * The engine is one thread's poll loop over the two non-blocking sockets and the abort
 * eventfd. Sends gather every ready item (header and payload iovecs, straight from the
 * caller's buffer) into one sendmsg; receives read the rest of the current payload and the
 * next item's header in one recvmsg (a header is validated before its payload is read, and
 * the scatter list never reaches beyond the call's last frame, so bytes of the peer's next
 * call stay in the socket). Reduce-scatter payloads land in a chunk-sized staging buffer
 * and are added into data right away (the add loop vectorizes; the chunk is still in cache).
 * A socket is polled only once a call returned less than was asked for, so a busy stream
 * costs about one syscall per direction per wake-up.
 *
 * Between neighbours on one host (lane.c) the same items travel through a shared byte ring
 * instead of the socket: lane_send copies every ready item that fits into it and publishes
 * the write position in the segment's control block, lane_recv takes what it shows
 * (reduce-scatter values are added straight from the ring, no staging) and publishes the read
 * position. Before sleeping in poll a side spins briefly on the other's position, then sets
 * its wait flag; the other rings a doorbell (SHM_DATA, SHM_FREE) only for a flag it finds set,
 * so a busy pair makes no syscalls and a sleeper is always woken. The rest - the plan, the
 * dependency rule, the poll loop with its timeout and abort, the failures below, seen on the
 * sockets - is the same, and the two directions choose their lane independently. A doorbell
 * still unsent keeps the call going: the neighbour may sleep waiting for it.
 *
 * A ring of 2 members on lanes that was opened with shared_floats sums data lying in the
 * members' shared buffers in place instead (below: each adds its half straight from the
 * other's buffer, then copies the other's half; no plan, no frame), or leaves the sum to the
 * caller, who reads the other's buffer where it lies (dt_ring_allreduce_pair).
 *
 * Failures (EOF, reset, a bad frame, timeout_ms without progress, dt_ring_abort) shut both
 * sockets down at once, so that the neighbours fail promptly too instead of waiting out
 * their timeouts, mark the ring broken and record the peer to blame: the previous member
 * for receiving, the next for sending; for a timeout the next when a send was blocked on a
 * full socket buffer (the next member is not reading), otherwise the previous. The code
 * says which: DT_ERR_NETWORK (closed, reset), DT_ERR_TIMEOUT (no progress), DT_ERR_PROTOCOL
 * (a frame that is not the one expected), DT_ERR_STATE (aborted, or the ring already broken).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/bf16-impl.h"
#include "core/clock-impl.h"
#include "core/futex-impl.h"
#include "ring/ring-impl.h"

#define SEND_IOV 64 /* iovecs per sendmsg: 32 frames */

typedef struct item {
    uint8_t *p; /* send: the payload; receive: where it goes (reduce: the data to add into;
                 * bfloat16: the payload's place in r->wire) */
    size_t len; /* payload bytes (> 0) */
    int step;   /* for messages */
    int reduce; /* receive: add into p (bfloat16: into f) through the staging buffer */
    int staged; /* receive: the payload goes to the staging buffer (read with its header) */
    /* bfloat16 all-reduce (len / 2 values): */
    float *f;   /* the float32 data behind the payload */
    int narrow; /* send: narrow f into p before the item is first offered */
    int round;  /* send: and write the narrowed values back into f (the segment's owner) */
    int widen;  /* receive: widen p into f as it comes */
} item;

typedef struct plan {
    const char *op;
    int bf16;         /* all-reduce values are bfloat16 on the wire */
    int reduce_steps; /* steps below this are reduce-scatter (all-reduce), for messages */
    item *send, *recv;
    size_t nsend, nrecv, free;
} plan;

/* ---- plans ---- */

static dt_err items_reserve(dt_ring *r, size_t n) {
    if (n <= r->items_cap) return DT_OK;
    size_t cap = r->items_cap ? r->items_cap : 64;
    while (cap < n)
        cap *= 2;
    void *p = realloc(r->items, cap * sizeof(item));
    if (!p) return dt_err_set(DT_ERR_NOMEM, "ring: out of memory for %zu transfer items", cap);
    r->items = p;
    r->items_cap = cap;
    return DT_OK;
}

static dt_err stage_reserve(dt_ring *r, size_t bytes) {
    if (bytes <= r->stage_cap) return DT_OK;
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, bytes) != 0)
        return dt_err_set(DT_ERR_NOMEM, "ring: out of memory for a %zu-byte staging buffer", bytes);
    free(r->stage);
    r->stage = p;
    r->stage_cap = bytes;
    return DT_OK;
}

/* The pipelining unit of this member's plans. On a TCP connection both ends must cut the
 * same frames: chunk_bytes, the ring's. A lane carries a byte stream whose bytes do not
 * depend on the cut (every cut is a multiple of 4 from a 4-aligned start, and each call's
 * stream starts 4-aligned), so a member whose two connections are lanes pipelines in finer
 * pieces: waking a neighbour costs microseconds there, and with more members than cores
 * (4 on 2) 64 KiB measured about 1.6x faster than 256 KiB at 1 MiB (docs/PERFORMANCE.md). */
static size_t plan_chunk(const dt_ring *r) {
    return r->in.on && r->out.on && r->chunk > DT__RING_LANE_CHUNK ? DT__RING_LANE_CHUNK : r->chunk;
}

static size_t chunks_of(size_t bytes, size_t chunk) {
    return (bytes + chunk - 1) / chunk;
}

/* Append the chunks of [p, p + bytes) to list at *k (broadcast: bytes as they are). */
static void add_chunks(item *list, size_t *k, uint8_t *p, size_t bytes, size_t chunk, int step) {
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t len = bytes - off < chunk ? bytes - off : chunk;
        list[(*k)++] = (item){.p = p + off, .len = len, .step = step};
    }
}

/* Segment s of n floats over P members: the first n % P segments get one float more. */
static void segment(size_t n, int P, int s, size_t *off, size_t *len) {
    size_t base = n / (size_t)P, extra = n % (size_t)P, us = (size_t)s;
    *len = base + (us < extra);
    *off = us * base + (us < extra ? us : extra);
}

static int mod(int a, int P) {
    return ((a % P) + P) % P;
}

static dt_err wire_reserve(dt_ring *r, size_t n) {
    if (n <= r->wire_cap) return DT_OK;
    uint16_t *p = NULL;
    if (posix_memalign((void **)&p, 64, n * 2) != 0)
        return dt_err_set(DT_ERR_NOMEM, "ring: out of memory for %zu bfloat16 values", n);
    free(r->wire);
    r->wire = p;
    r->wire_cap = n;
    return DT_OK;
}

/* What a segment's items do (add_segment). */
enum { SEG_SEND, SEG_SEND_OWN, SEG_RECV_ADD, SEG_RECV };

/* Append the items of values [off, off + len) of data to list at *k, ce values an item:
 * float32 straight from / into data, or (pl->bf16) bfloat16 from / into r->wire. */
static void add_segment(const dt_ring *r, const plan *pl, item *list, size_t *k, float *data,
                        size_t off, size_t len, size_t ce, int step, int what) {
    for (size_t o = 0; o < len; o += ce) {
        size_t m = len - o < ce ? len - o : ce;
        item it = {.step = step};
        if (pl->bf16) {
            it.p = (uint8_t *)(r->wire + off + o);
            it.len = m * 2;
            it.f = data + off + o;
            it.narrow = what == SEG_SEND || what == SEG_SEND_OWN;
            it.round = what == SEG_SEND_OWN;
            it.widen = what == SEG_RECV;
        } else {
            it.p = (uint8_t *)(data + off + o);
            it.len = m * 4;
        }
        it.reduce = it.staged = what == SEG_RECV_ADD;
        list[(*k)++] = it;
    }
}

static dt_err plan_ring(dt_ring *r, plan *pl, float *data, size_t n) {
    int P = r->size, me = r->rank;
    size_t esz = pl->bf16 ? 2 : 4;
    size_t ce = plan_chunk(r) / esz, per = 0; /* values per chunk; items per direction */
    for (int s = 0; s < P; s++) {
        size_t off, len;
        segment(n, P, s, &off, &len);
        per += chunks_of(len, ce);
    }
    /* each direction touches every segment but one in each phase */
    dt_err err = items_reserve(r, 4 * per);
    if (err) return err;
    size_t seg_max = (n + (size_t)P - 1) / (size_t)P;
    if ((err = stage_reserve(r, (seg_max < ce ? seg_max : ce) * esz))) return err;
    if (pl->bf16 && (err = wire_reserve(r, n))) return err;
    item *it = r->items;
    pl->send = it;
    pl->recv = it + 2 * per;
    pl->nsend = pl->nrecv = 0;
    pl->reduce_steps = P - 1;
    for (int k = 0; k < 2 * (P - 1); k++) {
        int rs = k < P - 1;
        int ss = rs ? mod(me - k, P) : mod(me + 1 - (k - (P - 1)), P);
        int rsg = rs ? mod(me - k - 1, P) : mod(me - (k - (P - 1)), P);
        /* bfloat16: reduce-scatter sends narrow the partial sums, all-gather step 0 sends
         * this member's own segment's final sum (narrowed and kept rounded), the later steps
         * forward what came */
        int send = rs ? SEG_SEND : k == P - 1 ? SEG_SEND_OWN : -1;
        size_t off, len;
        segment(n, P, ss, &off, &len);
        add_segment(r, pl, pl->send, &pl->nsend, data, off, len, ce, k, send);
        if (k == 0) pl->free = pl->nsend;
        segment(n, P, rsg, &off, &len);
        add_segment(r, pl, pl->recv, &pl->nrecv, data, off, len, ce, k,
                    rs ? SEG_RECV_ADD : SEG_RECV);
    }
    return DT_OK;
}

/* Slots 0..P-1 of n values in r->stage (float32, or bfloat16 with pl->bf16), slot q holding
 * member q's buffer. */
static dt_err plan_small(dt_ring *r, plan *pl, float *data, size_t n) {
    int P = r->size, me = r->rank;
    size_t bytes = n * (pl->bf16 ? 2 : 4); /* a slot */
    dt_err err = items_reserve(r, 2 * (size_t)P);
    if (err) return err;
    if ((err = stage_reserve(r, (size_t)P * bytes))) return err;
    item *it = r->items;
    uint8_t *slots = (uint8_t *)r->stage;
    pl->send = it;
    pl->recv = it + P;
    pl->nsend = pl->nrecv = 0;
    pl->free = 1;
    pl->reduce_steps = 0;
    if (pl->bf16) /* this member's own values, rounded as every other member sees them */
        dt__bf16_narrow((uint16_t *)(void *)(slots + (size_t)me * bytes), data, n);
    else
        memcpy(slots + (size_t)me * bytes, data, bytes);
    for (int k = 0; k < P - 1; k++) {
        uint8_t *from = slots + (size_t)mod(me - k, P) * bytes;
        uint8_t *to = slots + (size_t)mod(me - k - 1, P) * bytes;
        pl->send[pl->nsend++] = (item){.p = from, .len = bytes, .step = k};
        pl->recv[pl->nrecv++] = (item){.p = to, .len = bytes, .step = k, .staged = 1};
    }
    return DT_OK;
}

static dt_err plan_broadcast(dt_ring *r, plan *pl, uint8_t *bytes, size_t len, int root) {
    size_t chunk = plan_chunk(r), per = chunks_of(len, chunk);
    dt_err err = items_reserve(r, 2 * per);
    if (err) return err;
    item *it = r->items;
    pl->send = it;
    pl->recv = it + per;
    pl->nsend = pl->nrecv = 0;
    pl->reduce_steps = 0;
    int step = mod(r->rank - root, r->size); /* hops from the root */
    if (r->rank == root) {
        add_chunks(pl->send, &pl->nsend, bytes, len, chunk, step);
        pl->free = pl->nsend;
        return DT_OK;
    }
    add_chunks(pl->recv, &pl->nrecv, bytes, len, chunk, step - 1);
    if (r->next != root) add_chunks(pl->send, &pl->nsend, bytes, len, chunk, step);
    pl->free = 0;
    return DT_OK;
}

/* ---- the engine ---- */

static void add_f32(float *restrict d, const float *restrict s, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] += s[i];
}

typedef struct engine {
    dt_ring *r;
    plan *pl;
    size_t si, soff;  /* the item being sent, bytes of its frame (header included) sent */
    size_t prepared;  /* send items before this have their payload ready (narrowed) */
    size_t ri, rpgot; /* the item being received, payload bytes received */
    uint8_t rhdr[DT__FRAME_HDR];
    size_t rhgot;      /* header bytes of item ri received (== DT__FRAME_HDR: in its payload) */
    int prev_readable; /* lane: poll saw the previous member's socket readable */
} engine;

static const char *phase(const plan *pl, int step) {
    if (pl->reduce_steps == 0) return "";
    return step < pl->reduce_steps ? " (reduce-scatter)" : " (all-gather)";
}

/* dt_ring_abort ended the call: the ring is broken, no peer to blame; the sockets shut down
 * so that the neighbours notice. */
static dt_err abort_call(dt_ring *r, const char *op) {
    r->broken = 1;
    r->failed_peer = -1;
    if (r->next_fd >= 0) shutdown(r->next_fd, SHUT_RDWR);
    if (r->prev_fd >= 0) shutdown(r->prev_fd, SHUT_RDWR);
    return dt_err_set(DT_ERR_STATE, "ring gen %" PRId64 " rank %d: %s: aborted", r->generation,
                      r->rank, op);
}

/* Fail the call: record, log, shut the sockets down so that the neighbours notice. */
static dt_err fail(engine *e, dt_err code, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static dt_err fail(engine *e, dt_err code, int peer, const char *fmt, ...) {
    dt_ring *r = e->r;
    char what[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    r->broken = 1;
    r->failed_peer = peer;
    if (r->next_fd >= 0) shutdown(r->next_fd, SHUT_RDWR);
    if (r->prev_fd >= 0) shutdown(r->prev_fd, SHUT_RDWR);
    dt__ring_log(r, "%s failed: %s", e->pl->op, what);
    return dt_err_set(code, "ring gen %" PRId64 " rank %d: %s: %s", r->generation, r->rank,
                      e->pl->op, what);
}

static int send_ready(const engine *e, size_t i) {
    return i < e->pl->free || e->ri >= i - e->pl->free + 1;
}

/* Before send item i (ready, the next unprepared) is first offered: narrow its values into
 * its payload (bfloat16), and for the segment's owner keep the rounded values. */
static void prepare(engine *e, size_t i) {
    const item *it = &e->pl->send[i];
    if (it->narrow) {
        dt__bf16_narrow((uint16_t *)(void *)it->p, it->f, it->len / 2);
        if (it->round) dt__bf16_widen(it->f, (const uint16_t *)(const void *)it->p, it->len / 2);
    }
    e->prepared = i + 1;
}

/* Receive item it's payload is whole in its place: add or widen it into the data. */
static void received(engine *e, const item *it) {
    if (it->reduce && e->pl->bf16)
        dt__bf16_add(it->f, (const uint16_t *)(const void *)e->r->stage, it->len / 2);
    else if (it->reduce)
        add_f32((float *)(void *)it->p, e->r->stage, it->len / 4);
    else if (it->widen)
        dt__bf16_widen(it->f, (const uint16_t *)(const void *)it->p, it->len / 2);
}

/* One sendmsg of every ready frame. 1: all offered bytes went; 0: the socket is full;
 * -1: failed (errno). */
static int send_some(engine *e, size_t *sent_bytes) {
    dt_ring *r = e->r;
    plan *pl = e->pl;
    struct iovec iov[SEND_IOV];
    uint8_t hdr[SEND_IOV / 2][DT__FRAME_HDR];
    int n = 0, nh = 0;
    size_t offered = 0;
    for (size_t i = e->si; i < pl->nsend && n + 2 <= SEND_IOV && send_ready(e, i); i++) {
        if (i == e->prepared) prepare(e, i);
        item *it = &pl->send[i];
        size_t skip = i == e->si ? e->soff : 0;
        if (skip < DT__FRAME_HDR) {
            dt__frame_encode(hdr[nh], DT__RING_DATA, (int64_t)(r->send_seq + i), it->len);
            iov[n++] = (struct iovec){hdr[nh++] + skip, DT__FRAME_HDR - skip};
            offered += DT__FRAME_HDR - skip;
            skip = 0;
        } else {
            skip -= DT__FRAME_HDR;
        }
        iov[n++] = (struct iovec){it->p + skip, it->len - skip};
        offered += it->len - skip;
    }
    if (n == 0) return 1;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t k;
    do
        k = sendmsg(r->next_fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (k < 0 && errno == EINTR);
    if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    *sent_bytes = (size_t)k;
    size_t left = (size_t)k;
    while (left > 0) {
        size_t frame = DT__FRAME_HDR + pl->send[e->si].len - e->soff;
        if (left < frame) {
            e->soff += left;
            break;
        }
        left -= frame;
        e->si++;
        e->soff = 0;
    }
    return (size_t)k == offered;
}

/* Check the header of receive item e->ri. */
static dt_err check_hdr(engine *e) {
    dt_ring *r = e->r;
    const item *it = &e->pl->recv[e->ri];
    dt__frame_hdr h;
    dt__frame_decode(e->rhdr, &h);
    uint64_t seq = r->recv_seq + e->ri;
    if (dt__frame_check(&h) || h.type != DT__RING_DATA || h.arg != (int64_t)seq || h.len != it->len)
        return fail(e, DT_ERR_PROTOCOL, r->prev,
                    "step %d%s: from rank %d (%s): a frame with magic 0x%08" PRIx32
                    ", version %u, type %u, sequence %" PRId64 ", %" PRIu64
                    " bytes where DATA sequence %" PRIu64 " of %zu bytes was expected",
                    it->step, phase(e->pl, it->step), r->prev, r->peers[r->prev].addr, h.magic,
                    h.version, h.type, h.arg, h.len, seq, it->len);
    return DT_OK;
}

/* One recvmsg. 1: got what was asked for; 0: the socket ran dry; -1: failed (errno; 0 for
 * EOF); -2: a bad header (error set). */
static int recv_some(engine *e, size_t *got) {
    dt_ring *r = e->r;
    plan *pl = e->pl;
    item *it = &pl->recv[e->ri];
    struct iovec iov[2];
    int n = 0;
    uint8_t *dst = it->reduce ? (uint8_t *)r->stage : it->p;
    if (e->rhgot < DT__FRAME_HDR) {
        iov[n++] = (struct iovec){e->rhdr + e->rhgot, DT__FRAME_HDR - e->rhgot};
        /* a payload bound for the staging buffer may come along: it is not used before the
         * header has been checked */
        if (it->staged) iov[n++] = (struct iovec){dst, it->len};
    } else {
        iov[n++] = (struct iovec){dst + e->rpgot, it->len - e->rpgot};
        /* the next header may come along, never anything beyond this call */
        if (e->ri + 1 < pl->nrecv) iov[n++] = (struct iovec){e->rhdr, DT__FRAME_HDR};
    }
    size_t asked = iov[0].iov_len + (n > 1 ? iov[1].iov_len : 0);
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t k;
    do
        k = recvmsg(r->prev_fd, &m, MSG_DONTWAIT);
    while (k < 0 && errno == EINTR);
    if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    if (k == 0) {
        errno = 0;
        return -1;
    }
    *got = (size_t)k;
    size_t left = (size_t)k;
    if (e->rhgot < DT__FRAME_HDR) {
        size_t h = left < DT__FRAME_HDR - e->rhgot ? left : DT__FRAME_HDR - e->rhgot;
        e->rhgot += h;
        left -= h;
        if (e->rhgot < DT__FRAME_HDR) return 0; /* a header cut short: the socket is dry */
        if (check_hdr(e)) return -2;
        if (left == 0) return (size_t)k == asked;
    }
    size_t pay = it->len - e->rpgot;
    if (left < pay) {
        e->rpgot += left;
        return 0; /* a payload cut short: the socket is dry */
    }
    received(e, it);
    left -= pay;
    e->ri++;
    e->rpgot = 0;
    e->rhgot = left; /* bytes of the next header (at most DT__FRAME_HDR) */
    if (e->rhgot == DT__FRAME_HDR && check_hdr(e)) return -2;
    return (size_t)k == asked;
}

/* ---- the shared-memory lane (lane.c): the same items through a byte ring ---- */

_Static_assert(sizeof(dt__ring_ctl) == DT__RING_CTL, "the lane's control block");

static uint64_t align4(uint64_t p) {
    return (p + 3) & ~(uint64_t)3;
}

/* Copy len bytes between the ring (position pos) and p, in at most two pieces. */
static void ring_copy(const dt__ring_lane *L, uint64_t pos, uint8_t *p, size_t len, int into) {
    size_t at = (size_t)(pos % L->cap), first = L->cap - at < len ? L->cap - at : len;
    if (into) {
        memcpy(L->data + at, p, first);
        memcpy(L->data, p + first, len - first);
    } else {
        memcpy(p, L->data + at, first);
        memcpy(p + first, L->data, len - first);
    }
}

/* Add len bytes of floats at ring position pos (4-aligned) into d. */
static void ring_add(const dt__ring_lane *L, uint64_t pos, float *d, size_t len) {
    size_t at = (size_t)(pos % L->cap), first = L->cap - at < len ? L->cap - at : len;
    add_f32(d, (const float *)(const void *)(L->data + at), first / 4);
    add_f32(d + first / 4, (const float *)(const void *)L->data, (len - first) / 4);
}

/* Add len bytes of bfloat16 at ring position pos (2-aligned; cap is a multiple of 4, so no
 * value straddles the wrap) into d, widened. */
static void ring_add_bf16(const dt__ring_lane *L, uint64_t pos, float *d, size_t len) {
    size_t at = (size_t)(pos % L->cap), first = L->cap - at < len ? L->cap - at : len;
    dt__bf16_add(d, (const uint16_t *)(const void *)(L->data + at), first / 2);
    dt__bf16_add(d + first / 2, (const uint16_t *)(const void *)L->data, (len - first) / 2);
}

/* The peer's published position (the receiving lane's head, the sending lane's tail),
 * checked: never back, never beyond what can be there. 0, or -2 with the call failed. */
static int lane_peek(engine *e, dt__ring_lane *L, int recv_side) {
    dt_ring *r = e->r;
    uint64_t v =
        atomic_load_explicit(recv_side ? &L->ctl->head : &L->ctl->tail, memory_order_acquire);
    uint64_t lo = recv_side ? L->head : L->tail, hi = recv_side ? L->tail + L->cap : L->head;
    if (v < lo || v > hi) {
        int peer = recv_side ? r->prev : r->next;
        fail(e, DT_ERR_PROTOCOL, peer,
             "from rank %d (%s): shared memory %s %" PRIu64 " where %" PRIu64 " to %" PRIu64
             " was possible",
             peer, r->peers[peer].addr, recv_side ? "written" : "consumed", v, lo, hi);
        return -2;
    }
    if (recv_side)
        L->head = v;
    else
        L->tail = v;
    return 0;
}

/* Read the doorbells waiting on fd (SHM_DATA on the receiving lane, SHM_FREE on the sending
 * one): they only wake the poll (the positions are in ctl), but each is checked. 1: read;
 * -1: failed (errno; 0 for EOF); -2: a bad doorbell (error set). */
static int lane_bells(engine *e, dt__ring_lane *L, int fd, int type, int peer) {
    dt_ring *r = e->r;
    for (;;) {
        size_t ask = sizeof L->in - L->in_got;
        ssize_t k = recv(fd, L->in + L->in_got, ask, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
        if (k == 0) {
            errno = 0;
            return -1;
        }
        L->in_got += (size_t)k;
        size_t off = 0;
        for (; L->in_got - off >= DT__FRAME_HDR; off += DT__FRAME_HDR) {
            dt__frame_hdr h;
            dt__frame_decode(L->in + off, &h);
            /* counts in all: never less than the last doorbell's; SHM_DATA never more than
             * fits, SHM_FREE never more than written */
            uint64_t lo = L->rung;
            uint64_t hi = type == DT__RING_SHM_DATA ? L->tail + L->cap : L->head;
            uint64_t v = (uint64_t)h.arg;
            if (dt__frame_check(&h) || (int)h.type != type || h.len != 0 || v < lo || v > hi) {
                fail(e, DT_ERR_PROTOCOL, peer,
                     "from rank %d (%s): a frame with magic 0x%08" PRIx32
                     ", version %u, type %u, arg %" PRIu64 ", %" PRIu64
                     " bytes where %s of %" PRIu64 " to %" PRIu64 " was expected",
                     peer, r->peers[peer].addr, h.magic, h.version, h.type, v, h.len,
                     type == DT__RING_SHM_DATA ? "SHM_DATA" : "SHM_FREE", lo, hi);
                return -2;
            }
            L->rung = v;
        }
        memmove(L->in, L->in + off, L->in_got - off);
        L->in_got -= off;
        if ((size_t)k < ask) return 1; /* drained */
    }
}

/* Ring the doorbell of type with count v if the peer sleeps on *wait (it cleared the flag
 * being woken), then send what waits. 1 / 0 / -1 as dt__ring_bell_flush. */
static int lane_ring(dt__ring_lane *L, _Atomic uint32_t *wait, int type, uint64_t v, int fd) {
    if (atomic_exchange_explicit(wait, 0, memory_order_seq_cst))
        dt__ring_bell_set(&L->bell, type, v);
    return dt__ring_bell_flush(&L->bell, fd);
}

/* Write every ready item that fits into the next member's ring, publish it. 1: all ready
 * items went; 0: the ring is full or a doorbell waits (poll); -1: failed (errno); -2: a bad
 * position (error set). */
static int lane_send(engine *e, size_t *sent_bytes) {
    dt_ring *r = e->r;
    plan *pl = e->pl;
    dt__ring_lane *L = &r->out;
    if (lane_peek(e, L, 0)) return -2;
    size_t total = 0;
    int full = 0;
    while (e->si < pl->nsend && send_ready(e, e->si)) {
        if (e->si == e->prepared) prepare(e, e->si);
        const item *it = &pl->send[e->si];
        uint64_t pos = e->soff == 0 ? align4(L->head) : L->head;
        if (pos - L->tail >= L->cap) {
            full = 1;
            break;
        }
        size_t room = L->cap - (size_t)(pos - L->tail), len = it->len - e->soff;
        if (len > room) len = room;
        ring_copy(L, pos, it->p + e->soff, len, 1);
        L->head = pos + len;
        e->soff += len;
        total += len;
        if (e->soff == it->len) {
            e->si++;
            e->soff = 0;
        }
    }
    if (total) atomic_store_explicit(&L->ctl->head, L->head, memory_order_seq_cst);
    int rc = lane_ring(L, &L->ctl->rwait, DT__RING_SHM_DATA, L->head, r->next_fd);
    if (rc < 0) return -1;
    *sent_bytes = total;
    return rc && !full;
}

/* Consume what the previous member wrote into the receive items, publish it. 0: nothing more
 * to take now; -1, -2: as lane_bells. */
static int lane_recv(engine *e, size_t *got) {
    dt_ring *r = e->r;
    plan *pl = e->pl;
    dt__ring_lane *L = &r->in;
    int rc = 1, lost = 0;
    if (e->prev_readable) {
        e->prev_readable = 0;
        rc = lane_bells(e, L, r->prev_fd, DT__RING_SHM_DATA, r->prev);
        lost = errno;
        if (rc == -2) return rc;
    }
    if (lane_peek(e, L, 1)) return -2;
    size_t total = 0;
    while (e->ri < pl->nrecv) {
        const item *it = &pl->recv[e->ri];
        uint64_t pos = e->rpgot == 0 ? align4(L->tail) : L->tail;
        if (pos >= L->head) break;
        size_t len = it->len - e->rpgot;
        if (len > L->head - pos) len = (size_t)(L->head - pos);
        /* whole values to add or widen; the rest comes with the next */
        size_t unit = it->reduce ? (pl->bf16 ? 2 : 4) : it->widen ? 2 : 1;
        len -= len % unit;
        if (len == 0) break;
        if (it->reduce && pl->bf16) {
            ring_add_bf16(L, pos, it->f + e->rpgot / 2, len);
        } else if (it->reduce) {
            ring_add(L, pos, (float *)(void *)(it->p + e->rpgot), len);
        } else {
            ring_copy(L, pos, it->p + e->rpgot, len, 0);
            if (it->widen)
                dt__bf16_widen(it->f + e->rpgot / 2,
                               (const uint16_t *)(const void *)(it->p + e->rpgot), len / 2);
        }
        L->tail = pos + len;
        e->rpgot += len;
        total += len;
        if (e->rpgot == it->len) {
            e->ri++;
            e->rpgot = 0;
        }
    }
    *got = total;
    if (e->ri >= pl->nrecv && rc < 0) {
        /* everything came; the previous member is done and gone: it needs no SHM_FREE */
        L->bell.len = L->bell.sent = 0;
        return 0;
    }
    if (rc < 0) {
        errno = lost;
        return -1;
    }
    if (total) atomic_store_explicit(&L->ctl->tail, L->tail, memory_order_seq_cst);
    if (lane_ring(L, &L->ctl->swait, DT__RING_SHM_FREE, L->tail, r->prev_fd) < 0) {
        if (e->ri < pl->nrecv) return -1;
        L->bell.len = L->bell.sent = 0; /* as above: it finished and closed */
    }
    return 0; /* what was written is taken */
}

/* Before sleeping in poll: spin a little on the positions the peers publish (a neighbour on
 * another core is usually microseconds away), then say that this member sleeps, so that
 * the neighbour rings. 1: something moved (do not sleep); 0: sleep. */
static int lane_wait(engine *e, int want_in, int want_out) {
    dt_ring *r = e->r;
    dt__ring_lane *I = want_in ? &r->in : NULL, *O = want_out ? &r->out : NULL;
    if (!I && !O) return 0;
    int64_t until = dt__now_us() + r->spin_us; /* dt_ring_set_spin_us */
    for (int i = 0;; i++) {
        if (I && atomic_load_explicit(&I->ctl->head, memory_order_acquire) != I->head) return 1;
        if (O && atomic_load_explicit(&O->ctl->tail, memory_order_acquire) != O->tail) return 1;
        if (atomic_load_explicit(&r->aborted, memory_order_relaxed)) return 1;
        if ((i & 15) == 15) {
            if (dt__now_us() >= until) break;
            sched_yield(); /* more members than cores: let the neighbour run */
        }
    }
    if (I) atomic_store_explicit(&I->ctl->rwait, 1, memory_order_seq_cst);
    if (O) atomic_store_explicit(&O->ctl->swait, 1, memory_order_seq_cst);
    /* seen after the flag: the neighbour may have published just before it saw the flag */
    if ((I && atomic_load_explicit(&I->ctl->head, memory_order_seq_cst) != I->head) ||
        (O && atomic_load_explicit(&O->ctl->tail, memory_order_seq_cst) != O->tail)) {
        /* no sleep after all: spare the neighbour a doorbell (one already sent is read later) */
        if (I) atomic_store_explicit(&I->ctl->rwait, 0, memory_order_relaxed);
        if (O) atomic_store_explicit(&O->ctl->swait, 0, memory_order_relaxed);
        return 1;
    }
    return 0;
}

static int bell_waits(const dt__ring_lane *L) {
    return L->on && L->bell.sent < L->bell.len;
}

static dt_err run(dt_ring *r, plan *pl) {
    engine e = {.r = r, .pl = pl};
    int can_send = 1, can_recv = 1, moved = 1;
    int64_t last = dt__now_ms();
    /* a lane's doorbell still waiting counts as work: the neighbour waits for it */
    while (e.si < pl->nsend || e.ri < pl->nrecv || bell_waits(&r->out) || bell_waits(&r->in)) {
        if (atomic_load_explicit(&r->aborted, memory_order_relaxed)) goto aborted;
        int progress = 0;
        if (can_send && ((e.si < pl->nsend && send_ready(&e, e.si)) || bell_waits(&r->out))) {
            size_t k = 0;
            int rc = r->out.on ? lane_send(&e, &k) : send_some(&e, &k);
            if (rc == -2) return DT_ERR_PROTOCOL;
            if (rc < 0) {
                const item *it = &pl->send[e.si < pl->nsend ? e.si : pl->nsend - 1];
                return fail(&e, DT_ERR_NETWORK, r->next, "step %d%s: sending to rank %d (%s): %s",
                            it->step, phase(pl, it->step), r->next, r->peers[r->next].addr,
                            errno == EPIPE ? "the connection is closed" : strerror(errno));
            }
            if (rc == 0) can_send = 0;
            progress |= k > 0;
        }
        if (can_recv && (e.ri < pl->nrecv || bell_waits(&r->in))) {
            size_t k = 0;
            int rc = r->in.on ? lane_recv(&e, &k) : recv_some(&e, &k);
            if (rc == -2) return DT_ERR_PROTOCOL;
            if (rc < 0) {
                const item *it = &pl->recv[e.ri < pl->nrecv ? e.ri : pl->nrecv - 1];
                return fail(&e, DT_ERR_NETWORK, r->prev,
                            "step %d%s: receiving from rank %d (%s): %s", it->step,
                            phase(pl, it->step), r->prev, r->peers[r->prev].addr,
                            errno ? strerror(errno) : "the peer closed the connection");
            }
            if (rc == 0) can_recv = 0;
            progress |= k > 0;
        }
        moved |= progress;
        if (progress) continue;
        if (e.si >= pl->nsend && e.ri >= pl->nrecv && !bell_waits(&r->out) && !bell_waits(&r->in))
            break;

        /* nothing moved: wait */
        int64_t now = dt__now_ms();
        if (moved) last = now;
        moved = 0;
        int want_out = e.si < pl->nsend && send_ready(&e, e.si);
        int want_in = e.ri < pl->nrecv;
        if (now - last >= r->timeout_ms) {
            /* only a doorbell left to send (the items are done): its socket is full */
            if (want_out || (!want_in && bell_waits(&r->out))) {
                const item *it = &pl->send[e.si < pl->nsend ? e.si : pl->nsend - 1];
                return fail(&e, DT_ERR_TIMEOUT, r->next,
                            "step %d%s: no progress for %d ms sending to rank %d (%s): it does "
                            "not read",
                            it->step, phase(pl, it->step), r->timeout_ms, r->next,
                            r->peers[r->next].addr);
            }
            const item *it = &pl->recv[e.ri < pl->nrecv ? e.ri : pl->nrecv - 1];
            return fail(&e, DT_ERR_TIMEOUT, r->prev,
                        "step %d%s: no data from rank %d (%s) for %d ms", it->step,
                        phase(pl, it->step), r->prev, r->peers[r->prev].addr, r->timeout_ms);
        }
        if (lane_wait(&e, want_in && r->in.on, want_out && r->out.on)) {
            can_send = can_recv = 1;
            continue;
        }
        struct pollfd pf[3];
        int np = 0, ip = -1, op = -1;
        pf[np++] = (struct pollfd){.fd = r->wake_fd, .events = POLLIN};
        if (want_in || bell_waits(&r->in)) {
            ip = np;
            pf[np++] = (struct pollfd){
                .fd = r->prev_fd,
                .events = (short)((want_in ? POLLIN : 0) | (bell_waits(&r->in) ? POLLOUT : 0))};
        }
        if (e.si < pl->nsend || bell_waits(&r->out)) {
            /* on TCP the next member never sends: readable means it closed; on the lane it
             * sends SHM_FREE doorbells, and only a hang-up means it closed */
            op = np;
            short ev = POLLRDHUP;
            if (r->out.on) {
                ev |= POLLIN;
                if (bell_waits(&r->out)) ev |= POLLOUT;
            }
            if (want_out && !r->out.on) ev |= POLLOUT;
            pf[np++] = (struct pollfd){.fd = r->next_fd, .events = ev};
        }
        int k = poll(pf, (nfds_t)np, (int)(r->timeout_ms - (now - last)));
        if (k < 0 && errno != EINTR)
            return fail(&e, DT_ERR_NETWORK, -1, "poll: %s", strerror(errno));
        if (k <= 0) continue;
        if (pf[0].revents) goto aborted;
        if (ip >= 0 && pf[ip].revents) {
            can_recv = 1;
            e.prev_readable = r->in.on;
        }
        if (op >= 0 && pf[op].revents && r->out.on &&
            !(pf[op].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            /* SHM_FREE doorbells: read them (the ring has room again) */
            int rc = lane_bells(&e, &r->out, r->next_fd, DT__RING_SHM_FREE, r->next);
            if (rc == -2) return DT_ERR_PROTOCOL;
            if (rc < 0) pf[op].revents |= POLLHUP;
            moved = 1;
        }
        if (op >= 0 && pf[op].revents) {
            if (pf[op].revents & (POLLRDHUP | POLLHUP | POLLERR | (r->out.on ? 0 : POLLIN))) {
                const item *it = &pl->send[e.si < pl->nsend ? e.si : pl->nsend - 1];
                return fail(&e, DT_ERR_NETWORK, r->next,
                            "step %d%s: rank %d (%s) closed the connection", it->step,
                            phase(pl, it->step), r->next, r->peers[r->next].addr);
            }
            can_send = 1;
        }
    }
    r->send_seq += pl->nsend;
    r->recv_seq += pl->nrecv;
    return DT_OK;
aborted:
    return abort_call(r, pl->op);
}

/* ---- the in-place all-reduce (2 members, both connections lanes) ----
 *
 * Each member's data lies in its shared buffer (dt_ring_shared_buffer), which the other has
 * mapped. Call k of the ring, over [off, off + n) of both buffers: rank 0 owns the first
 * half of the range, rank 1 the second. Each member publishes its progress, 3k + 1 .. 3k + 3,
 * in its segment's control block:
 *   3k + 1  its data is in place; it then adds the other's copy of its own half into its
 *           buffer (reading the other's half, which the other does not write now: it adds
 *           into its own half)
 *   3k + 2  its half is the sum and it no longer reads the other's buffer; once the other
 *           says 3k + 2 too, it copies the other's half (the sum) into its buffer
 *   3k + 3  it no longer reads the other's buffer; once the other says so too, the call
 *           returns and the caller may write its buffer again.
 * Every element is summed once (a + b == b + a exactly) and copied: both members end with
 * the same bits. A wait spins (yielding) for up to r->spin_us, then sleeps on the other's
 * progress word (a futex on the shared page) in slices, between which it looks at the
 * sockets (a hang-up: the other member is gone) and at dt_ring_abort's flag; timeout_ms
 * without the other's progress fails the call. Failures are the engine's (fail()). */

/* a sleep's longest, between looks at the sockets and the abort flag (ring-impl.h) */
long dt__ring_in_place_slice_ns = 10 * 1000 * 1000;

static int reached(uint32_t have, uint32_t want) {
    return (int32_t)(have - want) >= 0;
}

static void publish(dt_ring *r, uint32_t v) {
    dt__futex_publish(&r->out.ctl->progress, v, &r->in.ctl->pwait);
}

static dt_err await_peer(engine *e, uint32_t want, const char *what) {
    dt_ring *r = e->r;
    _Atomic uint32_t *word = &r->in.ctl->progress;
    int peer = r->prev; /* == r->next: the ring has 2 members */
    int64_t start = dt__now_ms(), until = dt__now_us() + r->spin_us;
    for (int i = 0;; i++) {
        if (reached(atomic_load_explicit(word, memory_order_acquire), want)) return DT_OK;
        if ((i & 15) == 15) {
            if (dt__now_us() >= until || atomic_load_explicit(&r->aborted, memory_order_relaxed))
                break;
            sched_yield();
        }
    }
    for (;;) {
        uint32_t have = atomic_load_explicit(word, memory_order_acquire);
        if (!reached(have, want) && !atomic_load_explicit(&r->aborted, memory_order_relaxed))
            dt__futex_sleep(word, have, &r->out.ctl->pwait, dt__ring_in_place_slice_ns);
        if (reached(atomic_load_explicit(word, memory_order_acquire), want)) return DT_OK;
        if (atomic_load_explicit(&r->aborted, memory_order_relaxed))
            return abort_call(r, e->pl->op);
        struct pollfd pf[2] = {{.fd = r->prev_fd, .events = POLLRDHUP},
                               {.fd = r->next_fd, .events = POLLRDHUP}};
        if (poll(pf, 2, 0) > 0 &&
            ((pf[0].revents | pf[1].revents) & (POLLRDHUP | POLLHUP | POLLERR)))
            return fail(e, DT_ERR_NETWORK, peer, "in place, waiting for %s: rank %d (%s) closed "
                        "the connection", what, peer, r->peers[peer].addr);
        if (dt__now_ms() - start >= r->timeout_ms)
            return fail(e, DT_ERR_TIMEOUT, peer, "in place, waiting for %s: no progress from "
                        "rank %d (%s) for %d ms", what, peer, r->peers[peer].addr, r->timeout_ms);
    }
}

/* data lies in this member's shared buffer (which only a ring that sums in place has) */
static int in_place(dt_ring *r, const float *data, size_t n) {
    const float *buf = dt_ring_shared_buffer(r);
    if (!buf) return 0;
    uintptr_t d = (uintptr_t)data, b = (uintptr_t)buf;
    return d >= b && (d - b) % sizeof(float) == 0 && n <= r->shared_floats &&
           (d - b) / sizeof(float) <= r->shared_floats - n;
}

static dt_err usable(dt_ring *r, const char *op) {
    if (atomic_load(&r->aborted)) {
        r->broken = 1;
        r->failed_peer = -1;
        return dt_err_set(DT_ERR_STATE, "ring gen %" PRId64 " rank %d: %s: aborted", r->generation,
                          r->rank, op);
    }
    if (r->broken)
        return dt_err_set(DT_ERR_STATE,
                          "ring gen %" PRId64 " rank %d: %s: the ring failed earlier; close it "
                          "and form a new one",
                          r->generation, r->rank, op);
    return DT_OK;
}

/* ---- the in-place pair: the sum left to the caller (dt_ring_allreduce_pair) ----
 *
 * Call k (numbered with the in-place all-reduces) is the first phase alone: it publishes
 * 3k + 1 when this member's data is in place and returns once the other's is, with the other's
 * copy of the range. The caller reads both (a + b is the same float on both members: its
 * optimizer sums as it reads); dt_ring_release publishes 3k + 2, it no longer reads the
 * other's buffer; dt_ring_settle waits for the other's 3k + 2 before this member writes its
 * own buffer again. One meeting point a step instead of three, and no pass of its own over
 * the data: the later two waits and the sum's two passes were a tenth of a member's step (a
 * 2-core VM, docs/PERFORMANCE.md "One meeting point a step"). */

enum { PAIR_NONE, PAIR_READING, PAIR_RELEASED };

static void release_pair(dt_ring *r) {
    if (r->pair_state != PAIR_READING) return;
    publish(r, r->pair_k + 2);
    r->pair_state = PAIR_RELEASED;
}

static dt_err settle_pair(engine *e) {
    dt_ring *r = e->r;
    release_pair(r);
    if (r->pair_state != PAIR_RELEASED) return DT_OK;
    dt_err err = await_peer(e, r->pair_k + 2, "it to finish reading");
    if (!err) r->pair_state = PAIR_NONE;
    return err;
}

void dt_ring_release(dt_ring *r) {
    if (r) release_pair(r);
}

dt_err dt_ring_settle(dt_ring *r) {
    if (!r || r->pair_state == PAIR_NONE) return DT_OK;
    release_pair(r);
    dt_err err = usable(r, "settle");
    if (err) return err;
    plan pl = {.op = "settle"};
    engine e = {.r = r, .pl = &pl};
    return settle_pair(&e);
}

static dt_err pair_in_place(dt_ring *r, float *data, const float **peer) {
    plan pl = {.op = "allreduce"};
    engine e = {.r = r, .pl = &pl};
    dt_err err = settle_pair(&e); /* the last pair call's, if the caller did not */
    if (err) return err;
    uint32_t k = 3 * r->in_place_calls++;
    publish(r, k + 1);
    if ((err = await_peer(&e, k + 1, "its data"))) return err;
    r->pair_k = k;
    r->pair_state = PAIR_READING;
    *peer = r->in.shared + (data - r->out.shared);
    return DT_OK;
}

static dt_err allreduce_in_place(dt_ring *r, float *data, size_t n) {
    plan pl = {.op = "allreduce"};
    engine e = {.r = r, .pl = &pl};
    dt_err err = settle_pair(&e);
    if (err) return err;
    const float *other = r->in.shared + (data - r->out.shared);
    size_t half = n / 2;
    size_t mine = r->rank == 0 ? 0 : half, nmine = r->rank == 0 ? half : n - half;
    size_t theirs = r->rank == 0 ? half : 0, ntheirs = n - nmine;
    uint32_t k = 3 * r->in_place_calls++;
    publish(r, k + 1);
    if ((err = await_peer(&e, k + 1, "its data"))) return err;
    add_f32(data + mine, other + mine, nmine);
    publish(r, k + 2);
    if ((err = await_peer(&e, k + 2, "its half's sum"))) return err;
    memcpy(data + theirs, other + theirs, ntheirs * sizeof(float));
    publish(r, k + 3);
    return await_peer(&e, k + 3, "it to finish reading");
}

/* ---- the calls ---- */

static dt_err allreduce(dt_ring *r, float *data, size_t n, int bf16) {
    if (!r) return dt_err_set(DT_ERR_ARG, "ring allreduce: ring is NULL");
    dt_err err = usable(r, "allreduce");
    if (err) return err;
    if (n && !data) return dt_err_set(DT_ERR_ARG, "ring allreduce: data is NULL, n %zu", n);
    if (n > SIZE_MAX / 4 / (size_t)r->size)
        return dt_err_set(DT_ERR_ARG, "ring allreduce: n %zu is too large", n);
    if (r->size == 1 || n == 0) return DT_OK;
    if (in_place(r, data, n)) return allreduce_in_place(r, data, n);
    plan pl = {.op = "allreduce", .bf16 = bf16};
    int small = n * 4 <= dt__ring_small_bytes; /* the float32 size, whatever the wire's */
    if ((err = small ? plan_small(r, &pl, data, n) : plan_ring(r, &pl, data, n))) return err;
    if ((err = run(r, &pl))) return err;
    if (small && pl.bf16) {
        /* the widened buffers summed in rank order, the same on every member */
        const uint16_t *slots = (const uint16_t *)(const void *)r->stage;
        dt__bf16_widen(data, slots, n);
        for (int q = 1; q < r->size; q++)
            dt__bf16_add(data, slots + (size_t)q * n, n);
    } else if (small) {
        /* the sum in rank order, the same on every member */
        memcpy(data, r->stage, n * 4);
        for (int q = 1; q < r->size; q++)
            add_f32(data, r->stage + (size_t)q * n, n);
    }
    return DT_OK;
}

dt_err dt_ring_allreduce(dt_ring *r, float *data, size_t n) {
    return allreduce(r, data, n, r && r->bf16);
}

dt_err dt_ring_allreduce_pair(dt_ring *r, float *data, size_t n, const float **peer) {
    if (!peer) return dt_err_set(DT_ERR_ARG, "ring allreduce: peer is NULL");
    *peer = NULL;
    if (r && r->size == 2 && n > 0 && in_place(r, data, n)) {
        dt_err err = usable(r, "allreduce");
        return err ? err : pair_in_place(r, data, peer);
    }
    return allreduce(r, data, n, r && r->bf16);
}

dt_err dt_ring_allreduce_exact(dt_ring *r, float *data, size_t n) {
    return allreduce(r, data, n, 0);
}

dt_err dt_ring_broadcast(dt_ring *r, void *bytes, size_t len, int root) {
    if (!r) return dt_err_set(DT_ERR_ARG, "ring broadcast: ring is NULL");
    dt_err err = usable(r, "broadcast");
    if (err) return err;
    if (root < 0 || root >= r->size)
        return dt_err_set(DT_ERR_ARG, "ring broadcast: root %d is out of range (size %d)", root,
                          r->size);
    if (len && !bytes) return dt_err_set(DT_ERR_ARG, "ring broadcast: bytes is NULL, len %zu", len);
    if (r->size == 1 || len == 0) return DT_OK;
    plan pl = {.op = "broadcast"};
    if ((err = plan_broadcast(r, &pl, bytes, len, root))) return err;
    return run(r, &pl);
}

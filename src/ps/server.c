/*
 * server.c - the parameter server (include/dtrain/ps.h, docs/WIRE.md).
 *
 * Design
 *
 * Threads: one accept thread and one thread per connection (a PS talks to a handful of
 * workers; a blocking thread per peer keeps the frame parsing straight-line code). The
 * accept thread also joins connection threads that have finished.
 *
 * Bounds before the token is checked (docs/WIRE.md, "Limits"): a connection is "pending"
 * until its HELLO is verified, then "authenticated". At most max_pending are pending: the
 * accept thread, at the cap, closes the oldest pending one (shuts its read side: its thread
 * reads what had come, and unless that was its whole HELLO, sends an ERROR saying why and
 * ends), so a flood of idle clients cannot lock out a real one
 * that sends its HELLO at once; one whose whole HELLO is already in hand (in its socket, or
 * read and being checked) is passed over, so a burst of real clients is not turned away
 * (they are verified or refused at once; the cap may be exceeded by them for that moment). A pending connection's thread reads the header and the HELLO
 * straight from the socket before one deadline (hello_timeout_ms after the accept), polling
 * before each read, so trickling bytes does not stretch it. At most max_conns are
 * authenticated; a verified HELLO beyond that is refused. Both counts live under clock with
 * the connection list; a connection is counted in exactly one until its thread ends.
 *
 * State and locks:
 *   vlock (rwlock)  the values, the optimizer (its slots and step count) and `initialized`.
 *                   Readers: async pushes, which order themselves in the pipeline below.
 *                   Writers, which need the whole model still: INIT, copying VALUES into
 *                   the connection's buffer (sent after the lock is released), SAVE, a
 *                   sync round's step, a push whose step is split over a pool. A reply is
 *                   one consistent snapshot. Writers are preferred, so a stream of pushes
 *                   cannot starve a save (without a pipeline, snapshots take it for reading:
 *                   snapshot_lock).
 *   tlock (mutex)   taking a pipeline ticket and its optimizer step (dt_optim_take_step).
 *   slock (mutex)   the sync round: sum buffer, contributors, `active` flags of
 *                   connections; scv (condvar, CLOCK_MONOTONIC) wakes its waiters. Lock
 *                   order: slock, then vlock (the round's apply); never the reverse.
 *   clock (mutex)   the connection list and `stopping`.
 *   loglock         one log line at a time.
 *
 * Frames are validated whole before anything is applied: a pushed tensor list is read into
 * the connection's own gradient buffer (allocated at its first push, 64-byte aligned, the
 * layout of the PS's values), checking as it goes that every name belongs to this
 * partition, that every shape matches, that no variable comes twice and that every byte
 * counted by the header is accounted for; only after the last tensor (and the check that
 * every variable came) does the push touch shared state. A push's header says its
 * gradients' element type (arg: float32 or bfloat16, wire-impl.h; any other is refused
 * before a payload byte is read); bfloat16 ones are widened to float32 in c->grad as they
 * come, so everything after reading is the same for both. A bfloat16 PUSH_PULL is answered
 * VALUES_BF16: the values narrowed into the connection's copy under vlock (PULL is
 * always float32: the model as it is, for checkpoints, evaluation, the end). In async mode the push
 * goes through the pipeline below (a float32 PUSH_PULL's new values are copied into the
 * connection's snapshot buffer as it goes, and that is the reply); with a pool, the
 * optimizer's params get their grad pointed at that buffer and one dt_optim_step runs under
 * the write lock. In sync mode the buffer is added into the round's sum under slock.
 *
 * Pipelined pushes (async, no pool): a push takes a ticket and its optimizer step (number,
 * learning rate) in arrival order, then applies the step a block of one variable at a time
 * (BLOCK elements, in cache for the copy into the reply that follows each), every block
 * only after the previous ticket's push has finished it. Two workers' pushes then run one
 * block apart on two threads instead of the second waiting a whole step (~200 us for the
 * example MLP) for the first, and each element still sees the pushes in ticket order: the
 * result is that of applying them one after another. A block's wait spins briefly, then
 * sleeps on the block's word (a futex); a push marks a block only after it is done with it,
 * and sets the step count before marking the last one, so the count only grows.
 *
 * A violation is logged as one line naming the peer, sent back as an ERROR frame, and the
 * connection closed. Before closing, the rest of the declared payload (at most max_frame,
 * checked when the header came) is drained for up to a second, so that the client reads
 * the ERROR frame instead of a connection reset. An oversized header is refused without
 * reading further.
 *
 * Sync rounds: a round sums one gradient per active connection (active: it has pushed and
 * is still open). The push that completes the round (contributors == active) applies the
 * mean and wakes the others; otherwise pushers wait on scv until the round is applied or
 * until sync_timeout_ms after the round's first push, when whichever waiter wakes first
 * applies the round with what it has (logged). A connection closing leaves the active set
 * at once and may thereby complete the round. A connection that already contributed to the
 * current round (only possible for a second connection of the same replica name) waits
 * for the next round before contributing.
 *
 * Shared memory: SHM_ATTACH checks the client's descriptions like a push's, then maps the
 * client's sealed segment (conn.shm) or declines it with the reason. On such a connection
 * the optimizer reads the gradients straight from the segment (no copy into c->grad) and
 * writes the new values into it. The client rings the segment's request bell instead of
 * sending lane frames, and the PS answers on the reply bell (docs/WIRE.md, "Doorbells"):
 * the connection's thread sleeps on the request bell in slices (lane_wait), reading the
 * socket when a ring says a frame was sent there, or between slices when it has data or
 * was closed.
 *
 * Checkpoints: SAVE writes ckpt_dir/ckpt-<step, 10 digits>.safetensors with the values by
 * name, the optimizer slots as "optimizer/<slot>", and metadata format "dtrain-ps",
 * version, step, partition, nps; then deletes all but the newest `keep`. Start restores
 * from the newest file after checking every tensor's name and shape.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/assert-impl.h"
#include "core/clock-impl.h"
#include "core/futex-impl.h"
#include "core/path-impl.h"
#include "core/shm-impl.h"
#include "core/thread-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/ps.h"
#include "net/sock-impl.h"
#include "ps/ps-impl.h"
#include "ps/wire-impl.h"

#define READ_BUF (64 << 10)
#define LISTEN_BACKLOG 64
#define SEND_TIMEOUT_S 60
#define DRAIN_MS 1000
#define CKPT_FORMAT "dtrain-ps"
#define CKPT_VERSION "1"
#define BLOCK 8192      /* elements per pipeline block (32 KB: in L1 for the copy after it) */
#define BLOCK_SPINS 16 /* pauses before a push sleeps waiting for a block (~1 us) */

typedef struct var {
    dt_param p; /* name, shape, decay; value.data into s->values; grad set per step */
    int64_t numel;
    size_t off; /* float offset into the values / gradient layout */
} var;

typedef struct conn conn;

/* One block of the push pipeline: a range of one variable, and the last push through it.
 * Each on its own cache line: a push writes its block's word as the next one polls it. */
typedef struct pblock {
    _Alignas(64) _Atomic uint32_t done; /* the ticket of the last push applied to it */
    int var;
    int64_t lo, hi;
} pblock;

struct dt_ps_server {
    dt_ps_server_conf conf;
    char *host, *token, *ckpt_dir; /* owned copies */
    char name[32];                 /* "ps-<index>" */
    int lfd, port;
    pthread_t accept_thread;
    int accept_started;

    var *vars;
    dt_param **pp; /* &vars[i].p for the optimizer */
    int nvars;
    size_t total; /* floats in the partition */
    float *values;
    dt_optim *optim;
    dt_pool *pool;
    /* the VALUES frame's constant part: count and every tensor's description */
    uint8_t *meta;
    size_t *meta_off, *meta_len;
    uint64_t list_bytes; /* tensor-list payload size */
    size_t data_floats;  /* the partition's elements (total without the padding) */

    pthread_rwlock_t vlock;
    int initialized;      /* vlock */
    _Atomic int64_t step; /* -1 while uninitialized; written under vlock, or by the push
                             that completes the pipeline's last block */

    /* the push pipeline (async pushes without a pool): "Pipelined pushes" above */
    pthread_mutex_t tlock;
    uint32_t tickets; /* tlock: the last ticket taken */
    pblock *blocks;
    int nblocks;
    _Alignas(64) _Atomic int sleepers; /* pushes asleep on a block's word (its own line) */
    _Alignas(64) _Atomic int closing;  /* drain or stop: bell waits end (lane_wait) */

    pthread_mutex_t slock;
    pthread_cond_t scv;
    float *sum;            /* slock: the round's gradient sum */
    int contributors;      /* slock */
    int64_t round;         /* slock: rounds applied */
    int64_t round_started; /* slock: ms of the round's first push */
    int64_t round_step;    /* slock: step after the last applied round */
    int nactive;           /* slock */
    int sync_stop;         /* slock */

    pthread_mutex_t clock;
    conn *conns; /* clock */
    int stopping;
    int npending; /* clock: connections counted that have not yet sent a valid HELLO */
    int nauthed;  /* clock: connections counted that have */

    pthread_mutex_t save_lock;
    pthread_mutex_t loglock;
};

struct conn {
    dt_ps_server *s;
    int fd;
    pthread_t thread;
    _Atomic int done;
    conn *next;
    char peer[64];    /* "127.0.0.1:40000" */
    char replica[64]; /* from HELLO; written under clock */
    int64_t hello_deadline; /* dt__now_ms: the HELLO must be verified by then */
    int authed;  /* clock: its HELLO was verified (counted in nauthed) */
    int evicted; /* clock: its read side shut by the accept thread to make room (no longer
                    counted in npending; what it had sent is still read) */
    int left;    /* clock: its thread has ended (no longer counted) */
    _Atomic int hello_read; /* its thread has the whole HELLO and is checking it */
    char who[160];    /* "worker-1 (127.0.0.1:40000)" */
    dt__ps_reader rd;
    float *grad;     /* this connection's pushed tensors (nvars layout) */
    float *snap;     /* a copy of the values being sent (NULL until the first VALUES) */
    float **snap_vars; /* per var: where its values go in snap (a push writes them there) */
    dt__shm shm;     /* the client's segment, once attached (SHM_ATTACH) */
    float *shm_grad; /* its gradient area (PS layout), then its value area */
    float *shm_vals;
    float **shm_var_vals; /* per var: where its values go in the value area */
    uint32_t req_seen;    /* the client's rings of the lane's request bell taken so far */
    uint32_t rep_rings;   /* this PS's rings of the reply bell */
    int64_t sock_sent;    /* the frames the client's last ring says it sent on the socket */
    int64_t sock_read;    /* frames read from the socket since the attach */
    char *seen;        /* per var, during one tensor list */
    struct iovec *iov; /* VALUES reply: header, count+meta/data pairs */
    int active;        /* slock: has pushed (sync) */
    int64_t joined;    /* slock: the round it contributed to (-1: none) */
    int bf16_seen;     /* a bfloat16 push came (logged once) */
};

/* ---- logging ---- */

static void slog(dt_ps_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void slog(dt_ps_server *s, const char *fmt, ...) {
    FILE *f = s->conf.log ? s->conf.log : stderr;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&s->loglock);
    fprintf(f, "%s: ", s->name);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
    pthread_mutex_unlock(&s->loglock);
    va_end(ap);
}

/* ---- refusals ---- */

/* Log, send ERROR (best effort), drain what the peer is still sending (`left` bytes of the
 * current frame at most), close. Returns -1 for the caller's loop. */
static int refuse(conn *c, uint64_t left, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(conn *c, uint64_t left, const char *fmt, ...) {
    char msg[DT__PS_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* "push from worker-1 (addr): ..." names the peer already; others get it in front */
    if (strstr(msg, c->who))
        slog(c->s, "%s; closing the connection", msg);
    else
        slog(c->s, "%s: %s; closing the connection", c->who, msg);
    dt__ps_send_frame(c->fd, DT__PS_ERROR, 0, msg, strlen(msg));
    shutdown(c->fd, SHUT_WR);
    if (left > 0) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        int64_t until = dt__now_ms() + DRAIN_MS;
        uint8_t sink[16384];
        /* the reader's buffer may hold part of it */
        size_t have = c->rd.end - c->rd.pos;
        left -= have < left ? have : left;
        c->rd.pos = c->rd.end;
        while (left > 0 && dt__now_ms() < until) {
            ssize_t k = recv(c->fd, sink, left < sizeof sink ? left : sizeof sink, 0);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            left -= (uint64_t)k;
        }
    }
    return -1;
}

/* ---- the tensor list of INIT/PUSH/PUSH_PULL into c->grad ---- */

static int find_var(const dt_ps_server *s, const char *name, int hint) {
    if (hint < s->nvars && !strcmp(s->vars[hint].p.name, name)) return hint;
    for (int i = 0; i < s->nvars; i++)
        if (!strcmp(s->vars[i].p.name, name)) return i;
    return -1;
}

/* Read a tensor list of `len` payload bytes into c->grad, its data of element type dtype
 * (wire-impl.h: a bfloat16 tensor is read into the upper half of its floats' room and
 * widened there); with `described_only` (SHM_ATTACH) the list has descriptions only, in
 * partition order, and no data. 0: every variable came, valid; -1: the connection is
 * finished (refused or truncated; already logged). */
static int read_tensors(conn *c, const char *op, uint64_t len, int dtype, int described_only) {
    dt_ps_server *s = c->s;
    char what[200];
    snprintf(what, sizeof what, "%s from %s", op, c->who);
    uint64_t left = len;
    size_t got;
    if (!c->grad && !described_only) {
        size_t bytes = (s->total * sizeof(float) + 63) / 64 * 64;
        if (bytes == 0) bytes = 64;
        if (posix_memalign((void **)&c->grad, 64, bytes) != 0) {
            c->grad = NULL;
            return refuse(c, left, "%s: the PS is out of memory", what);
        }
        memset(c->grad, 0, bytes); /* the padding between variables stays zero */
    }
    memset(c->seen, 0, (size_t)s->nvars + 1);
#define NEED(n)                                                                                    \
    do {                                                                                           \
        if (left < (uint64_t)(n))                                                                  \
            return refuse(c, left, "%s: frame length %" PRIu64 " is too short for its tensors",    \
                          what, len);                                                              \
    } while (0)
#define READ(dst, n)                                                                               \
    do {                                                                                           \
        if (dt__ps_read(&c->rd, (dst), (n), &got) != 0) goto truncated;                            \
        left -= (n);                                                                               \
    } while (0)
    uint8_t b[8 * DT_MAX_DIMS + 8];
    NEED(4);
    READ(b, 4);
    uint32_t count = dt__get32(b);
    if (count != (uint32_t)s->nvars)
        return refuse(c, left, "%s: %" PRIu32 " tensors, this partition has %d variables", what,
                      count, s->nvars);
    for (uint32_t t = 0; t < count; t++) {
        NEED(4);
        READ(b, 4);
        unsigned nl = dt__get16(b), nd = dt__get16(b + 2);
        if (nd > DT_MAX_DIMS)
            return refuse(c, left, "%s: tensor %" PRIu32 ": %u dimensions (at most %d)", what, t,
                          nd, DT_MAX_DIMS);
        if (nl == 0 || nl > DT__PS_NAME_MAX)
            return refuse(c, left, "%s: tensor %" PRIu32 ": name length %u (1 to %d)", what, t, nl,
                          DT__PS_NAME_MAX);
        NEED(8 * nd + nl);
        READ(b, 8 * nd);
        char name[DT__PS_NAME_MAX + 1];
        READ(name, nl);
        name[nl] = '\0';
        if (memchr(name, '\0', nl))
            return refuse(c, left, "%s: tensor %" PRIu32 ": the name contains a NUL byte", what, t);
        int i = find_var(s, name, (int)t);
        if (described_only && i >= 0 && i != (int)t)
            return refuse(c, left, "%s: tensor %s comes %" PRIu32 "th, its place is %d", what, name,
                          t, i);
        if (i < 0)
            return refuse(c, left, "%s: tensor %s: no such variable in partition %d of %d", what,
                          name, s->conf.index, s->conf.nps);
        if (c->seen[i]) return refuse(c, left, "%s: tensor %s: sent twice", what, name);
        c->seen[i] = 1;
        const dt_shape *want = &s->vars[i].p.value.shape;
        dt_shape sh = {.ndim = (int)nd};
        int same = (int)nd == want->ndim;
        for (unsigned d = 0; d < nd; d++) {
            uint64_t v = dt__get64(b + 8 * d);
            sh.dim[d] = v > INT64_MAX ? -1 : (int64_t)v;
            if (same && sh.dim[d] != want->dim[d]) same = 0;
        }
        if (!same) {
            char a[96], w[96];
            if (sh.ndim >= 0)
                for (unsigned d = 0; d < nd; d++)
                    if (sh.dim[d] < 0) sh.dim[d] = 0;
            return refuse(c, left, "%s: tensor %s: shape %s does not match %s", what, name,
                          dt_shape_str(&sh, a, sizeof a), dt_shape_str(want, w, sizeof w));
        }
        if (described_only) continue;
        uint64_t bytes = (uint64_t)s->vars[i].numel * dt__ps_dtype_size(dtype);
        NEED(bytes);
        float *dst = c->grad + s->vars[i].off;
        if (dtype == DT__PS_BF16) {
            READ((uint8_t *)dst + bytes, bytes);
            dt__bf16_widen_tail(dst, (size_t)s->vars[i].numel);
        } else {
            READ(dst, bytes);
        }
    }
    if (left != 0)
        return refuse(c, left, "%s: %" PRIu64 " bytes after the last tensor", what, left);
    return 0;
#undef NEED
#undef READ
truncated:
    if (errno)
        slog(s,
             "%s: reading the frame failed after %" PRIu64 " of %" PRIu64
             " payload bytes: %s; closing the connection",
             what, len - left + got, len, strerror(errno));
    else
        slog(s,
             "%s: truncated frame: the peer closed after %" PRIu64 " of %" PRIu64
             " payload bytes; closing the connection",
             what, len - left + got, len);
    return -1;
}

/* ---- replies ---- */

/* Whether async pushes go through the pipeline ("Pipelined pushes" above): not in sync
 * mode, and not when a step is split over a pool. */
static int pipelined(const dt_ps_server *s) {
    return !s->conf.sync && !s->pool;
}

/* vlock for a snapshot of the values: for writing while async pushes go through the
 * pipeline (they hold it for reading); otherwise every step takes it for writing, and
 * snapshots share it. */
static void snapshot_lock(dt_ps_server *s) {
    if (pipelined(s))
        pthread_rwlock_wrlock(&s->vlock);
    else
        pthread_rwlock_rdlock(&s->vlock);
}

/* c->snap and c->snap_vars, allocated at the first reply that needs them: 1, or 0 without
 * memory for both (without c->snap, the reply goes out of the values under the lock). */
static int snap_ready(conn *c) {
    dt_ps_server *s = c->s;
    if (c->snap_vars) return 1;
    if (s->total == 0) return 0;
    if (!c->snap && posix_memalign((void **)&c->snap, 64, s->total * sizeof(float)) != 0) {
        c->snap = NULL;
        return 0;
    }
    if (!(c->snap_vars = malloc((size_t)s->nvars * sizeof(float *) + 1))) return 0;
    for (int i = 0; i < s->nvars; i++)
        c->snap_vars[i] = c->snap + s->vars[i].off;
    return 1;
}

/* VALUES with the current values, from a copy taken under vlock (snapshot_lock), so a slow
 * reader holds the lock for a memcpy, not for the whole send, and other workers' updates are
 * not held up. With `bf16` (a bfloat16 PUSH_PULL's reply) the copy is the values narrowed to
 * bfloat16, sent as VALUES_BF16; without memory for a copy, float32 VALUES under the lock
 * (the frame's type says which, and the client takes either). With `pushed` >= 0, c->snap
 * already holds the values right after the push that made that step (float32; the push
 * wrote them): they are sent as they are. */
static int send_values(conn *c, int bf16, int64_t pushed) {
    dt_ps_server *s = c->s;
    uint8_t hdr[DT__PS_HDR];
    snap_ready(c);
    if (!c->snap) bf16 = 0; /* no copy: send under the lock */
    const float *src = c->snap ? c->snap : s->values;
    uint16_t *narrow = (uint16_t *)c->snap; /* bf16: var i at vars[i].off (of total) */
    int locked = pushed < 0;
    if (locked) snapshot_lock(s);
    int64_t step = locked ? atomic_load(&s->step) : pushed;
    if (bf16)
        dt__ps_hdr_encode(hdr, DT__PS_VALUES_BF16, step,
                          s->list_bytes - (uint64_t)s->data_floats * 2);
    else
        dt__ps_hdr_encode(hdr, DT__PS_VALUES, step, s->list_bytes);
    if (locked && c->snap) {
        if (bf16)
            for (int i = 0; i < s->nvars; i++)
                dt__bf16_narrow(narrow + s->vars[i].off, s->values + s->vars[i].off,
                                (size_t)s->vars[i].numel);
        else
            memcpy(c->snap, s->values, s->total * sizeof(float));
        pthread_rwlock_unlock(&s->vlock);
        locked = 0;
    }
    int n = 0;
    c->iov[n++] = (struct iovec){hdr, sizeof hdr};
    c->iov[n++] = (struct iovec){s->meta, 4};
    for (int i = 0; i < s->nvars; i++) {
        c->iov[n++] = (struct iovec){s->meta + s->meta_off[i], s->meta_len[i]};
        c->iov[n++] = bf16 ? (struct iovec){narrow + s->vars[i].off,
                                            (size_t)s->vars[i].numel * sizeof(uint16_t)}
                           : (struct iovec){(void *)(src + s->vars[i].off),
                                            (size_t)s->vars[i].numel * sizeof(float)};
    }
    int rc = dt__ps_writev_all(c->fd, c->iov, n);
    if (locked) pthread_rwlock_unlock(&s->vlock);
    return rc;
}

/* ---- applying ---- */

/* copy: NULL, or where each variable's new values go as well (a lane's value area) */
static void apply_grad_locked(dt_ps_server *s, float *g, float *const *copy) {
    for (int i = 0; i < s->nvars; i++)
        s->vars[i].p.grad.data = g + s->vars[i].off;
    if (copy)
        dt_optim_step_copy(s->optim, s->pool, copy);
    else
        dt_optim_step(s->optim, s->pool);
    atomic_store(&s->step, dt_optim_steps(s->optim));
}

/* Under slock: apply the round's mean (contributors > 0) and start the next round. */
static void sync_apply(dt_ps_server *s, const char *why) {
    int k = s->contributors;
    float inv = (float)k;
    for (size_t j = 0; j < s->total; j++)
        s->sum[j] /= inv;
    pthread_rwlock_wrlock(&s->vlock);
    apply_grad_locked(s, s->sum, NULL);
    s->round_step = atomic_load(&s->step);
    pthread_rwlock_unlock(&s->vlock);
    if (why) {
        slog(s, "sync round %" PRId64 " applied with %d of %d workers: %s", s->round + 1, k,
             s->nactive, why);
        /* Who did not push this round (a worker waiting for data, a stalled one) leaves the
         * active set until it pushes again, so the next rounds do not wait for it too.
         * Lock order: slock (held), clock. */
        pthread_mutex_lock(&s->clock);
        for (conn *o = s->conns; o; o = o->next)
            if (o->active && o->joined != s->round) {
                o->active = 0;
                s->nactive--;
            }
        pthread_mutex_unlock(&s->clock);
    }
    s->round++;
    s->contributors = 0;
    pthread_cond_broadcast(&s->scv);
}

/* Under slock: whether c's replica already contributed to the current round (through c
 * or another connection with the same replica name). Takes clock (order: slock, clock). */
static int replica_joined(dt_ps_server *s, const conn *c) {
    if (c->joined == s->round) return 1;
    if (!c->replica[0]) return 0;
    int dup = 0;
    pthread_mutex_lock(&s->clock);
    for (const conn *o = s->conns; o && !dup; o = o->next)
        dup = o != c && o->joined == s->round && !strcmp(o->replica, c->replica);
    pthread_mutex_unlock(&s->clock);
    return dup;
}

/* Sync push of g (c's gradients); returns the step after its round, or -1 when the server
 * stops. */
static int64_t sync_push(conn *c, const float *g) {
    dt_ps_server *s = c->s;
    pthread_mutex_lock(&s->slock);
    if (!c->active) {
        c->active = 1;
        s->nactive++;
    }
    /* a second contribution from the same replica waits for the next round */
    while (!s->sync_stop && replica_joined(s, c))
        pthread_cond_wait(&s->scv, &s->slock);
    if (s->sync_stop) {
        pthread_mutex_unlock(&s->slock);
        return -1;
    }
    if (s->contributors == 0) {
        memcpy(s->sum, g, s->total * sizeof(float));
        s->round_started = dt__now_ms();
    } else {
        for (size_t j = 0; j < s->total; j++)
            s->sum[j] += g[j];
    }
    s->contributors++;
    int64_t mine = s->round;
    c->joined = mine;
    if (s->contributors >= s->nactive) sync_apply(s, NULL);
    while (s->round == mine && !s->sync_stop) {
        int64_t deadline = s->round_started + s->conf.sync_timeout_ms;
        int64_t now = dt__now_ms();
        if (now >= deadline) {
            char why[64];
            snprintf(why, sizeof why, "timed out after %" PRId64 " ms", s->conf.sync_timeout_ms);
            sync_apply(s, why);
            break;
        }
        struct timespec ts = dt__mono_after_ms(deadline - now);
        pthread_cond_timedwait(&s->scv, &s->slock, &ts);
    }
    int64_t step = s->round > mine ? s->round_step : -1;
    pthread_mutex_unlock(&s->slock);
    return step;
}

/* A connection leaves the sync active set; may complete the round. */
static void sync_leave(conn *c) {
    dt_ps_server *s = c->s;
    pthread_mutex_lock(&s->slock);
    if (c->active) {
        c->active = 0;
        s->nactive--;
        if (s->contributors > 0 && s->contributors >= s->nactive && !s->sync_stop) {
            char why[200];
            snprintf(why, sizeof why, "%s disconnected", c->who);
            sync_apply(s, why);
        }
    }
    pthread_mutex_unlock(&s->slock);
}

/* ---- checkpoints ---- */

static int ckpt_step_of(const char *name) {
    /* ckpt-<10 digits>.safetensors */
    size_t n = strlen(name);
    if (n != 5 + 10 + 12 || strncmp(name, "ckpt-", 5) || strcmp(name + 15, ".safetensors"))
        return 0;
    for (int i = 5; i < 15; i++)
        if (name[i] < '0' || name[i] > '9') return 0;
    return 1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Delete all but the newest `keep` checkpoints (names sort by step: 10 digits). */
static void prune(dt_ps_server *s) {
    if (s->conf.keep <= 0) return;
    DIR *d = opendir(s->ckpt_dir);
    if (!d) return;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!ckpt_step_of(e->d_name)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **g = realloc(names, (size_t)cap * sizeof *g);
            if (!g) break;
            names = g;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (n > 0) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n - s->conf.keep; i++) {
        char path[DT__PATH_MAX];
        if (dt__path(path, sizeof path, "%s/%s", s->ckpt_dir, names[i])) { /* never a cut path */
            slog(s, "cannot delete old checkpoint: %s", dt_errmsg());
            continue;
        }
        if (unlink(path) != 0 && errno != ENOENT)
            slog(s, "cannot delete old checkpoint %s: %s", path, strerror(errno));
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Under the write lock (or before serving). */
static dt_err save_locked(dt_ps_server *s, char *path, size_t len) {
    if (mkdir(s->ckpt_dir, 0755) != 0 && errno != EEXIST)
        return dt_err_set(DT_ERR_IO, "%s: cannot create the checkpoint directory: %s", s->ckpt_dir,
                          strerror(errno));
    int64_t step = atomic_load(&s->step);
    dt_err perr = dt__path(path, len, "%s/ckpt-%010" PRId64 ".safetensors", s->ckpt_dir, step);
    if (perr) return perr;
    int nslots = dt_optim_num_slots(s->optim);
    int nt = s->nvars + nslots;
    dt_st_tensor *ts = calloc((size_t)(nt ? nt : 1), sizeof *ts);
    char(*names)[128] = calloc((size_t)(nslots ? nslots : 1), sizeof *names);
    if (!ts || !names) {
        free(ts);
        free(names);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < s->nvars; i++)
        ts[i] = (dt_st_tensor){s->vars[i].p.name, &s->vars[i].p.value};
    for (int i = 0; i < nslots; i++) {
        snprintf(names[i], sizeof names[i], "optimizer/%s", dt_optim_slot_name(s->optim, i));
        ts[s->nvars + i] = (dt_st_tensor){names[i], dt_optim_slot(s->optim, i)};
    }
    char step_s[24], part_s[16], nps_s[16];
    snprintf(step_s, sizeof step_s, "%" PRId64, step);
    snprintf(part_s, sizeof part_s, "%d", s->conf.index);
    snprintf(nps_s, sizeof nps_s, "%d", s->conf.nps);
    dt_st_meta meta[] = {{"format", CKPT_FORMAT},
                         {"version", CKPT_VERSION},
                         {"step", step_s},
                         {"partition", part_s},
                         {"nps", nps_s}};
    dt_err err = dt_safetensors_write(path, ts, nt, meta, 5);
    free(ts);
    free(names);
    if (!err) prune(s);
    return err;
}

static dt_err meta_int(const dt_safetensors *st, const char *path, const char *key, int64_t *out) {
    const char *v = dt_safetensors_meta(st, key);
    if (!v) return dt_err_set(DT_ERR_FORMAT, "%s: metadata %s is missing", path, key);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 0)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: metadata %s: expected a non-negative integer, got \"%s\"", path, key,
                          v);
    *out = x;
    return DT_OK;
}

static dt_err check_tensor(const dt_safetensors *st, const char *path, const char *name,
                           const dt_shape *want, dt_tensor *t) {
    if (dt_safetensors_find(st, name, t) != DT_OK)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s is missing", path, name);
    if (!dt_shape_eq(&t->shape, want)) {
        char a[96], b[96];
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s: shape %s does not match %s", path, name,
                          dt_shape_str(&t->shape, a, sizeof a), dt_shape_str(want, b, sizeof b));
    }
    return DT_OK;
}

/* Restore from the newest checkpoint in ckpt_dir, if any (before serving). */
static dt_err restore(dt_ps_server *s) {
    char path[DT__PATH_MAX];
    dt_err err = dt_checkpoint_dir_latest(s->ckpt_dir, path, sizeof path);
    if (err == DT_ERR_NOTFOUND) {
        dt_err_clear();
        return DT_OK;
    }
    if (err) return err;
    dt_safetensors *st = NULL;
    if ((err = dt_safetensors_read(&st, path))) return err;
    int64_t step = 0, part = 0, nps = 0;
    const char *fmt = dt_safetensors_meta(st, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT)) {
        err =
            dt_err_set(DT_ERR_FORMAT, "%s: metadata format is \"%s\", expected \"" CKPT_FORMAT "\"",
                       path, fmt ? fmt : "(missing)");
        goto out;
    }
    if ((err = meta_int(st, path, "step", &step)) ||
        (err = meta_int(st, path, "partition", &part)) || (err = meta_int(st, path, "nps", &nps)))
        goto out;
    if (part != s->conf.index || nps != s->conf.nps) {
        err = dt_err_set(DT_ERR_FORMAT,
                         "%s: a checkpoint of partition %" PRId64 " of %" PRId64
                         ", this is partition %d of %d",
                         path, part, nps, s->conf.index, s->conf.nps);
        goto out;
    }
    int nslots = dt_optim_num_slots(s->optim);
    if (dt_safetensors_count(st) != s->nvars + nslots) {
        /* name the first tensor the partition does not know */
        for (int i = 0; i < dt_safetensors_count(st); i++) {
            const char *nm = dt_safetensors_name(st, i);
            int known = find_var(s, nm, 0) >= 0;
            for (int k = 0; !known && k < nslots; k++)
                known = !strncmp(nm, "optimizer/", 10) &&
                        !strcmp(nm + 10, dt_optim_slot_name(s->optim, k));
            if (!known) {
                err = dt_err_set(DT_ERR_FORMAT, "%s: tensor %s is not a variable of partition %d",
                                 path, nm, s->conf.index);
                goto out;
            }
        }
        err = dt_err_set(DT_ERR_FORMAT, "%s: %d tensors, expected %d", path,
                         dt_safetensors_count(st), s->nvars + nslots);
        goto out;
    }
    dt_tensor t;
    for (int i = 0; i < s->nvars; i++)
        if ((err = check_tensor(st, path, s->vars[i].p.name, &s->vars[i].p.value.shape, &t)))
            goto out;
    for (int k = 0; k < nslots; k++) {
        char nm[160];
        snprintf(nm, sizeof nm, "optimizer/%s", dt_optim_slot_name(s->optim, k));
        if ((err = check_tensor(st, path, nm, &dt_optim_slot(s->optim, k)->shape, &t))) goto out;
    }
    /* all checked: copy */
    for (int i = 0; i < s->nvars; i++) {
        dt_safetensors_find(st, s->vars[i].p.name, &t);
        memcpy(s->vars[i].p.value.data, t.data, (size_t)s->vars[i].numel * sizeof(float));
    }
    for (int k = 0; k < nslots; k++) {
        char nm[160];
        snprintf(nm, sizeof nm, "optimizer/%s", dt_optim_slot_name(s->optim, k));
        dt_safetensors_find(st, nm, &t);
        dt_tensor *slot = dt_optim_slot(s->optim, k);
        memcpy(slot->data, t.data, (size_t)dt_tensor_numel(slot) * sizeof(float));
    }
    dt_optim_set_steps(s->optim, step);
    atomic_store(&s->step, step);
    s->initialized = 1;
    slog(s, "restored %d variables at step %" PRId64 " from %s", s->nvars, step, path);
out:
    dt_safetensors_free(st);
    return err;
}

/* ---- the shared-memory lane ---- */

/* Until the block's last push is `want` (the ticket before the caller's): a short spin (the
 * push ahead is usually one block, a few microseconds, away), then a sleep on its word. */
static void block_wait(dt_ps_server *s, pblock *b, uint32_t want) {
    for (int i = 0; i < BLOCK_SPINS; i++) {
        if (atomic_load_explicit(&b->done, memory_order_acquire) == want) return;
        dt__cpu_relax();
    }
    atomic_fetch_add(&s->sleepers, 1);
    uint32_t have;
    while ((have = atomic_load(&b->done)) != want)
        dt__futex_wait(&b->done, have, -1);
    atomic_fetch_sub(&s->sleepers, 1);
}

/* The block is done with by `ticket`: the next push may have it. (Sleepers counted before
 * they look at the word, and the word set before they are looked at: none is missed.) */
static void block_pass(dt_ps_server *s, pblock *b, uint32_t ticket) {
    atomic_store(&b->done, ticket);
    if (atomic_load(&s->sleepers))
        dt__futex_wake(&b->done);
}

/* The pipeline's blocks: each variable in BLOCK-element ranges, in the layout's order. */
static int make_blocks(dt_ps_server *s) {
    int64_t n = 0;
    for (int i = 0; i < s->nvars; i++)
        n += (s->vars[i].numel + BLOCK - 1) / BLOCK;
    if (n > INT_MAX / 2) return -1;
    if (posix_memalign((void **)&s->blocks, 64, (size_t)(n ? n : 1) * sizeof *s->blocks)) {
        s->blocks = NULL;
        return -1;
    }
    for (int i = 0; i < s->nvars; i++)
        for (int64_t lo = 0; lo < s->vars[i].numel; lo += BLOCK) {
            pblock *b = &s->blocks[s->nblocks++];
            atomic_init(&b->done, 0);
            b->var = i;
            b->lo = lo;
            b->hi = s->vars[i].numel - lo < BLOCK ? s->vars[i].numel : lo + BLOCK;
        }
    return 0;
}

/* An async push through the pipeline ("Pipelined pushes" above); the step after it. */
static int64_t pipelined_push(dt_ps_server *s, const float *g, float *const *copy) {
    pthread_rwlock_rdlock(&s->vlock);
    pthread_mutex_lock(&s->tlock);
    uint32_t ticket = ++s->tickets;
    dt_optim_taken k;
    dt_optim_take_step(s->optim, &k);
    if (s->nblocks == 0) atomic_store(&s->step, k.step + 1);
    pthread_mutex_unlock(&s->tlock);
    for (int i = 0; i < s->nblocks; i++) {
        pblock *b = &s->blocks[i];
        const var *v = &s->vars[b->var];
        block_wait(s, b, ticket - 1);
        dt_optim_apply_range(s->optim, &k, b->var, b->lo, b->hi, g + v->off,
                             copy ? copy[b->var] : NULL);
        if (i == s->nblocks - 1) atomic_store(&s->step, k.step + 1);
        block_pass(s, b, ticket);
    }
    pthread_rwlock_unlock(&s->vlock);
    return k.step + 1;
}

/* One push of g: applied at once (async; copy: where each variable's new values go as
 * well, or NULL) or with its round (sync). The step after it, or -1 when the server stops. */
static int64_t apply_push(conn *c, const float *g, float *const *copy) {
    dt_ps_server *s = c->s;
    if (s->conf.sync) return sync_push(c, g);
    if (pipelined(s)) return pipelined_push(s, g, copy);
    pthread_rwlock_wrlock(&s->vlock); /* the step split over the pool: alone, whole */
    apply_grad_locked(s, (float *)g, copy);
    int64_t step = atomic_load(&s->step);
    pthread_rwlock_unlock(&s->vlock);
    return step;
}

/* The values into the segment's value area (one snapshot); their step. */
static int64_t shm_snapshot(conn *c) {
    dt_ps_server *s = c->s;
    snapshot_lock(s);
    int64_t step = atomic_load(&s->step);
    memcpy(c->shm_vals, s->values, s->total * sizeof(float));
    pthread_rwlock_unlock(&s->vlock);
    return step;
}

/* A lane request's answer: a frame on the socket, or (`bell`: the request came by the
 * request bell) a ring of the reply bell. */
static int lane_answer(conn *c, int bell, int type, int64_t arg) {
    if (!bell) return dt__ps_send_frame(c->fd, type, arg, NULL, 0);
    dt__ps_bell_ring(&dt__ps_lane_ctl_of(&c->shm)->rep, ++c->rep_rings, (uint32_t)type, arg);
    return 0;
}

/* SHM_PUSH, SHM_PUSH_PULL or SHM_PULL on an attached connection. SHM_PUSH_PULL, async: the
 * optimizer step writes the new values into the value area as it goes (no second pass over
 * the model), so the reply is the state right after this push; sync: the round, then a
 * snapshot. */
static int lane_request(conn *c, int type, int bell) {
    dt_ps_server *s = c->s;
    if (atomic_load(&s->step) < 0) return lane_answer(c, bell, DT__PS_NOT_INITIALIZED, 0);
    if (type == DT__PS_SHM_PULL) return lane_answer(c, bell, DT__PS_SHM_VALUES, shm_snapshot(c));
    int pull = type == DT__PS_SHM_PUSH_PULL;
    int64_t step = apply_push(c, c->shm_grad, pull ? c->shm_var_vals : NULL);
    if (step < 0) return -1;
    if (!pull) return lane_answer(c, bell, DT__PS_ACK, step);
    if (s->conf.sync) step = shm_snapshot(c);
    return lane_answer(c, bell, DT__PS_SHM_VALUES, step);
}

/* How long an attached connection's thread sleeps on the request bell before it looks at
 * the socket (a hang-up, a frame from a client that does not ring) and at `closing`: 10 ms
 * (DT__PS_BELL_SLICE_NS), doubling while nothing comes up to 160 ms, so an idle connection
 * costs a few wake-ups a second */
#define BELL_SLICE_MAX_NS (160 * 1000 * 1000L)

/* On an attached connection, before the next frame header: wait for the client's ring or
 * for the socket. 1: a lane request was rung (its type in *type); 0: read the socket (a
 * frame is owed or there, a hang-up, or the server is closing: its socket is shut). Every
 * ring carries the count of frames the client has sent on the socket, so a ring missed (the
 * count moved on twice between two looks) loses nothing. */
static int lane_wait(conn *c, int *type) {
    dt__ps_bell *req = &dt__ps_lane_ctl_of(&c->shm)->req;
    long slice = DT__PS_BELL_SLICE_NS;
    for (;;) {
        if (atomic_load(&c->s->closing) || c->sock_sent > c->sock_read || c->rd.pos < c->rd.end)
            return 0;
        uint32_t n = atomic_load_explicit(&req->count, memory_order_acquire);
        if (n != c->req_seen) {
            c->req_seen = n; /* a client rings once, then waits for the answer */
            uint32_t t = atomic_load_explicit(&req->type, memory_order_relaxed);
            int64_t sent = atomic_load_explicit(&req->arg, memory_order_relaxed);
            if (sent > c->sock_sent) c->sock_sent = sent; /* a hostile count can only stall it */
            if (t == DT__PS_BELL_SOCKET) continue;
            *type = t > INT16_MAX ? INT16_MAX : (int)t; /* checked by the caller */
            return 1;
        }
        if (dt__ps_bell_sleep(req, n, slice)) continue;
        struct pollfd pf = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
        if (poll(&pf, 1, 0) > 0) return 0;
        if (slice < BELL_SLICE_MAX_NS) slice *= 2;
    }
}

/* SHM_ATTACH: check the descriptions like a push's (a mismatch is refused and closes the
 * connection), then map the client's segment. A segment this PS cannot reach or that does
 * not check out is declined with the reason: the client goes on over TCP. */
static int shm_attach(conn *c, const dt__ps_hdr *h) {
    dt_ps_server *s = c->s;
    if (h->len < DT__PS_SHM_FIXED + 4)
        return refuse(c, h->len, "SHM_ATTACH of %" PRIu64 " bytes (at least %d)", h->len,
                      DT__PS_SHM_FIXED + 4);
    uint8_t b[DT__PS_SHM_FIXED];
    size_t got;
    if (dt__ps_read(&c->rd, b, sizeof b, &got) != 0) {
        slog(s, "%s: truncated SHM_ATTACH (%zu of %" PRIu64 " bytes); closing the connection",
             c->who, got, h->len);
        return -1;
    }
    if (read_tensors(c, "shm attach", h->len - DT__PS_SHM_FIXED, DT__PS_F32, 1)) return -1;
    uint64_t size = dt__shm_offer_size(b);
    uint64_t want = dt__ps_lane_size(s->total);
    if (size != want)
        return refuse(c, 0,
                      "SHM_ATTACH: a segment of %" PRIu64 " bytes, the partition needs %" PRIu64,
                      size, want);
    dt__shm_free(&c->shm);
    c->shm_grad = c->shm_vals = NULL;
    if (!c->shm_var_vals && !(c->shm_var_vals = malloc((size_t)s->nvars * sizeof(float *) + 1))) {
        slog(s, "%s: out of memory for SHM_ATTACH; closing the connection", c->who);
        return -1;
    }
    dt__shm m;
    if (s->conf.no_shm || dt__shm_attach_offer(&m, b) != DT_OK) {
        char why[DT__PS_TEXT_MAX];
        snprintf(why, sizeof why, "%s",
                 s->conf.no_shm ? "shared memory is off on this PS" : dt_errmsg());
        dt_err_clear();
        slog(s, "%s: shared memory declined: %s; its tensors come over TCP", c->who, why);
        return dt__ps_send_frame(c->fd, DT__PS_SHM_DECLINED, 0, why, strlen(why));
    }
    c->shm = m;
    c->req_seen = c->rep_rings = 0; /* a fresh segment's bells */
    c->sock_sent = c->sock_read = 0;
    c->shm_grad = dt__ps_lane_grads(&c->shm);
    c->shm_vals = c->shm_grad + s->total;
    for (int i = 0; i < s->nvars; i++)
        c->shm_var_vals[i] = c->shm_vals + s->vars[i].off;
    slog(s, "%s: tensors through shared memory (%" PRIu64 " bytes)", c->who, size);
    return dt__ps_send_frame(c->fd, DT__PS_OK, 0, NULL, 0);
}

/* ---- one connection ---- */

/* The handshake's reads failed with e after `got` of `want` bytes of `what`: closed to make
 * room (the accept thread logged it), past the HELLO deadline, or a connection that went
 * away. Returns -1 for the caller's loop. */
static int handshake_failed(conn *c, dt_err e, const char *what, size_t got, size_t want) {
    dt_ps_server *s = c->s;
    pthread_mutex_lock(&s->clock);
    int evicted = c->evicted;
    pthread_mutex_unlock(&s->clock);
    if (evicted) {
        /* its read side is shut: only the reason is left to say */
        char msg[160];
        snprintf(msg, sizeof msg,
                 "closed: %d connections were waiting for their HELLO and this was the oldest",
                 s->conf.max_pending);
        dt__ps_send_frame(c->fd, DT__PS_ERROR, 0, msg, strlen(msg));
        return -1;
    }
    if (e == DT_ERR_TIMEOUT)
        return refuse(c, 0, "no HELLO within %" PRId64 " ms (%zu of %zu bytes of its %s came)",
                      s->conf.hello_timeout_ms, got, want, what);
    if (got > 0 || (errno && errno != ECONNRESET && errno != EBADF && errno != EINVAL))
        slog(s, "%s: truncated %s (%zu of %zu bytes)%s%s; closing the connection", c->who, what,
             got, want, errno ? ": " : "", errno ? strerror(errno) : "");
    return -1;
}

static int handle_hello(conn *c, const dt__ps_hdr *h) {
    dt_ps_server *s = c->s;
    if (h->type != DT__PS_HELLO)
        return refuse(c, h->len, "expected HELLO, got %s (type %u)", dt__ps_type_name(h->type),
                      h->type);
    if (h->len > DT__PS_HELLO_MAX || h->len < 16)
        return refuse(c, 0, "HELLO of %" PRIu64 " bytes (16 to %d)", h->len, DT__PS_HELLO_MAX);
    uint8_t buf[DT__PS_HELLO_MAX];
    size_t got;
    dt_err e = dt__sock_read_full(c->fd, buf, (size_t)h->len, c->hello_deadline, &got);
    if (e) return handshake_failed(c, e, "HELLO", got, (size_t)h->len);
    atomic_store(&c->hello_read, 1);
    /* the shared part (net/frame-impl.h), then u32 replica_len, replica */
    dt__frame_hello hl;
    if (dt__frame_hello_parse(buf, (size_t)h->len, &hl) != DT_OK || hl.rest_len < 4)
        return refuse(c, 0, "HELLO: token length %" PRIu32 " exceeds the frame",
                      dt__get32(buf + 8));
    uint32_t index = hl.a, nps = hl.b, tl = hl.token_len;
    uint32_t rl = dt__get32(hl.rest);
    if ((uint64_t)rl + 4 != hl.rest_len)
        return refuse(c, 0, "HELLO: lengths %" PRIu32 " + %" PRIu32 " do not add up to the frame",
                      tl, rl);
    const char *rep = (const char *)hl.rest + 4;
    size_t rn = rl < sizeof c->replica - 1 ? rl : sizeof c->replica - 1;
    pthread_mutex_lock(&s->clock); /* replica_joined reads other connections' names */
    for (size_t i = 0; i < rn; i++)
        c->replica[i] = (rep[i] >= 0x20 && rep[i] < 0x7f) ? rep[i] : '?';
    c->replica[rn] = '\0';
    pthread_mutex_unlock(&s->clock);
    if (rn) snprintf(c->who, sizeof c->who, "%s (%s)", c->replica, c->peer);
    if (h->version != DT__PS_VERSION)
        return refuse(c, 0, "protocol version %u is not supported (this PS speaks %d)", h->version,
                      DT__PS_VERSION);
    if (!dt__frame_hello_token_ok(&hl, s->token)) return refuse(c, 0, "HELLO: wrong token");
    if ((int)index != s->conf.index || (int)nps != s->conf.nps)
        return refuse(
            c, 0, "HELLO: the client expects ps-%" PRIu32 " of %" PRIu32 ", this is ps-%d of %d",
            index, nps, s->conf.index, s->conf.nps);
    /* verified: from the connections waiting for their HELLO to the authenticated ones, if
     * there is room. One the accept thread closed to make room meanwhile (no longer counted
     * as waiting) still counts: its whole HELLO had come before its read side was shut. */
    pthread_mutex_lock(&s->clock);
    int full = s->nauthed >= s->conf.max_conns;
    if (!full) {
        c->authed = 1;
        if (!c->evicted) s->npending--;
        s->nauthed++;
    }
    pthread_mutex_unlock(&s->clock);
    if (full)
        return refuse(c, 0, "this PS has %d connections already (its limit); try again later",
                      s->conf.max_conns);
    return dt__ps_send_frame(c->fd, DT__PS_OK, atomic_load(&s->step), NULL, 0);
}

static int handle(conn *c, const dt__ps_hdr *h) {
    dt_ps_server *s = c->s;
    switch (h->type) {
    case DT__PS_INIT: {
        if (h->arg != DT__PS_F32)
            return refuse(c, h->len,
                          "init from %s: values come as float32 (dtype 0), not dtype %" PRId64,
                          c->who, h->arg);
        if (read_tensors(c, "init", h->len, DT__PS_F32, 0)) return -1;
        pthread_rwlock_wrlock(&s->vlock);
        int taken = !s->initialized;
        if (taken) {
            memcpy(s->values, c->grad, s->total * sizeof(float));
            s->initialized = 1;
            atomic_store(&s->step, dt_optim_steps(s->optim));
        }
        pthread_rwlock_unlock(&s->vlock);
        if (taken) slog(s, "initialized by %s", c->who);
        return dt__ps_send_frame(c->fd, DT__PS_ACK, taken, NULL, 0);
    }
    case DT__PS_PULL:
    case DT__PS_SAVE:
        if (h->len != 0)
            return refuse(c, h->len, "%s with a payload of %" PRIu64 " bytes (must be empty)",
                          dt__ps_type_name(h->type), h->len);
        if (atomic_load(&s->step) < 0)
            return dt__ps_send_frame(c->fd, DT__PS_NOT_INITIALIZED, 0, NULL, 0);
        if (h->type == DT__PS_PULL) return send_values(c, 0, -1);
        if (!s->ckpt_dir) return refuse(c, 0, "save: this PS has no checkpoint directory");
        {
            char path[DT__PATH_MAX];
            pthread_mutex_lock(&s->save_lock);
            pthread_rwlock_wrlock(&s->vlock);
            int64_t step = atomic_load(&s->step);
            dt_err err = save_locked(s, path, sizeof path);
            pthread_rwlock_unlock(&s->vlock);
            pthread_mutex_unlock(&s->save_lock);
            if (err) return refuse(c, 0, "save: %s", dt_errmsg());
            slog(s, "saved step %" PRId64 " to %s", step, path);
            return dt__ps_send_frame(c->fd, DT__PS_ACK, step, NULL, 0);
        }
    case DT__PS_PUSH:
    case DT__PS_PUSH_PULL: {
        const char *op = h->type == DT__PS_PUSH ? "push" : "push_pull";
        if (!dt__ps_dtype_size(h->arg))
            return refuse(c, h->len,
                          "%s from %s: unknown wire dtype %" PRId64
                          " (this PS takes 0 float32, 1 bfloat16)",
                          op, c->who, h->arg);
        if (read_tensors(c, op, h->len, (int)h->arg, 0)) return -1;
        if (h->arg == DT__PS_BF16 && !c->bf16_seen) {
            c->bf16_seen = 1;
            slog(s, "%s: gradients come as bfloat16", c->who);
        }
        if (atomic_load(&s->step) < 0)
            return dt__ps_send_frame(c->fd, DT__PS_NOT_INITIALIZED, 0, NULL, 0);
        /* an async float32 PUSH_PULL's reply is written by its step as it goes */
        int direct = h->type == DT__PS_PUSH_PULL && h->arg == DT__PS_F32 && !s->conf.sync &&
                     snap_ready(c);
        int64_t step = apply_push(c, c->grad, direct ? c->snap_vars : NULL);
        if (step < 0) return -1;
        if (h->type == DT__PS_PUSH) return dt__ps_send_frame(c->fd, DT__PS_ACK, step, NULL, 0);
        return send_values(c, h->arg == DT__PS_BF16, direct ? step : -1);
    }
    case DT__PS_SHM_ATTACH:
        return shm_attach(c, h);
    case DT__PS_SHM_PUSH:
    case DT__PS_SHM_PUSH_PULL:
    case DT__PS_SHM_PULL: {
        if (h->len != 0)
            return refuse(c, h->len, "%s with a payload of %" PRIu64 " bytes (must be empty)",
                          dt__ps_type_name(h->type), h->len);
        if (!c->shm.base)
            return refuse(c, 0, "%s before SHM_ATTACH: no shared memory on this connection",
                          dt__ps_type_name(h->type));
        return lane_request(c, h->type, 0);
    }
    default:
        return refuse(c, h->len, "unknown frame type %u", h->type);
    }
}

static void *conn_main(void *arg) {
    conn *c = arg;
    dt__thread_name("dt-ps-conn");
    dt_ps_server *s = c->s;
    int hello = 0, lane_type = 0;
    for (;;) {
        uint8_t hb[DT__PS_HDR];
        size_t got;
        if (!hello) {
            /* the handshake reads straight from the socket, all of it before one deadline
             * however slowly the bytes come (the buffered reader takes over after it) */
            dt_err e = dt__sock_read_full(c->fd, hb, sizeof hb, c->hello_deadline, &got);
            if (e) {
                handshake_failed(c, e, "frame header", got, sizeof hb);
                break;
            }
        } else if (c->shm.base && lane_wait(c, &lane_type)) {
            if (lane_type != DT__PS_SHM_PUSH && lane_type != DT__PS_SHM_PUSH_PULL &&
                lane_type != DT__PS_SHM_PULL) {
                refuse(c, 0, "the request bell rung with type %d (not a lane request)",
                       lane_type);
                break;
            }
            if (lane_request(c, lane_type, 1) != 0) break;
            continue;
        } else if (dt__ps_read(&c->rd, hb, sizeof hb, &got) != 0) {
            if (got > 0 || (errno && errno != ECONNRESET && errno != EBADF && errno != EINVAL))
                slog(s, "%s: truncated frame header (%zu of %d bytes)%s%s; closing the connection",
                     c->who, got, DT__PS_HDR, errno ? ": " : "", errno ? strerror(errno) : "");
            break;
        }
        dt__ps_hdr h;
        dt__ps_hdr_decode(hb, &h);
        if (h.magic != DT__PS_MAGIC) {
            refuse(c, 0, "bad frame magic 0x%08" PRIx32 " (not a dtrain PS client?)", h.magic);
            break;
        }
        if (h.len > (uint64_t)s->conf.max_frame) {
            refuse(c, 0, "%s frame of %" PRIu64 " bytes exceeds the maximum frame size %" PRId64,
                   dt__ps_type_name(h.type), h.len, s->conf.max_frame);
            break;
        }
        int rc;
        if (!hello) {
            rc = handle_hello(c, &h);
            hello = rc == 0;
        } else {
            if (c->shm.base) c->sock_read++; /* a frame a ring said was coming, or ahead of it */
            rc = handle(c, &h);
        }
        if (rc != 0) break;
    }
    shutdown(c->fd, SHUT_RDWR);
    if (s->conf.sync) sync_leave(c);
    pthread_mutex_lock(&s->clock);
    if (c->authed)
        s->nauthed--;
    else if (!c->evicted)
        s->npending--;
    c->left = 1;
    pthread_mutex_unlock(&s->clock);
    atomic_store(&c->done, 1);
    return NULL;
}

static void conn_free(conn *c) {
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    dt__ps_reader_free(&c->rd);
    free(c->grad);
    free(c->snap);
    free(c->snap_vars);
    dt__shm_free(&c->shm);
    free(c->shm_var_vals);
    free(c->seen);
    free(c->iov);
    free(c);
}

/* Join finished connections (all of them when `all`, after shutting their sockets). */
static void reap(dt_ps_server *s, int all) {
    pthread_mutex_lock(&s->clock);
    conn **pp = &s->conns;
    conn *dead = NULL;
    while (*pp) {
        conn *c = *pp;
        if (all) shutdown(c->fd, SHUT_RDWR);
        if (all || atomic_load(&c->done)) {
            *pp = c->next;
            c->next = dead;
            dead = c;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&s->clock);
    while (dead) {
        conn *c = dead;
        dead = c->next;
        pthread_join(c->thread, NULL);
        conn_free(c);
    }
}

/* Whether a whole HELLO (header and payload) waits unread in c's socket, or c's thread has
 * read one and is checking it: such a connection is about to be verified or refused, and
 * closing it would turn away a real client that sent at once. */
static int hello_in_hand(conn *c) {
    if (atomic_load(&c->hello_read)) return 1;
    uint8_t hb[DT__PS_HDR];
    int queued = 0;
    if (recv(c->fd, hb, sizeof hb, MSG_PEEK | MSG_DONTWAIT) != (ssize_t)sizeof hb ||
        ioctl(c->fd, FIONREAD, &queued) != 0)
        return 0;
    dt__ps_hdr h;
    dt__ps_hdr_decode(hb, &h);
    return h.len <= DT__PS_HELLO_MAX && (uint64_t)queued >= DT__PS_HDR + h.len;
}

/* Under clock, at the cap of connections waiting for their HELLO: close the oldest of them
 * that has not its whole HELLO in hand (its read side: its thread reads what had come, then
 * sees the end, says why and goes), so that a flood of idle or slow clients cannot keep a
 * real one from its handshake.
 * 0 when every one has its HELLO in hand (they are verified or refused at once). */
static int evict_oldest_locked(dt_ps_server *s) {
    conn *oldest = NULL; /* the list is newest first: the last one waiting */
    for (conn *o = s->conns; o; o = o->next)
        if (!o->authed && !o->evicted && !o->left && !hello_in_hand(o)) oldest = o;
    if (!oldest) return 0;
    oldest->evicted = 1;
    s->npending--;
    shutdown(oldest->fd, SHUT_RD);
    slog(s, "%d connections wait for their HELLO (the limit); closed the oldest, from %s",
         s->conf.max_pending, oldest->peer);
    return 1;
}

static void *accept_main(void *arg) {
    dt_ps_server *s = arg;
    dt__thread_name("dt-ps-accept");
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(s->lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
        pthread_mutex_lock(&s->clock);
        int stopping = s->stopping;
        pthread_mutex_unlock(&s->clock);
        if (stopping) {
            if (fd >= 0) close(fd);
            break;
        }
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                slog(s, "accept: %s", strerror(errno));
                usleep(100000);
                continue;
            }
            slog(s, "accept failed: %s; no longer accepting connections", strerror(errno));
            break;
        }
        reap(s, 0);
        dt__ps_tune_socket(fd);
        struct timeval tv = {.tv_sec = SEND_TIMEOUT_S};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        conn *c = calloc(1, sizeof *c);
        if (c) {
            c->fd = fd;
            c->joined = -1;
            c->s = s;
        }
        if (!c || dt__ps_reader_init(&c->rd, fd, READ_BUF) ||
            !(c->seen = calloc((size_t)s->nvars + 1, 1)) ||
            !(c->iov = calloc((size_t)(2 * s->nvars + 2), sizeof *c->iov))) {
            slog(s, "out of memory for a connection; closing it");
            if (c)
                conn_free(c);
            else
                close(fd);
            continue;
        }
        dt__sock_addr_text(&sa, c->peer, sizeof c->peer);
        snprintf(c->who, sizeof c->who, "%s", c->peer);
        c->hello_deadline = dt__now_ms() + s->conf.hello_timeout_ms;
        pthread_mutex_lock(&s->clock);
        while (s->npending >= s->conf.max_pending && evict_oldest_locked(s)) {
        }
        if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
            pthread_mutex_unlock(&s->clock);
            slog(s, "cannot start a connection thread; closing %s", c->peer);
            conn_free(c);
            continue;
        }
        c->next = s->conns;
        s->conns = c;
        s->npending++;
        pthread_mutex_unlock(&s->clock);
    }
    return NULL;
}

/* ---- life cycle ---- */

static dt_err listen_on(dt_ps_server *s) {
    dt_err e = dt__sock_listen(s->host, s->conf.port, LISTEN_BACKLOG, &s->lfd, &s->port);
    return e ? dt_err_wrap(e, "%s", s->name) : DT_OK;
}

static char *dup_or_null(const char *str, int *fail) {
    if (!str) return NULL;
    char *d = strdup(str);
    if (!d) *fail = 1;
    return d;
}

dt_err dt_ps_server_start(dt_ps_server **out, const dt_ps_server_conf *conf,
                          dt_param *const *params, int n) {
    DT_ASSERT(out && conf && n >= 0 && (n == 0 || params));
    *out = NULL;
    if (conf->nps < 1 || conf->index < 0 || conf->index >= conf->nps)
        return dt_err_set(DT_ERR_ARG, "ps: index %d of nps %d is out of range", conf->index,
                          conf->nps);
    if (conf->max_frame < 0)
        return dt_err_set(DT_ERR_ARG, "ps: max_frame must be >= 0, got %" PRId64, conf->max_frame);
    dt_ps_server *s = NULL; /* aligned: some members have cache lines of their own */
    if (posix_memalign((void **)&s, _Alignof(dt_ps_server), sizeof *s) != 0)
        return dt_err_set(DT_ERR_NOMEM, "ps: out of memory");
    memset(s, 0, sizeof *s);
    s->conf = *conf;
    s->lfd = -1;
    if (!s->conf.max_frame) s->conf.max_frame = DT_PS_DEFAULT_MAX_FRAME;
    if (s->conf.sync_timeout_ms <= 0) s->conf.sync_timeout_ms = 5000;
    if (s->conf.max_pending <= 0) s->conf.max_pending = DT_PS_DEFAULT_MAX_PENDING;
    if (s->conf.hello_timeout_ms <= 0) s->conf.hello_timeout_ms = DT_PS_DEFAULT_HELLO_TIMEOUT_MS;
    if (s->conf.max_conns <= 0) s->conf.max_conns = DT_PS_DEFAULT_MAX_CONNS;
    snprintf(s->name, sizeof s->name, "ps-%d", conf->index);
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    /* an optimizer step must not starve behind a stream of VALUES replies */
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->vlock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&s->slock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->scv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->clock, NULL);
    pthread_mutex_init(&s->save_lock, NULL);
    pthread_mutex_init(&s->loglock, NULL);
    pthread_mutex_init(&s->tlock, NULL);
    atomic_store(&s->step, -1);

    dt_err err = DT_OK;
    int *owner = NULL;
    int fail = 0;
    s->host = dup_or_null(conf->host, &fail);
    s->token = dup_or_null(conf->token ? conf->token : "", &fail);
    s->ckpt_dir = dup_or_null(conf->ckpt_dir, &fail);
    s->conf.host = s->host;
    s->conf.token = s->token;
    s->conf.ckpt_dir = s->ckpt_dir;
    if (fail) goto nomem;

    /* our partition */
    if (n > 0) {
        int64_t *numel = malloc((size_t)n * sizeof *numel);
        owner = malloc((size_t)n * sizeof *owner);
        if (!numel || !owner) {
            free(numel);
            goto nomem;
        }
        for (int i = 0; i < n; i++)
            numel[i] = dt_tensor_numel(&params[i]->value);
        dt_ps_partition(numel, n, conf->nps, owner);
        free(numel);
    }
    for (int i = 0; i < n; i++)
        s->nvars += owner[i] == conf->index;
    s->vars = calloc((size_t)s->nvars + 1, sizeof *s->vars);
    s->pp = calloc((size_t)s->nvars + 1, sizeof *s->pp);
    s->meta_off = calloc((size_t)s->nvars + 1, sizeof *s->meta_off);
    s->meta_len = calloc((size_t)s->nvars + 1, sizeof *s->meta_len);
    if (!s->vars || !s->pp || !s->meta_off || !s->meta_len) goto nomem;
    size_t meta_bytes = 4;
    for (int i = 0, k = 0; i < n; i++) {
        if (owner[i] != conf->index) continue;
        const dt_param *p = params[i];
        size_t nl = strlen(p->name);
        if (nl == 0 || nl > DT__PS_NAME_MAX) {
            err =
                dt_err_set(DT_ERR_ARG, "%s: variable %d: name \"%s\" must have 1 to %d characters",
                           s->name, i, p->name, DT__PS_NAME_MAX);
            goto fail;
        }
        var *v = &s->vars[k];
        snprintf(v->p.name, sizeof v->p.name, "%s", p->name);
        v->p.value.shape = p->value.shape;
        v->p.grad.shape = p->value.shape;
        v->p.decay = p->decay;
        v->numel = dt_tensor_numel(&p->value);
        v->off = s->total;
        s->total += dt__ps_shm_floats(v->numel); /* each variable 64-byte aligned */
        s->meta_off[k] = meta_bytes;
        s->meta_len[k] = dt__ps_meta_size(p->name, &p->value.shape);
        meta_bytes += s->meta_len[k];
        s->list_bytes += (uint64_t)v->numel * sizeof(float);
        s->data_floats += (size_t)v->numel;
        s->pp[k] = &v->p;
        k++;
    }
    for (int i = 0; i < s->nvars; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(s->vars[i].p.name, s->vars[j].p.name)) {
                err = dt_err_set(DT_ERR_ARG, "%s: variable %s appears twice", s->name,
                                 s->vars[i].p.name);
                goto fail;
            }
    s->list_bytes += meta_bytes;
    if (s->list_bytes > (uint64_t)s->conf.max_frame) {
        err = dt_err_set(DT_ERR_ARG,
                         "%s: the partition's frames (%" PRIu64 " bytes) exceed max_frame %" PRId64,
                         s->name, s->list_bytes, s->conf.max_frame);
        goto fail;
    }
    if (!(s->meta = malloc(meta_bytes))) goto nomem;
    dt__put32(s->meta, (uint32_t)s->nvars);
    for (int k = 0; k < s->nvars; k++)
        dt__ps_meta_encode(s->meta + s->meta_off[k], s->vars[k].p.name, &s->vars[k].p.value.shape);
    {
        size_t bytes = (s->total ? s->total : 16) * sizeof(float);
        if (posix_memalign((void **)&s->values, 64, bytes) != 0) {
            s->values = NULL;
            goto nomem;
        }
        memset(s->values, 0, bytes);
        if (conf->sync) {
            if (posix_memalign((void **)&s->sum, 64, bytes) != 0) {
                s->sum = NULL;
                goto nomem;
            }
            memset(s->sum, 0, bytes);
        }
    }
    for (int k = 0; k < s->nvars; k++) {
        s->vars[k].p.value.data = s->values + s->vars[k].off;
        s->vars[k].p.grad.data = s->values + s->vars[k].off; /* set per step */
    }
    if ((err = dt_optim_init(&s->optim, &conf->optim, s->pp, s->nvars))) goto fail;
    if (conf->threads > 1 && (err = dt_pool_init(&s->pool, conf->threads))) goto fail;
    if (pipelined(s) && make_blocks(s)) goto nomem;
    if (s->ckpt_dir && (err = restore(s))) goto fail;
    if ((err = listen_on(s))) goto fail;
    if (pthread_create(&s->accept_thread, NULL, accept_main, s) != 0) {
        err = dt_err_set(DT_ERR_STATE, "%s: cannot start the accept thread", s->name);
        goto fail;
    }
    s->accept_started = 1;
    slog(s, "serving %d variables (%zu floats) on port %d%s", s->nvars, s->total, s->port,
         conf->sync ? ", synchronous" : "");
    free(owner);
    *out = s;
    return DT_OK;
nomem:
    err = dt_err_set(DT_ERR_NOMEM, "ps: out of memory");
fail:
    free(owner);
    dt_ps_server_stop(s);
    return err;
}

int dt_ps_server_port(const dt_ps_server *s) {
    return s->port;
}

int64_t dt_ps_server_step(const dt_ps_server *s) {
    return atomic_load(&((dt_ps_server *)s)->step);
}

int dt__ps_server_pending(dt_ps_server *s) {
    pthread_mutex_lock(&s->slock);
    int n = s->contributors;
    pthread_mutex_unlock(&s->slock);
    return n;
}

/* Stop accepting: the accept thread ends (no-op when it has already). */
static void stop_accepting(dt_ps_server *s) {
    if (!s->accept_started) return;
    pthread_mutex_lock(&s->clock);
    s->stopping = 1;
    pthread_mutex_unlock(&s->clock);
    shutdown(s->lfd, SHUT_RDWR);
    pthread_join(s->accept_thread, NULL);
    s->accept_started = 0;
}

dt_err dt_ps_server_drain(dt_ps_server *s, int64_t *step, char *path, size_t len) {
    *step = -1;
    if (len) path[0] = 0;
    stop_accepting(s);
    atomic_store(&s->closing, 1);
    /* The read side only: a thread blocked on its next header (or in the middle of a
     * frame, which is then not applied) sees the end; one applying a frame still sends
     * its reply. A sync round completes with the connections that pushed to it, as the
     * others leave. */
    pthread_mutex_lock(&s->clock);
    for (conn *c = s->conns; c; c = c->next) shutdown(c->fd, SHUT_RD);
    pthread_mutex_unlock(&s->clock);
    for (;;) {
        pthread_mutex_lock(&s->clock);
        int open = 0;
        for (conn *c = s->conns; c; c = c->next) open += !atomic_load(&c->done);
        pthread_mutex_unlock(&s->clock);
        reap(s, 0);
        if (!open) break;
        struct timespec tick = {0, 5 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    if (atomic_load(&s->step) < 0 || !s->ckpt_dir) return DT_OK; /* nothing to save */
    char tmp[DT__PATH_MAX];
    pthread_mutex_lock(&s->save_lock);
    pthread_rwlock_wrlock(&s->vlock);
    *step = atomic_load(&s->step);
    dt_err err = save_locked(s, len ? path : tmp, len ? len : sizeof tmp);
    pthread_rwlock_unlock(&s->vlock);
    pthread_mutex_unlock(&s->save_lock);
    return err;
}

void dt_ps_server_stop(dt_ps_server *s) {
    if (!s) return;
    if (s->accept_started || s->conns) {
        stop_accepting(s);
        atomic_store(&s->closing, 1);
        pthread_mutex_lock(&s->slock);
        s->sync_stop = 1;
        pthread_cond_broadcast(&s->scv);
        pthread_mutex_unlock(&s->slock);
        reap(s, 1);
    }
    if (s->lfd >= 0) close(s->lfd);
    dt_optim_free(s->optim);
    dt_pool_free(s->pool);
    free(s->values);
    free(s->sum);
    free(s->meta);
    free(s->meta_off);
    free(s->meta_len);
    free(s->vars);
    free(s->pp);
    free(s->blocks);
    free(s->host);
    free(s->token);
    free(s->ckpt_dir);
    pthread_rwlock_destroy(&s->vlock);
    pthread_mutex_destroy(&s->slock);
    pthread_cond_destroy(&s->scv);
    pthread_mutex_destroy(&s->clock);
    pthread_mutex_destroy(&s->save_lock);
    pthread_mutex_destroy(&s->loglock);
    pthread_mutex_destroy(&s->tlock);
    free(s);
}

/*
 * ring_test.c - the ring all-reduce data plane (include/dtrain/ring.h) over real loopback
 * sockets: members are threads of this process (each its own dt_ring) or forked processes
 * (to kill or stop one). Every wait is bounded so that a hang fails the test instead of
 * blocking ctest; nothing asserts how fast anything is.
 *
 * Members of one process or of one host share memory by default (lane.c): the tests run on
 * that lane, and those whose behaviour must be the same on both lanes run again with every
 * member opened no_shm (tcp_only: RING_DATA frames, as between hosts).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/bf16-impl.h"
#include "dtrain/ring.h"
#include "ring/ring-impl.h"
#include "testing/dt_test.h"

#define MAXM 4
static int tcp_only;     /* members open their rings with no_shm */
/* members open their rings with shared_floats IN_PLACE_FLOATS, and the all-reduces of the
 * failure tests take their data from the shared buffer where the ring gives one */
static int in_place;
#define IN_PLACE_FLOATS ((size_t)4 << 20)
#define JOIN_BOUND_S 120 /* generous: only there so that a hang fails instead of blocking */

/* ---- a group of members: listening sockets and addresses ---- */

typedef struct group {
    int size;
    int lfd[MAXM];
    char addr[MAXM][32];
    const char *peers[MAXM];
} group;

static int group_listen(group *g, int size) {
    memset(g, 0, sizeof *g);
    g->size = size;
    for (int q = 0; q < size; q++) {
        int port;
        if (dt_ring_listen("127.0.0.1", 0, &g->lfd[q], &port)) return -1;
        snprintf(g->addr[q], sizeof g->addr[q], "127.0.0.1:%d", port);
        g->peers[q] = g->addr[q];
    }
    return 0;
}

static void group_close(group *g) {
    for (int q = 0; q < g->size; q++)
        close(g->lfd[q]);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- members as threads ---- */

typedef struct member member;
typedef void (*member_fn)(member *m, dt_ring *r);

struct member {
    group *g;
    int rank;
    int64_t gen;
    const char *token;
    int timeout_ms;
    int hello_ms; /* conf.hello_timeout_ms (0: the default) */
    size_t chunk;
    int spin_us; /* dt_ring_set_spin_us(spin_us) after opening; 0: left at the default */
    size_t shared; /* conf.shared_floats (0: IN_PLACE_FLOATS when in_place, else none) */
    dt_ring_wire_dtype wire; /* conf.wire_dtype */
    FILE *log;
    member_fn fn;
    void *arg;
    _Atomic(dt_ring *) ring; /* set once open succeeded */
    dt_err open_err, err;
    char msg[1024];
    int failed_peer;
    int lanes; /* connections on shared memory (0 to 2) */
    int ok;    /* fn's own verdict, 1: good */
    pthread_t th;
};

static void member_record(member *m, dt_err e, dt_ring *r) {
    m->err = e;
    snprintf(m->msg, sizeof m->msg, "%s", e ? dt_errmsg() : "");
    if (r) m->failed_peer = dt_ring_failed_peer(r);
}

static void *member_main(void *p) {
    member *m = p;
    dt_ring_conf c = {.token = m->token ? m->token : "tok",
                      .generation = m->gen ? m->gen : 1,
                      .rank = m->rank,
                      .size = m->g->size,
                      .peers = m->g->peers,
                      .timeout_ms = m->timeout_ms ? m->timeout_ms : 20000,
                      .chunk_bytes = m->chunk,
                      .hello_timeout_ms = m->hello_ms,
                      .log = m->log,
                      .no_shm = tcp_only,
                      .wire_dtype = m->wire,
                      .shared_floats = m->shared ? m->shared : in_place ? IN_PLACE_FLOATS : 0};
    dt_ring *r = NULL;
    m->open_err = dt_ring_open(&r, m->g->lfd[m->rank], &c);
    if (m->open_err) {
        snprintf(m->msg, sizeof m->msg, "%s", dt_errmsg());
        return NULL;
    }
    m->lanes = r->in.on + r->out.on;
    atomic_store(&m->ring, r);
    if (m->fn) m->fn(m, r);
    atomic_store(&m->ring, NULL);
    dt_ring_close(r);
    return NULL;
}

/* Start members[0..n) (filled in by the caller); join them within JOIN_BOUND_S. */
static int run_members(member *ms, int n) {
    for (int i = 0; i < n; i++)
        if (pthread_create(&ms[i].th, NULL, member_main, &ms[i]) != 0) return -1;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += JOIN_BOUND_S;
    for (int i = 0; i < n; i++)
        if (pthread_timedjoin_np(ms[i].th, NULL, &dl) != 0) {
            fprintf(stderr, "member %d did not finish within %d s: the ring hangs\n", i,
                    JOIN_BOUND_S);
            abort(); /* the hung threads cannot be reclaimed */
        }
    return 0;
}

static void members_init(member *ms, group *g, member_fn fn, void *arg) {
    memset(ms, 0, sizeof(member) * (size_t)g->size);
    for (int i = 0; i < g->size; i++) {
        ms[i].g = g;
        ms[i].rank = i;
        ms[i].fn = fn;
        ms[i].arg = arg;
        ms[i].failed_peer = -2;
        atomic_init(&ms[i].ring, NULL);
    }
}

/* ---- data ---- */

/* n zeroed floats for a call: in the ring's shared buffer when the test runs in place and
 * the ring has one (data_free then leaves it), else allocated */
static float *data_for(dt_ring *r, size_t n) {
    float *b = in_place ? dt_ring_shared_buffer(r) : NULL;
    if (b && n <= IN_PLACE_FLOATS) {
        memset(b, 0, n * sizeof *b);
        return b;
    }
    return calloc(n ? n : 1, sizeof *b);
}

static void data_free(dt_ring *r, float *d) {
    if (d != dt_ring_shared_buffer(r)) free(d);
}

static uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* Small integers: every summation order gives the exact sum. */
static float int_value(int rank, size_t i) {
    return (float)((int)(hash32((uint32_t)(rank * 1000003 + (int)i)) % 201) - 100);
}

/* Values of many magnitudes: the sum depends on the order of the additions. */
static float rough_value(int rank, size_t i) {
    uint32_t h = hash32((uint32_t)(rank * 7919 + (int)i * 31 + 17));
    float m = (float)(h & 0xffffff) / (float)0x1000000 - 0.5f;
    return ldexpf(m, (int)(h >> 26) - 20);
}

static const size_t test_ns[] = {0, 1, 3, 0 /* size-1 */, 1000, (1u << 20) + 7};
#define NNS (sizeof test_ns / sizeof test_ns[0])

typedef struct sums_out {
    float *res[NNS][2]; /* per n: the integer run's and the rough run's results */
} sums_out;

static void sums_fn(member *m, dt_ring *r) {
    sums_out *out = &((sums_out *)m->arg)[m->rank];
    m->ok = 1;
    if (m->spin_us) dt_ring_set_spin_us(r, m->spin_us);
    for (size_t k = 0; k < NNS; k++) {
        size_t n = k == 3 ? (size_t)m->g->size - 1 : test_ns[k];
        for (int kind = 0; kind < 2; kind++) {
            float *d = malloc((n ? n : 1) * sizeof *d);
            for (size_t i = 0; i < n; i++)
                d[i] = kind ? rough_value(m->rank, i) : int_value(m->rank, i);
            dt_err e = dt_ring_allreduce(r, d, n);
            if (e) {
                member_record(m, e, r);
                free(d);
                m->ok = 0;
                return;
            }
            out->res[k][kind] = d;
        }
    }
    member_record(m, DT_OK, r);
}

/* Every n for one size, one chunk size, one small threshold; spin[rank] (NULL: none) for
 * dt_ring_set_spin_us (0: the default). */
static void check_sums_spin(int size, size_t chunk, size_t small, const int *spin) {
    size_t saved = dt__ring_small_bytes;
    dt__ring_small_bytes = small;
    group g;
    DT_CHECK(group_listen(&g, size) == 0);
    member ms[MAXM];
    sums_out out[MAXM];
    memset(out, 0, sizeof out);
    members_init(ms, &g, sums_fn, out);
    for (int i = 0; i < size; i++) {
        ms[i].chunk = chunk;
        ms[i].spin_us = spin ? spin[i] : 0;
    }
    DT_CHECK(run_members(ms, size) == 0);
    group_close(&g);
    dt__ring_small_bytes = saved;
    int bad = 0;
    for (int i = 0; i < size; i++) {
        if (ms[i].open_err || ms[i].err) {
            fprintf(stderr, "size %d rank %d: %s\n", size, i, ms[i].msg);
            bad = 1;
        }
        /* members of one process map each other's segments; size 1 has no connections; a
         * member that declines has its incoming connection on TCP, its previous member its
         * outgoing one */
        int want = size == 1 || tcp_only ? 0 : 2;
        if (want && dt__ring_decline_rank >= 0)
            want -= (i == dt__ring_decline_rank) + ((i + 1) % size == dt__ring_decline_rank);
        if (!bad && ms[i].lanes != want) {
            fprintf(stderr, "size %d rank %d: %d connections on shared memory, want %d\n", size, i,
                    ms[i].lanes, want);
            bad = 1;
        }
    }
    for (size_t k = 0; k < NNS && !bad; k++) {
        size_t n = k == 3 ? (size_t)size - 1 : test_ns[k];
        for (size_t i = 0; i < n && !bad; i++) {
            /* the serial reference, in rank order */
            float want = 0;
            double rough = 0, mag = 0;
            for (int q = 0; q < size; q++) {
                want += int_value(q, i);
                rough += rough_value(q, i);
                mag += fabs((double)rough_value(q, i));
            }
            for (int q = 0; q < size && !bad; q++) {
                if (out[q].res[k][0][i] != want) {
                    fprintf(stderr, "size %d chunk %zu n %zu rank %d element %zu: %g, want %g\n",
                            size, chunk, n, q, i, (double)out[q].res[k][0][i], (double)want);
                    bad = 1;
                }
                if (fabs((double)out[q].res[k][1][i] - rough) > 1e-6 * mag) {
                    fprintf(stderr, "size %d n %zu rank %d element %zu: %.9g, want ~%.9g\n", size,
                            n, q, i, (double)out[q].res[k][1][i], rough);
                    bad = 1;
                }
            }
        }
        /* bitwise the same on every member, whatever the order of the additions */
        for (int q = 1; q < size && !bad; q++)
            for (int kind = 0; kind < 2; kind++)
                if (n && memcmp(out[q].res[k][kind], out[0].res[k][kind], n * 4) != 0) {
                    fprintf(stderr, "size %d n %zu: rank %d differs from rank 0 (kind %d)\n", size,
                            n, q, kind);
                    bad = 1;
                }
    }
    for (int q = 0; q < size; q++)
        for (size_t k = 0; k < NNS; k++)
            for (int kind = 0; kind < 2; kind++)
                free(out[q].res[k][kind]);
    DT_CHECK(!bad);
}

static void check_sums(int size, size_t chunk, size_t small) {
    check_sums_spin(size, chunk, small, NULL);
}

/* Members that never spin (every wait sleeps and is rung awake: a spin of "-1" is taken as
 * none) beside members that spin 100 ms (none of their waits sleeps): the same sums. */
static void test_allreduce_spin_settings(void) {
    static const int spin[4] = {-1, 100000, -1, 100000};
    for (int size = 2; size <= 4; size++) {
        check_sums_spin(size, 1000, 0, spin);
        if (dt__test_failed) return;
    }
}

static void test_allreduce_sums(void) {
    for (int size = 1; size <= 4; size++) {
        check_sums(size, 0, dt__ring_small_bytes); /* defaults */
        if (dt__test_failed) return;
    }
}

/* Every n through reduce-scatter + all-gather, with many uneven chunks. */
static void test_allreduce_ring_path_small_chunks(void) {
    for (int size = 2; size <= 4; size++) {
        check_sums(size, 1000, 0);
        if (dt__test_failed) return;
    }
}

/* Every n through the gather-everything path. */
static void test_allreduce_small_path(void) {
    for (int size = 2; size <= 4; size++) {
        check_sums(size, 0, (size_t)8 << 20);
        if (dt__test_failed) return;
    }
}

/* ---- broadcast ---- */

static const size_t bc_lens[] = {0, 1, 5, 100003};
#define NBC (sizeof bc_lens / sizeof bc_lens[0])

static uint8_t bc_byte(int root, size_t len, size_t i) {
    return (uint8_t)hash32((uint32_t)(root * 131 + (int)len * 7 + (int)i));
}

static void bcast_fn(member *m, dt_ring *r) {
    m->ok = 1;
    uint8_t *buf = malloc(bc_lens[NBC - 1]);
    for (int root = 0; root < m->g->size && m->ok; root++)
        for (size_t k = 0; k < NBC && m->ok; k++) {
            size_t len = bc_lens[k];
            for (size_t i = 0; i < len; i++)
                buf[i] = m->rank == root ? bc_byte(root, len, i) : 0xEE;
            dt_err e = dt_ring_broadcast(r, buf, len, root);
            if (e) {
                member_record(m, e, r);
                m->ok = 0;
                break;
            }
            for (size_t i = 0; i < len; i++)
                if (buf[i] != bc_byte(root, len, i)) {
                    snprintf(m->msg, sizeof m->msg, "root %d len %zu byte %zu wrong", root, len, i);
                    m->ok = 0;
                    break;
                }
        }
    free(buf);
}

static void test_broadcast_every_root(void) {
    for (int size = 1; size <= 4; size++) {
        for (int c = 0; c < 2; c++) {
            group g;
            DT_CHECK(group_listen(&g, size) == 0);
            member ms[MAXM];
            members_init(ms, &g, bcast_fn, NULL);
            for (int i = 0; i < size; i++)
                ms[i].chunk = c ? 4096 : 0;
            DT_CHECK(run_members(ms, size) == 0);
            group_close(&g);
            for (int i = 0; i < size; i++) {
                if (!ms[i].ok) fprintf(stderr, "size %d rank %d: %s\n", size, i, ms[i].msg);
                DT_CHECK(ms[i].open_err == DT_OK && ms[i].ok);
            }
        }
    }
}

/* ---- the handshake ---- */

static int dial(const char *addr) {
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t k = recv(fd, b, n, 0);
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A HELLO of a float32 ring. */
static int send_hello(int fd, int64_t gen, uint32_t rank, uint32_t size, const char *token) {
    uint8_t b[DT__FRAME_HDR + 16 + 256];
    size_t tl = strlen(token);
    dt__frame_encode(b, DT__RING_HELLO, gen, 16 + tl);
    dt__put32(b + DT__FRAME_HDR, rank);
    dt__put32(b + DT__FRAME_HDR + 4, size);
    dt__put32(b + DT__FRAME_HDR + 8, (uint32_t)tl);
    memcpy(b + DT__FRAME_HDR + 12, token, tl);
    dt__put32(b + DT__FRAME_HDR + 12 + tl, DT_RING_WIRE_F32);
    return write_all(fd, b, DT__FRAME_HDR + 16 + tl);
}

/* Read the answer: its type; the ERROR text into text. -1: nothing. */
static int read_answer(int fd, char *text, size_t cap) {
    uint8_t h[DT__FRAME_HDR];
    if (read_all(fd, h, sizeof h)) return -1;
    dt__frame_hdr hd;
    dt__frame_decode(h, &hd);
    text[0] = '\0';
    if (hd.type == DT__RING_ERROR && hd.len < cap) {
        if (read_all(fd, text, (size_t)hd.len)) return -1;
        text[hd.len] = '\0';
    }
    return hd.type;
}

/* The whole log written so far. */
static char *slurp(FILE *f) {
    fflush(f);
    long n = ftell(f);
    char *s = calloc(1, (size_t)n + 1);
    rewind(f);
    if (n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
    fseek(f, 0, SEEK_END);
    return s;
}

static void simple_allreduce_fn(member *m, dt_ring *r) {
    float v[5] = {1, 2, 3, 4, (float)m->rank};
    dt_err e = dt_ring_allreduce(r, v, 5);
    member_record(m, e, r);
    int P = m->g->size;
    m->ok = !e && v[0] == P && v[3] == 4 * P && v[4] == P * (P - 1) / 2;
}

static void test_refuses_wrong_connections(void) {
    group g;
    DT_CHECK(group_listen(&g, 3) == 0);
    FILE *log = tmpfile();
    DT_CHECK(log != NULL);
    /* impostors at rank 1's door, before the real rank 0 */
    struct {
        int64_t gen;
        uint32_t rank, size;
        const char *token, *why;
    } bad[] = {
        {1, 0, 3, "other-job", "wrong token"},
        {7, 0, 3, "tok", "generation 7, this ring is generation 1"},
        {1, 2, 3, "tok", "rank 2, expected rank 0"},
        {1, 0, 4, "tok", "ring size 4, this ring has 3 members"},
    };
    int nbad = (int)(sizeof bad / sizeof bad[0]);
    int fds[8];
    for (int i = 0; i < nbad; i++) {
        fds[i] = dial(g.addr[1]);
        DT_CHECK(fds[i] >= 0);
        DT_CHECK(send_hello(fds[i], bad[i].gen, bad[i].rank, bad[i].size, bad[i].token) == 0);
    }
    /* not a ring frame at all, and a HELLO too long to be one */
    fds[nbad] = dial(g.addr[1]);
    DT_CHECK(write_all(fds[nbad], "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27) == 0);
    fds[nbad + 1] = dial(g.addr[1]);
    uint8_t h[DT__FRAME_HDR];
    dt__frame_encode(h, DT__RING_HELLO, 1, 1 << 20);
    DT_CHECK(write_all(fds[nbad + 1], h, sizeof h) == 0);
    /* a HELLO whose token length does not match its length */
    fds[nbad + 2] = dial(g.addr[1]);
    uint8_t b[DT__FRAME_HDR + 15];
    dt__frame_encode(b, DT__RING_HELLO, 1, 15);
    dt__put32(b + DT__FRAME_HDR, 0);
    dt__put32(b + DT__FRAME_HDR + 4, 3);
    dt__put32(b + DT__FRAME_HDR + 8, 200);
    memcpy(b + DT__FRAME_HDR + 12, "tok", 3);
    DT_CHECK(write_all(fds[nbad + 2], b, sizeof b) == 0);
    /* one that says nothing and goes away */
    int quiet = dial(g.addr[1]);
    close(quiet);

    member ms[MAXM];
    members_init(ms, &g, simple_allreduce_fn, NULL);
    for (int i = 0; i < 3; i++)
        ms[i].log = log;
    DT_CHECK(run_members(ms, 3) == 0);
    for (int i = 0; i < 3; i++) {
        if (!ms[i].ok) fprintf(stderr, "rank %d: %s\n", i, ms[i].msg);
        DT_CHECK(ms[i].open_err == DT_OK && ms[i].ok);
    }
    char text[DT__RING_TEXT_MAX + 1];
    for (int i = 0; i < nbad; i++) {
        DT_CHECK(read_answer(fds[i], text, sizeof text) == DT__RING_ERROR);
        if (!strstr(text, bad[i].why)) DT_FAIL("ERROR text \"%s\" lacks \"%s\"", text, bad[i].why);
        DT_CHECK(strstr(text, g.addr[1]) != NULL); /* names the refusing member */
    }
    DT_CHECK(read_answer(fds[nbad], text, sizeof text) == DT__RING_ERROR);
    DT_CHECK(strstr(text, "not a dtrain frame") != NULL);
    DT_CHECK(read_answer(fds[nbad + 1], text, sizeof text) == DT__RING_ERROR);
    DT_CHECK(strstr(text, "HELLO of 1048576 bytes") != NULL);
    DT_CHECK(read_answer(fds[nbad + 2], text, sizeof text) == DT__RING_ERROR);
    DT_CHECK(strstr(text, "token length 200") != NULL);
    char *lg = slurp(log);
    for (int i = 0; i < nbad; i++) {
        char want[256];
        snprintf(want, sizeof want, "ring gen 1 rank 1: refused a connection from 127.0.0.1:");
        DT_CHECK(strstr(lg, want) != NULL);
        if (!strstr(lg, bad[i].why)) DT_FAIL("log lacks \"%s\":\n%s", bad[i].why, lg);
    }
    DT_CHECK(strstr(lg, "before its HELLO") != NULL);
    free(lg);
    for (int i = 0; i < nbad + 3; i++)
        close(fds[i]);
    fclose(log);
    group_close(&g);
}

/* A member at another generation: neither side forms a ring with it; both give up after
 * the timeout, the acceptor having logged the reason and the connector the refusal. */
static void test_generation_mismatch_times_out(void) {
    group g;
    DT_CHECK(group_listen(&g, 2) == 0);
    FILE *log = tmpfile();
    member ms[MAXM];
    members_init(ms, &g, NULL, NULL);
    for (int i = 0; i < 2; i++) {
        ms[i].log = log;
        ms[i].timeout_ms = 400;
    }
    ms[0].gen = 2;
    DT_CHECK(run_members(ms, 2) == 0);
    for (int i = 0; i < 2; i++) {
        DT_CHECK(ms[i].open_err == DT_ERR_TIMEOUT);
        DT_CHECK(strstr(ms[i].msg, "within 400 ms") != NULL);
    }
    char *lg = slurp(log);
    DT_CHECK(strstr(lg, "generation 2, this ring is generation 1") != NULL);
    DT_CHECK(strstr(lg, "refused the connection") != NULL);
    free(lg);
    fclose(log);
    group_close(&g);
}

/* The next member starts listening only later: the connect is retried. */
static void test_connect_retries_until_listening(void) {
    group g;
    DT_CHECK(group_listen(&g, 2) == 0);
    /* free rank 1's port: nobody listens there for a while */
    close(g.lfd[1]);
    int port1 = atoi(strrchr(g.addr[1], ':') + 1);
    member ms[MAXM];
    members_init(ms, &g, simple_allreduce_fn, NULL);
    pthread_create(&ms[0].th, NULL, member_main, &ms[0]);
    sleep_ms(300);
    int p = 0;
    DT_CHECK_OK(dt_ring_listen("127.0.0.1", port1, &g.lfd[1], &p));
    pthread_create(&ms[1].th, NULL, member_main, &ms[1]);
    pthread_join(ms[0].th, NULL);
    pthread_join(ms[1].th, NULL);
    for (int i = 0; i < 2; i++) {
        if (!ms[i].ok) fprintf(stderr, "rank %d: %s\n", i, ms[i].msg);
        DT_CHECK(ms[i].open_err == DT_OK && ms[i].ok);
    }
    group_close(&g);
}

/* ---- failures ---- */

/* Sum a large buffer `arg` times (0: once); record the first error. */
static void big_allreduce_fn(member *m, dt_ring *r) {
    size_t n = (size_t)4 << 20;
    float *d = data_for(r, n);
    long times = m->arg ? (long)(intptr_t)m->arg : 1;
    dt_err e = DT_OK;
    for (long t = 0; t < times && !e; t++)
        e = dt_ring_allreduce(r, d, n);
    member_record(m, e, r);
    if (e) {
        /* a broken ring stays broken */
        dt_err again = dt_ring_allreduce(r, d, 4);
        m->ok = again == DT_ERR_STATE;
    }
    data_free(r, d);
}

static void leave_fn(member *m, dt_ring *r) {
    (void)r;
    m->ok = 1; /* closes its ring at once */
}

/* A member that closes its connections while the others all-reduce: they fail promptly
 * (their timeout is far beyond the join bound) with DT_ERR_NETWORK, and blame it. */
static void test_peer_closes_midway(void) {
    for (int size = 2; size <= 3; size++) {
        group g;
        DT_CHECK(group_listen(&g, size) == 0);
        FILE *log = tmpfile();
        member ms[MAXM];
        members_init(ms, &g, big_allreduce_fn, (void *)(intptr_t)1000000);
        for (int i = 0; i < size; i++) {
            ms[i].timeout_ms = 1000 * 1000;
            ms[i].log = log;
        }
        ms[1].fn = leave_fn;
        DT_CHECK(run_members(ms, size) == 0);
        for (int i = 0; i < size; i++) {
            if (i == 1) continue;
            DT_CHECK(ms[i].open_err == DT_OK);
            if (ms[i].err != DT_ERR_NETWORK)
                DT_FAIL("size %d rank %d: %s: %s", size, i, dt_strerror(ms[i].err), ms[i].msg);
            DT_CHECK(ms[i].ok); /* later calls: DT_ERR_STATE */
            DT_CHECK(strstr(ms[i].msg, "allreduce") != NULL);
            DT_CHECK(strstr(ms[i].msg, "rank ") != NULL && strstr(ms[i].msg, "127.0.0.1:"));
        }
        if (size == 2) {
            /* both of rank 0's connections are with rank 1 */
            DT_CHECK(ms[0].failed_peer == 1);
            DT_CHECK(strstr(ms[0].msg, g.addr[1]) != NULL);
        } else {
            DT_CHECK(ms[2].failed_peer == 1 || ms[2].failed_peer == 0);
        }
        char *lg = slurp(log);
        DT_CHECK(strstr(lg, "allreduce failed") != NULL);
        free(lg);
        fclose(log);
        group_close(&g);
    }
}

/* A member that stays connected but silent until `until` others have finished (counted in
 * done; a minute at most): their failures, not a fixed time, end its silence (a silence of
 * fixed length could end first on a loaded machine, and its close would fail the others). */
typedef struct silence {
    atomic_int done;
    int until;
} silence;

static void silent_fn(member *m, dt_ring *r) {
    (void)r;
    silence *s = m->arg;
    for (int waited = 0; atomic_load(&s->done) < s->until && waited < 60000; waited += 5)
        sleep_ms(5);
    m->ok = 1;
}

/* big_allreduce_fn once, then count this member done in the silence m->arg. */
static void big_allreduce_then_done_fn(member *m, dt_ring *r) {
    silence *s = m->arg;
    m->arg = NULL;
    big_allreduce_fn(m, r);
    atomic_fetch_add(&s->done, 1);
}

/* A member that stays connected but never takes part: the others fail after timeout_ms. */
static void test_silent_peer_times_out(void) {
    group g;
    DT_CHECK(group_listen(&g, 3) == 0);
    FILE *log = tmpfile();
    member ms[MAXM];
    silence si = {.until = 2};
    atomic_init(&si.done, 0);
    members_init(ms, &g, big_allreduce_then_done_fn, &si);
    for (int i = 0; i < 3; i++) {
        ms[i].timeout_ms = 500;
        ms[i].log = log;
    }
    /* rank 0 waits longer: rank 2 times out first, blaming rank 1, and its failure then
     * reaches rank 0 (a close); rank 1 is silent until both have failed */
    ms[0].timeout_ms = 3000;
    ms[1].fn = silent_fn;
    DT_CHECK(run_members(ms, 3) == 0);
    /* rank 2 times out; rank 0 sees rank 2 close its connections */
    for (int i = 0; i < 3; i += 2) {
        if (ms[i].err != (i == 2 ? DT_ERR_TIMEOUT : DT_ERR_NETWORK))
            DT_FAIL("rank %d: %s: %s", i, dt_strerror(ms[i].err), ms[i].msg);
    }
    /* rank 2 waited for rank 1's data */
    DT_CHECK(ms[2].failed_peer == 1);
    DT_CHECK(strstr(ms[2].msg, "no data from rank 1") != NULL);
    DT_CHECK(strstr(ms[2].msg, "500 ms") != NULL);
    fclose(log);
    group_close(&g);
}

typedef struct abort_arg {
    atomic_int entered;
    atomic_int aborted; /* the test's aborts are done: the ring may be closed */
} abort_arg;

static void abortee_fn(member *m, dt_ring *r) {
    abort_arg *a = m->arg;
    float *v = data_for(r, 64);
    atomic_store(&a->entered, 1);
    dt_err e = dt_ring_allreduce(r, v, 64); /* rank 1 never joins in */
    member_record(m, e, r);
    dt_err again = dt_ring_broadcast(r, v, 8, 0);
    data_free(r, v);
    m->ok = again == DT_ERR_STATE && strstr(dt_errmsg(), "aborted") != NULL;
    /* the ring is closed on return: not before the test's second abort used it (TSan) */
    while (!atomic_load(&a->aborted))
        sleep_ms(1);
}

static void test_abort_unblocks(void) {
    group g;
    DT_CHECK(group_listen(&g, 2) == 0);
    member ms[MAXM];
    abort_arg a;
    atomic_init(&a.entered, 0);
    atomic_init(&a.aborted, 0);
    members_init(ms, &g, abortee_fn, &a);
    ms[0].timeout_ms = 1000 * 1000;
    /* rank 1 is silent until rank 0 is done (the abort, not rank 1's close, must end it) */
    silence si = {.until = 1};
    atomic_init(&si.done, 0);
    ms[1].fn = silent_fn;
    ms[1].arg = &si;
    for (int i = 0; i < 2; i++)
        pthread_create(&ms[i].th, NULL, member_main, &ms[i]);
    while (!atomic_load(&a.entered))
        sleep_ms(5);
    sleep_ms(100); /* let it block in poll */
    dt_ring *r = atomic_load(&ms[0].ring);
    DT_CHECK(r != NULL);
    dt_ring_abort(r);
    dt_ring_abort(r); /* twice is fine */
    atomic_store(&a.aborted, 1);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += JOIN_BOUND_S;
    DT_CHECK(pthread_timedjoin_np(ms[0].th, NULL, &dl) == 0);
    atomic_store(&si.done, 1);
    DT_CHECK(pthread_timedjoin_np(ms[1].th, NULL, &dl) == 0);
    DT_CHECK(ms[0].err == DT_ERR_STATE);
    DT_CHECK(strstr(ms[0].msg, "aborted") != NULL);
    DT_CHECK(ms[0].failed_peer == -1);
    DT_CHECK(ms[0].ok);
    group_close(&g);
}

/* After a failed ring, the same listening sockets form a new generation. */
static void test_new_generation_after_failure(void) {
    group g;
    DT_CHECK(group_listen(&g, 3) == 0);
    FILE *log = tmpfile();
    member ms[MAXM];
    members_init(ms, &g, big_allreduce_fn, (void *)(intptr_t)1000000);
    for (int i = 0; i < 3; i++)
        ms[i].log = log;
    ms[2].fn = leave_fn;
    DT_CHECK(run_members(ms, 3) == 0);
    DT_CHECK(ms[0].err == DT_ERR_NETWORK && ms[1].err == DT_ERR_NETWORK);
    /* a straggler of generation 1 knocks while generation 2 forms */
    int old = dial(g.addr[0]);
    DT_CHECK(send_hello(old, 1, 2, 3, "tok") == 0);
    members_init(ms, &g, sums_fn, NULL);
    sums_out out[MAXM];
    memset(out, 0, sizeof out);
    for (int i = 0; i < 3; i++) {
        ms[i].gen = 2;
        ms[i].log = log;
        ms[i].arg = out;
    }
    DT_CHECK(run_members(ms, 3) == 0);
    for (int i = 0; i < 3; i++) {
        if (ms[i].open_err || ms[i].err) fprintf(stderr, "rank %d: %s\n", i, ms[i].msg);
        DT_CHECK(ms[i].open_err == DT_OK && ms[i].err == DT_OK);
    }
    for (size_t k = 0; k < NNS; k++) {
        size_t n = k == 3 ? 2 : test_ns[k];
        for (size_t i = 0; i < n; i++) {
            float want = int_value(0, i) + int_value(1, i) + int_value(2, i);
            for (int q = 0; q < 3; q++)
                if (out[q].res[k][0][i] != want) DT_FAIL("n %zu element %zu rank %d", n, i, q);
        }
    }
    for (int q = 0; q < 3; q++)
        for (size_t k = 0; k < NNS; k++)
            for (int kind = 0; kind < 2; kind++)
                free(out[q].res[k][kind]);
    char text[DT__RING_TEXT_MAX + 1];
    DT_CHECK(read_answer(old, text, sizeof text) == DT__RING_ERROR);
    DT_CHECK(strstr(text, "generation 1, this ring is generation 2") != NULL);
    close(old);
    fclose(log);
    group_close(&g);
}

/* ---- a fake member speaking the protocol by hand ---- */

typedef struct fake {
    group g;
    int to_real, from_real; /* fake rank 0's connections: to rank 1, from rank 1 */
} fake;

static void *accept_hello(void *p) {
    fake *f = p;
    int fd = -1;
    for (int tries = 0; tries < 3000 && fd < 0; tries++) {
        fd = accept(f->g.lfd[0], NULL, NULL);
        if (fd < 0) sleep_ms(10);
    }
    f->from_real = fd;
    if (fd < 0) return NULL;
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    uint8_t b[DT__FRAME_HDR + 64];
    dt__frame_hdr hd;
    if (read_all(fd, b, DT__FRAME_HDR)) return NULL;
    dt__frame_decode(b, &hd);
    if (hd.len > 64 || read_all(fd, b + DT__FRAME_HDR, (size_t)hd.len)) return NULL;
    uint8_t ok[DT__FRAME_HDR];
    dt__frame_encode(ok, DT__RING_OK, 1, 0);
    write_all(fd, ok, sizeof ok);
    return NULL;
}

/* Rank 1 is real, rank 0 is this test: the ring forms, then `frame` (len bytes) is sent to
 * rank 1 as its all-reduce's first incoming frame. Returns rank 1's error. */
static dt_err with_fake_frame(const void *frame, size_t len, int close_after, char *msg, size_t cap,
                              int *failed_peer) {
    static fake f;
    memset(&f, 0, sizeof f);
    if (group_listen(&f.g, 2)) return DT_ERR_IO;
    FILE *log = tmpfile();
    pthread_t acc;
    pthread_create(&acc, NULL, accept_hello, &f);
    /* the fake's HELLO waits in rank 1's backlog; its accept thread answers rank 1's */
    dt_ring_conf c = {.token = "tok",
                      .generation = 1,
                      .rank = 1,
                      .size = 2,
                      .peers = f.g.peers,
                      .timeout_ms = 5000,
                      .log = log,
                      .no_shm = 1}; /* the fake peer speaks RING_DATA */
    f.to_real = dial(f.g.addr[1]);
    send_hello(f.to_real, 1, 0, 2, "tok");
    dt_ring *r = NULL;
    dt_err e = dt_ring_open(&r, f.g.lfd[1], &c);
    pthread_join(acc, NULL);
    char text[64];
    if (e || read_answer(f.to_real, text, sizeof text) != DT__RING_OK) {
        snprintf(msg, cap, "open: %s", dt_errmsg());
        dt_ring_close(r);
        return DT_ERR_NOTFOUND;
    }
    write_all(f.to_real, frame, len);
    if (close_after) shutdown(f.to_real, SHUT_WR);
    float v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = 1;
    e = dt_ring_allreduce(r, v, 1000);
    snprintf(msg, cap, "%s", dt_errmsg());
    *failed_peer = dt_ring_failed_peer(r);
    dt_ring_close(r);
    close(f.to_real);
    if (f.from_real >= 0) close(f.from_real);
    fclose(log);
    group_close(&f.g);
    return e;
}

/* accept_hello, then decline the real member's SHM_OFFER (the fake's lane from rank 1 is TCP). */
static void *accept_hello_lane(void *p) {
    fake *f = p;
    accept_hello(p);
    if (f->from_real < 0) return NULL;
    uint8_t b[DT__FRAME_HDR + DT__SHM_OFFER];
    dt__frame_hdr hd;
    if (read_all(f->from_real, b, DT__FRAME_HDR)) return NULL;
    dt__frame_decode(b, &hd);
    if (hd.len > DT__SHM_OFFER || read_all(f->from_real, b + DT__FRAME_HDR, (size_t)hd.len))
        return NULL;
    uint8_t no[DT__FRAME_HDR];
    dt__frame_encode(no, DT__RING_SHM_ANSWER, 0, 0);
    write_all(f->from_real, no, sizeof no);
    return NULL;
}

/* The lane's counterpart of with_fake_frame: fake rank 0 offers rank 1 a real segment (rank 1
 * maps it: its incoming data come through shared memory), then, while rank 1 all-reduces,
 * publishes a write position beyond the ring (mode 0) or rings a doorbell announcing one
 * (mode 1). Mode 2 offers a segment whose nonce is not the one in its header: rank 1 must
 * decline (the reason in the answer: into msg) and take a RING_DATA frame instead; the
 * all-reduce's result goes to *sum0. Returns rank 1's error. */
static dt_err with_fake_lane(int mode, char *msg, size_t cap, int *failed_peer, int *lane,
                             float *sum0) {
    static fake f;
    memset(&f, 0, sizeof f);
    if (group_listen(&f.g, 2)) return DT_ERR_IO;
    dt__shm seg;
    size_t ring_bytes = (size_t)256 << 10;
    if (dt__shm_create(&seg, "fake", DT__SHM_HDR + DT__RING_CTL + ring_bytes)) return DT_ERR_IO;
    FILE *log = tmpfile();
    pthread_t acc;
    pthread_create(&acc, NULL, accept_hello_lane, &f);
    dt_ring_conf c = {.token = "tok",
                      .generation = 1,
                      .rank = 1,
                      .size = 2,
                      .peers = f.g.peers,
                      .timeout_ms = 5000,
                      .log = log};
    f.to_real = dial(f.g.addr[1]);
    send_hello(f.to_real, 1, 0, 2, "tok");
    uint8_t offer[DT__FRAME_HDR + DT__SHM_OFFER];
    dt__frame_encode(offer, DT__RING_SHM_OFFER, 0, DT__SHM_OFFER);
    dt__put64(offer + DT__FRAME_HDR, (uint64_t)getpid());
    dt__put64(offer + DT__FRAME_HDR + 8, (uint64_t)seg.fd);
    dt__put64(offer + DT__FRAME_HDR + 16, (uint64_t)seg.size);
    memcpy(offer + DT__FRAME_HDR + 24, seg.nonce, DT__SHM_NONCE);
    if (mode == 2) offer[DT__FRAME_HDR + 24] ^= 0xff;
    write_all(f.to_real, offer, sizeof offer);
    dt_ring *r = NULL;
    dt_err e = dt_ring_open(&r, f.g.lfd[1], &c);
    pthread_join(acc, NULL);
    char text[64];
    uint8_t ah[DT__FRAME_HDR];
    dt__frame_hdr hd = {0};
    if (e || read_answer(f.to_real, text, sizeof text) != DT__RING_OK ||
        read_all(f.to_real, ah, sizeof ah)) {
        snprintf(msg, cap, "open: %s", dt_errmsg());
        dt_ring_close(r);
        dt__shm_free(&seg);
        return DT_ERR_NOTFOUND;
    }
    dt__frame_decode(ah, &hd);
    *lane = r->in.on;
    dt__ring_ctl *ctl = dt__shm_data(&seg);
    uint64_t beyond = (uint64_t)1 << 40;
    if (mode == 2) {
        /* SHM_ANSWER(0) with the reason; then the fake's data as a RING_DATA frame */
        msg[0] = '\0';
        if (hd.type == DT__RING_SHM_ANSWER && hd.arg == 0 && hd.len < cap &&
            read_all(f.to_real, msg, (size_t)hd.len) == 0)
            msg[hd.len] = '\0';
        uint8_t fr[DT__FRAME_HDR + 4000];
        dt__frame_encode(fr, DT__RING_DATA, 0, 4000);
        for (int i = 0; i < 1000; i++) {
            float two = 2;
            memcpy(fr + DT__FRAME_HDR + 4 * i, &two, 4);
        }
        write_all(f.to_real, fr, sizeof fr);
    } else if (mode == 1) {
        uint8_t bell[DT__FRAME_HDR];
        dt__frame_encode(bell, DT__RING_SHM_DATA, (int64_t)beyond, 0);
        write_all(f.to_real, bell, sizeof bell);
    } else {
        atomic_store(&ctl->head, beyond);
    }
    float v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = 1;
    e = dt_ring_allreduce(r, v, 1000);
    if (mode != 2) snprintf(msg, cap, "%s", dt_errmsg());
    *failed_peer = dt_ring_failed_peer(r);
    *sum0 = v[0];
    for (int i = 1; i < 1000; i++)
        if (v[i] != v[0]) *sum0 = -1;
    dt_ring_close(r);
    close(f.to_real);
    if (f.from_real >= 0) close(f.from_real);
    if (mode == 2) {
        char *lg = slurp(log);
        if (!strstr(lg, "ring gen 1 rank 1: data from rank 0 (127.0.0.1:")) *sum0 = -2;
        if (!strstr(lg, "over TCP: shared memory: ")) *sum0 = -3;
        free(lg);
    }
    fclose(log);
    group_close(&f.g);
    dt__shm_free(&seg);
    return e;
}

/* A neighbour that publishes an impossible position, or rings one, fails the call as a bad
 * frame does on TCP: DT_ERR_PROTOCOL, naming it. */
/* A segment that cannot be mapped as announced (here: another nonce; in practice another
 * host or pid namespace) is declined with the reason, logged, and that connection carries
 * RING_DATA frames: the lane is an optimization, never a requirement. */
static void test_lane_declined_falls_back_to_tcp(void) {
    char msg[1024];
    int peer = -2, lane = 1;
    float sum0 = 0;
    dt_err e = with_fake_lane(2, msg, sizeof msg, &peer, &lane, &sum0);
    if (e) DT_FAIL("%s: %s", dt_strerror(e), dt_errmsg());
    DT_CHECK(lane == 0);
    if (!strstr(msg, "is not the segment announced")) DT_FAIL("answer \"%s\"", msg);
    if (sum0 != 3) DT_FAIL("sum %g (-1: uneven, -2/-3: log lines missing), want 3", (double)sum0);
}

static void test_bad_lane_positions(void) {
    const char *want[2] = {"shared memory written 1099511627776 where 0 to 262144",
                           "type 38, arg 1099511627776, 0 bytes where SHM_DATA of 0 to 262144"};
    for (int bad_bell = 0; bad_bell < 2; bad_bell++) {
        char msg[1024];
        int peer = -2, lane = 0;
        float sum0 = 0;
        dt_err e = with_fake_lane(bad_bell, msg, sizeof msg, &peer, &lane, &sum0);
        DT_CHECK(lane == 1);
        if (e != DT_ERR_PROTOCOL) DT_FAIL("case %d: %s: %s", bad_bell, dt_strerror(e), msg);
        if (!strstr(msg, want[bad_bell]))
            DT_FAIL("case %d: \"%s\" lacks \"%s\"", bad_bell, msg, want[bad_bell]);
        DT_CHECK(strstr(msg, "from rank 0 (127.0.0.1:") != NULL);
        DT_CHECK(peer == 0);
    }
}

/* ---- bounds before the token is checked ---- */

/* Whether the peer closed fd (end of stream or reset) rather than the read timing out. */
static int closed_by_peer(int fd) {
    uint8_t b[256];
    for (;;) {
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET)) return 1;
        if (k < 0 && errno != EINTR) return 0;
    }
}

/* The previous member's HELLO waits in the backlog ahead of a flood of idle connections,
 * three times what a member holds while it forms a ring: the member reads it before it drops
 * anything, the ring forms, and every idle connection is closed. */
static void test_idle_flood_does_not_lock_out(void) {
    static fake f;
    memset(&f, 0, sizeof f);
    DT_CHECK(group_listen(&f.g, 2) == 0);
    FILE *log = tmpfile();
    pthread_t acc;
    pthread_create(&acc, NULL, accept_hello, &f);
    f.to_real = dial(f.g.addr[1]);
    DT_CHECK(send_hello(f.to_real, 1, 0, 2, "tok") == 0);
    enum { FLOOD = 48 }; /* within the listen backlog */
    int fds[FLOOD];
    for (int i = 0; i < FLOOD; i++)
        fds[i] = dial(f.g.addr[1]);
    dt_ring_conf c = {.token = "tok",
                      .generation = 1,
                      .rank = 1,
                      .size = 2,
                      .peers = f.g.peers,
                      .timeout_ms = 10000,
                      .log = log,
                      .no_shm = 1}; /* the fake peer does not offer a segment */
    dt_ring *r = NULL;
    dt_err e = dt_ring_open(&r, f.g.lfd[1], &c);
    pthread_join(acc, NULL);
    if (e) fprintf(stderr, "open: %s\n", dt_errmsg());
    DT_CHECK(e == DT_OK);
    char text[64];
    DT_CHECK(read_answer(f.to_real, text, sizeof text) == DT__RING_OK);
    for (int i = 0; i < FLOOD; i++)
        if (!closed_by_peer(fds[i])) DT_FAIL("idle connection %d is still open", i);
    char *lg = slurp(log);
    DT_CHECK(
        strstr(lg, "16 connections wait for their HELLO; dropped the oldest, from 127.0.0.1:"));
    free(lg);
    dt_ring_close(r);
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    close(f.to_real);
    if (f.from_real >= 0) close(f.from_real);
    fclose(log);
    group_close(&f.g);
}

/* A HELLO that trickles in a byte at a time (never idle for long) is refused at its
 * deadline, with the reason; the real previous member then forms the ring. */
static void test_trickled_hello_closed(void) {
    group g;
    DT_CHECK(group_listen(&g, 2) == 0);
    FILE *log = tmpfile();
    member ms[MAXM];
    members_init(ms, &g, simple_allreduce_fn, NULL);
    for (int i = 0; i < 2; i++)
        ms[i].log = log;
    ms[1].hello_ms = 300;
    pthread_create(&ms[1].th, NULL, member_main, &ms[1]); /* rank 0 comes later */
    int fd = dial(g.addr[1]);
    uint8_t h[DT__FRAME_HDR];
    dt__frame_encode(h, DT__RING_HELLO, 1, DT__RING_HELLO_MAX);
    DT_CHECK(write_all(fd, h, sizeof h) == 0);
    /* a byte of the payload each time 20 ms pass without an answer: it would take 80 s */
    size_t sent = 0;
    for (; sent < DT__RING_HELLO_MAX; sent++) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 20) > 0) break; /* answered (or closed) */
        if (send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    }
    DT_CHECK(sent < DT__RING_HELLO_MAX);
    char text[DT__RING_TEXT_MAX + 1];
    DT_CHECK(read_answer(fd, text, sizeof text) == DT__RING_ERROR);
    if (!strstr(text, "no HELLO within 300 ms")) DT_FAIL("ERROR text \"%s\"", text);
    close(fd);
    pthread_create(&ms[0].th, NULL, member_main, &ms[0]);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += JOIN_BOUND_S;
    for (int i = 0; i < 2; i++)
        if (pthread_timedjoin_np(ms[i].th, NULL, &dl) != 0) abort(); /* a hang */
    for (int i = 0; i < 2; i++) {
        if (!ms[i].ok) fprintf(stderr, "rank %d: %s\n", i, ms[i].msg);
        DT_CHECK(ms[i].open_err == DT_OK && ms[i].ok);
    }
    char *lg = slurp(log);
    DT_CHECK(strstr(lg, "ring gen 1 rank 1: refused a connection from 127.0.0.1:"));
    DT_CHECK(strstr(lg, "no HELLO within 300 ms"));
    free(lg);
    fclose(log);
    group_close(&g);
}

static void test_bad_data_frames(void) {
    /* rank 1 of 2, n = 1000 < small threshold: it expects DATA sequence 0 of 4000 bytes */
    struct {
        uint32_t magic;
        int type;
        int64_t seq;
        uint64_t len;
        const char *want;
    } cases[] = {
        {0x12345678u, DT__RING_DATA, 0, 4000, "magic 0x12345678"},
        {DT__FRAME_MAGIC, DT__RING_HELLO, 0, 4000, "type 32"},
        {DT__FRAME_MAGIC, DT__RING_DATA, 5, 4000, "sequence 5"},
        {DT__FRAME_MAGIC, DT__RING_DATA, 0, (uint64_t)1 << 40, "1099511627776 bytes"},
        {DT__FRAME_MAGIC, DT__RING_DATA, 0, 3996, "3996 bytes where DATA sequence 0 of 4000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t fr[DT__FRAME_HDR + 4000];
        dt__frame_encode(fr, cases[i].type, cases[i].seq, cases[i].len);
        dt__put32(fr, cases[i].magic);
        memset(fr + DT__FRAME_HDR, 0x41, 4000);
        char msg[1024];
        int peer = -2;
        dt_err e = with_fake_frame(fr, sizeof fr, 0, msg, sizeof msg, &peer);
        if (e != DT_ERR_PROTOCOL) DT_FAIL("case %zu: %s: %s", i, dt_strerror(e), msg);
        if (!strstr(msg, cases[i].want))
            DT_FAIL("case %zu: \"%s\" lacks \"%s\"", i, msg, cases[i].want);
        DT_CHECK(strstr(msg, "from rank 0 (127.0.0.1:") != NULL);
        DT_CHECK(peer == 0);
    }
    /* a frame cut short by the peer closing */
    uint8_t fr[DT__FRAME_HDR + 100];
    dt__frame_encode(fr, DT__RING_DATA, 0, 4000);
    char msg[1024];
    int peer = -2;
    DT_CHECK(with_fake_frame(fr, sizeof fr, 1, msg, sizeof msg, &peer) == DT_ERR_NETWORK);
    DT_CHECK(strstr(msg, "receiving from rank 0") != NULL);
    DT_CHECK(strstr(msg, "closed the connection") != NULL);
    DT_CHECK(peer == 0);
}

/* ---- processes: killed, stopped ---- */

/* Child: be member `rank`, all-reduce 1M floats in a loop; after the first, write 'S' on
 * `ready`; on failure write the error code and message on `report` and exit. */
static void child_member(group *g, int rank, int timeout_ms, int ready, int report) {
    for (int q = 0; q < g->size; q++)
        if (q != rank) close(g->lfd[q]);
    dt_ring_conf c = {.token = "tok",
                      .generation = 1,
                      .rank = rank,
                      .size = g->size,
                      .peers = g->peers,
                      .timeout_ms = timeout_ms,
                      .log = stderr,
                      .no_shm = tcp_only,
                      .shared_floats = in_place ? IN_PLACE_FLOATS : 0};
    dt_ring *r = NULL;
    dt_err e = dt_ring_open(&r, g->lfd[rank], &c);
    int lanes = r ? r->in.on + r->out.on : -1;
    size_t n = 1 << 20;
    float *d = r ? data_for(r, n) : NULL;
    for (long t = 0; !e; t++) {
        e = dt_ring_allreduce(r, d, n);
        if (t == 0 && !e) (void)!write(ready, "S", 1);
    }
    char out[1100];
    int len = snprintf(out, sizeof out, "%d %d %d %s", (int)e, r ? dt_ring_failed_peer(r) : -2,
                       lanes, dt_errmsg());
    (void)!write(report, out, (size_t)len);
    _exit(0);
}

/* Fork `size` members; when all have done one all-reduce, hit `victim` with sig; collect
 * the others' reports. */
static void with_processes(int size, int victim, int sig, int timeout_ms, int *codes, int *peers,
                           int *lanes, char msgs[][1100]) {
    group g;
    if (group_listen(&g, size)) return;
    int ready[2], rep[MAXM][2];
    pid_t pid[MAXM];
    if (pipe(ready)) return;
    for (int q = 0; q < size; q++)
        if (pipe(rep[q])) return;
    fflush(NULL);
    for (int q = 0; q < size; q++) {
        pid[q] = fork();
        if (pid[q] == 0) child_member(&g, q, timeout_ms, ready[1], rep[q][1]);
        close(rep[q][1]);
    }
    close(ready[1]);
    char c;
    int got = 0;
    struct pollfd pf = {.fd = ready[0], .events = POLLIN};
    while (got < size && poll(&pf, 1, JOIN_BOUND_S * 1000) == 1 && read(ready[0], &c, 1) == 1)
        got++;
    kill(pid[victim], sig);
    for (int q = 0; q < size; q++) {
        codes[q] = -1;
        if (q == victim) continue;
        char buf[1100] = {0};
        struct pollfd rp = {.fd = rep[q][0], .events = POLLIN};
        if (poll(&rp, 1, JOIN_BOUND_S * 1000) == 1 && read(rep[q][0], buf, sizeof buf - 1) > 0) {
            int off = 0;
            sscanf(buf, "%d %d %d %n", &codes[q], &peers[q], &lanes[q], &off);
            snprintf(msgs[q], 1100, "%s", buf + off);
        }
    }
    for (int q = 0; q < size; q++) {
        kill(pid[q], SIGKILL);
        waitpid(pid[q], NULL, 0);
        close(rep[q][0]);
    }
    close(ready[0]);
    group_close(&g);
}

static void test_killed_member_fails_the_others(void) {
    int codes[MAXM], peers[MAXM], lanes[MAXM];
    char msgs[MAXM][1100];
    /* a timeout far beyond the bound: only the prompt detection can end the calls */
    with_processes(3, 1, SIGKILL, 1000 * 1000, codes, peers, lanes, msgs);
    for (int q = 0; q < 3; q += 2) {
        if (codes[q] != DT_ERR_NETWORK) DT_FAIL("rank %d: code %d: %s", q, codes[q], msgs[q]);
        DT_CHECK(strstr(msgs[q], "allreduce") != NULL);
        /* processes of one host: the data went through shared memory, the death was seen on
         * the doorbell sockets */
        if (lanes[q] != (tcp_only ? 0 : 2)) DT_FAIL("rank %d: %d lanes", q, lanes[q]);
    }
    DT_CHECK(peers[2] == 1 || peers[2] == 0);
}

static void test_stopped_member_times_out(void) {
    int codes[MAXM], peers[MAXM], lanes[MAXM];
    char msgs[MAXM][1100];
    with_processes(2, 1, SIGSTOP, 500, codes, peers, lanes, msgs);
    if (codes[0] != DT_ERR_TIMEOUT) DT_FAIL("rank 0: code %d: %s", codes[0], msgs[0]);
    if (lanes[0] != (tcp_only ? 0 : 2)) DT_FAIL("rank 0: %d lanes", lanes[0]);
    DT_CHECK(peers[0] == 1);
    DT_CHECK(strstr(msgs[0], "500 ms") != NULL);
}

/* ---- arguments ---- */

static void test_bad_arguments(void) {
    group g;
    DT_CHECK(group_listen(&g, 2) == 0);
    dt_ring *r = NULL;
    dt_ring_conf c = {.token = "tok", .generation = 1, .rank = 2, .size = 2, .peers = g.peers};
    DT_CHECK_ERR(dt_ring_open(&r, g.lfd[0], &c), DT_ERR_ARG, "rank 2 of size 2");
    c.rank = 0;
    const char *bad_peers[2] = {"127.0.0.1:1", "nohostport"};
    c.peers = bad_peers;
    DT_CHECK_ERR(dt_ring_open(&r, g.lfd[0], &c), DT_ERR_ARG, "peers[1] \"nohostport\"");
    const char *bad_port[2] = {"127.0.0.1:1", "h:12x"};
    c.peers = bad_port;
    DT_CHECK_ERR(dt_ring_open(&r, g.lfd[0], &c), DT_ERR_ARG, "port is not a number");
    const char *null_peer[2] = {"127.0.0.1:1", NULL};
    c.peers = null_peer;
    DT_CHECK_ERR(dt_ring_open(&r, g.lfd[0], &c), DT_ERR_ARG, "peers[1] is NULL");
    c.peers = g.peers;
    c.chunk_bytes = 2;
    DT_CHECK_ERR(dt_ring_open(&r, g.lfd[0], &c), DT_ERR_ARG, "chunk_bytes 2");
    c.chunk_bytes = 0;
    c.timeout_ms = -1;
    DT_CHECK_ERR(dt_ring_open(&r, g.lfd[0], &c), DT_ERR_ARG, "timeout_ms -1");
    c.timeout_ms = 0;
    DT_CHECK_ERR(dt_ring_open(&r, -1, &c), DT_ERR_ARG, "listen_fd -1");
    char longtok[DT__RING_TOKEN_MAX + 2];
    memset(longtok, 'x', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = '\0';
    c.token = longtok;
    DT_CHECK_ERR(dt_ring_open(&r, g.lfd[0], &c), DT_ERR_ARG, "token is longer");
    DT_CHECK(r == NULL);
    int fd, port;
    DT_CHECK_ERR(dt_ring_listen("127.0.0.1", 70000, &fd, &port), DT_ERR_ARG, "port 70000");
    /* the port is taken */
    int taken = atoi(strrchr(g.addr[0], ':') + 1);
    int lfd2 = -1;
    dt_err e = dt_ring_listen("127.0.0.1", taken, &lfd2, &port);
    if (e == DT_OK)
        close(lfd2); /* SO_REUSEADDR does not allow two listeners; be lenient */
    else
        DT_CHECK(strstr(dt_errmsg(), "cannot listen on 127.0.0.1") != NULL);
    group_close(&g);

    /* size 1: no connections; calls return at once; argument checks still apply */
    const char *one[1] = {"127.0.0.1:9"};
    dt_ring_conf c1 = {.token = "tok", .generation = 1, .rank = 0, .size = 1, .peers = one};
    DT_CHECK_OK(dt_ring_open(&r, -1, &c1));
    float v[3] = {1, 2, 3};
    DT_CHECK_OK(dt_ring_allreduce(r, v, 3));
    DT_CHECK(v[0] == 1 && v[2] == 3);
    DT_CHECK_OK(dt_ring_broadcast(r, v, 12, 0));
    DT_CHECK_ERR(dt_ring_broadcast(r, v, 12, 1), DT_ERR_ARG, "root 1 is out of range");
    DT_CHECK_ERR(dt_ring_allreduce(r, NULL, 3), DT_ERR_ARG, "data is NULL");
    DT_CHECK(dt_ring_rank(r) == 0 && dt_ring_size(r) == 1 && dt_ring_failed_peer(r) == -1);
    dt_ring_abort(r);
    DT_CHECK_ERR(dt_ring_allreduce(r, v, 3), DT_ERR_STATE, "aborted");
    dt_ring_close(r);
    dt_ring_close(NULL);
}

/* ---- bfloat16 on the wire ---- */

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Values of many magnitudes that bfloat16 cannot hold: every 5th a tie (the lower half
 * exactly 0x8000, rounded to even), and rank 1's element 2 a signalling NaN whose payload is
 * in the lower half only (truncated, it would become an infinity). */
static float bf16_value(int rank, size_t i) {
    if (rank == 1 && i == 2) return bits_float(0x7f800001u);
    float v = rough_value(rank, i);
    uint32_t u;
    memcpy(&u, &v, 4);
    u = i % 5 == 0 ? (u & 0xffff0000u) | 0x8000u : u | 1u;
    return bits_float(u);
}

static float nb(float v) { /* v as it arrives in bfloat16 */
    return dt__bf16_to_f32(dt__bf16_from_f32(v));
}

/* What element i of an n-value bfloat16 all-reduce over P members must be, each member's
 * values from bf16_value: on the ring path (collective.c) segment s starts at member s and
 * gathers member s+1's, s+2's... each adding its own float32 value to the narrowed partial
 * sum, the owner's sum narrowed once; on the small path every buffer narrowed, summed in
 * rank order. */
static float bf16_expected(int P, size_t n, size_t i, int small) {
    if (small) {
        float acc = nb(bf16_value(0, i));
        for (int q = 1; q < P; q++)
            acc += nb(bf16_value(q, i));
        return acc;
    }
    int s = 0;
    for (; s < P; s++) { /* collective.c's segment(): the first n % P get one more */
        size_t base = n / (size_t)P, extra = n % (size_t)P, us = (size_t)s;
        size_t off = us * base + (us < extra ? us : extra), len = base + (us < extra);
        if (i >= off && i < off + len) break;
    }
    float acc = bf16_value(s, i);
    for (int j = 1; j < P; j++)
        acc = bf16_value((s + j) % P, i) + nb(acc);
    return nb(acc);
}

static const size_t bf16_ns[] = {1, 2, 3, 7, 1001, 4099, 100003};
#define NBF (sizeof bf16_ns / sizeof bf16_ns[0])

static void bf16_fn(member *m, dt_ring *r) {
    float **out = (float **)m->arg + (size_t)m->rank * NBF;
    m->ok = 1;
    for (size_t k = 0; k < NBF; k++) {
        size_t n = bf16_ns[k];
        float *d = malloc(n * sizeof *d);
        for (size_t i = 0; i < n; i++)
            d[i] = bf16_value(m->rank, i);
        dt_err e = dt_ring_allreduce(r, d, n);
        out[k] = d;
        if (e) {
            member_record(m, e, r);
            m->ok = 0;
            return;
        }
    }
    member_record(m, DT_OK, r);
}

/* Every n of bf16_ns over `size` members with wire dtype bfloat16: each member's result is
 * bf16_expected's, bit for bit the same on every member, and not the float32 sum. */
static void check_bf16(int size, size_t chunk, size_t small) {
    size_t saved = dt__ring_small_bytes;
    dt__ring_small_bytes = small;
    group g;
    DT_CHECK(group_listen(&g, size) == 0);
    member ms[MAXM];
    float *out[MAXM * NBF];
    memset(out, 0, sizeof out);
    members_init(ms, &g, bf16_fn, out);
    for (int i = 0; i < size; i++) {
        ms[i].chunk = chunk;
        ms[i].wire = DT_RING_WIRE_BF16;
    }
    DT_CHECK(run_members(ms, size) == 0);
    group_close(&g);
    dt__ring_small_bytes = saved;
    int bad = 0;
    for (int i = 0; i < size; i++)
        if (ms[i].open_err || !ms[i].ok) {
            fprintf(stderr, "bf16 size %d rank %d: %s\n", size, i, ms[i].msg);
            bad = 1;
        }
    for (size_t k = 0; k < NBF && !bad; k++) {
        size_t n = bf16_ns[k], differ = 0;
        int is_small = n * 4 <= small;
        for (size_t i = 0; i < n && !bad; i++) {
            float want = bf16_expected(size, n, i, is_small), f32 = 0;
            for (int q = 0; q < size; q++)
                f32 += bf16_value(q, i);
            differ += !isnan(f32) && f32 != want;
            for (int q = 0; q < size && !bad; q++) {
                float got = out[(size_t)q * NBF + k][i];
                if (isnan(want) ? !isnan(got) : got != want) {
                    fprintf(stderr,
                            "bf16 size %d chunk %zu n %zu%s rank %d element %zu: %.9g, want "
                            "%.9g\n",
                            size, chunk, n, is_small ? " (small)" : "", q, i, (double)got,
                            (double)want);
                    bad = 1;
                }
            }
        }
        /* the float32 sums are not what came: the values did travel narrowed */
        if (!bad && n >= 7 && differ == 0) {
            fprintf(stderr, "bf16 size %d n %zu: every sum is the float32 one\n", size, n);
            bad = 1;
        }
        for (int q = 1; q < size && !bad; q++)
            if (memcmp(out[(size_t)q * NBF + k], out[k], n * 4) != 0) {
                fprintf(stderr, "bf16 size %d n %zu: rank %d's bits differ from rank 0's\n", size,
                        n, q);
                bad = 1;
            }
    }
    for (size_t j = 0; j < (size_t)MAXM * NBF; j++)
        free(out[j]);
    DT_CHECK(!bad);
}

/* bfloat16 on the wire over TCP (as between hosts), on the lane, and on rings that mix them
 * (whose members cut their transfers differently): the ring path with the default and with
 * odd small chunks, and the small path. */
static void test_allreduce_bf16(void) {
    for (int mode = 0; mode < 3 && !dt__test_failed; mode++) {
        tcp_only = mode == 0;
        dt__ring_decline_rank = mode == 2 ? 1 : -1;
        for (int size = 2; size <= 3 && !dt__test_failed; size++) {
            check_bf16(size, 0, dt__ring_small_bytes);
            if (!dt__test_failed) check_bf16(size, 1004, 0);
            if (!dt__test_failed && mode == 0) check_bf16(size, 0, (size_t)1 << 20);
        }
    }
    tcp_only = 0;
    dt__ring_decline_rank = -1;
}

/* dt_ring_allreduce_exact on a bfloat16 ring: counters that bfloat16 cannot hold (257,
 * 60001) sum exactly, on the small path and the ring path, between bfloat16 calls. */
static void exact_fn(member *m, dt_ring *r) {
    m->ok = 1;
    for (int round = 0; round < 2 && m->ok; round++) {
        size_t n = round ? 50000 : 4; /* the ring path, then the small one */
        float *d = malloc(n * sizeof *d), g[7];
        for (size_t i = 0; i < n; i++)
            d[i] = (float)(60001 + (int)i % 1000 + m->rank);
        for (int i = 0; i < 7; i++)
            g[i] = bf16_value(m->rank, (size_t)i);
        dt_err e = dt_ring_allreduce_exact(r, d, n);
        if (!e) e = dt_ring_allreduce(r, g, 7);
        member_record(m, e, r);
        int P = m->g->size;
        for (size_t i = 0; i < n && !e && m->ok; i++)
            if (d[i] != (float)(P * (60001 + (int)i % 1000) + P * (P - 1) / 2)) {
                snprintf(m->msg, sizeof m->msg, "n %zu element %zu: %.9g", n, i, (double)d[i]);
                m->ok = 0;
            }
        /* the bfloat16 call after it still rounds */
        if (!e && m->ok && g[3] != bf16_expected(P, 7, 3, 7 * 4 <= dt__ring_small_bytes)) {
            snprintf(m->msg, sizeof m->msg, "bfloat16 after exact: %.9g", (double)g[3]);
            m->ok = 0;
        }
        m->ok = m->ok && !e;
        free(d);
    }
}

static void test_allreduce_exact_on_bf16(void) {
    tcp_only = 1;
    group g;
    DT_CHECK(group_listen(&g, 3) == 0);
    member ms[MAXM];
    members_init(ms, &g, exact_fn, NULL);
    for (int i = 0; i < 3; i++)
        ms[i].wire = DT_RING_WIRE_BF16;
    DT_CHECK(run_members(ms, 3) == 0);
    for (int i = 0; i < 3; i++) {
        if (ms[i].open_err || !ms[i].ok) fprintf(stderr, "rank %d: %s\n", i, ms[i].msg);
        DT_CHECK(!ms[i].open_err && ms[i].ok);
    }
    group_close(&g);
    tcp_only = 0;
}

/* Members with different wire dtypes: the ring does not form; both fail at the handshake
 * with DT_ERR_PROTOCOL naming both dtypes (not at the timeout, not reading each other's data
 * at the wrong width). */
static void test_wire_dtype_mismatch(void) {
    group g;
    DT_CHECK(group_listen(&g, 2) == 0);
    FILE *log = tmpfile();
    member ms[MAXM];
    members_init(ms, &g, simple_allreduce_fn, NULL);
    ms[1].wire = DT_RING_WIRE_BF16;
    for (int i = 0; i < 2; i++) {
        ms[i].log = log;
        ms[i].timeout_ms = 60000; /* a failure by timeout would take this long */
    }
    DT_CHECK(run_members(ms, 2) == 0);
    for (int i = 0; i < 2; i++) {
        if (ms[i].open_err != DT_ERR_PROTOCOL)
            DT_FAIL("rank %d: code %d, %s", i, (int)ms[i].open_err, ms[i].msg);
        if (!strstr(ms[i].msg, "float32") || !strstr(ms[i].msg, "bfloat16") ||
            !strstr(ms[i].msg, "wire dtype"))
            DT_FAIL("rank %d: \"%s\" does not name both dtypes", i, ms[i].msg);
    }
    /* whichever saw the other's HELLO first refused it; the other may learn it from that
     * refusal ("refused the ring") before it reads the first's HELLO */
    char *lg = slurp(log);
    DT_CHECK(strstr(lg, "rank 0 sends float32 (wire dtype 0) on the wire, this member bfloat16") ||
             strstr(lg, "rank 1 sends bfloat16 (wire dtype 1) on the wire, this member float32"));
    free(lg);
    fclose(log);
    group_close(&g);
}

/* Rings that mix lanes and TCP connections (as rings spanning hosts do): rank 1 declines
 * its previous member's segment. Members with a TCP connection cut their transfers at
 * chunk_bytes, the others finer (collective.c, plan_chunk): the sums and broadcasts must come
 * out the same. */
static void test_mixed_lanes(void) {
    dt__ring_decline_rank = 1;
    for (int size = 2; size <= 4 && !dt__test_failed; size++) {
        check_sums(size, 0, dt__ring_small_bytes);
        if (!dt__test_failed) check_sums(size, 1000, 0);
    }
    if (!dt__test_failed) test_broadcast_every_root();
    dt__ring_decline_rank = -1;
}

/* ---- the in-place all-reduce ---- */

/* The ranges summed in place, within the shared buffer, one after another (with a lane
 * all-reduce and a broadcast between them: the paths mix). */
static const size_t ip_off[] = {0, 7, 100, 0, 5, 3};
static const size_t ip_n[] = {1, 3, 1000, (1u << 20) + 7, 0, 2};
#define NIP (sizeof ip_n / sizeof ip_n[0])

typedef struct ip_out {
    float *res[NIP][2]; /* per range: the integer run's and the rough run's results */
    int guards_ok;
} ip_out;

static void in_place_fn(member *m, dt_ring *r) {
    ip_out *out = &((ip_out *)m->arg)[m->rank];
    if (m->spin_us) dt_ring_set_spin_us(r, m->spin_us);
    float *b = dt_ring_shared_buffer(r);
    out->guards_ok = 1;
    m->ok = b != NULL;
    if (!b) return;
    for (size_t k = 0; k < NIP; k++) {
        size_t off = ip_off[k], n = ip_n[k];
        for (int kind = 0; kind < 2; kind++) {
            for (size_t i = 0; i < n; i++)
                b[off + i] = kind ? rough_value(m->rank, i) : int_value(m->rank, i);
            /* the floats just outside the range must not change */
            if (off) b[off - 1] = 12345.0f;
            b[off + n] = -777.0f;
            dt_err e = dt_ring_allreduce(r, b + off, n);
            if (e) {
                member_record(m, e, r);
                m->ok = 0;
                return;
            }
            if ((off && b[off - 1] != 12345.0f) || b[off + n] != -777.0f) out->guards_ok = 0;
            out->res[k][kind] = malloc((n ? n : 1) * sizeof(float));
            memcpy(out->res[k][kind], b + off, n * sizeof(float));
        }
        /* data outside the shared buffer goes the lane's way, a broadcast too */
        float side[1000], bytes[16];
        for (size_t i = 0; i < 1000; i++)
            side[i] = int_value(m->rank, i);
        for (int i = 0; i < 16; i++)
            bytes[i] = m->rank == 1 ? (float)i : 0.0f;
        dt_err e = dt_ring_allreduce(r, side, 1000);
        if (!e) e = dt_ring_broadcast(r, bytes, sizeof bytes, 1);
        if (e) {
            member_record(m, e, r);
            m->ok = 0;
            return;
        }
        for (size_t i = 0; i < 1000; i++)
            if (side[i] != int_value(0, i) + int_value(1, i)) m->ok = 0;
        for (int i = 0; i < 16; i++)
            if (bytes[i] != (float)i) m->ok = 0;
    }
    /* every non-empty range went in place (two members' lane sums would be the same bits) */
    if (r->in_place_calls != 2 * (NIP - 1)) m->ok = 0;
    member_record(m, DT_OK, r);
}

/* Two members of one host, summing in place, run fn (arg) to the end; spin: each one's
 * dt_ring_set_spin_us (0: the default). A member that never spins (< 0) sleeps at every
 * wait: with a minute between its looks, only the other's wake-up ends a sleep in time (a
 * lost one hangs the test). */
static void run_in_place(member *ms, member_fn fn, void *arg, const int *spin) {
    in_place = 1;
    long slice = dt__ring_in_place_slice_ns;
    if (spin[0] < 0 || spin[1] < 0) dt__ring_in_place_slice_ns = 60L * 1000 * 1000 * 1000;
    group g;
    DT_CHECK(group_listen(&g, 2) == 0);
    members_init(ms, &g, fn, arg);
    for (int i = 0; i < 2; i++)
        ms[i].spin_us = spin[i];
    DT_CHECK(run_members(ms, 2) == 0);
    group_close(&g);
    in_place = 0;
    dt__ring_in_place_slice_ns = slice;
}

/* check(spin) with the default spins, then with one member that never spins beside one that
 * spins 100 ms, either way round. */
static void each_spin_setting(void (*check)(const int *spin)) {
    static const int settings[3][2] = {{0, 0}, {-1, 100000}, {100000, -1}};
    for (int k = 0; k < 3 && !dt__test_failed; k++)
        check(settings[k]);
}

static void check_in_place(const int *spin) {
    member ms[MAXM];
    ip_out out[2];
    memset(out, 0, sizeof out);
    run_in_place(ms, in_place_fn, out, spin);
    int bad = 0;
    for (int q = 0; q < 2; q++)
        if (ms[q].open_err || ms[q].err || !ms[q].ok || !out[q].guards_ok) {
            fprintf(stderr, "rank %d: ok %d, guards %d: %s\n", q, ms[q].ok, out[q].guards_ok,
                    ms[q].msg);
            bad = 1;
        }
    for (size_t k = 0; k < NIP && !bad; k++)
        for (size_t i = 0; i < ip_n[k] && !bad; i++) {
            float want = int_value(0, i) + int_value(1, i);
            float rough = rough_value(0, i) + rough_value(1, i); /* a + b == b + a */
            for (int q = 0; q < 2; q++)
                if (out[q].res[k][0][i] != want || out[q].res[k][1][i] != rough) {
                    fprintf(stderr, "range %zu rank %d element %zu: %g / %g, want %g / %g\n", k,
                            q, i, (double)out[q].res[k][0][i], (double)out[q].res[k][1][i],
                            (double)want, (double)rough);
                    bad = 1;
                }
        }
    for (int q = 0; q < 2; q++)
        for (size_t k = 0; k < NIP; k++)
            for (int kind = 0; kind < 2; kind++)
                free(out[q].res[k][kind]);
    DT_CHECK(!bad);
}

/* Two members of one host sum in place: exact sums, the same bits on both, nothing outside
 * the range touched; with the default spins, and with one member that never spins (every
 * wait sleeps on the futex and is woken) beside one that spins 100 ms. */
static void test_in_place_sums(void) {
    each_spin_setting(check_in_place);
}

static void no_shared_fn(member *m, dt_ring *r) {
    m->ok = dt_ring_shared_buffer(r) == NULL;
}

/* No in-place sum without 2 members on lanes, float32 on the wire, and the room asked for;
 * members asking for buffers of different sizes decline each other's segments (TCP). */
static void test_in_place_only_where_it_can(void) {
    struct {
        int size, tcp, bf16, shared, differ;
    } cases[] = {{3, 0, 0, 1, 0}, {2, 1, 0, 1, 0}, {2, 0, 1, 1, 0}, {2, 0, 0, 0, 0}, {2, 0, 0, 1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] && !dt__test_failed; c++) {
        in_place = cases[c].shared;
        tcp_only = cases[c].tcp;
        group g;
        DT_CHECK(group_listen(&g, cases[c].size) == 0);
        member ms[MAXM];
        members_init(ms, &g, no_shared_fn, NULL);
        for (int i = 0; i < cases[c].size; i++)
            ms[i].wire = cases[c].bf16 ? DT_RING_WIRE_BF16 : DT_RING_WIRE_F32;
        if (cases[c].differ) ms[1].shared = IN_PLACE_FLOATS + 16; /* 64 bytes more */
        DT_CHECK(run_members(ms, cases[c].size) == 0);
        group_close(&g);
        in_place = tcp_only = 0;
        for (int i = 0; i < cases[c].size; i++) {
            if (ms[i].open_err || !ms[i].ok)
                DT_FAIL("case %zu rank %d: %s (a shared buffer: %d)", c, i, ms[i].msg, !ms[i].ok);
            if (cases[c].differ && ms[i].lanes != 0)
                DT_FAIL("case %zu rank %d: %d lanes with mismatched shared buffers", c, i,
                        ms[i].lanes);
        }
    }
}

/* The other member killed while this one waits for it in place: seen on the socket at once
 * (the timeout is far beyond the bound), blamed on it. */
static void killed_in_place(void) {
    int codes[MAXM], peers[MAXM], lanes[MAXM];
    char msgs[MAXM][1100];
    with_processes(2, 1, SIGKILL, 1000 * 1000, codes, peers, lanes, msgs);
    if (codes[0] != DT_ERR_NETWORK) DT_FAIL("rank 0: code %d: %s", codes[0], msgs[0]);
    DT_CHECK(strstr(msgs[0], "in place") != NULL && strstr(msgs[0], "closed the connection"));
    DT_CHECK(peers[0] == 1);
}

/* The failures, summing in place: a member that closes, one killed, one stopped, an abort -
 * each seen as on the lane (the same codes, blame and prompt end). */
static void test_in_place_failures(void) {
    void (*const tests[])(void) = {test_peer_closes_midway, test_abort_unblocks, killed_in_place,
                                   test_stopped_member_times_out};
    in_place = 1;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0] && !dt__test_failed; i++)
        tests[i]();
    in_place = 0;
}

/* ---- the in-place pair (dt_ring_allreduce_pair, dt_ring_release, dt_ring_settle) ---- */

#define PAIR_STEPS 120
#define PAIR_N 4099

static float pair_value(int rank, int step, size_t i) {
    return rough_value(rank, i + (size_t)step * 7919u);
}

typedef struct pair_out {
    int data_kept, peer_whole, sums_ok, calls_ok, last_sum_ok;
} pair_out;

/* Steps as a trainer takes them: settle, write its buffer, meet, read the other's copy (every
 * seventh step on a member slowly, twice 2 ms apart), release. Without the settle's wait the
 * faster member would overwrite its buffer while the slower still reads it. */
static void pair_fn(member *m, dt_ring *r) {
    pair_out *out = &((pair_out *)m->arg)[m->rank];
    if (m->spin_us) dt_ring_set_spin_us(r, m->spin_us);
    float *b = dt_ring_shared_buffer(r);
    *out = (pair_out){1, 1, 1, 1, 1};
    m->ok = b != NULL;
    if (!b) return;
    /* an in-place all-reduce first: a pair call after one takes up the count */
    for (size_t i = 0; i < PAIR_N; i++)
        b[i] = int_value(m->rank, i);
    dt_err e0 = dt_ring_allreduce(r, b, PAIR_N);
    for (size_t i = 0; i < PAIR_N && !e0; i++)
        if (b[i] != int_value(0, i) + int_value(1, i)) out->sums_ok = 0;
    if (e0) {
        member_record(m, e0, r);
        m->ok = 0;
        return;
    }
    const float *peer = NULL;
    for (int s = 0; s < PAIR_STEPS; s++) {
        dt_err e = dt_ring_settle(r);
        if (e) {
            member_record(m, e, r);
            m->ok = 0;
            return;
        }
        for (size_t i = 0; i < PAIR_N; i++)
            b[i] = pair_value(m->rank, s, i);
        if ((e = dt_ring_allreduce_pair(r, b, PAIR_N, &peer)) || !peer) {
            member_record(m, e, r);
            m->ok = 0;
            return;
        }
        int slow = s % 7 == m->rank;
        for (int pass = 0; pass < 1 + slow; pass++) {
            if (pass) sleep_ms(2);
            for (size_t i = 0; i < PAIR_N; i++)
                if (peer[i] != pair_value(1 - m->rank, s, i)) out->peer_whole = 0;
        }
        for (size_t i = 0; i < PAIR_N; i++) {
            if (b[i] != pair_value(m->rank, s, i)) out->data_kept = 0;
            /* in rank order: a + b == b + a, the same bits on both members */
            if (b[i] + peer[i] != pair_value(0, s, i) + pair_value(1, s, i)) out->sums_ok = 0;
        }
        dt_ring_release(r);
    }
    if (r->in_place_calls != PAIR_STEPS + 1) out->calls_ok = 0;
    /* an in-place all-reduce after a pair call settles it first: the last step's sums */
    dt_err e = dt_ring_allreduce(r, b, PAIR_N);
    if (e) {
        member_record(m, e, r);
        m->ok = 0;
        return;
    }
    for (size_t i = 0; i < PAIR_N; i++)
        if (b[i] != pair_value(0, PAIR_STEPS - 1, i) + pair_value(1, PAIR_STEPS - 1, i))
            out->last_sum_ok = 0;
    member_record(m, DT_OK, r);
}

static void check_pairs(const int *spin) {
    member ms[MAXM];
    pair_out out[2];
    run_in_place(ms, pair_fn, out, spin);
    for (int q = 0; q < 2; q++)
        if (ms[q].open_err || ms[q].err || !ms[q].ok || !out[q].data_kept ||
            !out[q].peer_whole || !out[q].sums_ok || !out[q].calls_ok || !out[q].last_sum_ok)
            DT_FAIL("spins %d/%d rank %d: ok %d, data kept %d, the other's whole %d, sums %d, "
                    "calls %d, a later all-reduce %d: %s",
                    spin[0], spin[1], q, ms[q].ok, out[q].data_kept, out[q].peer_whole,
                    out[q].sums_ok, out[q].calls_ok, out[q].last_sum_ok, ms[q].msg);
}

/* Two members meet once a step and each reads the other's data where it lies: the other's
 * values whole while it reads them (however slowly), its own untouched, the same sums on both;
 * with the default spins, and with one member that never spins (its waits sleep on the futex
 * and only the other's wake-up ends them in time) beside one that spins 100 ms. */
static void test_in_place_pairs(void) {
    each_spin_setting(check_pairs);
}

static void pair_fallback_fn(member *m, dt_ring *r) {
    float *v = data_for(r, 1000);
    for (size_t i = 0; i < 1000; i++)
        v[i] = int_value(m->rank, i);
    const float *peer = (const float *)v;
    dt_err e = dt_ring_allreduce_pair(r, v, 1000, &peer);
    member_record(m, e, r);
    m->ok = !e && peer == NULL && dt_ring_settle(r) == DT_OK;
    for (size_t i = 0; i < 1000 && m->ok; i++) {
        float want = 0;
        for (int q = 0; q < m->g->size; q++)
            want += int_value(q, i);
        if (v[i] != want) m->ok = 0;
    }
    dt_ring_release(r); /* nothing to release: nothing happens */
    data_free(r, v);
}

/* Where the ring does not sum in place (3 members; TCP; no shared buffer; a shared buffer
 * but the data outside it),
 * dt_ring_allreduce_pair is the all-reduce: the sums in data, no peer range. */
static void test_pair_elsewhere_sums(void) {
    struct {
        int size, tcp, shared;
    } cases[] = {{3, 0, 1}, {2, 1, 1}, {2, 0, 0}, {2, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] && !dt__test_failed; c++) {
        tcp_only = cases[c].tcp;
        group g;
        DT_CHECK(group_listen(&g, cases[c].size) == 0);
        member ms[MAXM];
        members_init(ms, &g, pair_fallback_fn, NULL);
        /* in_place stays 0: data_for allocates, outside any shared buffer */
        for (int i = 0; i < cases[c].size && cases[c].shared; i++)
            ms[i].shared = 4096;
        DT_CHECK(run_members(ms, cases[c].size) == 0);
        group_close(&g);
        tcp_only = 0;
        for (int i = 0; i < cases[c].size; i++)
            if (ms[i].open_err || ms[i].err || !ms[i].ok)
                DT_FAIL("case %zu rank %d: ok %d: %s", c, i, ms[i].ok, ms[i].msg);
    }
}

/* Rank 0 reads and releases, then settles; rank 1 met it, then closes without releasing
 * (closes: kind 0) or stays silent until an abort of rank 0's ring ended its wait (kind 1). */
typedef struct pair_fail {
    int kind;
    atomic_int settling, aborted;
} pair_fail;

static void pair_fail_fn(member *m, dt_ring *r) {
    pair_fail *pf = m->arg;
    float *b = dt_ring_shared_buffer(r);
    const float *peer;
    dt_err e = b ? dt_ring_allreduce_pair(r, b, 100, &peer) : DT_ERR_STATE;
    if (e) {
        member_record(m, e, r);
        return;
    }
    if (m->rank == 1) {
        m->ok = 1;
        while (pf->kind == 1 && !atomic_load(&pf->aborted))
            sleep_ms(1);
        return; /* the ring closes, rank 0's buffer never released */
    }
    dt_ring_release(r);
    atomic_store(&pf->settling, 1);
    e = dt_ring_settle(r);
    member_record(m, e, r);
    m->ok = e != DT_OK && dt_ring_settle(r) == DT_ERR_STATE; /* broken: later calls fail */
    /* the ring is closed on return: not before the test's abort used it (TSan) */
    while (pf->kind == 1 && !atomic_load(&pf->aborted))
        sleep_ms(1);
}

/* A settle whose other member went away (closed) or whose ring was aborted fails promptly
 * (the timeout is far beyond the bound), blamed as every in-place wait is. */
static void test_pair_settle_failures(void) {
    for (int kind = 0; kind < 2 && !dt__test_failed; kind++) {
        in_place = 1;
        group g;
        DT_CHECK(group_listen(&g, 2) == 0);
        member ms[MAXM];
        pair_fail pf = {.kind = kind};
        atomic_init(&pf.settling, 0);
        atomic_init(&pf.aborted, 0);
        members_init(ms, &g, pair_fail_fn, &pf);
        for (int i = 0; i < 2; i++)
            ms[i].timeout_ms = 1000 * 1000;
        for (int i = 0; i < 2; i++)
            pthread_create(&ms[i].th, NULL, member_main, &ms[i]);
        if (kind == 1) {
            /* bounded: a rank 0 that failed before settling fails the checks below */
            for (int waited = 0; !atomic_load(&pf.settling) && waited < JOIN_BOUND_S * 1000;
                 waited++)
                sleep_ms(1);
            dt_ring *r = atomic_load(&ms[0].ring);
            DT_CHECK(r != NULL);
            if (r) dt_ring_abort(r);
        }
        atomic_store(&pf.aborted, 1);
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += JOIN_BOUND_S;
        DT_CHECK(pthread_timedjoin_np(ms[0].th, NULL, &dl) == 0);
        DT_CHECK(pthread_timedjoin_np(ms[1].th, NULL, &dl) == 0);
        group_close(&g);
        in_place = 0;
        DT_CHECK(ms[1].ok);
        if (!ms[0].ok) DT_FAIL("kind %d: %s: %s", kind, dt_strerror(ms[0].err), ms[0].msg);
        if (kind == 0) {
            DT_CHECK(ms[0].err == DT_ERR_NETWORK);
            DT_CHECK(strstr(ms[0].msg, "settle") && strstr(ms[0].msg, "closed the connection"));
            DT_CHECK(ms[0].failed_peer == 1);
        } else {
            DT_CHECK(ms[0].err == DT_ERR_STATE && strstr(ms[0].msg, "aborted"));
        }
    }
}

/* The tests whose behaviour must not depend on the lane, again over TCP alone. */
static void test_tcp_lane(void) {
    void (*const tests[])(void) = {
        test_allreduce_sums,          test_allreduce_ring_path_small_chunks,
        test_allreduce_small_path,    test_broadcast_every_root,
        test_peer_closes_midway,      test_silent_peer_times_out,
        test_abort_unblocks,          test_killed_member_fails_the_others,
        test_stopped_member_times_out};
    tcp_only = 1;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0] && !dt__test_failed; i++)
        tests[i]();
    tcp_only = 0;
}

DT_TEST_MAIN(DT_T(test_allreduce_sums), DT_T(test_allreduce_ring_path_small_chunks),
             DT_T(test_allreduce_small_path), DT_T(test_broadcast_every_root),
             DT_T(test_refuses_wrong_connections), DT_T(test_generation_mismatch_times_out),
             DT_T(test_connect_retries_until_listening), DT_T(test_peer_closes_midway),
             DT_T(test_silent_peer_times_out), DT_T(test_abort_unblocks),
             DT_T(test_new_generation_after_failure), DT_T(test_bad_data_frames),
             DT_T(test_killed_member_fails_the_others), DT_T(test_stopped_member_times_out),
             DT_T(test_bad_arguments), DT_T(test_idle_flood_does_not_lock_out),
             DT_T(test_trickled_hello_closed), DT_T(test_bad_lane_positions),
             DT_T(test_lane_declined_falls_back_to_tcp), DT_T(test_mixed_lanes),
             DT_T(test_tcp_lane), DT_T(test_allreduce_bf16), DT_T(test_allreduce_exact_on_bf16),
             DT_T(test_wire_dtype_mismatch), DT_T(test_allreduce_spin_settings),
             DT_T(test_in_place_sums), DT_T(test_in_place_only_where_it_can),
             DT_T(test_in_place_failures), DT_T(test_in_place_pairs),
             DT_T(test_pair_elsewhere_sums), DT_T(test_pair_settle_failures))

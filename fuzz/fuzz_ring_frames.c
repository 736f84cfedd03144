/*
 * fuzz_ring_frames.c - libFuzzer harness: ring frames (docs/WIRE.md, "Ring frames") as a
 * ring member reads them: the previous member's HELLO, then its DATA frames. Each input
 * forms a real ring of two (dt_ring_open, token "t", generation 1) whose rank 0 runs here
 * and whose rank 1 is played by a thread: it answers rank 0's HELLO with OK, and connects
 * to rank 0 sending the input's bytes, then shuts its sending side. Rank 0 then sums 8
 * floats (dt_ring_allreduce, 16-byte chunks) with what it receives. When rank 0 refuses
 * the input (its bytes are no valid HELLO), the thread connects again with a valid HELLO
 * and nothing after it, so that the ring forms and the call fails at once: no input waits
 * for a timeout, and each is over before the next. A valid HELLO of a bfloat16 ring is
 * refused for good (ERROR arg 1): rank 0's dt_ring_open fails with DT_ERR_PROTOCOL, as it
 * must, and the thread does not connect again.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include "dtrain/ring.h"
#include "fuzz-impl.h"
#include "ring/ring-impl.h"

static int lfd0 = -1, lfd1 = -1, port0, port1;
static char peer0[64], peer1[64];

typedef struct player {
    const uint8_t *data;
    size_t size;
} player;

static int connect0(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port0),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("fuzz_ring_frames: connect");
        abort();
    }
    return fd;
}

static void send_all(int fd, const void *p, size_t n) {
    size_t off = 0;
    while (off < n) {
        ssize_t k = send(fd, (const uint8_t *)p + off, n - off, MSG_NOSIGNAL);
        if (k <= 0) return; /* rank 0 closed (a refusal) */
        off += (size_t)k;
    }
}

/* Read until the peer closes; 1 when the first frame was the ring's OK, 2 when it was an
 * ERROR that gives up on the ring (arg 1). */
static int drain(int fd) {
    uint8_t buf[4096];
    size_t got = 0;
    int ok = 0;
    ssize_t k;
    while ((k = recv(fd, buf + (got < DT__FRAME_HDR ? got : 0),
                     got < DT__FRAME_HDR ? DT__FRAME_HDR - got : sizeof buf, 0)) > 0) {
        if (got < DT__FRAME_HDR && (got += (size_t)k) == DT__FRAME_HDR) {
            dt__frame_hdr h;
            dt__frame_decode(buf, &h);
            ok = h.magic == DT__FRAME_MAGIC && h.type == DT__RING_OK;
            if (h.magic == DT__FRAME_MAGIC && h.type == DT__RING_ERROR && h.arg == 1) ok = 2;
        }
    }
    return ok;
}

static void *play_rank1(void *arg) {
    const player *pl = arg;
    /* rank 0's connection to its next member (this one): its HELLO, answered OK */
    int out;
    while ((out = accept4(lfd1, NULL, NULL, SOCK_CLOEXEC)) < 0) { /* lfd1 is non-blocking */
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) abort();
        poll(&(struct pollfd){.fd = lfd1, .events = POLLIN}, 1, -1);
    }
    uint8_t hello[DT__FRAME_HDR + DT__RING_HELLO_MIN + 1 + DT__RING_HELLO_OWN];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof hello && (k = recv(out, hello + got, sizeof hello - got, 0)) > 0)
        got += (size_t)k;
    uint8_t ok[DT__FRAME_HDR];
    dt__frame_encode(ok, DT__RING_OK, 1, 0);
    send_all(out, ok, sizeof ok);
    /* the input, as rank 1's connection to rank 0 */
    int in = connect0();
    send_all(in, pl->data, pl->size);
    shutdown(in, SHUT_WR);
    if (!drain(in)) {
        close(in);
        in = connect0();
        uint8_t valid[DT__FRAME_HDR + DT__RING_HELLO_MIN + 1 + DT__RING_HELLO_OWN];
        dt__frame_encode(valid, DT__RING_HELLO, 1, DT__RING_HELLO_MIN + 1 + DT__RING_HELLO_OWN);
        dt__put32(valid + DT__FRAME_HDR, 1);
        dt__put32(valid + DT__FRAME_HDR + 4, 2);
        dt__put32(valid + DT__FRAME_HDR + 8, 1);
        valid[DT__FRAME_HDR + DT__RING_HELLO_MIN] = 't';
        dt__put32(valid + DT__FRAME_HDR + DT__RING_HELLO_MIN + 1, DT_RING_WIRE_F32);
        send_all(in, valid, sizeof valid);
        shutdown(in, SHUT_WR);
        drain(in);
    }
    close(in);
    drain(out); /* rank 0's DATA, until it closes the ring */
    close(out);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (lfd0 < 0) {
        if (dt_ring_listen("127.0.0.1", 0, &lfd0, &port0) ||
            dt_ring_listen("127.0.0.1", 0, &lfd1, &port1)) {
            fprintf(stderr, "fuzz_ring_frames: %s\n", dt_errmsg());
            abort();
        }
        snprintf(peer0, sizeof peer0, "127.0.0.1:%d", port0);
        snprintf(peer1, sizeof peer1, "127.0.0.1:%d", port1);
    }
    static FILE *log;
    if (!log) log = fopen("/dev/null", "w");
    player pl = {data, size};
    pthread_t t;
    if (pthread_create(&t, NULL, play_rank1, &pl) != 0) abort();
    const char *peers[2] = {peer0, peer1};
    dt_ring_conf conf = {.token = "t", .generation = 1, .rank = 0, .size = 2, .peers = peers,
                         .timeout_ms = 10000, .chunk_bytes = 16, .log = log,
                         .no_shm = 1}; /* the frames of the TCP lane: the played rank 1 is TCP */
    dt_ring *r = NULL;
    dt_err e = dt_ring_open(&r, lfd0, &conf);
    if (e == DT_OK) {
        float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        dt_ring_allreduce(r, x, 8);
        dt_ring_close(r);
    } else if (e == DT_ERR_PROTOCOL && strstr(dt_errmsg(), "wire dtype")) {
        /* rank 1 said another wire dtype: no ring, as it must be */
    } else {
        fprintf(stderr, "fuzz_ring_frames: the ring did not form: %s\n", dt_errmsg());
        abort();
    }
    pthread_join(t, NULL);
    dt_err_clear();
    return 0;
}

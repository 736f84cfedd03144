/*
 * ring-impl.h - internals of src/ring/: the ring's frames (docs/WIRE.md, "Ring frames"), the
 * dt_ring object shared by ring.c (life cycle, handshake) and collective.c (the transfer
 * engine, all-reduce, broadcast), and tunables the tests and the benchmark look at.
 *
 * Frames use the data plane's shared framing (net/frame-impl.h, as the parameter server's:
 * 24-byte header "DTPS", version, type, i64 arg, u64 len, little-endian) with their own
 * types, above the PS's:
 *   RING_HELLO  connector -> acceptor  arg generation; payload u32 rank, u32 size,
 *                                      u32 token_len, token, u32 wire dtype (0 float32,
 *                                      1 bfloat16: dt_ring_wire_dtype)
 *   RING_OK     acceptor -> connector  arg generation; no payload
 *   RING_ERROR  acceptor -> connector  arg 0: refused, try again (another generation...);
 *                                      1: the ring cannot form (the wire dtypes differ), give
 *                                      up; payload the reason (UTF-8, at most 1024 bytes)
 *   RING_DATA   connector -> acceptor  arg the frame's sequence number on this connection
 *                                      (0 for the first after the handshake); payload the
 *                                      all-reduce's values in the ring's wire dtype, or
 *                                      broadcast bytes, of the length both ends computed from
 *                                      the call's arguments
 * The shared-memory lane (lane.c; docs/WIRE.md, "Ring shared memory"), right after RING_OK
 * unless the members were opened with no_shm:
 *   RING_SHM_OFFER  connector -> acceptor  arg 0; payload empty (no segment) or u64 pid,
 *                                          u64 fd, u64 segment bytes, 16-byte nonce
 *   RING_SHM_ANSWER acceptor -> connector  arg 1: attached; 0: declined, payload the reason
 *   RING_SHM_DATA   connector -> acceptor  arg the bytes written into the segment in all
 *   RING_SHM_FREE   acceptor -> connector  arg the bytes consumed from the segment in all
 */
#ifndef DTRAIN_RING_IMPL_H
#define DTRAIN_RING_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/shm-impl.h"
#include "dtrain/ring.h"
#include "net/frame-impl.h"

typedef enum dt__ring_type {
    DT__RING_HELLO = 32,
    DT__RING_OK = 33,
    DT__RING_ERROR = 34,
    DT__RING_DATA = 35,
    DT__RING_SHM_OFFER = 36,
    DT__RING_SHM_ANSWER = 37,
    DT__RING_SHM_DATA = 38,
    DT__RING_SHM_FREE = 39,
} dt__ring_type;

/* A member whose two connections are lanes pipelines in pieces of at most this (collective.c,
 * plan_chunk); a lane's byte ring holds four of them (lane.c). */
#define DT__RING_LANE_CHUNK ((size_t)64 << 10)

/* the HELLO's shared part (net/frame-impl.h): rank, size, token_len, token; the ring's own
 * field follows (DT__RING_HELLO_OWN bytes: u32 wire dtype) */
#define DT__RING_HELLO_OWN 4
#define DT__RING_HELLO_MIN DT__FRAME_HELLO_MIN
#define DT__RING_HELLO_MAX DT__FRAME_HELLO_MAX /* payloads longer than this are refused */
#define DT__RING_TOKEN_MAX DT__FRAME_TOKEN_MAX /* dt_ring_open refuses longer tokens */
#define DT__RING_TEXT_MAX DT__FRAME_TEXT_MAX   /* ERROR texts are cut to this */
#define DT__RING_CHUNK_MAX (1u << 30)          /* chunk_bytes above this are cut to it */

/* A "host:port" split for getaddrinfo. */
typedef struct dt__ring_peer {
    char addr[300]; /* as given, for messages */
    char host[256];
    char port[16];
} dt__ring_peer;

/* A doorbell waiting to go: at most two header-only frames (one partly sent, the newest). */
typedef struct dt__ring_bell {
    uint8_t b[2 * DT__FRAME_HDR];
    size_t len, sent;
} dt__ring_bell;

/* The first DT__RING_CTL bytes of a lane's segment (after the shm header): the positions
 * both sides publish, and whether one side sleeps in poll waiting for the other (then the
 * other rings its doorbell; otherwise the positions alone carry the news). */
typedef struct dt__ring_ctl {
    _Atomic uint64_t head;  /* bytes written in all: the sender's */
    _Atomic uint32_t rwait; /* the receiver sleeps waiting for data */
    uint8_t pad0[52];
    _Atomic uint64_t tail;  /* bytes consumed in all: the receiver's */
    _Atomic uint32_t swait; /* the sender sleeps waiting for room */
    uint8_t pad1[52];
    /* the in-place all-reduce (collective.c): the segment's maker's phases done, and whether
     * it sleeps (futex) waiting for the other member's */
    _Atomic uint32_t progress;
    uint8_t pad2[60];
    _Atomic uint32_t pwait;
    uint8_t pad3[60];
} dt__ring_ctl;
#define DT__RING_CTL 256

/* One direction of the shared-memory lane: a byte ring of `cap` bytes in a segment the
 * sending member made. Positions count bytes since the ring opened (never wrap); the byte at
 * position p lives at data + p % cap. Every item starts at a multiple of 4. */
typedef struct dt__ring_lane {
    dt__shm seg;
    int on;
    size_t cap;
    dt__ring_ctl *ctl;           /* in seg */
    uint8_t *data;               /* the byte ring, in seg */
    float *shared;               /* after the byte ring: its maker's shared buffer (NULL: none) */
    uint64_t head;               /* written (sender) / last seen in ctl (receiver) */
    uint64_t tail;               /* last seen in ctl (sender) / consumed (receiver) */
    uint64_t rung;               /* the last doorbell's count read from the peer */
    uint8_t in[16 * DT__FRAME_HDR]; /* doorbells read from the socket, not yet parsed */
    size_t in_got;
    dt__ring_bell bell; /* the doorbell to send: SHM_DATA (sender), SHM_FREE (receiver) */
} dt__ring_lane;

struct dt_ring {
    int64_t generation;
    int rank, size;
    int prev, next; /* ranks */
    int timeout_ms;
    int hello_timeout_ms; /* an accepted connection's HELLO must come within it */
    int spin_us;          /* a lane's wait spins this long before it sleeps (collective.c) */
    size_t chunk;         /* bytes, a multiple of 4 */
    int bf16;             /* the all-reduce's wire dtype is bfloat16 (collective.c) */
    size_t shared_floats; /* conf.shared_floats (2 members only; else 0) */
    uint32_t in_place_calls; /* in-place all-reduces so far (collective.c) */
    /* the last dt_ring_allreduce_pair (collective.c): 3 x its call number, and whether this
     * member still reads the other's buffer (PAIR_READING) or waits for the other to stop
     * reading its own (PAIR_RELEASED) */
    uint32_t pair_k;
    int pair_state;
    FILE *log;
    char *token;
    dt__ring_peer *peers; /* size */

    int next_fd; /* connected to next: this member only sends on it */
    int prev_fd; /* accepted from prev: this member only receives on it */
    int wake_fd; /* eventfd: dt_ring_abort writes it; every poll watches it */

    atomic_int aborted;
    int broken;      /* a call failed: every later call fails */
    int failed_peer; /* after a failure: the rank whose connection failed, or -1 */

    uint64_t send_seq, recv_seq; /* the next DATA frame's sequence number, per direction */

    float *stage;     /* receive staging (reduce-scatter chunks; small all-reduce slots) */
    size_t stage_cap; /* bytes */
    uint16_t *wire;   /* bfloat16 all-reduce: the data's narrow image, element for element
                         (what this member sends and receives); collective.c */
    size_t wire_cap;  /* elements */
    void *items;      /* the transfer plan's items (collective.c) */
    size_t items_cap; /* entries */

    dt__ring_lane out; /* to next: this member's segment (out.on: next attached it) */
    dt__ring_lane in;  /* from prev: prev's segment (in.on: attached) */
};

/* All-reduces of at most this many bytes (and every all-reduce of a 2-member ring up to it)
 * gather every member's whole buffer round the ring (size-1 steps instead of 2(size-1)) and
 * sum them in rank order. Settable by the benchmark to measure the crossover. */
extern size_t dt__ring_small_bytes;

/* The member of this rank declines every segment offered to it (-1: none): ring_test's way to
 * form rings whose connections mix lanes and TCP, as rings spanning hosts do. */
extern int dt__ring_decline_rank;

/* The in-place all-reduce's longest sleep between its looks at the sockets and the abort
 * flag (10 ms): ring_test makes it a minute, so that a lost wake-up hangs instead of being
 * covered by the next look. */
extern long dt__ring_in_place_slice_ns;

/* "float32" / "bfloat16" for a wire dtype, "unknown" for another number. */
const char *dt__ring_dtype_name(uint32_t dtype);

/* Log one line "ring gen G rank R: ..." to r->log. */
void dt__ring_log(const dt_ring *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse "host:port" ("[v6]:port" too); DT_ERR_ARG naming `what` when malformed. */
dt_err dt__ring_peer_parse(dt__ring_peer *p, const char *addr, const char *what);

/* After the handshake: offer next a segment, attach prev's, within deadline (dt__now_ms).
 * A neighbour that cannot share memory leaves that connection on TCP; the errors are the
 * socket's (DT_ERR_NETWORK, DT_ERR_TIMEOUT, DT_ERR_PROTOCOL). lane.c. */
dt_err dt__ring_lane_open(dt_ring *r, int64_t deadline);
void dt__ring_lane_close(dt_ring *r);
/* Queue a doorbell (type, arg) on bell, replacing one not yet begun. */
void dt__ring_bell_set(dt__ring_bell *b, int type, uint64_t arg);
/* Send what bell holds: 1 all sent, 0 the socket is full, -1 failed (errno). */
int dt__ring_bell_flush(dt__ring_bell *b, int fd);

/* The bytes a lane's segment holds after its byte ring for the shared buffer. */
size_t dt__ring_shared_bytes(const dt_ring *r);

/* Large buffers, TCP_NODELAY, non-blocking. */
void dt__ring_tune(int fd);

#endif

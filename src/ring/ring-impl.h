/*
 * ring-impl.h - internals of src/ring/: the ring's frames (docs/WIRE.md, "Ring frames"), the
 * dt_ring object shared by ring.c (life cycle, handshake) and collective.c (the transfer
 * engine, all-reduce, broadcast), and tunables the tests and the benchmark look at.
 *
 * Frames use the data plane's shared framing (net/frame-impl.h, as the parameter server's:
 * 24-byte header "DTPS", version, type, i64 arg, u64 len, little-endian) with their own
 * types, above the PS's:
 *   RING_HELLO  connector -> acceptor  arg generation; payload u32 rank, u32 size,
 *                                      u32 token_len, token
 *   RING_OK     acceptor -> connector  arg generation; no payload
 *   RING_ERROR  acceptor -> connector  arg 0; payload the reason (UTF-8, at most 1024 bytes)
 *   RING_DATA   connector -> acceptor  arg the frame's sequence number on this connection
 *                                      (0 for the first after the handshake); payload float32
 *                                      values or broadcast bytes, of the length both ends
 *                                      computed from the call's arguments
 */
#ifndef DTRAIN_RING_IMPL_H
#define DTRAIN_RING_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/ring.h"
#include "ps/wire-impl.h"

typedef enum dt__ring_type {
    DT__RING_HELLO = 32,
    DT__RING_OK = 33,
    DT__RING_ERROR = 34,
    DT__RING_DATA = 35,
} dt__ring_type;

/* the HELLO's shared part (net/frame-impl.h): rank, size, token_len, token */
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

struct dt_ring {
    int64_t generation;
    int rank, size;
    int prev, next; /* ranks */
    int timeout_ms;
    int hello_timeout_ms; /* an accepted connection's HELLO must come within it */
    size_t chunk;         /* bytes, a multiple of 4 */
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
    void *items;      /* the transfer plan's items (collective.c) */
    size_t items_cap; /* entries */
};

/* All-reduces of at most this many bytes (and every all-reduce of a 2-member ring up to it)
 * gather every member's whole buffer round the ring (size-1 steps instead of 2(size-1)) and
 * sum them in rank order. Settable by the benchmark to measure the crossover. */
extern size_t dt__ring_small_bytes;

/* Log one line "ring gen G rank R: ..." to r->log. */
void dt__ring_log(const dt_ring *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse "host:port" ("[v6]:port" too); DT_ERR_ARG naming `what` when malformed. */
dt_err dt__ring_peer_parse(dt__ring_peer *p, const char *addr, const char *what);

/* Large buffers, TCP_NODELAY, non-blocking. */
void dt__ring_tune(int fd);

#endif

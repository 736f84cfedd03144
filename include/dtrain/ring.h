/*
 * ring.h - the all-reduce strategy's data plane: a ring of worker processes that sum float32
 * buffers (reduce-scatter, then all-gather), chunked and pipelined over TCP (docs/WIRE.md).
 *
 * A ring has `size` members, rank 0..size-1, each listening on the address peers[rank]. Rank r
 * connects to rank (r+1) % size and accepts one connection from rank (r-1+size) % size: data
 * flows one way round the ring, and every member sends and receives at the same time. Each
 * connection opens with a handshake carrying the job's token, the ring's generation, the
 * sender's rank and the ring's size; a connection that does not match (another job, an old
 * generation, a wrong rank) is refused and closed, the reason logged, and the member goes on
 * waiting for the right one until the timeout.
 *
 * dt_ring_allreduce leaves every member with bitwise the same sums: each segment is reduced
 * by one member and its final value sent round unchanged. A failure (a peer closed, a frame
 * that is not the one expected, no progress for timeout_ms, dt_ring_abort) fails the call;
 * the ring is then unusable and must be closed: the caller abandons the step and forms a new
 * ring (a new generation) through the master. The code tells why: DT_ERR_NETWORK (a peer
 * closed or reset its connection), DT_ERR_TIMEOUT (no progress for timeout_ms; for
 * dt_ring_open, no ring within it), DT_ERR_PROTOCOL (a frame the protocol does not allow),
 * DT_ERR_STATE (aborted, or a call on a ring that already failed).
 *
 * A ring of size 1 has no connections; its all-reduce and broadcast return at once.
 *
 * Usage:
 *     int lfd, port;
 *     dt_ring_listen("127.0.0.1", 0, &lfd, &port);   // register host:port with the master
 *     ... the master answers rank, size, generation, peers ...
 *     dt_ring *r;
 *     dt_ring_open(&r, lfd, &conf);
 *     dt_ring_allreduce(r, grads, n);                 // sums in place
 *     dt_ring_close(r);                               // lfd stays open for the next ring
 */
#ifndef DTRAIN_RING_H
#define DTRAIN_RING_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_RING_DEFAULT_CHUNK ((size_t)256 << 10)
#define DT_RING_DEFAULT_TIMEOUT_MS 10000
/* An accepted connection must have sent its whole HELLO this long after its accept, however
 * slowly its bytes come: the previous member sends it at once; 5 s leaves room for a loaded
 * host and bounds what a silent or trickling client holds while a ring forms. */
#define DT_RING_DEFAULT_HELLO_TIMEOUT_MS 5000

typedef struct dt_ring dt_ring;

/* The element type of the all-reduce's data on the wire (docs/WIRE.md, "Ring wire dtype"):
 * float32, or bfloat16 (half the bytes; the sums still accumulate in float32, and every
 * member ends with the same bits, each a bfloat16 value on the ring path). */
typedef enum dt_ring_wire_dtype { DT_RING_WIRE_F32 = 0, DT_RING_WIRE_BF16 = 1 } dt_ring_wire_dtype;

typedef struct dt_ring_conf {
    const char *token;         /* the job's token; both ends must present the same */
    int64_t generation;        /* the ring's generation (from the master) */
    int rank, size;            /* 0 <= rank < size */
    const char *const *peers;  /* size "host:port" addresses; peers[rank] is this member's */
    int timeout_ms;            /* connect / send / receive without progress for this long
                                * fails the call (0: DT_RING_DEFAULT_TIMEOUT_MS) */
    size_t chunk_bytes;        /* pipelining unit (0: DT_RING_DEFAULT_CHUNK) */
    int hello_timeout_ms;      /* an accepted connection's HELLO, in all, from its accept
                                * (0: DT_RING_DEFAULT_HELLO_TIMEOUT_MS; docs/WIRE.md) */
    FILE *log;                 /* refusals and failures are logged here (NULL: stderr) */
    int no_shm;                /* 1: data only over TCP, even to a neighbour on this host
                                * (0: a shared-memory segment where the neighbour can map it;
                                * docs/WIRE.md, "Ring shared memory"). Every member of a ring
                                * must pass the same */
    dt_ring_wire_dtype wire_dtype; /* the all-reduce's element type between members (the
                                * shared-memory lane too): every member must pass the same;
                                * the handshake refuses a neighbour with another one
                                * (DT_ERR_PROTOCOL naming both). Broadcast is bytes either way */
    size_t shared_floats;      /* a 2-member ring: room in each member's segment for a buffer
                                * of this many floats that the other member maps
                                * (dt_ring_shared_buffer); 0: none. Every member must pass
                                * the same */
} dt_ring_conf;

/* Listen on host:port ("" or NULL host: every interface; port 0: any free port). *fd is the
 * listening socket (the caller closes it), *bound_port the port it got. */
dt_err dt_ring_listen(const char *host, int port, int *fd, int *bound_port);

/* Form the ring: connect to the next member (retrying while it is not yet listening) and
 * accept the previous one's connection on listen_fd, both within conf->timeout_ms. conf's
 * strings are copied. */
dt_err dt_ring_open(dt_ring **out, int listen_fd, const dt_ring_conf *conf);
void dt_ring_close(dt_ring *r); /* NULL: no-op */

int dt_ring_rank(const dt_ring *r);
int dt_ring_size(const dt_ring *r);

/* Sum data[0..n) over all members, in place; every member passes the same n. With
 * wire_dtype bfloat16 the values travel narrowed (rounded to nearest even) and are added in
 * float32; the result is the same on every member but not the exact float32 sum. */
dt_err dt_ring_allreduce(dt_ring *r, float *data, size_t n);

/* dt_ring_allreduce in float32 on the wire whatever the ring's wire dtype: for values whose
 * sums must be exact (counters: bfloat16 holds integers exactly only up to 256). Every
 * member makes the same calls in the same order. */
dt_err dt_ring_allreduce_exact(dt_ring *r, float *data, size_t n);

/* How long a call waiting on a shared-memory neighbour spins before it sleeps in poll
 * (the neighbour then rings a doorbell, and waking costs 50-70 us on a VM): default
 * DT_RING_DEFAULT_SPIN_US. Spinning yields the CPU often, but still takes it from a member
 * of another ring or a thread of this process on the same core: spin long only where every
 * member has a core of its own and nothing else is meant to run meanwhile. Set between the
 * ring's calls, never during one; us < 0 is taken as 0. */
#define DT_RING_DEFAULT_SPIN_US 50
void dt_ring_set_spin_us(dt_ring *r, int us);

/* This member's shared buffer (conf.shared_floats floats, in its segment, which the other
 * member maps) when the ring sums in place: 2 members whose connections are both
 * shared-memory lanes, float32 on the wire; else NULL. An all-reduce of data lying in it
 * (at the same offset on both members) is summed in place: each member adds its half of
 * the range straight from the other's buffer, then copies the other half from it - no copy
 * through the lane (docs/WIRE.md, "In place"). Valid until dt_ring_close. */
float *dt_ring_shared_buffer(dt_ring *r);

/* dt_ring_allreduce without the sum, where the ring sums in place (data in this member's
 * shared buffer, at the same offset on both members): returns once the other member's data
 * is in place, with *peer its copy of data[0..n) - the sum is data[i] + (*peer)[i], the same
 * float on both members - and leaves data as it was. The caller reads *peer until it calls
 * dt_ring_release, and must call dt_ring_settle (the other may still be reading data) before
 * it writes data again. Elsewhere (TCP, more members, bfloat16, data outside the buffer) it
 * is dt_ring_allreduce and *peer is NULL. docs/WIRE.md, "In place". */
dt_err dt_ring_allreduce_pair(dt_ring *r, float *data, size_t n, const float **peer);
/* This member no longer reads the range dt_ring_allreduce_pair gave (none: nothing). The
 * range stays mapped until dt_ring_close, even after the other member died. */
void dt_ring_release(dt_ring *r);
/* Wait until the other member no longer reads this member's buffer (releases it); it
 * releases this member's own reading first. Fails as a call of the ring does (the other gone,
 * timeout_ms, dt_ring_abort); DT_OK at once when no dt_ring_allreduce_pair waits for it.
 * After it failed the other may still be reading: leave the buffer as it is until
 * dt_ring_close (the all-reduce trainer copies it out and trains on in a buffer of its own). */
dt_err dt_ring_settle(dt_ring *r);

/* Copy root's bytes[0..len) to every member; every member passes the same len. */
dt_err dt_ring_broadcast(dt_ring *r, void *bytes, size_t len, int root);

/* After a failed call: the rank whose connection failed (the previous member when receiving
 * stalled or closed, the next when sending did), -1 when unknown or after an abort. */
int dt_ring_failed_peer(const dt_ring *r);

/* From any thread: make a call in progress (and every later one) fail promptly with
 * DT_ERR_STATE ("aborted"). Safe to call more than once; dt_ring_close is still needed. */
void dt_ring_abort(dt_ring *r);

#ifdef __cplusplus
}
#endif

#endif

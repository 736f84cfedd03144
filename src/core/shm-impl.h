/*
 * shm-impl.h - a shared-memory segment one process creates and another on the same host
 * attaches to: the data plane's fast lane between processes of one machine (a PS and its
 * co-located workers), where loopback TCP would copy every byte through the kernel twice.
 *
 * The creator makes an anonymous memfd, sizes it, seals it against shrinking and growing
 * (so the other side can never be made to fault on a truncated mapping), maps it and writes
 * a header: magic "DTSHMSEG", a random 16-byte nonce and the size. It then tells the peer,
 * over the connection they already share, its pid, the fd number, the size and the nonce.
 * The peer opens /proc/<pid>/fd/<fd>, checks that it is a sealed memfd of exactly that size
 * whose header carries that nonce, and maps it. Any failure there - another host, another
 * pid namespace, a process that is not the one that spoke - is DT_ERR_NOTFOUND, and the two
 * sides go on over the socket instead: the lane is an optimization, never a requirement.
 *
 * Layout: bytes [0, DT__SHM_HDR) are the header; the rest is the users' (64-byte aligned).
 */
#ifndef DTRAIN_CORE_SHM_IMPL_H
#define DTRAIN_CORE_SHM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

#define DT__SHM_HDR 64
#define DT__SHM_NONCE 16

typedef struct dt__shm {
    uint8_t *base; /* the mapping (NULL: none) */
    size_t size;   /* bytes mapped, header included */
    int fd;        /* the memfd (creator: kept open for re-attaches; attacher: -1) */
    uint8_t nonce[DT__SHM_NONCE];
} dt__shm;

/* Create, seal and map a segment of size bytes (header included; size >= DT__SHM_HDR).
 * name labels the memfd (shown in /proc/PID/fd). The payload starts zeroed. */
dt_err dt__shm_create(dt__shm *m, const char *name, size_t size);
/* Map the segment fd `fd` of process `pid` described by size and nonce.
 * DT_ERR_NOTFOUND: not reachable from here, or not the segment described (the message
 * says which); the caller falls back to its socket. */
dt_err dt__shm_attach(dt__shm *m, int64_t pid, int64_t fd, size_t size,
                      const uint8_t nonce[DT__SHM_NONCE]);
/* The offer a creator sends its peer over their connection (docs/WIRE.md: SHM_ATTACH, the
 * ring's SHM_OFFER): u64 pid, u64 fd, u64 size, the nonce; integers little-endian. */
#define DT__SHM_OFFER 40
void dt__shm_offer_encode(const dt__shm *m, uint8_t out[DT__SHM_OFFER]);
/* The size an offer describes, for the receiver to check before it maps anything. */
uint64_t dt__shm_offer_size(const uint8_t in[DT__SHM_OFFER]);
/* dt__shm_attach on what an offer describes (a pid or fd beyond int64: DT_ERR_NOTFOUND). */
dt_err dt__shm_attach_offer(dt__shm *m, const uint8_t in[DT__SHM_OFFER]);

/* Unmap and close. A zeroed or freed dt__shm is a no-op. */
void dt__shm_free(dt__shm *m);

/* The user area: base + DT__SHM_HDR. */
static inline void *dt__shm_data(const dt__shm *m) {
    return m->base + DT__SHM_HDR;
}

#endif

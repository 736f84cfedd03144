/*
 * lane.c - the ring's shared-memory lane between neighbours on one host (ring-impl.h;
 * docs/WIRE.md, "Ring shared memory").
 *
 * Design
 *
 * Loopback TCP copies every byte through the kernel and costs a syscall per socket buffer;
 * between processes of one host a shared byte ring does the same transfer with two memcpys
 * and a doorbell per batch. Right after the handshake each member makes a segment for the
 * connection it sends on (src/core/shm.c: a sealed memfd) and offers it to its next member
 * with SHM_OFFER; it then reads its previous member's offer and tries to map it exactly as
 * the parameter server maps a worker's (dt__shm_attach: /proc/<pid>/fd/<fd>, a memfd of that
 * size carrying the seals and the nonce). Mapped, it answers SHM_ANSWER(1); not - another
 * host or pid namespace, no segment offered - SHM_ANSWER(0) with the reason, logged once, and
 * that connection carries RING_DATA frames as before. So the lane is decided per connection
 * by the same test the PS uses, and is never a requirement.
 *
 * On a lane the socket stays: the positions live in the segment's control block, but a side
 * that sleeps is woken by a doorbell on the socket (SHM_DATA, SHM_FREE: collective.c), and a
 * neighbour that dies or hangs is seen on it exactly as before. The segment outlives a
 * dead creator (the mapping holds it) and can never shrink (the seals): a peer's failure
 * can never fault this process.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/clock-impl.h"
#include "net/sock-impl.h"
#include "ring/ring-impl.h"

#define LANE_RING (4 * DT__RING_LANE_CHUNK) /* the ring this member offers */
#define LANE_MAX ((size_t)64 << 20)         /* the largest it maps */
#define LANE_SHARED_MAX ((size_t)4 << 30)   /* the largest shared buffer (conf.shared_floats) */

int dt__ring_decline_rank = -1;

void dt__ring_bell_set(dt__ring_bell *b, int type, uint64_t arg) {
    if (b->sent == b->len) {
        b->len = b->sent = 0;
    } else if (b->sent > 0) {
        /* the first frame is under way: the new one follows (or replaces a waiting second) */
        dt__frame_encode(b->b + DT__FRAME_HDR, type, (int64_t)arg, 0);
        b->len = 2 * DT__FRAME_HDR;
        return;
    }
    dt__frame_encode(b->b, type, (int64_t)arg, 0); /* nothing of it went yet: replace */
    b->len = DT__FRAME_HDR;
    b->sent = 0;
}

int dt__ring_bell_flush(dt__ring_bell *b, int fd) {
    while (b->sent < b->len) {
        ssize_t k = send(fd, b->b + b->sent, b->len - b->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        b->sent += (size_t)k;
        if (b->sent >= DT__FRAME_HDR && b->len == 2 * DT__FRAME_HDR && b->sent < b->len) {
            /* the first went whole: the second moves to the front */
            memmove(b->b, b->b + DT__FRAME_HDR, DT__FRAME_HDR);
            b->sent -= DT__FRAME_HDR;
            b->len = DT__FRAME_HDR;
        }
    }
    b->len = b->sent = 0;
    return 1;
}

static dt_err lane_err(dt_ring *r, dt_err e, int peer, const char *what) {
    r->failed_peer = peer;
    char msg[1200];
    snprintf(msg, sizeof msg, "%s", dt_errmsg());
    dt__ring_log(r, "shared memory with rank %d (%s): %s: %s", peer, r->peers[peer].addr, what,
                 msg);
    return dt_err_set(e, "ring gen %" PRId64 " rank %d: shared memory with rank %d (%s): %s: %s",
                      r->generation, r->rank, peer, r->peers[peer].addr, what, msg);
}

/* Read one whole frame of the given type (payload at most cap bytes) from fd. */
static dt_err read_frame(dt_ring *r, int fd, int peer, int type, int64_t deadline, dt__frame_hdr *h,
                         uint8_t *payload, size_t cap) {
    dt_err e = dt__frame_read_hdr(fd, deadline, cap, h, NULL);
    if (!e && (int)h->type != type)
        e = dt_err_set(DT_ERR_PROTOCOL, "a frame of type %u where %s (%d) was expected", h->type,
                       type == DT__RING_SHM_OFFER ? "SHM_OFFER" : "SHM_ANSWER", type);
    if (!e && h->len) e = dt__sock_read_full(fd, payload, (size_t)h->len, deadline, NULL);
    if (e) return lane_err(r, e, peer, "setting up");
    return DT_OK;
}

static dt_err write_frame(dt_ring *r, int fd, int peer, int type, int64_t arg, const void *p,
                          size_t len, int64_t deadline) {
    uint8_t h[DT__FRAME_HDR];
    dt__frame_encode(h, type, arg, len);
    struct iovec iov[2] = {{h, sizeof h}, {(void *)p, len}};
    dt_err e = dt__sock_writev_all(fd, iov, len ? 2 : 1, deadline);
    if (e) return lane_err(r, e, peer, "setting up");
    return DT_OK;
}

size_t dt__ring_shared_bytes(const dt_ring *r) {
    /* bfloat16 on the wire never sums in place; above the limit, no buffer either (both
     * members compute the same) */
    if (r->bf16 || r->shared_floats > LANE_SHARED_MAX / 4) return 0;
    return (r->shared_floats * 4 + 63) & ~(size_t)63;
}

dt_err dt__ring_lane_open(dt_ring *r, int64_t deadline) {
    /* the byte ring: four of the lane's chunks in flight, small enough to stay in the caches
     * (a 1 MiB ring measured slower than this) */
    size_t cap = LANE_RING;
    uint8_t offer[DT__SHM_OFFER];
    size_t offer_len = 0;
    char name[32];
    snprintf(name, sizeof name, "dtrain-ring-%d", r->rank);
    size_t shared = dt__ring_shared_bytes(r);
    if (dt__shm_create(&r->out.seg, name, DT__SHM_HDR + DT__RING_CTL + cap + shared) == DT_OK) {
        dt__shm_offer_encode(&r->out.seg, offer);
        offer_len = sizeof offer;
        r->out.cap = cap;
    } else {
        dt__ring_log(r, "no shared memory (%s); data to rank %d goes over TCP", dt_errmsg(),
                     r->next);
        dt_err_clear();
    }
    dt_err e =
        write_frame(r, r->next_fd, r->next, DT__RING_SHM_OFFER, 0, offer, offer_len, deadline);
    if (e) return e;

    /* the previous member's offer: map it, answer */
    dt__frame_hdr h;
    uint8_t in[DT__SHM_OFFER];
    if ((e = read_frame(r, r->prev_fd, r->prev, DT__RING_SHM_OFFER, deadline, &h, in, sizeof in)))
        return e;
    char why[DT__RING_TEXT_MAX] = "";
    if (h.len == 0) {
        snprintf(why, sizeof why, "rank %d offered no segment", r->prev);
    } else if (r->rank == dt__ring_decline_rank) {
        snprintf(why, sizeof why, "declined for a test");
    } else if (h.len != DT__SHM_OFFER) {
        e = dt_err_set(DT_ERR_PROTOCOL, "an SHM_OFFER of %" PRIu64 " bytes (0 or %d)", h.len,
                       DT__SHM_OFFER);
        return lane_err(r, e, r->prev, "setting up");
    } else {
        uint64_t size = dt__shm_offer_size(in);
        uint64_t fixed = DT__SHM_HDR + DT__RING_CTL + (uint64_t)shared;
        if (size <= fixed || size > fixed + LANE_MAX || (size - fixed) % 64) {
            snprintf(why, sizeof why, "a segment of %" PRIu64 " bytes is not a ring's", size);
        } else if (shared && size != fixed + LANE_RING) {
            /* with a shared buffer both layouts must be the same: a buffer of another size
             * could otherwise pass for a smaller or larger byte ring */
            snprintf(why, sizeof why,
                     "a segment of %" PRIu64 " bytes is not a ring of %zu with a shared buffer "
                     "of %zu",
                     size, (size_t)LANE_RING, shared);
        } else if (dt__shm_attach_offer(&r->in.seg, in) != DT_OK) {
            snprintf(why, sizeof why, "%s", dt_errmsg());
            dt_err_clear();
        } else {
            r->in.cap = (size_t)(size - fixed);
            r->in.ctl = dt__shm_data(&r->in.seg);
            r->in.data = (uint8_t *)dt__shm_data(&r->in.seg) + DT__RING_CTL;
            if (shared) r->in.shared = (float *)(void *)(r->in.data + r->in.cap);
        }
    }
    int attached = r->in.seg.base != NULL;
    if ((e = write_frame(r, r->prev_fd, r->prev, DT__RING_SHM_ANSWER, attached, why,
                         attached ? 0 : strlen(why), deadline)))
        return e;
    r->in.on = attached;
    if (attached)
        dt__ring_log(r, "data from rank %d (%s) through shared memory (%zu bytes)", r->prev,
                     r->peers[r->prev].addr, r->in.cap);
    else
        dt__ring_log(r, "data from rank %d (%s) over TCP: %s", r->prev, r->peers[r->prev].addr,
                     why);

    /* the next member's answer */
    char text[DT__RING_TEXT_MAX + 1];
    if ((e = read_frame(r, r->next_fd, r->next, DT__RING_SHM_ANSWER, deadline, &h, (uint8_t *)text,
                        DT__RING_TEXT_MAX)))
        return e;
    if (h.arg == 1 && h.len == 0 && offer_len) {
        r->out.on = 1;
        r->out.ctl = dt__shm_data(&r->out.seg);
        r->out.data = (uint8_t *)dt__shm_data(&r->out.seg) + DT__RING_CTL;
        if (shared)
            r->out.shared = (float *)(void *)(r->out.data + r->out.cap);
    } else if (h.arg != 0) {
        e = dt_err_set(DT_ERR_PROTOCOL, "SHM_ANSWER %" PRId64 " (%" PRIu64 " bytes) to %s", h.arg,
                       h.len, offer_len ? "an offer" : "no offer");
        return lane_err(r, e, r->next, "setting up");
    } else {
        dt__shm_free(&r->out.seg);
        r->out.cap = 0;
    }
    return DT_OK;
}

void dt__ring_lane_close(dt_ring *r) {
    dt__shm_free(&r->out.seg);
    dt__shm_free(&r->in.seg);
    r->out.on = r->in.on = 0;
    r->out.shared = r->in.shared = NULL;
}

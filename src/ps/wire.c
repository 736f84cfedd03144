/*
 * wire.c - framing for the parameter-server protocol (docs/WIRE.md; layout in wire-impl.h; the
 * header itself is net/frame-impl.h's, shared with the ring).
 *
 * Design: headers and tensor descriptions are encoded byte by byte (explicit little-endian,
 * no struct punning); tensor data is float32 sent as is (the host is little-endian, checked
 * at compile time in wire-impl.h), or, for a training step's exchange on request, bfloat16:
 * the sender narrows into a buffer of its own, the receiver reads the narrow values into the
 * upper half of the floats' own room and widens them in place (no second buffer). Writing is
 * scatter-gather: callers keep prebuilt iovec arrays (header, descriptions, pointers to the
 * tensors' own data), so a frame of many megabytes leaves in a few sendmsg calls without being
 * copied into a send buffer. Reading goes through a per-connection buffer for the small parts
 * (headers, descriptions) while tensor data, once the buffer is drained, is read straight into its
 * destination.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/futex-impl.h"
#include "net/sock-impl.h"
#include "ps/wire-impl.h"

const char *dt__ps_type_name(int type) {
    static const char *const names[] = {
        [DT__PS_HELLO] = "HELLO",
        [DT__PS_OK] = "OK",
        [DT__PS_ERROR] = "ERROR",
        [DT__PS_INIT] = "INIT",
        [DT__PS_PULL] = "PULL",
        [DT__PS_PUSH] = "PUSH",
        [DT__PS_PUSH_PULL] = "PUSH_PULL",
        [DT__PS_SAVE] = "SAVE",
        [DT__PS_VALUES] = "VALUES",
        [DT__PS_ACK] = "ACK",
        [DT__PS_NOT_INITIALIZED] = "NOT_INITIALIZED",
        [DT__PS_SHM_ATTACH] = "SHM_ATTACH",
        [DT__PS_SHM_DECLINED] = "SHM_DECLINED",
        [DT__PS_SHM_PUSH] = "SHM_PUSH",
        [DT__PS_SHM_PUSH_PULL] = "SHM_PUSH_PULL",
        [DT__PS_SHM_PULL] = "SHM_PULL",
        [DT__PS_SHM_VALUES] = "SHM_VALUES",
        [DT__PS_VALUES_BF16] = "VALUES_BF16",
    };
    if (type <= 0 || type >= (int)(sizeof names / sizeof names[0])) return "unknown";
    return names[type];
}

size_t dt__ps_meta_size(const char *name, const dt_shape *shape) {
    return 4 + 8 * (size_t)shape->ndim + strlen(name);
}

size_t dt__ps_meta_encode(uint8_t *out, const char *name, const dt_shape *shape) {
    size_t nl = strlen(name);
    dt__put16(out, (uint16_t)nl);
    dt__put16(out + 2, (uint16_t)shape->ndim);
    uint8_t *p = out + 4;
    for (int d = 0; d < shape->ndim; d++, p += 8)
        dt__put64(p, (uint64_t)shape->dim[d]);
    memcpy(p, name, nl);
    return 4 + 8 * (size_t)shape->ndim + nl;
}

/* ---- reading ---- */

dt_err dt__ps_reader_init(dt__ps_reader *r, int fd, size_t cap) {
    r->fd = fd;
    r->cap = cap;
    r->pos = r->end = 0;
    r->buf = malloc(cap);
    if (!r->buf) return dt_err_set(DT_ERR_NOMEM, "ps: out of memory for a read buffer");
    return DT_OK;
}

void dt__ps_reader_free(dt__ps_reader *r) {
    free(r->buf);
    r->buf = NULL;
}

void dt__ps_reader_reset(dt__ps_reader *r, int fd) {
    r->fd = fd;
    r->pos = r->end = 0;
}

static ssize_t read_some(int fd, void *dst, size_t n, int flags) {
    for (;;) {
        ssize_t k = recv(fd, dst, n, flags);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) errno = 0;
        return k;
    }
}

int dt__ps_read(dt__ps_reader *r, void *dst, size_t n, size_t *got) {
    uint8_t *d = dst;
    size_t done = 0;
    /* buffered bytes first */
    size_t have = r->end - r->pos;
    if (have) {
        size_t k = have < n ? have : n;
        memcpy(d, r->buf + r->pos, k);
        r->pos += k;
        done = k;
    }
    while (done < n) {
        size_t want = n - done;
        ssize_t k;
        if (want >= r->cap / 2) {
            k = read_some(r->fd, d + done, want, 0); /* large: straight into dst */
            if (k <= 0) goto fail;
            done += (size_t)k;
        } else {
            k = read_some(r->fd, r->buf, r->cap, 0);
            if (k <= 0) goto fail;
            r->pos = 0;
            r->end = (size_t)k;
            size_t c = (size_t)k < want ? (size_t)k : want;
            memcpy(d + done, r->buf, c);
            r->pos = c;
            done += c;
        }
    }
    if (got) *got = done;
    return 0;
fail:
    if (got) *got = done;
    return -1;
}

/* ---- writing ---- */

int dt__ps_writev_all(int fd, struct iovec *iov, int n) {
    return dt__sock_writev_all(fd, iov, n, -1) == DT_OK ? 0 : -1;
}

int dt__ps_send_frame(int fd, int type, int64_t arg, const void *payload, size_t len) {
    uint8_t hdr[DT__PS_HDR];
    dt__ps_hdr_encode(hdr, type, arg, len);
    struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)payload, len}};
    return dt__ps_writev_all(fd, iov, len ? 2 : 1);
}

void dt__ps_tune_socket(int fd) {
    dt__sock_nodelay(fd);
    dt__sock_buffers(fd);
}

/* ---- the lane's doorbells ---- */

void dt__ps_bell_ring(dt__ps_bell *b, uint32_t count, uint32_t type, int64_t arg) {
    atomic_store_explicit(&b->type, type, memory_order_relaxed);
    atomic_store_explicit(&b->arg, arg, memory_order_relaxed);
    dt__futex_publish(&b->count, count, &b->asleep); /* type and arg are seen with it */
}

int dt__ps_bell_sleep(dt__ps_bell *b, uint32_t seen, long slice_ns) {
    dt__futex_sleep(&b->count, seen, &b->asleep, slice_ns);
    return atomic_load_explicit(&b->count, memory_order_acquire) != seen;
}

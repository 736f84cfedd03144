/*
 * wire.c - framing for the parameter-server protocol (docs/WIRE.md; layout in wire-impl.h).
 *
 * Design: headers and tensor descriptions are encoded byte by byte (explicit little-endian,
 * no struct punning); tensor data is float32 sent as is (the host is little-endian, checked
 * at compile time in wire-impl.h). Writing is scatter-gather: callers keep prebuilt iovec
 * arrays (header, descriptions, pointers to the tensors' own data), so a frame of many
 * megabytes leaves in a few sendmsg calls without being copied into a send buffer. Reading
 * goes through a per-connection buffer for the small parts (headers, descriptions) while
 * tensor data, once the buffer is drained, is read straight into its destination.
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ps/wire-impl.h"

void dt__ps_hdr_encode(uint8_t out[DT__PS_HDR], int type, int64_t arg, uint64_t len) {
    dt__put32(out, DT__PS_MAGIC);
    dt__put16(out + 4, DT__PS_VERSION);
    dt__put16(out + 6, (uint16_t)type);
    dt__put64(out + 8, (uint64_t)arg);
    dt__put64(out + 16, len);
}

void dt__ps_hdr_decode(const uint8_t in[DT__PS_HDR], dt__ps_hdr *h) {
    h->magic = dt__get32(in);
    h->version = dt__get16(in + 4);
    h->type = dt__get16(in + 6);
    h->arg = (int64_t)dt__get64(in + 8);
    h->len = dt__get64(in + 16);
}

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
    while (n > 0) {
        /* skip empty entries */
        if (iov->iov_len == 0) {
            iov++;
            n--;
            continue;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)(n < IOV_MAX ? n : IOV_MAX)};
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        size_t left = (size_t)k;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0 && left) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

int dt__ps_send_frame(int fd, int type, int64_t arg, const void *payload, size_t len) {
    uint8_t hdr[DT__PS_HDR];
    dt__ps_hdr_encode(hdr, type, arg, len);
    struct iovec iov[2] = {{hdr, sizeof hdr}, {(void *)payload, len}};
    return dt__ps_writev_all(fd, iov, len ? 2 : 1);
}

void dt__ps_tune_socket(int fd) {
    /* 4 MiB: Linux's usual net.core.wmem_max/rmem_max (larger requests are cut to it and
     * the kernel doubles the value for its bookkeeping) */
    int one = 1, bytes = 4 << 20;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

int64_t dt__ps_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

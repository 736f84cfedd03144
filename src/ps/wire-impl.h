/*
 * wire-impl.h - the parameter-server protocol's frames (docs/WIRE.md), shared by
 * src/ps/server.c and src/ps/client.c.
 *
 * A frame is the data plane's shared framing (net/frame-impl.h): a 24-byte header
 *   u32 magic "DTPS"   u16 version   u16 type   i64 arg   u64 len
 * then `len` payload bytes. HELLO's payload is the shared HELLO (u32 index, u32 nps, u32
 * token_len, token), then u32 replica_len, replica.
 * A tensor list (INIT, PUSH, PUSH_PULL, VALUES) is u32 count, then per tensor
 *   u16 name_len  u16 ndim  u64 dim[ndim]  name bytes  numel elements of the frame's dtype.
 * The dtype of a PUSH or PUSH_PULL is its header's arg (dt__ps_dtype: 0 float32, 4 bytes an
 * element; 1 bfloat16, 2 bytes, the float32's upper half rounded to nearest even); INIT and
 * VALUES are always float32 (arg 0 on INIT; VALUES' arg is the step), VALUES_BF16 (the reply
 * to a bfloat16 PUSH_PULL) bfloat16.
 */
#ifndef DTRAIN_PS_WIRE_IMPL_H
#define DTRAIN_PS_WIRE_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "core/bf16-impl.h" /* the bfloat16 conversions */
#include "core/shm-impl.h"  /* the shared-memory offer */
#include "dtrain/tensor.h"
#include "net/frame-impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the PS wire format sends float32 data as is: a little-endian host is required"
#endif

#define DT__PS_MAGIC DT__FRAME_MAGIC
#define DT__PS_VERSION DT__FRAME_VERSION
#define DT__PS_HDR DT__FRAME_HDR
#define DT__PS_NAME_MAX 63                   /* dt_param.name holds 63 characters */
#define DT__PS_HELLO_MAX DT__FRAME_HELLO_MAX /* HELLO payloads longer than this are refused */
#define DT__PS_TEXT_MAX DT__FRAME_TEXT_MAX   /* ERROR texts are cut to this */

typedef enum dt__ps_type {
    DT__PS_HELLO = 1,
    DT__PS_OK = 2,
    DT__PS_ERROR = 3,
    DT__PS_INIT = 4,
    DT__PS_PULL = 5,
    DT__PS_PUSH = 6,
    DT__PS_PUSH_PULL = 7,
    DT__PS_SAVE = 8,
    DT__PS_VALUES = 9,
    DT__PS_ACK = 10,
    DT__PS_NOT_INITIALIZED = 11,
    /* the shared-memory lane (docs/WIRE.md, "Shared memory"): the tensors of a push and of
     * the values replied live in a segment of the client's; these frames carry none */
    DT__PS_SHM_ATTACH = 12,
    DT__PS_SHM_DECLINED = 13,
    DT__PS_SHM_PUSH = 14,
    DT__PS_SHM_PUSH_PULL = 15,
    DT__PS_SHM_PULL = 16,
    DT__PS_SHM_VALUES = 17,
    /* the reply to a bfloat16 PUSH_PULL: VALUES with bfloat16 data (docs/WIRE.md, "Wire
     * dtype") */
    DT__PS_VALUES_BF16 = 18,
} dt__ps_type;

/* The element types a pushed tensor list may use (the header's arg on PUSH / PUSH_PULL). */
typedef enum dt__ps_dtype {
    DT__PS_F32 = 0,
    DT__PS_BF16 = 1,
} dt__ps_dtype;
/* Bytes of one element of dtype (0: not a dtype of the wire). */
static inline size_t dt__ps_dtype_size(int64_t dtype) {
    return dtype == DT__PS_F32 ? 4 : dtype == DT__PS_BF16 ? 2 : 0;
}

/* SHM_ATTACH's fixed part: u64 pid, u64 fd, u64 segment bytes, 16-byte nonce; the tensor
 * descriptions (a tensor list without data, in partition order) follow. */
#define DT__PS_SHM_FIXED DT__SHM_OFFER
/* A variable's place in the segment's gradient and value areas: in partition order, each
 * starting at a multiple of 16 floats (64 bytes). */
static inline size_t dt__ps_shm_floats(int64_t numel) {
    return ((size_t)numel + 15) / 16 * 16;
}

/* The lane's doorbells (docs/WIRE.md, "Doorbells"): the first DT__PS_LANE_CTL bytes of the
 * segment's user area, then the gradient area, then the value area. On an attached
 * connection the client rings `req` for each lane request (type SHM_PUSH, SHM_PUSH_PULL or
 * SHM_PULL; DT__PS_BELL_SOCKET after it has sent a frame on the socket; arg: the frames it
 * has sent on the socket since the attach, on every ring) and the PS rings `rep` with the
 * answer (its frame type and arg), instead of frames on the socket. The bell's writer writes
 * count, type and arg; the other side writes asleep. */
#define DT__PS_LANE_CTL 128
#define DT__PS_BELL_SOCKET 0
/* A wait for a bell sleeps this long at first before it looks at the socket */
#define DT__PS_BELL_SLICE_NS (10 * 1000 * 1000L)
typedef struct dt__ps_bell {
    _Alignas(64) _Atomic uint32_t count; /* rings so far (wraps) */
    _Atomic uint32_t asleep;             /* the other side sleeps on count */
    _Atomic uint32_t type;               /* the last ring's: a frame type */
    uint32_t pad;
    _Atomic int64_t arg;
} dt__ps_bell;
typedef struct dt__ps_lane_ctl {
    dt__ps_bell req; /* written by the client */
    dt__ps_bell rep; /* written by the PS */
} dt__ps_lane_ctl;
_Static_assert(sizeof(dt__ps_lane_ctl) == DT__PS_LANE_CTL, "the lane's control block");

static inline dt__ps_lane_ctl *dt__ps_lane_ctl_of(const dt__shm *m) {
    return (dt__ps_lane_ctl *)dt__shm_data(m);
}
/* The gradient area (the value area follows it: total floats later). */
static inline float *dt__ps_lane_grads(const dt__shm *m) {
    return (float *)((uint8_t *)dt__shm_data(m) + DT__PS_LANE_CTL);
}
/* The segment's size for areas of `total` floats each. */
static inline uint64_t dt__ps_lane_size(uint64_t total) {
    return DT__SHM_HDR + DT__PS_LANE_CTL + 2 * total * sizeof(float);
}
/* Ring b: its type and arg, then its count (the `count`th ring), then a wake-up if the
 * other side sleeps. */
void dt__ps_bell_ring(dt__ps_bell *b, uint32_t count, uint32_t type, int64_t arg);
/* Sleep until b's count is no longer `seen`, for at most slice_ns. 1: it is not. */
int dt__ps_bell_sleep(dt__ps_bell *b, uint32_t seen, long slice_ns);

/* The header and its coding are the data plane's shared framing (net/frame-impl.h). */
typedef dt__frame_hdr dt__ps_hdr;
static inline void dt__ps_hdr_encode(uint8_t out[DT__PS_HDR], int type, int64_t arg, uint64_t len) {
    dt__frame_encode(out, type, arg, len);
}
static inline void dt__ps_hdr_decode(const uint8_t in[DT__PS_HDR], dt__ps_hdr *h) {
    dt__frame_decode(in, h);
}
const char *dt__ps_type_name(int type);

/* Bytes of one tensor's description (name_len .. name, without the data). */
size_t dt__ps_meta_size(const char *name, const dt_shape *shape);
/* Writes the description into out (dt__ps_meta_size bytes); returns that size. */
size_t dt__ps_meta_encode(uint8_t *out, const char *name, const dt_shape *shape);

/* A buffered reader over a socket: small reads come from the buffer, large ones go
 * straight into the destination. */
typedef struct dt__ps_reader {
    int fd;
    uint8_t *buf;
    size_t cap, pos, end;
} dt__ps_reader;

dt_err dt__ps_reader_init(dt__ps_reader *r, int fd, size_t cap);
void dt__ps_reader_free(dt__ps_reader *r);
/* Forget buffered bytes and read from fd from now on. */
void dt__ps_reader_reset(dt__ps_reader *r, int fd);
/* Read exactly n bytes. 0: done; -1: failed with errno set (0 when the peer closed);
 * *got (may be NULL) gets the bytes read before the failure. */
int dt__ps_read(dt__ps_reader *r, void *dst, size_t n, size_t *got);

/* Write every byte of iov[0..n) (iov is modified; net/sock-impl.h's dt__sock_writev_all
 * without a deadline: the socket's SO_SNDTIMEO bounds it). 0: done; -1: errno set. */
int dt__ps_writev_all(int fd, struct iovec *iov, int n);
/* One frame with a small payload (may be NULL when len is 0). */
int dt__ps_send_frame(int fd, int type, int64_t arg, const void *payload, size_t len);

/* Socket options for a PS connection: large buffers, TCP_NODELAY (net/sock-impl.h). */
void dt__ps_tune_socket(int fd);

#endif

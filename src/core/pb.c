/*
 * pb.c - the protocol buffers wire-format writer (pb-impl.h).
 *
 * Design: a buffer grows by doubling (from 256 bytes) and never shrinks; every append goes
 * through reserve(), which marks the buffer failed on overflow or when realloc fails, after
 * which appends do nothing (the sticky error of pb-impl.h). Multi-byte values are written
 * byte by byte in little-endian order, whatever the host's.
 */
#include "core/pb-impl.h"

#include <stdlib.h>
#include <string.h>

void dt__pb_init(dt__pb_buf *b) {
    memset(b, 0, sizeof *b);
}

void dt__pb_free(dt__pb_buf *b) {
    if (!b) return;
    free(b->data);
    memset(b, 0, sizeof *b);
}

void dt__pb_clear(dt__pb_buf *b) {
    b->len = 0;
}

dt_err dt__pb_status(const dt__pb_buf *b) {
    if (b->failed) return dt_err_set(DT_ERR_NOMEM, "protobuf writer: out of memory");
    return DT_OK;
}

/* Room for n more bytes; 0 (and the buffer marked failed) when there is none. */
static int reserve(dt__pb_buf *b, size_t n) {
    if (b->failed) return 0;
    if (n <= b->cap - b->len) return 1;
    if (n > SIZE_MAX / 2 - b->len) {
        b->failed = 1;
        return 0;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return 0;
    }
    b->data = p;
    b->cap = cap;
    return 1;
}

void dt__pb_raw(dt__pb_buf *b, const void *p, size_t n) {
    if (!reserve(b, n) || n == 0) return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

size_t dt__pb_varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

void dt__pb_varint(dt__pb_buf *b, uint64_t v) {
    if (!reserve(b, DT__PB_VARINT_MAX)) return;
    uint8_t *p = b->data + b->len;
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    b->len += n;
}

void dt__pb_le32(dt__pb_buf *b, uint32_t v) {
    uint8_t p[4];
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    dt__pb_raw(b, p, sizeof p);
}

void dt__pb_le64(dt__pb_buf *b, uint64_t v) {
    uint8_t p[8];
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    dt__pb_raw(b, p, sizeof p);
}

void dt__pb_key(dt__pb_buf *b, uint32_t field, dt__pb_wire wire) {
    dt__pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire);
}

void dt__pb_uint(dt__pb_buf *b, uint32_t field, uint64_t v) {
    dt__pb_key(b, field, DT__PB_VARINT);
    dt__pb_varint(b, v);
}

void dt__pb_int(dt__pb_buf *b, uint32_t field, int64_t v) {
    dt__pb_uint(b, field, (uint64_t)v); /* two's complement, as the wire format says */
}

void dt__pb_bool(dt__pb_buf *b, uint32_t field, int v) {
    dt__pb_uint(b, field, v != 0);
}

void dt__pb_fixed32(dt__pb_buf *b, uint32_t field, uint32_t v) {
    dt__pb_key(b, field, DT__PB_FIXED32);
    dt__pb_le32(b, v);
}

void dt__pb_fixed64(dt__pb_buf *b, uint32_t field, uint64_t v) {
    dt__pb_key(b, field, DT__PB_FIXED64);
    dt__pb_le64(b, v);
}

void dt__pb_float(dt__pb_buf *b, uint32_t field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    dt__pb_fixed32(b, field, u);
}

void dt__pb_double(dt__pb_buf *b, uint32_t field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    dt__pb_fixed64(b, field, u);
}

void dt__pb_bytes(dt__pb_buf *b, uint32_t field, const void *p, size_t n) {
    dt__pb_key(b, field, DT__PB_LEN);
    dt__pb_varint(b, n);
    dt__pb_raw(b, p, n);
}

void dt__pb_string(dt__pb_buf *b, uint32_t field, const char *s) {
    dt__pb_bytes(b, field, s ? s : "", s ? strlen(s) : 0);
}

void dt__pb_message(dt__pb_buf *b, uint32_t field, const dt__pb_buf *child) {
    if (child->failed) b->failed = 1;
    dt__pb_bytes(b, field, child->data, child->len);
}

void dt__pb_float_array(dt__pb_buf *b, uint32_t field, const float *v, size_t n) {
    if (n > SIZE_MAX / 8) {
        b->failed = 1;
        return;
    }
    dt__pb_key(b, field, DT__PB_LEN);
    dt__pb_varint(b, n * 4);
    if (!reserve(b, n * 4)) return;
    uint8_t *p = b->data + b->len;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        p[4 * i] = (uint8_t)u;
        p[4 * i + 1] = (uint8_t)(u >> 8);
        p[4 * i + 2] = (uint8_t)(u >> 16);
        p[4 * i + 3] = (uint8_t)(u >> 24);
    }
    b->len += n * 4;
}

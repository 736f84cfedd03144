/*
 * pb-impl.h - a protocol buffers wire-format writer, for the formats dtrain writes but never
 * reads (ONNX models, TensorBoard event records): no schema, no generator, only encodings.
 *
 * A message is built in a dt__pb_buf, a growable byte buffer, by appending its fields in
 * order. Each field is key = varint(field << 3 | wire type), then the value:
 *
 *   DT__PB_VARINT   7 bits a byte, low group first, top bit "more follows": uint, int64
 *                   (a negative one as its 64-bit two's complement: 10 bytes), bool, enum
 *   DT__PB_FIXED64  8 bytes little-endian: double, fixed64
 *   DT__PB_LEN      varint length, then that many bytes: string, bytes, nested message,
 *                   packed repeated scalars
 *   DT__PB_FIXED32  4 bytes little-endian: float, fixed32
 *
 * A nested message's length comes before its body, so children are built first, each into
 * a buffer of its own, and appended whole to the parent (dt__pb_message): bottom-up.
 *
 * Errors are sticky: the first allocation failure marks the buffer, every later append to
 * it is a no-op, and dt__pb_status reports DT_ERR_NOMEM once at the end, so a writer can
 * append a whole message without checking each call. A parent that takes a failed child
 * fails too.
 *
 * Ownership: a buffer owns its bytes; dt__pb_init/dt__pb_free pair up (free of a zeroed or
 * freed buffer is a no-op). Not thread-safe; one writer per buffer.
 */
#ifndef DTRAIN_PB_IMPL_H
#define DTRAIN_PB_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

typedef enum dt__pb_wire {
    DT__PB_VARINT = 0,
    DT__PB_FIXED64 = 1,
    DT__PB_LEN = 2,
    DT__PB_FIXED32 = 5,
} dt__pb_wire;

typedef struct dt__pb_buf {
    uint8_t *data;
    size_t len, cap;
    int failed; /* an append ran out of memory: the contents are incomplete */
} dt__pb_buf;

/* The longest varint: 64 bits in 7-bit groups. */
#define DT__PB_VARINT_MAX 10

void dt__pb_init(dt__pb_buf *b);
void dt__pb_free(dt__pb_buf *b);
/* Empty the buffer for reuse (keeps its memory and its failed mark). */
void dt__pb_clear(dt__pb_buf *b);
/* DT_OK, or DT_ERR_NOMEM (message set) when an append failed. */
dt_err dt__pb_status(const dt__pb_buf *b);

/* ---- raw encodings (no key) ---- */

/* Append n bytes as they are (an already encoded run of fields, a record header). */
void dt__pb_raw(dt__pb_buf *b, const void *p, size_t n);
void dt__pb_varint(dt__pb_buf *b, uint64_t v);
void dt__pb_le32(dt__pb_buf *b, uint32_t v);
void dt__pb_le64(dt__pb_buf *b, uint64_t v);
/* Bytes a varint of v takes (1..10). */
size_t dt__pb_varint_size(uint64_t v);

/* ---- fields (key, then value) ---- */

void dt__pb_key(dt__pb_buf *b, uint32_t field, dt__pb_wire wire);
void dt__pb_uint(dt__pb_buf *b, uint32_t field, uint64_t v);
/* int32/int64/enum: negative values take 10 bytes (not zigzag: that is sint64). */
void dt__pb_int(dt__pb_buf *b, uint32_t field, int64_t v);
void dt__pb_bool(dt__pb_buf *b, uint32_t field, int v);
void dt__pb_fixed32(dt__pb_buf *b, uint32_t field, uint32_t v);
void dt__pb_fixed64(dt__pb_buf *b, uint32_t field, uint64_t v);
void dt__pb_float(dt__pb_buf *b, uint32_t field, float v);
void dt__pb_double(dt__pb_buf *b, uint32_t field, double v);
void dt__pb_bytes(dt__pb_buf *b, uint32_t field, const void *p, size_t n);
/* A NUL-terminated string as bytes (s NULL: the empty string). */
void dt__pb_string(dt__pb_buf *b, uint32_t field, const char *s);
/* A nested message: child's whole contents, length-prefixed (a failed child fails b). */
void dt__pb_message(dt__pb_buf *b, uint32_t field, const dt__pb_buf *child);
/* n floats as little-endian float32 in one length-delimited field: packed repeated floats
 * and a bytes field of raw float32 data (ONNX raw_data) are the same bytes. */
void dt__pb_float_array(dt__pb_buf *b, uint32_t field, const float *v, size_t n);

#endif

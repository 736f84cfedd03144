/*
 * frame-impl.h - the binary framing the data plane's two protocols share (docs/WIRE.md): the
 * parameter server's (src/ps/wire-impl.h) and the ring's (src/ring/ring-impl.h) frames are
 * both a 24-byte header, then `len` payload bytes. Header fields, little-endian:
 *   u32 magic "DTPS"   u16 version   u16 type   i64 arg   u64 len
 * The protocols number their types apart (PS 1..18, ring 32..35).
 *
 * Both open a connection the same way: the connector sends a HELLO whose payload starts
 *   u32 a   u32 b   u32 token_len   token bytes
 * (PS: a = partition index, b = partition count, then its own u32 replica_len, replica;
 * ring: a = rank, b = ring size, nothing after the token). The acceptor reads the header and
 * the HELLO within one deadline, checks the token (net/token-impl.h) and answers OK, or an
 * ERROR frame whose payload is the reason as text (at most DT__FRAME_TEXT_MAX bytes), and
 * closes. A header is checked (magic, version, a length within the reader's bound) before a
 * byte of its payload is read.
 */
#ifndef DTRAIN_NET_FRAME_IMPL_H
#define DTRAIN_NET_FRAME_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/le-impl.h" /* the fields' byte order */
#include "dtrain/err.h"

#define DT__FRAME_MAGIC 0x53505444u /* "DTPS" as little-endian bytes */
#define DT__FRAME_VERSION 1
#define DT__FRAME_HDR 24
#define DT__FRAME_HELLO_MIN 12   /* a, b, token_len */
#define DT__FRAME_HELLO_MAX 4096 /* HELLO payloads longer than this are refused */
#define DT__FRAME_TOKEN_MAX 1024 /* tokens longer than this are refused before sending */
#define DT__FRAME_TEXT_MAX 1024  /* ERROR texts are cut to this */

typedef struct dt__frame_hdr {
    uint32_t magic;
    uint16_t version, type;
    int64_t arg;
    uint64_t len;
} dt__frame_hdr;

void dt__frame_encode(uint8_t out[DT__FRAME_HDR], int type, int64_t arg, uint64_t len);
void dt__frame_decode(const uint8_t in[DT__FRAME_HDR], dt__frame_hdr *h);

/* Magic and version: DT_OK, or DT_ERR_PROTOCOL "not a dtrain frame (magic 0x..., version N)". */
dt_err dt__frame_check(const dt__frame_hdr *h);

/* Read a header from fd before deadline_ms (-1: none), decode and check it (magic, version,
 * len <= max_len). *got (may be NULL) gets the header bytes read. DT_ERR_NETWORK /
 * DT_ERR_TIMEOUT as dt__sock_read_full, DT_ERR_PROTOCOL for a header the checks refuse. */
dt_err dt__frame_read_hdr(int fd, int64_t deadline_ms, uint64_t max_len, dt__frame_hdr *h,
                          size_t *got);

/* ---- HELLO ---- */

typedef struct dt__frame_hello {
    uint32_t a, b;
    const uint8_t *token; /* token_len bytes, inside the payload parsed */
    uint32_t token_len;
    const uint8_t *rest; /* what follows the token (the protocol's own fields) */
    size_t rest_len;
} dt__frame_hello;

/* The common part of a HELLO payload into out (DT__FRAME_HELLO_MIN + strlen(token) bytes);
 * returns that size. */
size_t dt__frame_hello_put(uint8_t *out, uint32_t a, uint32_t b, const char *token);

/* Split a HELLO payload of len bytes. DT_ERR_PROTOCOL when it is shorter than the common
 * part or its token length does not fit ("token length N does not fit the HELLO's M bytes"). */
dt_err dt__frame_hello_parse(const uint8_t *payload, size_t len, dt__frame_hello *h);

/* Whether the HELLO carries token (constant time). */
int dt__frame_hello_token_ok(const dt__frame_hello *h, const char *token);

/* ---- ERROR ---- */

/* An ERROR frame of the given type (the protocol's ERROR) and arg (the ring's 1: give up)
 * carrying text cut to DT__FRAME_TEXT_MAX bytes into out (DT__FRAME_HDR + DT__FRAME_TEXT_MAX
 * bytes); returns its size. */
size_t dt__frame_error(uint8_t *out, int type, int64_t arg, const char *text);

/* Make n bytes of a received text printable (control bytes become spaces) and end it with a
 * NUL at text[n]. */
void dt__frame_text_clean(char *text, size_t n);

#endif

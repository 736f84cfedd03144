/*
 * frame.c - the data plane's shared framing (net/frame-impl.h): header coding and checks,
 * the HELLO's common part, ERROR frames.
 *
 * Design: explicit little-endian byte coding (no struct punning), so the layout is the same
 * on every host; nothing here allocates, and nothing reads a payload whose header has not
 * passed its checks.
 */
#include <inttypes.h>
#include <string.h>

#include "net/frame-impl.h"
#include "net/sock-impl.h"
#include "net/token-impl.h"

void dt__frame_encode(uint8_t out[DT__FRAME_HDR], int type, int64_t arg, uint64_t len) {
    dt__put32(out, DT__FRAME_MAGIC);
    dt__put16(out + 4, DT__FRAME_VERSION);
    dt__put16(out + 6, (uint16_t)type);
    dt__put64(out + 8, (uint64_t)arg);
    dt__put64(out + 16, len);
}

void dt__frame_decode(const uint8_t in[DT__FRAME_HDR], dt__frame_hdr *h) {
    h->magic = dt__get32(in);
    h->version = dt__get16(in + 4);
    h->type = dt__get16(in + 6);
    h->arg = (int64_t)dt__get64(in + 8);
    h->len = dt__get64(in + 16);
}

dt_err dt__frame_check(const dt__frame_hdr *h) {
    if (h->magic != DT__FRAME_MAGIC || h->version != DT__FRAME_VERSION)
        return dt_err_set(DT_ERR_PROTOCOL, "not a dtrain frame (magic 0x%08" PRIx32 ", version %u)",
                          h->magic, h->version);
    return DT_OK;
}

dt_err dt__frame_read_hdr(int fd, int64_t deadline_ms, uint64_t max_len, dt__frame_hdr *h,
                          size_t *got) {
    uint8_t b[DT__FRAME_HDR];
    dt_err e = dt__sock_read_full(fd, b, sizeof b, deadline_ms, got);
    if (e) return e;
    dt__frame_decode(b, h);
    if ((e = dt__frame_check(h))) return e;
    if (h->len > max_len)
        return dt_err_set(DT_ERR_PROTOCOL, "a frame of %" PRIu64 " bytes (at most %" PRIu64 ")",
                          h->len, max_len);
    return DT_OK;
}

size_t dt__frame_hello_put(uint8_t *out, uint32_t a, uint32_t b, const char *token) {
    size_t tl = strlen(token);
    dt__put32(out, a);
    dt__put32(out + 4, b);
    dt__put32(out + 8, (uint32_t)tl);
    memcpy(out + DT__FRAME_HELLO_MIN, token, tl);
    return DT__FRAME_HELLO_MIN + tl;
}

dt_err dt__frame_hello_parse(const uint8_t *p, size_t len, dt__frame_hello *h) {
    memset(h, 0, sizeof *h);
    if (len < DT__FRAME_HELLO_MIN)
        return dt_err_set(DT_ERR_PROTOCOL, "a HELLO of %zu bytes (at least %d)", len,
                          DT__FRAME_HELLO_MIN);
    h->a = dt__get32(p);
    h->b = dt__get32(p + 4);
    h->token_len = dt__get32(p + 8);
    if ((uint64_t)h->token_len > len - DT__FRAME_HELLO_MIN)
        return dt_err_set(DT_ERR_PROTOCOL,
                          "token length %" PRIu32 " does not fit the HELLO's %zu bytes",
                          h->token_len, len);
    h->token = p + DT__FRAME_HELLO_MIN;
    h->rest = h->token + h->token_len;
    h->rest_len = len - DT__FRAME_HELLO_MIN - h->token_len;
    return DT_OK;
}

int dt__frame_hello_token_ok(const dt__frame_hello *h, const char *token) {
    return dt__token_eq(h->token, h->token_len, token, strlen(token));
}

size_t dt__frame_error(uint8_t *out, int type, int64_t arg, const char *text) {
    size_t n = strlen(text);
    if (n > DT__FRAME_TEXT_MAX) n = DT__FRAME_TEXT_MAX;
    dt__frame_encode(out, type, arg, n);
    memcpy(out + DT__FRAME_HDR, text, n);
    return DT__FRAME_HDR + n;
}

void dt__frame_text_clean(char *text, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] < 0x20) text[i] = ' ';
    text[n] = '\0';
}

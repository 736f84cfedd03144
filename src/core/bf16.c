/*
 * bf16.c - bulk float32 <-> bfloat16 conversions (core/bf16-impl.h), shared by the parameter
 * server's wire (src/ps/) and the ring's (src/ring/).
 *
 * Design: plain loops over the inline element conversions; the compiler vectorizes them.
 * Source and destination are separate arrays except in dt__bf16_widen_tail, whose in-place
 * order is argued there.
 */
#include "core/bf16-impl.h"

void dt__bf16_narrow(uint16_t *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = dt__bf16_from_f32(src[i]);
}

void dt__bf16_widen(float *restrict dst, const uint16_t *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = dt__bf16_to_f32(src[i]);
}

void dt__bf16_add(float *restrict dst, const uint16_t *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] += dt__bf16_to_f32(src[i]);
}

void dt__bf16_widen_tail(float *buf, size_t n) {
    /* ascending: float i (bytes 4i..4i+3) never reaches a narrow value not yet read (at
     * 2n + 2j for j > i, since 4i + 3 < 2n + 2i + 2 while i < n) */
    const uint8_t *src = (const uint8_t *)buf + 2 * n;
    uint8_t *dst = (uint8_t *)buf;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(dst + 4 * i, &u, 4);
    }
}

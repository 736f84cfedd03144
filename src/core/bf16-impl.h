/*
 * bf16-impl.h - float32 <-> bfloat16 for the data plane's narrow wire (the parameter server's
 * pushes, src/ps/; the ring's all-reduce, src/ring/; docs/WIRE.md, "Wire dtype").
 *
 * Design: bfloat16 is a float32's upper 16 bits (sign, 8-bit exponent, 7-bit mantissa), so
 * widening is a shift and narrowing rounds the lower half away to nearest, ties to even; a
 * NaN stays a NaN (made quiet: rounding could otherwise carry its payload into the exponent
 * and make it an infinity). Every user narrows through these, so a value narrowed anywhere
 * has the same bits.
 */
#ifndef DTRAIN_CORE_BF16_IMPL_H
#define DTRAIN_CORE_BF16_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* float32 -> bfloat16, rounding to nearest even (a NaN stays a NaN, quiet). */
static inline uint16_t dt__bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static inline float dt__bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* n floats into n bfloat16 (dst may not overlap src). */
void dt__bf16_narrow(uint16_t *dst, const float *src, size_t n);
/* n bfloat16 into n floats (dst may not overlap src). */
void dt__bf16_widen(float *dst, const uint16_t *src, size_t n);
/* dst[i] += the float of src[i], for n values. */
void dt__bf16_add(float *dst, const uint16_t *src, size_t n);
/* Widen n bfloat16 stored at byte offset 2 * n of buf into n floats at buf (in place: the
 * narrow values in the upper half of the floats' own room). */
void dt__bf16_widen_tail(float *buf, size_t n);

#endif

/*
 * token-impl.h - comparing a presented token with the job's: the one copy the data plane (the
 * PS's and the ring's HELLO) and the HTTP servers use.
 *
 * The comparison runs over every byte of the longer of the two whatever they hold, so its
 * time tells nothing about where a guessed token first differs (only, unavoidably, about the
 * lengths).
 */
#ifndef DTRAIN_NET_TOKEN_IMPL_H
#define DTRAIN_NET_TOKEN_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* 1 when a[0..alen) and b[0..blen) are the same bytes, else 0; no early exit. */
static inline int dt__token_eq(const void *a, size_t alen, const void *b, size_t blen) {
    const volatile uint8_t *x = a, *y = b;
    unsigned diff = alen != blen;
    size_t n = alen > blen ? alen : blen;
    for (size_t i = 0; i < n; i++) {
        uint8_t p = i < alen ? x[i] : 0, q = i < blen ? y[i] : 0;
        diff |= (unsigned)(p ^ q);
    }
    return diff == 0;
}

#endif

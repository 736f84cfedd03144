/*
 * strbuf-impl.h - a growable, always NUL-terminated string, for text built piece by piece
 * (TF_CONFIG, JSON answers, Prometheus expositions).
 *
 * Errors are sticky: an allocation that fails marks the buffer (oom) and every later append
 * is a no-op, so a writer appends a whole text and checks once at the end. A zeroed
 * dt__strbuf is empty and ready; the caller frees p (free(NULL) is fine).
 */
#ifndef DTRAIN_CORE_STRBUF_IMPL_H
#define DTRAIN_CORE_STRBUF_IMPL_H

#include <stddef.h>

typedef struct dt__strbuf {
    char *p;    /* NUL-terminated once anything was appended; NULL before */
    size_t len; /* bytes, without the NUL */
    size_t cap;
    int oom;    /* an append ran out of memory: the text is incomplete */
} dt__strbuf;

void dt__strbuf_put(dt__strbuf *b, const char *s, size_t n);
void dt__strbuf_puts(dt__strbuf *b, const char *s);
/* A short formatted piece (at most 511 bytes: longer marks the buffer failed). */
void dt__strbuf_printf(dt__strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

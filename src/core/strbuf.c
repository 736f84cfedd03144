/* strbuf.c - a growable string (strbuf-impl.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf-impl.h"

void dt__strbuf_put(dt__strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void dt__strbuf_puts(dt__strbuf *b, const char *s) {
    dt__strbuf_put(b, s, strlen(s));
}

void dt__strbuf_printf(dt__strbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof tmp) {
        b->oom = 1; /* callers print short pieces only: an overflow is a failure */
        return;
    }
    dt__strbuf_put(b, tmp, (size_t)w);
}

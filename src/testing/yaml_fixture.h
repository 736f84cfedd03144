/* yaml_fixture.h - helpers for tests that edit a YAML fixture and locate lines in it
 * (spec_test.c, job_test.c). Header-only: every function is static. */
#ifndef DTRAIN_YAML_FIXTURE_H
#define DTRAIN_YAML_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* base with the first `from` replaced by `to`, in a static buffer (two alternate, so that an
 * edit of an edit works). */
static inline const char *edit(const char *base, const char *from, const char *to) {
    static char bufs[2][8192];
    static int next;
    char *buf = bufs[next++ % 2];
    const char *p = strstr(base, from);
    if (!p) {
        fprintf(stderr, "fixture lacks \"%s\"\n", from);
        exit(2);
    }
    char tmp[sizeof bufs[0]]; /* base may be the other buffer */
    snprintf(tmp, sizeof tmp, "%.*s%s%s", (int)(p - base), base, to, p + strlen(from));
    memcpy(buf, tmp, sizeof tmp);
    return buf;
}

/* 1-based line of the first occurrence of needle in text. */
static inline int line_of(const char *text, const char *needle) {
    const char *p = strstr(text, needle);
    if (!p) {
        fprintf(stderr, "text lacks \"%s\"\n", needle);
        exit(2);
    }
    int line = 1;
    for (const char *q = text; q < p; q++)
        line += *q == '\n';
    return line;
}

#endif

/* path.c - dt__path: snprintf for paths, where truncation is an error (path-impl.h). */
#include "core/path-impl.h"

#include <stdarg.h>
#include <stdio.h>

dt_err dt__path(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = cap ? vsnprintf(buf, cap, fmt, ap) : -1;
    va_end(ap);
    if (n >= 0 && (size_t)n < cap) return DT_OK;
    /* show where the path started, so the user can tell which one it was */
    char start[81];
    snprintf(start, sizeof start, "%s", cap ? buf : "");
    if (cap) buf[0] = '\0';
    if (n < 0) return dt_err_set(DT_ERR_ARG, "path cannot be formatted: %s...", start);
    return dt_err_set(DT_ERR_ARG, "path too long (%d bytes, at most %zu): %s...", n,
                      cap ? cap - 1 : 0, start);
}

/* path.c - dt__path: snprintf for paths, where truncation is an error (path-impl.h). */
#include "core/path-impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

dt_err dt__path_room(const char *dir, size_t room, const char *what) {
    size_t n = strlen(dir);
    if (dir[0] != '/') {
        char cwd[DT__PATH_MAX];
        if (getcwd(cwd, sizeof cwd)) n += strlen(cwd) + 1;
        else if (errno == ENAMETOOLONG) n += DT__PATH_MAX;
    }
    size_t most = DT__PATH_MAX - 1 > room ? DT__PATH_MAX - 1 - room : 0;
    if (n <= most) return DT_OK;
    char start[81];
    snprintf(start, sizeof start, "%s", dir);
    return dt_err_set(DT_ERR_ARG, "%s: path too long (%zu bytes as an absolute path, at most %zu "
                      "to leave room for the files made in it): %s%s", what, n, most, start,
                      strlen(dir) >= sizeof start ? "..." : "");
}

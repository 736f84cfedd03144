/*
 * path-impl.h - building a file path into a fixed buffer, refusing what does not fit.
 *
 * A path cut short by snprintf names another file (a sibling, a parent), so a path that
 * does not fit is an error, never a shorter path: dt__path leaves buf empty and says which
 * path was too long. Buffers are DT__PATH_MAX bytes unless a caller has a reason.
 */
#ifndef DTRAIN_CORE_PATH_IMPL_H
#define DTRAIN_CORE_PATH_IMPL_H

#include <stddef.h>

#include "dtrain/err.h"

#define DT__PATH_MAX 4096

/* Format a path into buf (cap bytes). DT_OK, or DT_ERR_ARG "path too long (N bytes, at most
 * CAP-1): START..." with buf set to "" when the formatted path (or cap) does not fit. */
dt_err dt__path(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif

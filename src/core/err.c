/*
 * err.c - error codes and the thread-local error message.
 *
 * Design: a fixed-size thread-local buffer holds the last message, so that setting an error
 * never allocates (it must work when allocation is what failed).
 */
#include "dtrain/err.h"

#include <stdio.h>
#include <string.h>

#define DT_ERRMSG_MAX 1024

static _Thread_local char errmsg[DT_ERRMSG_MAX];

static const char *const err_names[DT_ERR__COUNT] = {
    [DT_OK] = "success",
    [DT_ERR_NOMEM] = "out of memory",
    [DT_ERR_IO] = "input/output error",
    [DT_ERR_FORMAT] = "malformed file",
    [DT_ERR_SPEC] = "malformed spec",
    [DT_ERR_SHAPE] = "shape mismatch",
    [DT_ERR_ARG] = "invalid argument",
    [DT_ERR_NOTFOUND] = "not found",
    [DT_ERR_STATE] = "invalid state",
    [DT_ERR_TIMEOUT] = "timed out",
    [DT_ERR_PROTOCOL] = "protocol violation",
    [DT_ERR_NETWORK] = "network error",
};

const char *dt_strerror(dt_err err) {
    if ((unsigned)err >= DT_ERR__COUNT) return "unknown error";
    return err_names[err];
}

const char *dt_errmsg(void) {
    return errmsg;
}

dt_err dt_err_setv(dt_err err, const char *fmt, va_list ap) {
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    return err;
}

dt_err dt_err_set(dt_err err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dt_err_setv(err, fmt, ap);
    va_end(ap);
    return err;
}

dt_err dt_err_wrap(dt_err err, const char *fmt, ...) {
    char prefix[DT_ERRMSG_MAX];
    char old[DT_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errmsg, sizeof old);
    /* truncation of an over-long message is acceptable */
    size_t n = strlen(prefix);
    memcpy(errmsg, prefix, n);
    if (n + 2 < sizeof errmsg) {
        errmsg[n] = ':';
        errmsg[n + 1] = ' ';
        size_t rest = strnlen(old, sizeof errmsg - n - 3);
        memcpy(errmsg + n + 2, old, rest);
        errmsg[n + 2 + rest] = '\0';
    } else {
        errmsg[sizeof errmsg - 1] = '\0';
    }
    return err;
}

void dt_err_clear(void) {
    errmsg[0] = '\0';
}

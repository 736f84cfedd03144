/*
 * err.h - the one project-wide error type.
 *
 * Every fallible function returns a dt_err (0 = success) and passes results through
 * out-parameters. A failing function also records a human-readable message in a
 * thread-local buffer (dt_errmsg) that names where the error is: the file and record of a
 * data reader, the file, line and field of a spec. Callers that add context wrap the message
 * with dt_err_wrap.
 */
#ifndef DTRAIN_ERR_H
#define DTRAIN_ERR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_err {
    DT_OK = 0,
    DT_ERR_NOMEM,    /* allocation failed */
    DT_ERR_IO,       /* open/read/write/rename failed */
    DT_ERR_FORMAT,   /* a data or checkpoint file is malformed */
    DT_ERR_SPEC,     /* a spec is malformed (unknown key, wrong type, missing field) */
    DT_ERR_SHAPE,    /* shapes do not fit together */
    DT_ERR_ARG,      /* an argument is out of range */
    DT_ERR_NOTFOUND, /* a named thing does not exist */
    DT_ERR_STATE,    /* an object is not in a state that allows the call */
    DT_ERR_TIMEOUT,  /* a peer did not answer or finish in time: worth retrying */
    DT_ERR_PROTOCOL, /* a peer sent something the protocol does not allow: not worth retrying */
    DT_ERR_NETWORK,  /* a connection could not be made or was lost: worth retrying */
    DT_ERR__COUNT
} dt_err;

/* A static description of the error code; never NULL. */
const char *dt_strerror(dt_err err);

/* The message recorded by the last failing call on this thread ("" when none). */
const char *dt_errmsg(void);

/* Record a message for err on this thread and return err, so that callers can write
 * `return dt_err_set(DT_ERR_FORMAT, "%s: bad magic", path);`. */
dt_err dt_err_set(dt_err err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
dt_err dt_err_setv(dt_err err, const char *fmt, va_list ap);

/* Prefix the recorded message with more context ("loading spec: <old message>"). */
dt_err dt_err_wrap(dt_err err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Forget the recorded message. */
void dt_err_clear(void);

#ifdef __cplusplus
}
#endif
#endif

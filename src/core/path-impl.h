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

/* Room a job dir leaves for the paths dtrain builds in it: the longest is a TensorBoard
 * event file, JOB_DIR/tensorboard/<run>/events.out.tfevents.<10 digits>.<host, at most 64>.
 * <pid>.<n> (about 140 bytes); a checkpoint's or an export's temporary file is shorter. */
#define DT__JOB_DIR_ROOM 256

/* Format a path into buf (cap bytes). DT_OK, or DT_ERR_ARG "path too long (N bytes, at most
 * CAP-1): START..." with buf set to "" when the formatted path (or cap) does not fit. */
dt_err dt__path(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Does dir, as an absolute path (relative ones after the working directory), leave room
 * bytes for what is built in it? DT_OK, or DT_ERR_ARG "WHAT: path too long ...". Functions
 * that build paths in dir and cannot return an error call it once at their entry. */
dt_err dt__path_room(const char *dir, size_t room, const char *what);

#endif

/* file-impl.h - small file-system helpers shared by the modules that write job files. */
#ifndef DTRAIN_FILE_IMPL_H
#define DTRAIN_FILE_IMPL_H

#include <stddef.h>

#include "dtrain/err.h"

/* mkdir -p: create path and its missing parents (mode 0755). */
dt_err dt__mkdirs(const char *path);

/* Write len bytes to path atomically: a temporary file in the same directory, fsync, rename
 * over path, fsync of the directory. On error path is unchanged and no temporary remains. */
dt_err dt__write_file_atomic(const char *path, const void *data, size_t len);

/* path must be a regular file this process can read: DT_ERR_IO naming it and saying what
 * it is otherwise (missing, a directory, a device, a FIFO, unreadable). Readers of data
 * files check first, so that /dev/zero or a FIFO never has them read without end. */
dt_err dt__check_regular(const char *path);

/* Read a whole file into a malloc'd, NUL-terminated buffer (*len excludes the NUL). */
dt_err dt__read_file(const char *path, char **data, size_t *len);

/* Remove path and everything under it, without following symbolic links (a job's own dir);
 * what cannot be removed stays. */
void dt__remove_tree(const char *path);

#endif

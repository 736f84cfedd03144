/* export-impl.h - pieces of exporting shared with the CLI. */
#ifndef DTRAIN_EXPORT_IMPL_H
#define DTRAIN_EXPORT_IMPL_H

#include <stddef.h>

#include "dtrain/spec.h"

/* A spec.yaml as a job dir or an export holds it: a training spec (dtrain train) or a job's
 * TrainJob manifest (its training spec is taken). Errors are the training spec's. */
dt_err dt__export_parse_spec(dt_spec **out, const char *text, size_t len, const char *path);

#endif
